// my_new_arch.cpp - an out-of-tree mobius plugin: a Llama-style decoder with parallel, scaled blocks.
//
// Everything here comes from the installed SDK (mobius-sdk.pc): the C ABI in mobius/plugin.h is
// reached only through the C++ layer (mobius/sdk/*.hpp) and the MOBIUS_PLUGIN macro.
//
// The architecture: a Llama decoder (embed_tokens, rotary GQA attention, gated MLP, RMSNorm,
// lm_head) whose layer runs attention and MLP side by side on one normed input and adds both,
// scaled by the config key `residual_scale`, to the residual stream:
//
//     h + residual_scale * (attn(norm(h)) + mlp(norm(h)))
//
// The SDK's DecoderLayer runs the two blocks one after the other, so this layer is a new class
// (a subclass of mobius::nn::DecoderLayerBase); everything else is the SDK's, reused as is.
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "mobius/sdk/nn.hpp"
#include "mobius/sdk/plugin.hpp"

namespace {

using mobius::ArchitectureConfig;
using mobius::ConfigReader;
using mobius::DType;
using mobius::Graph;
using mobius::ScopeGuard;
using mobius::Value;
using nlohmann::json;
namespace nn = mobius::nn;
namespace op = mobius::op;

// config.json -> the normalized config the build receives. Every error names the key, so a user
// with a broken config.json reads which key to fix, e.g.
// "[config] config.json: 'residual_scale' must be a positive number".
json parse(const json& raw) {
  ConfigReader r(mobius::text_config(raw), "config.json");
  ArchitectureConfig c;
  c.model_type = "my_new_arch";
  // The shape keys have no sensible default for a new architecture: a config must state them.
  c.vocab_size = r.get_int("vocab_size");
  c.hidden_size = r.get_int("hidden_size");
  c.intermediate_size = r.get_int("intermediate_size");
  c.num_hidden_layers = r.get_int("num_hidden_layers");
  c.num_attention_heads = r.get_int("num_attention_heads");
  if (c.num_attention_heads <= 0) r.fail("num_attention_heads", "must be positive");
  c.num_key_value_heads = r.get_int("num_key_value_heads", c.num_attention_heads);
  if (r.has("head_dim")) {
    c.head_dim = r.get_int("head_dim");
  } else {
    if (c.hidden_size % c.num_attention_heads != 0)
      r.fail("hidden_size", "is not a multiple of 'num_attention_heads' and there is no 'head_dim'");
    c.head_dim = c.hidden_size / c.num_attention_heads;
  }
  c.hidden_act = r.get_string("hidden_act", "silu");
  nn::check_activation(r, "hidden_act", c.hidden_act);
  c.rms_norm_eps = r.get_double("rms_norm_eps", 1e-6);
  c.max_position_embeddings = r.get_int("max_position_embeddings", 2048);
  c.rope = mobius::read_rope(r, 10000.0);
  c.tie_word_embeddings = r.get_bool("tie_word_embeddings", false);

  c.validate();  // relations between keys (heads divide, dims positive, ...)

  // A key of this architecture alone: ArchitectureConfig has no slot for it, so it travels
  // beside the config's fields in the normalized JSON, which build() receives unchanged.
  double scale = r.get_double("residual_scale", 1.0);
  if (!(scale > 0)) r.fail("residual_scale", "must be a positive number");
  json normalized = c;
  normalized["residual_scale"] = scale;
  return normalized;
}

// One layer: h + s * (attn(norm(h)) + mlp(norm(h))).
//
// Parameter names are the checkpoint's: the layer sits at "model.layers.<i>", so its tensors are
// model.layers.<i>.input_layernorm.weight, .self_attn.{q,k,v,o}_proj.weight and
// .mlp.{gate,up,down}_proj.weight, and they bind without a name table.
class ParallelScaledLayer : public nn::DecoderLayerBase {
 public:
  ParallelScaledLayer(const ArchitectureConfig& cfg, int64_t layer, double residual_scale)
      : residual_scale_(residual_scale) {
    input_layernorm_ = &add<nn::RMSNorm>("input_layernorm", cfg.hidden_size, cfg.rms_norm_eps);
    self_attn_ = &add<nn::Attention>("self_attn", cfg, layer, nn::rms_norm_factory());
    mlp_ = &add<nn::GatedMLP>("mlp", cfg.hidden_size, cfg.intermediate_size, cfg.mlp_bias,
                              cfg.hidden_act);
  }

  // The contract the causal-LM model drives every layer with: `h` is the residual stream
  // [batch, seq, hidden] in the activation dtype; `past` holds this layer's cache inputs by the
  // names cache_entries() declares, and every one of them must be written to `present`
  // (the attention does that for "key" and "value").
  Value forward(Graph& g, Value h, nn::SharedInputs& shared,
                const std::map<std::string, Value>& past,
                std::map<std::string, Value>& present) const override {
    ScopeGuard s(g, path());  // node names like "model.layers.0/Add_1" in the graph
    Value x = input_layernorm_->forward(g, h);
    Value a = self_attn_->forward(g, x, shared, past, present);
    Value m = mlp_->forward(g, x);
    Value sum = op::Add(a, m);
    if (residual_scale_ != 1.0) sum = op::Mul(sum, op::ScalarLike(sum, residual_scale_));
    return op::Add(h, sum);
  }

  // This layer's cache: what the attention keeps ("key", "value" [batch, kv_heads, past, head_dim]).
  // The text-generation task turns it into past_key_values.<i>.* inputs and present.<i>.* outputs.
  std::vector<nn::CacheEntry> cache_entries(DType act) const override {
    return self_attn_->cache_entries(act);
  }

 private:
  double residual_scale_;
  const nn::RMSNorm* input_layernorm_;
  const nn::Attention* self_attn_;
  const nn::GatedMLP* mlp_;
};

// Builds the graph and plans every weight. CausalLMModel brings embed_tokens, the layer stack,
// the final norm and lm_head (tied when the config says so); build_text_generation declares the
// graph I/O of the text-generation task and the tensors the model knowingly ignores.
void build(mobius::BuildContext& ctx, const json& normalized) {
  ArchitectureConfig cfg = normalized.get<ArchitectureConfig>();
  const double scale = normalized.at("residual_scale").get<double>();
  // The default spec names everything as Llama does; the layers are this plugin's own.
  nn::CausalLMModel model(cfg, nn::DecoderSpec{}, [scale](const ArchitectureConfig& c, int64_t i) {
    return std::make_unique<ParallelScaledLayer>(c, i, scale);
  });
  nn::build_text_generation(ctx, model);
}

// Called once when the host loads the plugin; the model types registered here must be the ones
// plugin.yaml lists, or the host refuses the plugin.
void register_all(mobius::PluginRegistrar& r) {
  r.add("my_new_arch", "text-generation", parse, build);
}

}  // namespace

// Exports mobius_plugin_get_info and mobius_plugin_register; the name must equal plugin.yaml's.
MOBIUS_PLUGIN("my_new_arch", "0.1.0", "example vendor", register_all)
