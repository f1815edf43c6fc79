// jamba.cpp - the Jamba pack: model type jamba (transformers' JambaForCausalLM).
//
// A hybrid decoder of pre-norm layers: the token mixer of layer i is attention without positions
// when i % attn_layer_period == attn_layer_offset and Mamba (mamba.hpp, with its dt/B/C norms)
// otherwise; the feed-forward is a sparse mixture of experts when i % expert_layer_period ==
// expert_layer_offset (and num_experts > 1) and a gated MLP otherwise. The experts' router
// (feed_forward.router) takes the top k of a float32 softmax over all experts and keeps their
// probabilities as they are (no renormalisation). Both parts come from the SDK; this file is the
// config table and the choice per layer.
#include <memory>
#include <string>

#include "mobius/sdk/decoder_config.hpp"
#include "mobius/sdk/mamba.hpp"
#include "mobius/sdk/moe.hpp"
#include "mobius/sdk/nn.hpp"
#include "mobius/sdk/plugin.hpp"

namespace {

using mobius::ArchitectureConfig;
using mobius::ConfigReader;
using nlohmann::json;
namespace nn = mobius::nn;

// JambaConfig's defaults (configuration_jamba.py): vocab, hidden, intermediate, layers, heads,
// kv heads, head_dim (0: hidden / heads), max positions, rms eps, rope theta (unused: no rope).
const mobius::DecoderDefaults kDefaults{65536, 4096, 14336, 32, 32, 8, 0, 262144, 1e-6, 10000.0};

// A layer period and offset pair: layer i is of that kind when i % period == offset
// (JambaConfig.validate_architecture: 0 <= offset < period).
struct Period {
  int64_t period, offset;
  bool has(int64_t layer) const { return layer % period == offset; }
};

Period read_period(const ConfigReader& r, const char* period_key, const char* offset_key,
                   int64_t period_default, int64_t offset_default) {
  Period p{r.get_int(period_key, period_default), r.get_int(offset_key, offset_default)};
  if (p.period < 1 || p.period > 1024)
    r.fail(period_key, "must be from 1 to 1024, got " + std::to_string(p.period));
  if (p.offset < 0 || p.offset >= p.period)
    r.fail(offset_key, "(" + std::to_string(p.offset) + ") must be from 0 to '" + period_key +
                           "' - 1 (" + std::to_string(p.period - 1) + ")");
  return p;
}

json parse(const json& raw) {
  ConfigReader r(raw, "config.json");
  ArchitectureConfig c = mobius::read_decoder_config(r, "jamba", kDefaults);
  // JambaAttention: no biases, no positions at all, no sliding window.
  c.qkv_bias = c.o_bias = c.mlp_bias = false;
  c.position_embedding = "none";
  c.sliding_window = 0;
  const Period attn = read_period(r, "attn_layer_period", "attn_layer_offset", 8, 4);
  const Period experts = read_period(r, "expert_layer_period", "expert_layer_offset", 2, 1);
  // JambaConfig.layer_types, derived from the periods (a config.json does not store it).
  c.layer_types.clear();
  for (int64_t i = 0; i < c.num_hidden_layers; ++i)
    c.layer_types.push_back(attn.has(i) ? "full_attention" : "linear_attention");

  // The routed experts (num_local_experts is the attribute_map's other spelling); with a single
  // expert every layer is the dense MLP, as transformers builds it.
  const std::string n_key =
      r.has("num_experts") || !r.has("num_local_experts") ? "num_experts" : "num_local_experts";
  const int64_t n_experts = r.get_int(n_key, 16);
  const int64_t top_k = r.get_int("num_experts_per_tok", 2);
  if (n_experts > 1) {
    if (top_k < 1 || top_k > n_experts)
      r.fail("num_experts_per_tok", "(" + std::to_string(top_k) + ") must be from 1 to '" + n_key +
                                        "' (" + std::to_string(n_experts) + ")");
    if (c.intermediate_size <= 0) r.fail("intermediate_size", "must be positive for the experts");
    mobius::MoEConfig moe;
    moe.n_routed_experts = n_experts;
    moe.num_experts_per_tok = top_k;
    moe.moe_intermediate_size = c.intermediate_size;  // each expert is a JambaMLP
    moe.scoring = "softmax";
    moe.topk_method = "greedy";
    moe.norm_topk_prob = false;
    // MoEConfig::is_moe_layer agrees with the periods: the layers that are not expert layers are
    // its mlp_only_layers.
    for (int64_t i = 0; i < c.num_hidden_layers; ++i)
      if (!experts.has(i)) moe.mlp_only_layers.push_back(i);
    c.moe = moe;
  }
  nn::MambaConfig mamba = nn::MambaConfig::read(r, "jamba", c.hidden_size);
  c.validate();
  json j = c;
  j["mamba"] = mamba;
  j["expert_layer_period"] = experts.period;
  j["expert_layer_offset"] = experts.offset;
  return j;
}

void build(mobius::BuildContext& ctx, const json& j) {
  ArchitectureConfig cfg = j.get<ArchitectureConfig>();
  const auto mamba = j.at("mamba").get<nn::MambaConfig>();
  const Period experts{j.at("expert_layer_period").get<int64_t>(),
                       j.at("expert_layer_offset").get<int64_t>()};
  nn::DecoderSpec spec;
  spec.names.final_norm = "final_layernorm";
  spec.names.post_attention_norm = "pre_ff_layernorm";
  spec.names.mixer_by_layer_type = {{"linear_attention", "mamba"}};
  spec.names.feed_forward = "feed_forward";
  spec.mixer = nn::mixer_by_layer_type(
      {{"linear_attention", nn::mamba_mixer(mamba)}, {"full_attention", nn::attention_mixer()}});
  nn::MoESpec moe;
  moe.names.router = "router";
  spec.feed_forward = [moe, experts](const ArchitectureConfig& c, int64_t layer,
                                     const nn::DecoderSpec& s) -> std::unique_ptr<nn::FeedForward> {
    if (c.moe && experts.has(layer))
      return std::make_unique<nn::SparseMoE>(nn::MoEConfig::from(c), moe);
    return nn::gated_mlp()(c, layer, s);
  };
  nn::build_text_generation(ctx, nn::CausalLMModel(cfg, spec));
}

void register_all(mobius::PluginRegistrar& r) { r.add("jamba", "text-generation", parse, build); }

}  // namespace

MOBIUS_PLUGIN("jamba", "0.1.0", "mobius", register_all)
