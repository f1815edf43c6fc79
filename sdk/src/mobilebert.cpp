// mobilebert.cpp - MobileBERT (mobius/sdk/mobilebert.hpp).
#include "mobius/sdk/mobilebert.hpp"

#include "mobius/sdk/config.hpp"
#include "mobius/sdk/encoder.hpp"
#include "mobius/sdk/layers.hpp"
#include "mobius/sdk/ops.hpp"
#include "mobius/sdk/plugin.hpp"
#include "mobius/sdk/sentence.hpp"

namespace mobius::nn {
namespace {

using namespace mobius::op;

struct MobileBertConfig {
  int64_t vocab_size = 30522, embedding_size = 128, hidden_size = 512, num_hidden_layers = 24, num_attention_heads = 4,
          intermediate_size = 512, max_position_embeddings = 512, type_vocab_size = 2, intra_bottleneck_size = 128,
          num_feedforward_networks = 4, num_labels = 2;
  std::string hidden_act = "relu";
  double layer_norm_eps = 1e-12;
  bool trigram_input = true, use_bottleneck = true, use_bottleneck_attention = false,
       key_query_shared_bottleneck = true, no_norm = true, classifier_activation = true, tie_word_embeddings = true;
  int64_t inner() const { return use_bottleneck ? intra_bottleneck_size : hidden_size; }  // true_hidden_size
};
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(MobileBertConfig, vocab_size, embedding_size, hidden_size,
                                                num_hidden_layers, num_attention_heads, intermediate_size,
                                                max_position_embeddings, type_vocab_size, intra_bottleneck_size,
                                                num_feedforward_networks, num_labels, hidden_act, layer_norm_eps,
                                                trigram_input, use_bottleneck, use_bottleneck_attention,
                                                key_query_shared_bottleneck, no_norm, classifier_activation,
                                                tie_word_embeddings)

MobileBertConfig read_config(const nlohmann::json& raw) {
  if (!raw.is_object()) throw Error("[config] config.json must be a JSON object");
  ConfigReader r(raw, "config.json");
  MobileBertConfig c;
  c.vocab_size = r.get_int("vocab_size", c.vocab_size);
  c.embedding_size = r.get_int("embedding_size", c.embedding_size);
  c.hidden_size = r.get_int("hidden_size", c.hidden_size);
  c.num_hidden_layers = r.get_int("num_hidden_layers", c.num_hidden_layers);
  c.num_attention_heads = r.get_int("num_attention_heads", c.num_attention_heads);
  c.intermediate_size = r.get_int("intermediate_size", c.intermediate_size);
  c.max_position_embeddings = r.get_int("max_position_embeddings", c.max_position_embeddings);
  c.type_vocab_size = r.get_int("type_vocab_size", c.type_vocab_size);
  c.intra_bottleneck_size = r.get_int("intra_bottleneck_size", c.intra_bottleneck_size);
  c.num_feedforward_networks = r.get_int("num_feedforward_networks", c.num_feedforward_networks);
  c.hidden_act = r.get_string("hidden_act", c.hidden_act);
  c.layer_norm_eps = r.get_double("layer_norm_eps", c.layer_norm_eps);
  c.trigram_input = r.get_bool("trigram_input", c.trigram_input);
  c.use_bottleneck = r.get_bool("use_bottleneck", c.use_bottleneck);
  c.use_bottleneck_attention = r.get_bool("use_bottleneck_attention", c.use_bottleneck_attention);
  c.key_query_shared_bottleneck = r.get_bool("key_query_shared_bottleneck", c.key_query_shared_bottleneck);
  c.classifier_activation = r.get_bool("classifier_activation", c.classifier_activation);
  c.tie_word_embeddings = r.get_bool("tie_word_embeddings", true);
  const std::string norm = r.get_string("normalization_type", "no_norm");
  if (norm != "no_norm" && norm != "layer_norm")
    r.fail("normalization_type", "is " + quote_value(norm) + " (known: no_norm, layer_norm)");
  c.no_norm = norm == "no_norm";
  c.num_labels = read_num_labels(r);
  if (c.num_feedforward_networks < 1 || c.num_feedforward_networks > 64)
    r.fail("num_feedforward_networks", "must be from 1 to 64");
  if (c.type_vocab_size < 0) r.fail("type_vocab_size", "must not be negative");
  if (c.use_bottleneck && c.intra_bottleneck_size % c.num_attention_heads != 0)
    r.fail("intra_bottleneck_size", "(" + std::to_string(c.intra_bottleneck_size) + ") must be a multiple of 'num_attention_heads' (" +
                                        std::to_string(c.num_attention_heads) + ")");
  // Queries and keys of the layer input itself need it as wide as the inner width.
  if (c.use_bottleneck && !c.use_bottleneck_attention && !c.key_query_shared_bottleneck &&
      c.intra_bottleneck_size != c.hidden_size)
    r.fail("key_query_shared_bottleneck", "is false with 'use_bottleneck_attention' false: the attention then reads the "
                                          "layer input, which needs 'intra_bottleneck_size' equal to 'hidden_size'");
  if (!c.trigram_input && c.embedding_size != c.hidden_size && c.embedding_size <= 0)
    r.fail("embedding_size", "must be positive");
  EncoderSizes sizes{c.vocab_size, c.hidden_size, c.intermediate_size, c.num_hidden_layers,
                     c.num_attention_heads, c.max_position_embeddings, c.layer_norm_eps, c.hidden_act};
  check_encoder_config(r, "mobilebert", sizes);
  return c;
}

// NoNorm: x * weight + bias, elementwise.
class NoNorm : public Module {
 public:
  explicit NoNorm(int64_t d) {
    declare("weight", {d});
    declare("bias", {d});
  }
  Value forward(Graph& g, Value x) const {
    ScopeGuard s(g, path());
    return Add(Mul(x, param(g, "weight", x.dtype())), param(g, "bias", x.dtype()));
  }
};

// The norm normalization_type names, at one place of the tree.
class Norm {
 public:
  Norm() = default;
  Norm(const NoNorm* n, const LayerNorm* l) : no_norm_(n), layer_norm_(l) {}
  Value forward(Graph& g, Value x) const { return no_norm_ ? no_norm_->forward(g, x) : layer_norm_->forward(g, x); }

 private:
  const NoNorm* no_norm_ = nullptr;
  const LayerNorm* layer_norm_ = nullptr;
};

// A module that can hold MobileBERT's norms.
class MobileModule : public Module {
 protected:
  Norm norm(const MobileBertConfig& c, const std::string& name, int64_t dim, bool torch_default_eps = false) {
    if (c.no_norm) return Norm(&add<NoNorm>(name, dim), nullptr);
    return Norm(nullptr, &add<LayerNorm>(name, dim, torch_default_eps ? 1e-5 : c.layer_norm_eps));
  }
};

class MobileBertLayer : public MobileModule {
 public:
  MobileBertLayer(const MobileBertConfig& c) : cfg(c) {
    const int64_t h = c.hidden_size, t = c.inner(), i = c.intermediate_size;
    if (c.use_bottleneck) {
      input = &add<Linear>("bottleneck.input.dense", h, t, true);
      input_norm = norm(c, "bottleneck.input.LayerNorm", t);
      if (!c.use_bottleneck_attention && c.key_query_shared_bottleneck) {
        shared = &add<Linear>("bottleneck.attention.dense", h, t, true);
        shared_norm = norm(c, "bottleneck.attention.LayerNorm", t);
      }
    }
    query = &add<Linear>("attention.self.query", t, t, true);
    key = &add<Linear>("attention.self.key", t, t, true);
    value = &add<Linear>("attention.self.value", c.use_bottleneck_attention ? t : h, t, true);
    attn_out = &add<Linear>("attention.output.dense", t, t, true);
    attn_norm = norm(c, "attention.output.LayerNorm", t);
    for (int64_t k = 0; k + 1 < c.num_feedforward_networks; ++k) {
      const std::string p = "ffn." + std::to_string(k) + ".";
      stacks.push_back({&add<Linear>(p + "intermediate.dense", t, i, true), &add<Linear>(p + "output.dense", i, t, true),
                        norm(c, p + "output.LayerNorm", t)});
    }
    ffn_in = &add<Linear>("intermediate.dense", t, i, true);
    ffn_out = &add<Linear>("output.dense", i, t, true);
    ffn_norm = norm(c, "output.LayerNorm", t, /*torch_default_eps=*/true);
    if (c.use_bottleneck) {
      out = &add<Linear>("output.bottleneck.dense", t, h, true);
      out_norm = norm(c, "output.bottleneck.LayerNorm", h);
    }
  }

  Value forward(Graph& g, Value hs, const PaddedAttention& mask) const {
    ScopeGuard s(g, path());
    const int64_t t = cfg.inner(), heads = cfg.num_attention_heads;
    Value li = hs, qk_in = hs, v_in = hs;
    if (input) {
      li = input_norm.forward(g, input->forward(g, hs));
      if (cfg.use_bottleneck_attention) qk_in = v_in = li;
      else if (shared) qk_in = shared_norm.forward(g, shared->forward(g, hs));
    }
    Value q = query->forward(g, qk_in), k = key->forward(g, qk_in), v = value->forward(g, v_in);
    Value a = attn_norm.forward(g, Add(attn_out->forward(g, padded_attention(g, q, k, v, heads, t / heads, mask)), li));
    for (const Stack& st : stacks)
      a = st.norm.forward(g, Add(st.out->forward(g, encoder_activation(g, cfg.hidden_act, st.in->forward(g, a))), a));
    Value o = ffn_norm.forward(g, Add(ffn_out->forward(g, encoder_activation(g, cfg.hidden_act, ffn_in->forward(g, a))), a));
    return out ? out_norm.forward(g, Add(out->forward(g, o), hs)) : o;
  }

  struct Stack {
    const Linear *in, *out;
    Norm norm;
  };
  const MobileBertConfig& cfg;
  const Linear *input = nullptr, *shared = nullptr, *query, *key, *value, *attn_out, *ffn_in, *ffn_out, *out = nullptr;
  Norm input_norm, shared_norm, attn_norm, ffn_norm, out_norm;
  std::vector<Stack> stacks;
};

class MobileBertModel : public MobileModule {
 public:
  MobileBertModel(const MobileBertConfig& c, const std::string& prefix, bool with_pooler) : cfg(c) {
    const int64_t e = c.embedding_size, h = c.hidden_size;
    word = &add<Embedding>(prefix + "embeddings.word_embeddings", c.vocab_size, e);
    if (c.trigram_input || e != h)
      transform = &add<Linear>(prefix + "embeddings.embedding_transformation", c.trigram_input ? 3 * e : e, h, true);
    position = &add<Embedding>(prefix + "embeddings.position_embeddings", c.max_position_embeddings, h);
    if (c.type_vocab_size > 0) token_type = &add<Embedding>(prefix + "embeddings.token_type_embeddings", c.type_vocab_size, h);
    embed_norm = norm(c, prefix + "embeddings.LayerNorm", h, /*torch_default_eps=*/true);
    for (int64_t i = 0; i < c.num_hidden_layers; ++i)
      layers.push_back(&add<MobileBertLayer>(prefix + "encoder.layer." + std::to_string(i), c));
    if (with_pooler && c.classifier_activation) pooler = &add<Linear>(prefix + "pooler.dense", h, h, true);
  }

  // (last_hidden_state, pooler_output)
  std::pair<Value, Value> forward(Graph& g, Value ids, Value mask, Value types, DType act) const {
    Value h;
    {
      ScopeGuard s(g, "embeddings");
      Value e = word->forward(g, ids, act);  // [b, s, e]
      if (cfg.trigram_input) {
        // [next, this, previous] token's embeddings, zeros past either end.
        Value zero = Mul(Slice(e, Ints(g, {0}), Ints(g, {1}), {1}), ScalarLike(e, 0.0));  // [b, 1, e]
        Value next = Concat({Slice(e, Ints(g, {1}), Ints(g, {INT64_MAX}), {1}), zero}, 1);
        Value prev = Concat({zero, Slice(e, Ints(g, {0}), Ints(g, {-1}), {1})}, 1);
        e = Concat({next, e, prev}, 2);
      }
      if (transform) e = transform->forward(g, e);
      Value rows = Slice(position->param(g, "weight"), Ints(g, {0}), DimOf(ids, 1), {0});
      e = Add(e, Cast(rows, act));
      if (token_type) e = Add(e, token_type->forward(g, types, act));
      h = embed_norm.forward(g, e);
    }
    PaddedAttention padding(mask);
    for (const MobileBertLayer* l : layers) h = l->forward(g, h, padding);
    ScopeGuard s(g, "pooler");
    Value first = Squeeze(Slice(h, Ints(g, {0}), Ints(g, {1}), {1}), {1});
    Value pooled = pooler ? Cast(Tanh(Cast(pooler->forward(g, first), DType::Float)), act) : first;
    return {h, pooled};
  }

  const MobileBertConfig& cfg;
  const Embedding *word, *position, *token_type = nullptr;
  const Linear *transform = nullptr, *pooler = nullptr;
  Norm embed_norm;
  std::vector<const MobileBertLayer*> layers;
};

// The masked LM's transform and its decoder [hidden, vocab]: the word embeddings (transposed)
// over cls.predictions.dense's rows for the width beyond the embeddings'.
class MobileBertHead : public Module {
 public:
  MobileBertHead(const MobileBertConfig& c, const std::string& task) : cfg(c), task(task) {
    if (task == "fill-mask") {
      dense = &add<Linear>("cls.predictions.transform.dense", c.hidden_size, c.hidden_size, true);
      norm = &add<LayerNorm>("cls.predictions.transform.LayerNorm", c.hidden_size, c.layer_norm_eps);
      bias = &add<VectorParam>("cls.predictions", "bias", c.vocab_size);
    } else {
      classifier = &add<Linear>("classifier", c.hidden_size, c.num_labels, true);
    }
  }
  Value forward(Graph& g, Value h, Value pooled, const Embedding& word) const {
    if (task == "sequence-classification") return classifier->forward(g, pooled);
    if (task == "token-classification") return classifier->forward(g, h);
    Value t = norm->forward(g, activation_f32(cfg.hidden_act, dense->forward(g, h)));
    Value w = Transpose(word.param(g, "weight"), {1, 0});  // [e, vocab]
    if (cfg.hidden_size > cfg.embedding_size) {
      Value rest = g.initializer("cls.predictions.dense.weight",
                                 TensorType(g.context().weight_dtype(), {Dim(cfg.hidden_size - cfg.embedding_size), Dim(cfg.vocab_size)}));
      g.context().plan_tensor("cls.predictions.dense.weight", "cls.predictions.dense.weight");
      w = Concat({w, rest}, 0);  // [hidden, vocab]
    }
    return Add(MatMul(t, Cast(w, t.dtype())), Cast(bias->forward(g), t.dtype()));
  }
  const MobileBertConfig& cfg;
  std::string task;
  const Linear *dense = nullptr, *classifier = nullptr;
  const LayerNorm* norm = nullptr;
  const VectorParam* bias = nullptr;
};

void build(BuildContext& ctx, const MobileBertConfig& cfg, const std::string& task) {
  const std::string prefix = checkpoint_prefix(ctx, "mobilebert.", "embeddings.word_embeddings.weight", task);
  ctx.ignore_tensors(prefix + "embeddings.position_ids");
  ctx.ignore_tensors(prefix + "embeddings.token_type_ids");
  bool pooler = task == "feature-extraction" || task == "sequence-classification";
  if (pooler && task == "feature-extraction" && !ctx.no_weights() && cfg.classifier_activation)
    pooler = ctx.query_tensor(prefix + "pooler.dense.weight").has_value();
  if (!pooler) ctx.ignore_tensors(prefix + "pooler.*");
  if (!prefix.empty() && task == "feature-extraction")
    for (const char* t : {"cls.*", "classifier.*"}) ctx.ignore_tensors(t);
  if (task == "fill-mask") ctx.ignore_tensors("cls.predictions.decoder.*");
  if (task != "fill-mask") check_classifier_rows(ctx, "classifier", cfg.num_labels);
  const std::optional<SentenceModules> sentence =
      read_sentence_modules(ctx, cfg.hidden_size, task);
  MobileBertModel model(cfg, prefix, pooler);
  model.retarget(legacy_norm_names(ctx));
  Graph& g = ctx.graph();
  const DType act = activation_dtype(ctx);
  const EncoderInputs in = encoder_inputs(g, cfg.type_vocab_size > 0);
  const Value ids = in.input_ids, mask = in.attention_mask, types = in.token_type_ids;
  auto [h, pooled] = model.forward(g, ids, mask, types, act);
  if (task == "feature-extraction") return output_features(g, h, pooler ? pooled : Value(), sentence, mask, act);
  if (task == "fill-mask" && !cfg.tie_word_embeddings)
    throw Error(MOBIUS_ERROR_KIND_CONFIG, "[config] config.json: 'tie_word_embeddings' is false: MobileBERT's masked LM "
                                          "reads its decoder from the word embeddings");
  MobileBertHead head(cfg, task);
  ScopeGuard s(g, "head");
  g.output(head.forward(g, h, pooled, *model.word), "logits");
}

}  // namespace

void register_mobilebert(PluginRegistrar& r) { register_encoder_family<MobileBertConfig>(r, "mobilebert", read_config, build); }

}  // namespace mobius::nn
