// xlm.cpp - XLM (mobius/sdk/xlm.hpp).
#include "mobius/sdk/xlm.hpp"

#include "mobius/sdk/config.hpp"
#include "mobius/sdk/encoder.hpp"
#include "mobius/sdk/layers.hpp"
#include "mobius/sdk/ops.hpp"
#include "mobius/sdk/plugin.hpp"
#include "mobius/sdk/sentence.hpp"

namespace mobius::nn {
namespace {

using namespace mobius::op;

struct XlmConfig {
  int64_t vocab_size = 30145, emb_dim = 2048, n_layers = 12, n_heads = 16, max_position_embeddings = 512,
          num_labels = 2;
  double layer_norm_eps = 1e-12;
  std::string act = "gelu", summary_type = "first", summary_activation;
  bool summary_use_proj = true, summary_proj_to_labels = true;
};
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(XlmConfig, vocab_size, emb_dim, n_layers, n_heads,
                                                max_position_embeddings, num_labels, layer_norm_eps, act,
                                                summary_type, summary_activation, summary_use_proj,
                                                summary_proj_to_labels)

XlmConfig read_config(const nlohmann::json& raw) {
  if (!raw.is_object()) throw Error("[config] config.json must be a JSON object");
  ConfigReader r(raw, "config.json");
  XlmConfig c;
  c.vocab_size = r.get_int(r.has("n_words") ? "n_words" : "vocab_size", c.vocab_size);
  c.emb_dim = r.get_int("emb_dim", c.emb_dim);
  c.n_layers = r.get_int("n_layers", c.n_layers);
  c.n_heads = r.get_int("n_heads", c.n_heads);
  c.max_position_embeddings = r.get_int("max_position_embeddings", c.max_position_embeddings);
  c.layer_norm_eps = r.get_double("layer_norm_eps", c.layer_norm_eps);
  c.act = r.get_bool("gelu_activation", true) ? "gelu" : "relu";
  if (r.get_bool("causal", false)) r.fail("causal", "is true: XLM's causal language model is not built (its encoder is)");
  if (r.get_bool("asm", false)) r.fail("asm", "is true: the adaptive softmax head is not built");
  if (!r.get_bool("is_encoder", true)) r.fail("is_encoder", "is false: XLM's decoder is not built");
  c.summary_type = r.get_string("summary_type", "first");
  if (c.summary_type != "first" && c.summary_type != "last" && c.summary_type != "mean")
    r.fail("summary_type", "is " + quote_value(c.summary_type) + " (built: first, last, mean)");
  c.summary_use_proj = r.get_bool("summary_use_proj", true);
  c.summary_proj_to_labels = r.get_bool("summary_proj_to_labels", true);
  if (r.has("summary_activation")) c.summary_activation = r.get_string("summary_activation");
  if (!c.summary_activation.empty()) check_activation(r, "summary_activation", c.summary_activation);
  c.num_labels = read_num_labels(r);
  EncoderSizes sizes{c.vocab_size, c.emb_dim, 4 * c.emb_dim, c.n_layers, c.n_heads, c.max_position_embeddings,
                     c.layer_norm_eps, c.act};
  sizes.hidden_key = "emb_dim";
  sizes.heads_key = "n_heads";
  sizes.act_key = "gelu_activation";
  check_encoder_config(r, "xlm", sizes);
  return c;
}

class XlmLayer : public Module {
 public:
  XlmLayer(const XlmConfig& c, const std::string& p, int64_t i) : cfg(c) {
    const std::string n = std::to_string(i);
    qkv_name = p + "attentions." + n + ".qkv";
    const int64_t d = c.emb_dim;
    q = &add<Linear>(p + "attentions." + n + ".q_lin", d, d, true);
    k = &add<Linear>(p + "attentions." + n + ".k_lin", d, d, true);
    v = &add<Linear>(p + "attentions." + n + ".v_lin", d, d, true);
    out = &add<Linear>(p + "attentions." + n + ".out_lin", d, d, true);
    norm1 = &add<LayerNorm>(p + "layer_norm1." + n, d, c.layer_norm_eps);
    lin1 = &add<Linear>(p + "ffns." + n + ".lin1", d, 4 * d, true);
    lin2 = &add<Linear>(p + "ffns." + n + ".lin2", 4 * d, d, true);
    norm2 = &add<LayerNorm>(p + "layer_norm2." + n, d, c.layer_norm_eps);
  }
  Value forward(Graph& g, Value h, const PaddedAttention& mask, Value keep) const {
    const int64_t heads = cfg.n_heads, d = cfg.emb_dim;
    Value a = self_attention(g, h, {q, k, v}, qkv_name, heads, d / heads, mask);
    h = norm1->forward(g, Add(h, out->forward(g, a)));
    h = norm2->forward(g, Add(h, lin2->forward(g, encoder_activation(g, cfg.act, lin1->forward(g, h)))));
    return Mul(h, keep);
  }
  const XlmConfig& cfg;
  std::string qkv_name;
  const Linear *q, *k, *v, *out, *lin1, *lin2;
  const LayerNorm *norm1, *norm2;
};

void build(BuildContext& ctx, const XlmConfig& cfg, const std::string& task) {
  const std::string p = checkpoint_prefix(ctx, "transformer.", "embeddings.weight", task);
  ctx.ignore_tensors(p + "position_ids");
  ctx.ignore_tensors(p + "lang_embeddings.*");  // read only with the langs input
  if (!p.empty() && task == "feature-extraction")
    for (const char* t : {"pred_layer.*", "sequence_summary.*", "classifier.*"}) ctx.ignore_tensors(t);
  const std::optional<SentenceModules> sentence =
      read_sentence_modules(ctx, cfg.emb_dim, task);
  struct Model : Module {
    Model(const XlmConfig& c, const std::string& p) {
      word = &add<Embedding>(p + "embeddings", c.vocab_size, c.emb_dim);
      position = &add<Embedding>(p + "position_embeddings", c.max_position_embeddings, c.emb_dim);
      norm = &add<LayerNorm>(p + "layer_norm_emb", c.emb_dim, c.layer_norm_eps);
      for (int64_t i = 0; i < c.n_layers; ++i) layers.push_back(&add<XlmLayer>("", c, p, i));
    }
    const Embedding *word, *position;
    const LayerNorm* norm;
    std::vector<const XlmLayer*> layers;
  } model(cfg, p);
  model.retarget(legacy_norm_names(ctx));
  Graph& g = ctx.graph();
  const DType act = activation_dtype(ctx);
  const EncoderInputs in = encoder_inputs(g, false);
  const Value ids = in.input_ids, mask = in.attention_mask;
  Value keep = Cast(Unsqueeze(mask, {2}), act);  // [b, s, 1]: padded rows zeroed
  Value h = model.word->forward(g, ids, act);
  h = Add(h, Cast(Slice(model.position->param(g, "weight"), Ints(g, {0}), DimOf(ids, 1), {0}), act));
  h = Mul(model.norm->forward(g, h), keep);
  PaddedAttention padding(mask);
  for (const XlmLayer* l : model.layers) h = l->forward(g, h, padding, keep);
  if (task == "feature-extraction") return output_features(g, h, Value(), sentence, mask, act);
  ScopeGuard s(g, "head");
  if (task == "fill-mask") {
    // pred_layer.proj: the embeddings' weight (unless stored) and its own bias.
    struct Head : Module {
      Head(const XlmConfig& c, bool own) {
        if (own) proj = &add<Linear>("pred_layer.proj", c.emb_dim, c.vocab_size, false);
        bias = &add<VectorParam>("pred_layer.proj", "bias", c.vocab_size);
      }
      const Linear* proj = nullptr;
      const VectorParam* bias;
    } head(cfg, !ctx.no_weights() && ctx.query_tensor("pred_layer.proj.weight").has_value());
    Value logits = head.proj ? head.proj->forward(g, h) : model.word->tied_logits(g, h);
    g.output(Add(logits, Cast(head.bias->forward(g), logits.dtype())), "logits");
    return;
  }
  if (task == "token-classification") {
    check_classifier_rows(ctx, "classifier", cfg.num_labels);
    struct Head : Module {
      explicit Head(const XlmConfig& c) { out = &add<Linear>("classifier", c.emb_dim, c.num_labels, true); }
      const Linear* out;
    } head(cfg);
    g.output(head.out->forward(g, h), "logits");
    return;
  }
  // sequence_summary: the first, last or mean token, projected, activated.
  Value x = cfg.summary_type == "first" ? Squeeze(Slice(h, Ints(g, {0}), Ints(g, {1}), {1}), {1})
            : cfg.summary_type == "last" ? Squeeze(Slice(h, Ints(g, {-1}), Ints(g, {INT64_MAX}), {1}), {1})
                                         : ReduceMean(h, {1}, false);
  if (cfg.summary_use_proj) {
    const int64_t n = cfg.summary_proj_to_labels && cfg.num_labels > 0 ? cfg.num_labels : cfg.emb_dim;
    check_classifier_rows(ctx, "sequence_summary.summary", n);
    struct Head : Module {
      Head(int64_t in, int64_t n) { out = &add<Linear>("sequence_summary.summary", in, n, true); }
      const Linear* out;
    } head(cfg.emb_dim, n);
    x = head.out->forward(g, x);
  }
  if (!cfg.summary_activation.empty()) x = activation_f32(cfg.summary_activation, x);
  g.output(x, "logits");
}

}  // namespace

void register_xlm(PluginRegistrar& r) { register_encoder_family<XlmConfig>(r, "xlm", read_config, build); }

}  // namespace mobius::nn
