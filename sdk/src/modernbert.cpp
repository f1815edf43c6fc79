// modernbert.cpp - ModernBERT (mobius/sdk/modernbert.hpp).
#include "mobius/sdk/modernbert.hpp"

#include <cfloat>
#include <cmath>

#include "mobius/sdk/config.hpp"
#include "mobius/sdk/encoder.hpp"
#include "mobius/sdk/layers.hpp"
#include "mobius/sdk/ops.hpp"
#include "mobius/sdk/plugin.hpp"
#include "mobius/sdk/sentence.hpp"

namespace mobius::nn {
namespace {

using namespace mobius::op;

struct ModernBertConfig {
  int64_t vocab_size = 50368, hidden_size = 768, intermediate_size = 1152, num_hidden_layers = 22,
          num_attention_heads = 12, local_attention = 128, num_labels = 2;
  std::string hidden_activation = "gelu", classifier_activation = "gelu", classifier_pooling = "cls";
  double norm_eps = 1e-5, global_theta = 160000.0, local_theta = 10000.0;
  bool norm_bias = false, attention_bias = false, mlp_bias = false, classifier_bias = false, decoder_bias = true,
       tie_word_embeddings = true;
  std::vector<bool> sliding;  // per layer: sliding-window attention
};
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(ModernBertConfig, vocab_size, hidden_size, intermediate_size,
                                                num_hidden_layers, num_attention_heads, local_attention, num_labels,
                                                hidden_activation, classifier_activation, classifier_pooling,
                                                norm_eps, global_theta, local_theta, norm_bias, attention_bias,
                                                mlp_bias, classifier_bias, decoder_bias, tie_word_embeddings, sliding)

// A rope_parameters entry's theta ("full_attention" / "sliding_attention"), else the older key.
double rope_theta(const ConfigReader& r, const nlohmann::json& raw, const std::string& layer_type,
                  const std::string& old_key, double def) {
  const auto rp = raw.find("rope_parameters");
  if (rp != raw.end() && rp->is_object()) {
    const auto e = rp->find(layer_type);
    if (e != rp->end()) {
      ConfigReader er(*e, "config.json: 'rope_parameters." + layer_type + "'");
      const std::string type = er.get_string("rope_type", "default");
      if (type != "default") er.fail("rope_type", "is " + quote_value(type) + "; ModernBERT's rotary is built unscaled (default)");
      return er.get_double("rope_theta", def);
    }
  }
  return r.get_double(old_key, def);
}

ModernBertConfig read_config(const nlohmann::json& raw) {
  if (!raw.is_object()) throw Error("[config] config.json must be a JSON object");
  ConfigReader r(raw, "config.json");
  ModernBertConfig c;
  c.vocab_size = r.get_int("vocab_size", c.vocab_size);
  c.hidden_size = r.get_int("hidden_size", c.hidden_size);
  c.intermediate_size = r.get_int("intermediate_size", c.intermediate_size);
  c.num_hidden_layers = r.get_int("num_hidden_layers", c.num_hidden_layers);
  c.num_attention_heads = r.get_int("num_attention_heads", c.num_attention_heads);
  c.hidden_activation = r.get_string("hidden_activation", c.hidden_activation);
  c.classifier_activation = r.get_string("classifier_activation", c.classifier_activation);
  c.classifier_pooling = r.get_string("classifier_pooling", c.classifier_pooling);
  c.norm_eps = r.get_double("norm_eps", c.norm_eps);
  c.norm_bias = r.get_bool("norm_bias", c.norm_bias);
  c.attention_bias = r.get_bool("attention_bias", c.attention_bias);
  c.mlp_bias = r.get_bool("mlp_bias", c.mlp_bias);
  c.classifier_bias = r.get_bool("classifier_bias", c.classifier_bias);
  c.decoder_bias = r.get_bool("decoder_bias", c.decoder_bias);
  c.tie_word_embeddings = r.get_bool("tie_word_embeddings", true);
  c.local_attention = r.get_int("local_attention", c.local_attention);
  const int64_t max_positions = r.get_int("max_position_embeddings", 8192);
  check_activation(r, "classifier_activation", c.classifier_activation);
  if (c.classifier_pooling != "cls" && c.classifier_pooling != "mean")
    r.fail("classifier_pooling", "is " + quote_value(c.classifier_pooling) + " (known: cls, mean)");
  if (c.local_attention < 0) r.fail("local_attention", "must not be negative");
  if (r.has("rope_scaling")) r.fail("rope_scaling", "is set; ModernBERT's rotary is built unscaled");
  c.global_theta = rope_theta(r, raw, "full_attention", "global_rope_theta", 160000.0);
  c.local_theta = rope_theta(r, raw, "sliding_attention", "local_rope_theta", 10000.0);
  if (!(c.global_theta > 1.0) || !(c.local_theta > 1.0)) r.fail("rope_parameters", "has a rope_theta not above 1");
  // Layer types: layer_types, or, in older configs, every global_attn_every_n_layers-th full.
  const std::vector<std::string> types = r.get_strings("layer_types");
  if (!types.empty()) {
    if (static_cast<int64_t>(types.size()) != c.num_hidden_layers)
      r.fail("layer_types", "lists " + std::to_string(types.size()) + " layers; 'num_hidden_layers' is " +
                                std::to_string(c.num_hidden_layers));
    for (const std::string& t : types) {
      if (t != "full_attention" && t != "sliding_attention")
        r.fail("layer_types", "names " + quote_value(t) + " (known: full_attention, sliding_attention)");
      c.sliding.push_back(t == "sliding_attention");
    }
  } else {
    const int64_t every = r.get_int("global_attn_every_n_layers", 3);
    if (every < 1) r.fail("global_attn_every_n_layers", "must be positive");
    for (int64_t i = 0; i < c.num_hidden_layers; ++i) c.sliding.push_back(i % every != 0);
  }
  c.num_labels = read_num_labels(r, c.num_labels);
  EncoderSizes sizes{c.vocab_size, c.hidden_size, c.intermediate_size, c.num_hidden_layers,
                     c.num_attention_heads, max_positions, c.norm_eps, c.hidden_activation};
  sizes.act_key = "hidden_activation";
  sizes.eps_key = "norm_eps";
  check_encoder_config(r, "modernbert", sizes);
  if ((c.hidden_size / c.num_attention_heads) % 2 != 0)
    r.fail("num_attention_heads", "leaves an odd head size; rotary needs an even one");
  return c;
}

class ModernBertLayer : public Module {
 public:
  ModernBertLayer(const ModernBertConfig& c, int64_t index) : act(c.hidden_activation), heads(c.num_attention_heads) {
    const int64_t d = c.hidden_size;
    if (index > 0) attn_norm = &add<LayerNorm>("attn_norm", d, c.norm_eps, LayerNorm::Compute::Float32, c.norm_bias);
    wqkv = &add<Linear>("attn.Wqkv", d, 3 * d, c.attention_bias);
    wo = &add<Linear>("attn.Wo", d, d, c.attention_bias);
    mlp_norm = &add<LayerNorm>("mlp_norm", d, c.norm_eps, LayerNorm::Compute::Float32, c.norm_bias);
    wi = &add<Linear>("mlp.Wi", d, 2 * c.intermediate_size, c.mlp_bias);
    mlp_wo = &add<Linear>("mlp.Wo", c.intermediate_size, d, c.mlp_bias);
    intermediate = c.intermediate_size;
  }
  Value forward(Graph& g, Value h, Value mask, const EncoderRope& rope) const {
    ScopeGuard s(g, path());
    const int64_t d = wo->in_features;
    Value x = attn_norm ? attn_norm->forward(g, h) : h;
    auto qkv = Split(wqkv->forward(g, x), {d, d, d}, -1);
    h = Add(h, wo->forward(g, encoder_attention(g, qkv[0], qkv[1], qkv[2], heads, d / heads, mask, &rope)));
    auto parts = Split(wi->forward(g, mlp_norm->forward(g, h)), {intermediate, intermediate}, -1);
    return Add(h, mlp_wo->forward(g, Mul(activation_f32(act, parts[0]), parts[1])));
  }
  std::string act;
  int64_t heads, intermediate = 0;
  const LayerNorm *attn_norm = nullptr, *mlp_norm;
  const Linear *wqkv, *wo, *wi, *mlp_wo;
};

class ModernBertModel : public Module {
 public:
  ModernBertModel(const ModernBertConfig& c, const std::string& prefix) : cfg(c) {
    word = &add<Embedding>(prefix + "embeddings.tok_embeddings", c.vocab_size, c.hidden_size);
    embed_norm = &add<LayerNorm>(prefix + "embeddings.norm", c.hidden_size, c.norm_eps, LayerNorm::Compute::Float32,
                                 c.norm_bias);
    for (int64_t i = 0; i < c.num_hidden_layers; ++i)
      layers.push_back(&add<ModernBertLayer>(prefix + "layers." + std::to_string(i), c, i));
    final_norm = &add<LayerNorm>(prefix + "final_norm", c.hidden_size, c.norm_eps, LayerNorm::Compute::Float32,
                                 c.norm_bias);
  }


  Value forward(Graph& g, Value ids, Value attention_mask, DType act) const {
    Value h;
    {
      ScopeGuard s(g, "embeddings");
      h = embed_norm->forward(g, word->forward(g, ids, act));
    }
    Value seq = Squeeze(DimOf(ids, 1), {0});
    Value full, sliding;
    EncoderRope global_rope, local_rope;
    {
      ScopeGuard s(g, "masks");
      Value pad = Unsqueeze(Equal(attention_mask, Int(g, 0)), {1, 2});  // [b, 1, 1, s]
      const Value lowest = Scalar(g, DType::Float, -FLT_MAX), zero = Scalar(g, DType::Float, 0.0);
      full = Where(pad, lowest, zero);
      Value idx = Range(Int(g, 0), seq, Int(g, 1));
      Value far = Greater(Abs(Sub(Unsqueeze(idx, {1}), Unsqueeze(idx, {0}))), Int(g, cfg.local_attention / 2));
      sliding = Where(Or(pad, far), lowest, zero);  // [b, 1, s, s]
      const int64_t d = cfg.hidden_size / cfg.num_attention_heads;
      global_rope = rotary_angles(g, seq, d, cfg.global_theta, act);
      local_rope = rotary_angles(g, seq, d, cfg.local_theta, act);
    }
    for (size_t i = 0; i < layers.size(); ++i)
      h = cfg.sliding[i] ? layers[i]->forward(g, h, sliding, local_rope) : layers[i]->forward(g, h, full, global_rope);
    return final_norm->forward(g, h);
  }

  const ModernBertConfig& cfg;
  const Embedding* word;
  const LayerNorm *embed_norm, *final_norm;
  std::vector<const ModernBertLayer*> layers;
};

// head = norm(act(dense(x))), then the task's output layer.
class ModernBertHead : public Module {
 public:
  ModernBertHead(const ModernBertConfig& c, const std::string& task, bool tied) : cfg(c), task(task) {
    dense = &add<Linear>("head.dense", c.hidden_size, c.hidden_size, c.classifier_bias);
    norm = &add<LayerNorm>("head.norm", c.hidden_size, c.norm_eps, LayerNorm::Compute::Float32, c.norm_bias);
    if (task == "fill-mask") {
      // The decoder's weight is the word embeddings' (read transposed) unless the checkpoint
      // stores its own; its bias is its own.
      if (!tied) decoder = &add<Linear>("decoder", c.hidden_size, c.vocab_size, false);
      if (c.decoder_bias) decoder_bias = &add<VectorParam>("decoder", "bias", c.vocab_size);
    } else {
      classifier = &add<Linear>("classifier", c.hidden_size, c.num_labels, true);
    }
  }
  Value forward(Graph& g, Value h, Value attention_mask, const Embedding& word) const {
    if (task == "sequence-classification") {
      if (cfg.classifier_pooling == "cls") {
        h = Squeeze(Slice(h, Ints(g, {0}), Ints(g, {1}), {1}), {1});
      } else {
        Value m = Cast(Unsqueeze(attention_mask, {2}), DType::Float);
        Value sum = ReduceSum(Mul(Cast(h, DType::Float), m), {1}, false);
        h = Cast(Div(sum, ReduceSum(m, {1}, false)), h.dtype());
      }
    }
    Value t = norm->forward(g, activation_f32(cfg.classifier_activation, dense->forward(g, h)));
    if (classifier) return classifier->forward(g, t);
    Value logits = decoder ? decoder->forward(g, t) : word.tied_logits(g, t);
    if (decoder_bias) logits = Add(logits, Cast(decoder_bias->forward(g), logits.dtype()));
    return logits;
  }
  const ModernBertConfig& cfg;
  std::string task;
  const Linear *dense, *decoder = nullptr, *classifier = nullptr;
  const VectorParam* decoder_bias = nullptr;
  const LayerNorm* norm;
};

void build(BuildContext& ctx, const ModernBertConfig& cfg, const std::string& task) {
  const bool weights = !ctx.no_weights();
  // A head's checkpoint holds the encoder under "model.".
  const std::string prefix = checkpoint_prefix(ctx, "model.", "embeddings.tok_embeddings.weight", task);
  if (!prefix.empty() && task == "feature-extraction")
    for (const char* t : {"head.*", "decoder.*", "classifier.*"}) ctx.ignore_tensors(t);
  const std::optional<SentenceModules> sentence =
      read_sentence_modules(ctx, cfg.hidden_size, task);
  ModernBertModel model(cfg, prefix);
  Graph& g = ctx.graph();
  const DType act = activation_dtype(ctx);
  const EncoderInputs in = encoder_inputs(g, false);
  const Value ids = in.input_ids, mask = in.attention_mask;
  Value h = model.forward(g, ids, mask, act);
  if (task == "feature-extraction") return output_features(g, h, Value(), sentence, mask, act);
  if (task != "fill-mask") check_classifier_rows(ctx, "classifier", cfg.num_labels);
  const bool tied = cfg.tie_word_embeddings && !(weights && ctx.query_tensor("decoder.weight"));
  if (tied) ctx.ignore_tensors("decoder.weight");
  ModernBertHead head(cfg, task, tied);
  ScopeGuard s(g, "head");
  g.output(head.forward(g, h, mask, *model.word), "logits");
}

}  // namespace

void register_modernbert(PluginRegistrar& r) { register_encoder_family<ModernBertConfig>(r, "modernbert", read_config, build); }

}  // namespace mobius::nn
