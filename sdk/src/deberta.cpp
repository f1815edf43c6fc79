// deberta.cpp - DeBERTa and DeBERTa-v2 encoders and their heads (mobius/sdk/deberta.hpp).
#include "mobius/sdk/deberta.hpp"

#include <algorithm>
#include <cctype>
#include <cfloat>
#include <cmath>
#include <optional>
#include <utility>
#include <vector>

#include "mobius/sdk/config.hpp"
#include "mobius/sdk/encoder.hpp"
#include "mobius/sdk/layers.hpp"
#include "mobius/sdk/ops.hpp"
#include "mobius/sdk/plugin.hpp"
#include "mobius/sdk/sentence.hpp"

namespace mobius::nn {
namespace {

using namespace mobius::op;

// The most relative distances v2's bucket table (relative_index_table) holds on each side.
constexpr int64_t kMaxBucketDistance = int64_t{1} << 18;

// The distance A from which v2's bucketed idx(i, j) is the same for every larger |i - j| (on
// each side): the first beyond mid whose bucket reaches the span S = position_buckets, so that
// idx = 2S - 1 on the positive side and 0 on the negative one from there on (buckets only
// grow with the distance); with mid = 1 every bucket beyond mid is +-1. -1 when A would pass
// kMaxBucketDistance.
int64_t bucket_saturation(int64_t buckets, int64_t max_rel) {
  const int64_t mid = buckets / 2;
  if (mid <= 1) return mid + 1;
  for (int64_t a = mid + 1; a <= kMaxBucketDistance; ++a)
    if (deberta_log_bucket(a, buckets, max_rel) >= buckets) return a;
  return -1;
}

// idx(d) = clamp(bucket(d) + S, 0, 2S - 1) for d = -A .. A (v2 with position buckets), the
// relative index of every distance a sequence of any length can hold once d is clipped to
// [-A, A].
std::vector<double> relative_index_table(int64_t buckets, int64_t max_rel, int64_t a) {
  const int64_t span = buckets;
  std::vector<double> t;
  t.reserve(static_cast<size_t>(2 * a + 1));
  for (int64_t d = -a; d <= a; ++d)
    t.push_back(static_cast<double>(std::clamp<int64_t>(deberta_log_bucket(d, buckets, max_rel) + span, 0, 2 * span - 1)));
  return t;
}

// The relative positions every layer reads: the (v2: layer-normed) embeddings of the span,
// rel [2S, hidden], and the indices into each layer's c2p and p2c scores flattened over their
// last two axes: c2p at i * 2S + idx(i, j), p2c at j * 2S + idx(i, j) (both [seq, seq]).
struct RelativePositions {
  Value rel, c2p_index, p2c_index;
};

// DisentangledSelfAttention (attention.self): its projections and the scores of
// deberta.hpp's formula; returns the attention's output [batch, seq, heads * head_dim].
class DisentangledAttention : public Module {
 public:
  explicit DisentangledAttention(const DebertaConfig& c)
      : cfg(c), heads(c.num_attention_heads), head_dim(c.head_dim) {
    const int64_t hd = c.hidden_size, all = heads * head_dim;
    const bool rel = c.relative_attention;
    if (!c.v2()) {
      in_proj = &add<Linear>("in_proj", hd, 3 * all, false);
      declare("q_bias", {all});
      declare("v_bias", {all});
      if (rel && c.c2p) pos_key = &add<Linear>("pos_proj", hd, all, false);
      if (rel && c.p2c) pos_query = &add<Linear>("pos_q_proj", hd, all, true);
      return;
    }
    query = &add<Linear>("query_proj", hd, all, true);
    key = &add<Linear>("key_proj", hd, all, true);
    value = &add<Linear>("value_proj", hd, all, true);
    if (rel && c.share_att_key) {
      if (c.c2p) pos_key = key;
      if (c.p2c) pos_query = query;
    } else if (rel) {
      if (c.c2p) pos_key = &add<Linear>("pos_key_proj", hd, all, true);
      if (c.p2c) pos_query = &add<Linear>("pos_query_proj", hd, all, true);
    }
  }

  Value forward(Graph& g, Value h, Value pair_mask, const RelativePositions* rp) const {
    ScopeGuard s(g, path());
    const DType act = h.dtype();
    const auto per_head = [&](Value x) { return Transpose(Reshape(x, {0, 0, heads, head_dim}), {0, 2, 1, 3}); };
    Value q, k, v;  // [batch, heads, seq, head_dim]
    if (in_proj) {
      // v1's in_proj: per head h its rows [q_h; k_h; v_h], so the product read as
      // [batch, seq, heads, 3 * head_dim] splits into q, k and v on its last axis.
      Value qkv = Reshape(in_proj->forward(g, h), {0, 0, heads, 3 * head_dim});
      auto parts = Split(qkv, {head_dim, head_dim, head_dim}, -1);
      q = Add(parts[0], Reshape(param(g, "q_bias", act), {heads, head_dim}));
      k = parts[1];
      v = Add(parts[2], Reshape(param(g, "v_bias", act), {heads, head_dim}));
      q = Transpose(q, {0, 2, 1, 3});
      k = Transpose(k, {0, 2, 1, 3});
      v = Transpose(v, {0, 2, 1, 3});
    } else if (pos_key != key && pos_query != query) {
      auto qkv = packed_linears(g, h, {query, key, value}, full_name("qkv"));
      q = per_head(qkv[0]);
      k = per_head(qkv[1]);
      v = per_head(qkv[2]);
    } else {
      // The projections also read the relative embeddings (share_att_key): each its own
      // initializer, used twice.
      q = per_head(query->forward(g, h));
      k = per_head(key->forward(g, h));
      v = per_head(value->forward(g, h));
    }
    // sqrt(head_dim * score_factor) in float32, as torch.sqrt(torch.tensor(D, float) * factor);
    // q (and the relative queries) divided by it before their products.
    const float scale = std::sqrt(static_cast<float>(head_dim) * static_cast<float>(cfg.score_factor));
    q = Div(q, ScalarLike(q, scale));
    Value scores = Cast(MatMul(q, Transpose(k, {0, 1, 3, 2})), DType::Float);  // [b, h, s, s]
    if (rp) {
      // The relative embeddings projected per head: [heads, head_dim, 2S].
      const auto rel_heads = [&](const Linear* proj) {
        return Transpose(Reshape(proj->forward(g, rp->rel), {-1, heads, head_dim}), {1, 2, 0});
      };
      if (pos_key) {
        // c2p(i, j) = q_i . Kr[idx(i, j)]: the [b, h, s, 2S] products read at i * 2S + idx.
        Value full = Reshape(MatMul(q, rel_heads(pos_key)), {0, 0, -1});
        scores = Add(scores, Cast(Gather(full, rp->c2p_index, 2), DType::Float));
      }
      if (pos_query) {
        // p2c(i, j) = k_j . Qr[idx(i, j)]: the [b, h, s, 2S] products of the keys read at
        // j * 2S + idx (transformers' gather at the negated position, transposed).
        Value qr = Div(rel_heads(pos_query), ScalarLike(rp->rel, scale));
        Value full = Reshape(MatMul(k, qr), {0, 0, -1});
        scores = Add(scores, Cast(Gather(full, rp->p2c_index, 2), DType::Float));
      }
    }
    // Masked pairs at finfo(float32).min, then a plain softmax (a padded query's row is uniform).
    scores = Where(pair_mask, scores, Scalar(g, DType::Float, -FLT_MAX));
    Value probs = Cast(Softmax(scores, -1), act);
    Value o = MatMul(probs, v);                                              // [b, h, s, d]
    return Reshape(Transpose(o, {0, 2, 1, 3}), {0, 0, heads * head_dim});  // [b, s, h * d]
  }

  const DebertaConfig& cfg;
  int64_t heads, head_dim;
  const Linear *in_proj = nullptr, *query = nullptr, *key = nullptr, *value = nullptr;
  const Linear *pos_key = nullptr, *pos_query = nullptr;
};

// One layer: a = LayerNorm(h + out(attention(h))), then LayerNorm(a + ffn_out(act(ffn_in(a)))).
class DebertaLayer : public Module {
 public:
  explicit DebertaLayer(const DebertaConfig& c) : act(c.hidden_act) {
    const int64_t hd = c.hidden_size;
    attention = &add<DisentangledAttention>("attention.self", c);
    attn_out = &add<Linear>("attention.output.dense", c.num_attention_heads * c.head_dim, hd, true);
    attn_norm = &add<LayerNorm>("attention.output.LayerNorm", hd, c.layer_norm_eps);
    ffn_in = &add<Linear>("intermediate.dense", hd, c.intermediate_size, true);
    ffn_out = &add<Linear>("output.dense", c.intermediate_size, hd, true);
    ffn_norm = &add<LayerNorm>("output.LayerNorm", hd, c.layer_norm_eps);
  }
  Value forward(Graph& g, Value h, Value pair_mask, const RelativePositions* rp) const {
    ScopeGuard s(g, path());
    Value a = attn_norm->forward(g, Add(attn_out->forward(g, attention->forward(g, h, pair_mask, rp)), h));
    Value y = ffn_out->forward(g, activation_f32(act, ffn_in->forward(g, a)));
    return ffn_norm->forward(g, Add(y, a));
  }
  std::string act;
  const DisentangledAttention* attention;
  const Linear *attn_out, *ffn_in, *ffn_out;
  const LayerNorm *attn_norm, *ffn_norm;
};

// torch.nn.Conv1d(channels, channels, kernel, padding=(kernel - 1) / 2, groups) over
// x [batch, channels, seq], in float32 (its weight [channels, channels / groups, kernel] and bias
// stored as float32); the kernel is odd, so the sequence keeps its length.
class SequenceConv : public Module {
 public:
  SequenceConv(int64_t channels, int64_t kernel, int64_t groups) : kernel(kernel), groups(groups) {
    declare("weight", {channels, channels / groups, kernel});
    declare("bias", {channels});
  }
  Value forward(Graph& g, Value x) const {
    ScopeGuard s(g, path());
    const int64_t pad = (kernel - 1) / 2;
    return g.node("Conv", {x, param(g, "weight", DType::Float), param(g, "bias", DType::Float)}, {x.type()},
                  {Attr("kernel_shape", std::vector<int64_t>{kernel}), Attr("pads", std::vector<int64_t>{pad, pad}),
                   Attr("group", groups)})[0];
  }
  int64_t kernel, groups;
};

// v2's ConvLayer (encoder.conv): Conv1d over the embeddings' output, zero at tokens whose mask
// is not 1, the activation, then LayerNorm(layer 0's output + it) * mask.
class ConvLayer : public Module {
 public:
  explicit ConvLayer(const DebertaConfig& c) : act(c.conv_act) {
    conv = &add<SequenceConv>("conv", c.hidden_size, c.conv_kernel_size, c.conv_groups);
    norm = &add<LayerNorm>("LayerNorm", c.hidden_size, c.layer_norm_eps);
  }
  Value forward(Graph& g, Value embeddings, Value layer0, Value mask) const {
    ScopeGuard s(g, path());
    Value y = conv->forward(g, Cast(Transpose(embeddings, {0, 2, 1}), DType::Float));
    y = Transpose(y, {0, 2, 1});  // [batch, seq, hidden], float32
    // transformers fills (1 - mask).bool(): every token whose mask is not exactly 1.
    Value keep = Unsqueeze(Equal(mask, Int(g, 1)), {2});
    y = Where(keep, y, Scalar(g, DType::Float, 0.0));
    y = Cast(activation(act, y), layer0.dtype());
    Value out = norm->forward(g, Add(layer0, y));
    return Mul(out, Cast(Unsqueeze(mask, {2}), out.dtype()));
  }
  std::string act;
  const SequenceConv* conv;
  const LayerNorm* norm;
};

// The encoder, its tensors under `prefix` ("" or "deberta.").
class DebertaModel : public Module {
 public:
  DebertaModel(const DebertaConfig& c, const std::string& prefix) : cfg(c) {
    const int64_t e = c.embedding_size, hd = c.hidden_size;
    word = &add<Embedding>(prefix + "embeddings.word_embeddings", c.vocab_size, e);
    if (c.position_biased_input)
      position = &add<Embedding>(prefix + "embeddings.position_embeddings", c.max_position_embeddings, e);
    if (c.type_vocab_size > 0)
      token_type = &add<Embedding>(prefix + "embeddings.token_type_embeddings", c.type_vocab_size, e);
    if (e != hd) embed_proj = &add<Linear>(prefix + "embeddings.embed_proj", e, hd, false);
    embed_norm = &add<LayerNorm>(prefix + "embeddings.LayerNorm", hd, c.layer_norm_eps);
    for (int64_t i = 0; i < c.num_hidden_layers; ++i)
      layers.push_back(&add<DebertaLayer>(prefix + "encoder.layer." + std::to_string(i), c));
    if (uses_relative()) {
      const int64_t rows = c.v2() ? 2 * c.v2_span() : 2 * c.max_relative_positions;
      rel_embeddings = &add<Embedding>(prefix + "encoder.rel_embeddings", rows, hd);
      if (c.v2() && c.norm_rel_embeddings) rel_norm = &add<LayerNorm>(prefix + "encoder.LayerNorm", hd, c.layer_norm_eps);
    }
    if (c.v2() && c.conv_kernel_size > 0) conv = &add<ConvLayer>(prefix + "encoder.conv", c);
  }

  // Whether the scores read the relative embeddings (relative attention with c2p or p2c).
  bool uses_relative() const { return cfg.relative_attention && (cfg.c2p || cfg.p2c); }

  Value forward(Graph& g, Value ids, Value mask, Value types, DType act) const {
    Value h;
    {
      ScopeGuard s(g, "embeddings");
      h = word->forward(g, ids, act);  // [b, s, embedding_size]
      if (position) {
        // position_ids = arange(seq): the table's first seq rows.
        Value rows = Slice(position->param(g, "weight"), Ints(g, {0}), DimOf(ids, 1), {0});
        h = Add(h, Cast(rows, act));
      }
      if (token_type) h = Add(h, token_type->forward(g, types, act));
      if (embed_proj) h = embed_proj->forward(g, h);
      h = embed_norm->forward(g, h);
      // Padded tokens' embeddings times their mask: 0.
      h = Mul(h, Cast(Unsqueeze(mask, {2}), act));
    }
    Value pair_mask;
    {
      // Pair (i, j) is attended when attention_mask[i] * attention_mask[j] != 0.
      ScopeGuard s(g, "pair_mask");
      Value real = Not(Equal(mask, Int(g, 0)));                               // [b, s]
      pair_mask = And(Unsqueeze(real, {1, 3}), Unsqueeze(real, {1, 2}));      // [b, 1, s, s]
    }
    std::optional<RelativePositions> rp;
    if (uses_relative()) rp = relative_positions(g, ids, act);
    const Value embeddings = h;
    for (size_t i = 0; i < layers.size(); ++i) {
      h = layers[i]->forward(g, h, pair_mask, rp ? &*rp : nullptr);
      if (i == 0 && conv) h = conv->forward(g, embeddings, h, mask);
    }
    return h;
  }

  // The relative embeddings and indices of deberta.hpp's idx(i, j) for this run's length.
  RelativePositions relative_positions(Graph& g, Value ids, DType act) const {
    ScopeGuard s(g, "relative_positions");
    Value seq = DimOf(ids, 1);  // int64 [1]
    Value pos = Range(Int(g, 0), Squeeze(seq, {0}), Int(g, 1));         // [s]
    Value d = Sub(Unsqueeze(pos, {1}), Unsqueeze(pos, {0}));            // i - j, [s, s]
    Value table = Cast(rel_embeddings->param(g, "weight"), act);
    Value span, idx;  // S (int64 scalar), idx [s, s]
    const auto clamp_index = [&](Value r, Value sp) {
      return Min(Max(Add(r, sp), Int(g, 0)), Sub(Mul(sp, Int(g, 2)), Int(g, 1)));
    };
    RelativePositions rp;
    if (!cfg.v2()) {
      // S = min(seq, max_rel): rows [max_rel - S, max_rel + S) of the 2 * max_rel.
      const int64_t m = cfg.max_relative_positions;
      span = Min(Squeeze(seq, {0}), Int(g, m));
      Value span1 = Unsqueeze(span, {0});
      rp.rel = Slice(table, Sub(Ints(g, {m}), span1), Add(Ints(g, {m}), span1), {0});
      idx = clamp_index(d, span);
    } else {
      span = Int(g, cfg.v2_span());
      rp.rel = rel_norm ? rel_norm->forward(g, table) : table;
      if (cfg.position_buckets > 0) {
        // The buckets of every distance up to the one from which they no longer change,
        // computed here as transformers computes them, read at the clipped distance.
        const int64_t a = bucket_saturation(cfg.position_buckets, cfg.max_relative_positions);
        if (a < 0) throw Error("[plugin] deberta-v2: the relative buckets do not saturate");  // read_deberta_config refuses it
        std::vector<double> t = relative_index_table(cfg.position_buckets, cfg.max_relative_positions, a);
        Value lookup = Constant(g, DType::Int64, {static_cast<int64_t>(t.size())}, t, "relative_index");
        idx = Gather(lookup, Add(Min(Max(d, Int(g, -a)), Int(g, a)), Int(g, a)), 0);
      } else {
        idx = clamp_index(d, span);
      }
    }
    Value width = Mul(span, Int(g, 2));
    rp.c2p_index = Add(idx, Mul(Unsqueeze(pos, {1}), width));
    rp.p2c_index = Add(idx, Mul(Unsqueeze(pos, {0}), width));
    return rp;
  }

  const DebertaConfig& cfg;
  const Embedding *word, *position = nullptr, *token_type = nullptr, *rel_embeddings = nullptr;
  const Linear* embed_proj = nullptr;
  const LayerNorm *embed_norm, *rel_norm = nullptr;
  std::vector<const DebertaLayer*> layers;
  const ConvLayer* conv = nullptr;
};

// A head on the encoder's last_hidden_state, its tensors at the checkpoint's root.
class DebertaHead : public Module {
 public:
  DebertaHead(const DebertaConfig& c, const std::string& task, const DebertaModel& encoder, bool checkpoint_decoder_bias)
      : task_(task), encoder_(encoder) {
    const int64_t hd = c.hidden_size;
    if (task == "sequence-classification") {
      // ContextPooler: pooler.dense over h[:, 0], then pooler_hidden_act; the classifier.
      dense_ = &add<Linear>("pooler.dense", hd, hd, true);
      act_ = c.pooler_hidden_act;
      out_ = &add<Linear>("classifier", hd, c.num_labels, true);
    } else if (task == "token-classification") {
      out_ = &add<Linear>("classifier", hd, c.num_labels, true);
    } else if (task == "fill-mask" && c.legacy) {
      // cls.predictions: transform.dense [embedding_size, hidden], act, transform.LayerNorm, then
      // the decoder (the word embeddings unless untied) and its bias: cls.predictions.bias, or
      // an untied checkpoint's own decoder.bias.
      dense_ = &add<Linear>("cls.predictions.transform.dense", hd, c.embedding_size, true);
      act_ = c.hidden_act;
      norm_ = &add<LayerNorm>("cls.predictions.transform.LayerNorm", c.embedding_size, c.layer_norm_eps);
      const bool own_bias = !c.tie_word_embeddings && checkpoint_decoder_bias;
      if (!c.tie_word_embeddings) decoder_ = &add<Linear>("cls.predictions.decoder", c.embedding_size, c.vocab_size, own_bias);
      if (!own_bias) bias_ = &add<VectorParam>("cls.predictions", "bias", c.vocab_size);
    } else if (task == "fill-mask") {
      // lm_predictions.lm_head: dense, act, LayerNorm, the word embeddings and lm_head.bias.
      dense_ = &add<Linear>("lm_predictions.lm_head.dense", hd, hd, true);
      act_ = c.hidden_act;
      norm_ = &add<LayerNorm>("lm_predictions.lm_head.LayerNorm", hd, c.layer_norm_eps);
      bias_ = &add<VectorParam>("lm_predictions.lm_head", "bias", c.vocab_size);
    } else {
      throw Error(MOBIUS_ERROR_KIND_PLUGIN, "[plugin] " + c.model_type + ": no head for task " + task);
    }
  }

  Value forward(Graph& g, Value h) const {
    if (task_ == "sequence-classification") {
      Value first = Squeeze(Slice(h, Ints(g, {0}), Ints(g, {1}), {1}), {1});  // h[:, 0]
      return out_->forward(g, activation_f32(act_, dense_->forward(g, first)));
    }
    if (task_ == "token-classification") return out_->forward(g, h);
    Value t = norm_->forward(g, activation_f32(act_, dense_->forward(g, h)));
    // The word embeddings' table [vocab, embedding_size] read transposed, or the own decoder.
    Value logits = decoder_ ? decoder_->forward(g, t)
                            : encoder_.word->tied_logits(g, t);
    return bias_ ? Add(logits, Cast(bias_->forward(g), logits.dtype())) : logits;
  }

 private:
  std::string task_, act_;
  const DebertaModel& encoder_;
  const Linear *dense_ = nullptr, *out_ = nullptr, *decoder_ = nullptr;
  const LayerNorm* norm_ = nullptr;
  const VectorParam* bias_ = nullptr;
};

// A "|"-separated config string as transformers' configs split it: lower-cased, split at "|",
// each part stripped ("p2c|c2p" -> p2c, c2p).
std::vector<std::string> split_bars(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
  std::vector<std::string> out;
  size_t start = 0;
  while (true) {
    const size_t bar = s.find('|', start);
    const std::string part = s.substr(start, bar == std::string::npos ? std::string::npos : bar - start);
    const size_t b = part.find_first_not_of(" \t\n\r"), e = part.find_last_not_of(" \t\n\r");
    out.push_back(b == std::string::npos ? "" : part.substr(b, e - b + 1));
    if (bar == std::string::npos) return out;
    start = bar + 1;
  }
}

// pos_att_type as transformers' configs take it: a list as it is, or a "|"-separated string.
std::vector<std::string> read_pos_att_type(const ConfigReader& r) {
  if (!r.has("pos_att_type")) return {};
  const nlohmann::json& v = r.raw().at("pos_att_type");
  return v.is_string() ? split_bars(v.get<std::string>()) : r.get_strings("pos_att_type");
}

}  // namespace

int64_t deberta_log_bucket(int64_t d, int64_t bucket_size, int64_t max_position) {
  const int64_t mid = bucket_size / 2;
  const int64_t sign = d > 0 ? 1 : d < 0 ? -1 : 0;
  const int64_t abs_pos = (d < mid && d > -mid) ? mid - 1 : (d < 0 ? -d : d);
  if (abs_pos <= mid) return d;
  // float32 throughout: abs_pos / mid a float32 division, the denominator the float32 of the
  // Python float (max_position - 1) / mid.
  const float denom = std::log(static_cast<float>(static_cast<double>(max_position - 1) / static_cast<double>(mid)));
  const float ratio = std::log(static_cast<float>(abs_pos) / static_cast<float>(mid)) / denom;
  const float log_pos = std::ceil(ratio * static_cast<float>(mid - 1)) + static_cast<float>(mid);
  return static_cast<int64_t>(log_pos * static_cast<float>(sign));
}

DebertaConfig read_deberta_config(const std::string& model_type, const nlohmann::json& raw, const std::string& task) {
  if (!raw.is_object()) throw Error("[config] config.json must be a JSON object");
  ConfigReader r(raw, "config.json");
  DebertaConfig c;
  c.model_type = model_type;
  const bool v2 = c.v2();
  // DebertaConfig's defaults (deberta-base), DebertaV2Config's (deberta-v2-xlarge).
  c.vocab_size = r.get_int("vocab_size", v2 ? 128100 : 50265);
  c.hidden_size = r.get_int("hidden_size", v2 ? 1536 : 768);
  c.num_hidden_layers = r.get_int("num_hidden_layers", v2 ? 24 : 12);
  c.num_attention_heads = r.get_int("num_attention_heads", v2 ? 24 : 12);
  c.intermediate_size = r.get_int("intermediate_size", v2 ? 6144 : 3072);
  c.hidden_act = r.get_string("hidden_act", "gelu");
  c.max_position_embeddings = r.get_int("max_position_embeddings", 512);
  c.type_vocab_size = r.get_int("type_vocab_size", 0);
  c.layer_norm_eps = r.get_double("layer_norm_eps", 1e-7);
  c.num_labels = read_num_labels(r);
  c.tie_word_embeddings = r.get_bool("tie_word_embeddings", true);
  EncoderSizes sizes{c.vocab_size, c.hidden_size, c.intermediate_size, c.num_hidden_layers,
                     c.num_attention_heads, c.max_position_embeddings, c.layer_norm_eps, c.hidden_act};
  check_encoder_config(r, model_type, sizes);
  c.head_dim = c.hidden_size / c.num_attention_heads;
  if (v2 && r.has("attention_head_size")) {
    // The attention's width must stay hidden_size: its output dense and the relative
    // embeddings are hidden_size wide.
    c.head_dim = r.get_int("attention_head_size");
    if (c.head_dim < 1 || c.head_dim > c.hidden_size || c.head_dim * c.num_attention_heads != c.hidden_size)
      r.fail("attention_head_size", "(" + std::to_string(c.head_dim) + ") times 'num_attention_heads' (" +
                                        std::to_string(c.num_attention_heads) + ") must be 'hidden_size' (" +
                                        std::to_string(c.hidden_size) + "): the attention's output dense is hidden_size wide");
  }
  c.embedding_size = r.get_int("embedding_size", c.hidden_size);
  c.position_biased_input = r.get_bool("position_biased_input", true);
  if (!v2 && r.get_bool("talking_head", false))
    r.fail("talking_head", "is true; DeBERTa's talking-head projections (head_logits_proj, head_weights_proj) are not built");

  // pos_att_type: which relative terms the scores add, and (whatever relative_attention says)
  // how many the scale counts: v1 every entry, v2 whether c2p and p2c are among them.
  const std::vector<std::string> types = read_pos_att_type(r);
  for (const std::string& t : types) {
    if (t != "c2p" && t != "p2c")
      r.fail("pos_att_type", "names " + quote_value(t) + ", a relative attention term mobius does not build (known: c2p, p2c)");
    if (t == "c2p") c.c2p = true;
    if (t == "p2c") c.p2c = true;
  }
  c.score_factor = v2 ? 1 + c.c2p + c.p2c : 1 + static_cast<int64_t>(types.size());

  c.relative_attention = r.get_bool("relative_attention", false);
  const int64_t max_positions = size_bound("max_position_embeddings")->max;
  if (c.relative_attention) {
    const int64_t m = r.get_int("max_relative_positions", -1);
    c.max_relative_positions = m < 1 ? c.max_position_embeddings : m;
    if (c.max_relative_positions > max_positions)
      r.fail("max_relative_positions", "(" + std::to_string(m) + ") is beyond " + std::to_string(max_positions) +
                                           " (its embeddings have twice as many rows)");
    if (v2) {
      c.position_buckets = r.get_int("position_buckets", -1);
      const int64_t pb = c.position_buckets;
      if (pb > max_positions)
        r.fail("position_buckets", "(" + std::to_string(pb) + ") is beyond " + std::to_string(max_positions));
      if (pb == 1) r.fail("position_buckets", "(1) must be at least 2: its log buckets divide by position_buckets / 2");
      if (pb > 1 && c.max_relative_positions - 1 <= pb / 2)
        r.fail("position_buckets", "(" + std::to_string(pb) + ") needs more than " + std::to_string(pb / 2 + 1) +
                                       " relative positions; the model has " + std::to_string(c.max_relative_positions) +
                                       " ('max_relative_positions', else 'max_position_embeddings'), and its log "
                                       "buckets divide by log((" + std::to_string(c.max_relative_positions) + " - 1) / " +
                                       std::to_string(pb / 2) + ")");
      if (pb > 1 && bucket_saturation(pb, c.max_relative_positions) < 0)
        r.fail("position_buckets", "(" + std::to_string(pb) + ") with " + std::to_string(c.max_relative_positions) +
                                       " relative positions gives buckets that keep changing past " +
                                       std::to_string(kMaxBucketDistance) + " tokens of distance, more than mobius tabulates");
    }
  }
  if (v2) {
    c.share_att_key = r.get_bool("share_att_key", false);
    // norm_rel_ebd ("|"-separated): layer_norm norms the relative embeddings.
    for (const std::string& part : split_bars(r.get_string("norm_rel_ebd", "none"))) {
      if (part == "layer_norm") c.norm_rel_embeddings = true;
      else if (part != "none")
        r.fail("norm_rel_ebd", "names " + quote_value(part) + ", a normalization of the relative embeddings mobius does not "
                                                             "build (known: layer_norm, none)");
    }
    c.conv_kernel_size = std::max<int64_t>(r.get_int("conv_kernel_size", 0), 0);
    if (c.conv_kernel_size > 0) {
      if (c.conv_kernel_size % 2 == 0 || c.conv_kernel_size > 1023)
        r.fail("conv_kernel_size", "(" + std::to_string(c.conv_kernel_size) +
                                       ") must be odd and below 1024: ConvLayer pads (kernel - 1) / 2 on each side, "
                                       "and only an odd kernel keeps the sequence's length");
      c.conv_groups = r.get_int("conv_groups", 1);
      if (c.conv_groups < 1 || c.hidden_size % c.conv_groups != 0)
        r.fail("conv_groups", "(" + std::to_string(c.conv_groups) + ") must divide 'hidden_size' (" +
                                  std::to_string(c.hidden_size) + ")");
      c.conv_act = r.get_string("conv_act", "tanh");
      check_activation(r, "conv_act", c.conv_act);
    }
  }

  // The heads' own keys, checked for the head being built.
  c.pooler_hidden_size = r.get_int("pooler_hidden_size", c.hidden_size);
  c.pooler_hidden_act = r.get_string("pooler_hidden_act", "gelu");
  c.legacy = r.get_bool("legacy", true);
  if (task == "sequence-classification") {
    check_activation(r, "pooler_hidden_act", c.pooler_hidden_act);
    if (c.pooler_hidden_size != c.hidden_size)
      r.fail("pooler_hidden_size", "(" + std::to_string(c.pooler_hidden_size) + ") is not 'hidden_size' (" +
                                       std::to_string(c.hidden_size) +
                                       "): the ContextPooler's dense takes h[:, 0] and its classifier reads hidden_size");
  }
  if (task == "fill-mask" && !c.legacy && c.embedding_size != c.hidden_size)
    r.fail("embedding_size", "(" + std::to_string(c.embedding_size) + ") is not 'hidden_size' (" +
                                 std::to_string(c.hidden_size) +
                                 "): with 'legacy' false the masked-LM head multiplies hidden_size-wide states by "
                                 "the word embeddings");
  return c;
}

void build_deberta(BuildContext& ctx, const DebertaConfig& cfg, const std::string& task) {
  const bool weights = !ctx.no_weights();
  // A head's checkpoint holds the encoder under "deberta."; a base model's at the root.
  const std::string prefix = checkpoint_prefix(ctx, "deberta.", "embeddings.word_embeddings.weight", task);
  // Buffers the embeddings may save, and relative tensors the scores do not read (relative
  // attention without c2p or p2c; v2's encoder.LayerNorm without relative attention).
  ctx.ignore_tensors(prefix + "embeddings.position_ids");
  DebertaModel model(cfg, prefix);
  if (!model.uses_relative()) {
    ctx.ignore_tensors(prefix + "encoder.rel_embeddings.*");
    if (cfg.v2()) ctx.ignore_tensors(prefix + "encoder.LayerNorm.*");
  }
  // What a head's checkpoint holds beside the encoder that this task does not read.
  if (!prefix.empty()) {
    std::vector<std::string> unused = {"pooler", "classifier", "cls", "lm_predictions", "mask_predictions", "qa_outputs"};
    std::vector<std::string> used;
    if (task == "sequence-classification") used = {"pooler", "classifier"};
    if (task == "token-classification") used = {"classifier"};
    if (task == "fill-mask") used = {cfg.legacy ? "cls" : "lm_predictions"};
    for (const std::string& name : unused)
      if (std::find(used.begin(), used.end(), name) == used.end()) ctx.ignore_tensors(name + ".*");
  }
  // The legacy masked-LM head: a tied decoder's own copies, where a checkpoint kept them.
  bool decoder_bias = false;
  if (task == "fill-mask" && cfg.legacy && weights) {
    decoder_bias = ctx.query_tensor("cls.predictions.decoder.bias").has_value();
    if (cfg.tie_word_embeddings) ctx.ignore_tensors("cls.predictions.decoder.*");
    else if (decoder_bias) ctx.ignore_tensors("cls.predictions.bias");
  }
  // transformers' legacy names, which it still reads (LayerNorm.gamma / .beta).
  const auto legacy = legacy_norm_names(ctx);
  model.retarget(legacy);
  // A sentence-transformers folder: its pooling and normalization add sentence_embedding.
  const std::optional<SentenceModules> sentence =
      read_sentence_modules(ctx, cfg.hidden_size, task);
  Graph& g = ctx.graph();
  const DType act = activation_dtype(ctx);
  const EncoderInputs in = encoder_inputs(g, model.token_type != nullptr);
  const Value ids = in.input_ids, mask = in.attention_mask, types = in.token_type_ids;
  Value h = model.forward(g, ids, mask, types, act);
  if (task == "feature-extraction") return output_features(g, h, Value(), sentence, mask, act);
  // A classifier's rows are its labels: a config that counts others is refused by name before
  // the weights are planned.
  if (task != "fill-mask") check_classifier_rows(ctx, "classifier", cfg.num_labels);
  DebertaHead head(cfg, task, model, decoder_bias);
  head.retarget(legacy);
  ScopeGuard s(g, "head");
  g.output(head.forward(g, h), "logits");
}

void register_deberta(PluginRegistrar& r) {
  for (const char* type : {"deberta", "deberta-v2"}) {
    const std::string model_type = type;
    r.add_tasks(
        model_type, encoder_tasks(),
        [model_type](const nlohmann::json& raw, const std::string& task) {
          return nlohmann::json(read_deberta_config(model_type, raw, task));
        },
        [](BuildContext& ctx, const nlohmann::json& cfg) {
          build_deberta(ctx, cfg.get<DebertaConfig>(), cfg.at("task").get<std::string>());
        });
  }
}

}  // namespace mobius::nn
