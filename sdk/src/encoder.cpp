// encoder.cpp - BERT-like encoders built from a spec (mobius/sdk/encoder.hpp).
#include "mobius/sdk/encoder.hpp"

#include <algorithm>
#include <cfloat>
#include <cmath>

#include "mobius/sdk/config.hpp"
#include "mobius/sdk/ops.hpp"
#include "mobius/sdk/plugin.hpp"
#include "mobius/sdk/sentence.hpp"

namespace mobius::nn {
namespace {

using namespace mobius::op;

// One layer: a = LayerNorm(h + out(attention(h))), then LayerNorm(a + ffn_out(act(ffn_in(a)))),
// the attention eager with q/k/v biased and packed into one MatMul.
class EncoderLayer : public Module {
 public:
  EncoderLayer(const EncoderConfig& c, const EncoderNames& n)
      : act(c.hidden_act), heads(c.num_attention_heads), head_dim(c.hidden_size / c.num_attention_heads) {
    query = &add<Linear>(n.query, c.hidden_size, c.hidden_size, true);
    key = &add<Linear>(n.key, c.hidden_size, c.hidden_size, true);
    value = &add<Linear>(n.value, c.hidden_size, c.hidden_size, true);
    attn_out = &add<Linear>(n.attn_out, c.hidden_size, c.hidden_size, true);
    attn_norm = &add<LayerNorm>(n.attn_norm, c.hidden_size, c.layer_norm_eps);
    ffn_in = &add<Linear>(n.ffn_in, c.hidden_size, c.intermediate_size, true);
    ffn_out = &add<Linear>(n.ffn_out, c.intermediate_size, c.hidden_size, true);
    ffn_norm = &add<LayerNorm>(n.ffn_norm, c.hidden_size, c.layer_norm_eps);
  }
  Value forward(Graph& g, Value h, const PaddedAttention& mask, bool pre_norm, const EncoderRope* rope) const {
    ScopeGuard s(g, path());
    auto attention = [&](Value x) {
      return attn_out->forward(g, self_attention(g, x, {query, key, value}, full_name("qkv"), heads, head_dim, mask, rope));
    };
    auto ffn = [&](Value x) { return ffn_out->forward(g, encoder_activation(g, act, ffn_in->forward(g, x))); };
    if (pre_norm) {
      Value a = Add(h, attention(attn_norm->forward(g, h)));
      return Add(a, ffn(ffn_norm->forward(g, a)));
    }
    Value a = attn_norm->forward(g, Add(attention(h), h));
    return ffn_norm->forward(g, Add(ffn(a), a));
  }
  std::string act;
  int64_t heads, head_dim;
  const Linear *query, *key, *value, *attn_out, *ffn_in, *ffn_out;
  const LayerNorm *attn_norm, *ffn_norm;
};

struct EncoderOutputs {
  Value last_hidden_state, pooler_output;  // pooler_output: not valid without a pooler
};

// The encoder of a family, its tensors under `prefix` ("" or the family's head prefix).
class EncoderModel : public Module {
 public:
  EncoderModel(const EncoderConfig& c, const EncoderSpec& s, const std::string& prefix, bool with_pooler)
      : cfg(c), spec(s) {
    const EncoderNames& n = s.names;
    const int64_t e = c.embedding_size;
    word = &add<Embedding>(prefix + n.word, c.vocab_size, e);
    if (c.absolute_positions) position = &add<Embedding>(prefix + n.position, c.max_position_embeddings, e);
    if (s.rotary == EncoderSpec::Rotary::StoredInterleaved)
      rotary_table = &add<Embedding>(prefix + s.rotary_table, c.max_position_embeddings,
                                     c.hidden_size / c.num_attention_heads);
    if (!s.relative_bias.empty())
      relative_bias = &add<Embedding>(prefix + s.relative_bias, c.relative_buckets, c.num_attention_heads);
    if (c.type_vocab_size > 0 && !n.token_type.empty())
      token_type = &add<Embedding>(prefix + n.token_type, c.type_vocab_size, e);
    if (!n.embed_norm.empty()) embed_norm = &add<LayerNorm>(prefix + n.embed_norm, e, c.layer_norm_eps);
    if (!n.embed_project.empty() && (n.embed_project_always || e != c.hidden_size))
      embed_project = &add<Linear>(prefix + n.embed_project, e, c.hidden_size, true);
    if (n.group_layer.empty()) {
      for (int64_t i = 0; i < c.num_hidden_layers; ++i)
        layers.push_back(&add<EncoderLayer>(prefix + n.layer + std::to_string(i), c, n));
    } else {
      // ALBERT: each group's layers once, run in order by every layer of the group's share.
      std::vector<std::vector<const EncoderLayer*>> groups(c.num_hidden_groups);
      for (int64_t gi = 0; gi < c.num_hidden_groups; ++gi)
        for (int64_t j = 0; j < c.inner_group_num; ++j)
          groups[gi].push_back(&add<EncoderLayer>(
              prefix + n.layer + std::to_string(gi) + "." + n.group_layer + std::to_string(j), c, n));
      for (int64_t i = 0; i < c.num_hidden_layers; ++i)
        for (const EncoderLayer* l : groups[i * c.num_hidden_groups / c.num_hidden_layers]) layers.push_back(l);
    }
    if (!n.final_norm.empty()) final_norm = &add<LayerNorm>(prefix + n.final_norm, c.hidden_size, c.layer_norm_eps);
    if (with_pooler) pooler = &add<Linear>(prefix + n.pooler, c.hidden_size, c.hidden_size, true);
  }

  EncoderOutputs forward(Graph& g, Value input_ids, Value attention_mask, Value token_type_ids, DType act) const {
    Value seq = DimOf(input_ids, 1);  // int64 [1]
    Value h;
    {
      ScopeGuard s(g, "embeddings");
      if (Value fused = fused_embeddings(g, input_ids, token_type_ids, act); fused.valid())
        h = fused;
      else
        h = embeddings(g, input_ids, token_type_ids, attention_mask, seq, act);
      if (spec.esm_embeddings) h = Mul(h, Cast(Unsqueeze(attention_mask, {2}), act));  // zero at padding
      if (embed_project) h = embed_project->forward(g, h);
    }
    // Keys whose attention_mask is 0 get finfo(float32).min added to their scores.
    PaddedAttention mask(attention_mask);
    if (relative_bias) mask.position_bias = relative_position_bias(g, seq);
    EncoderRope rope;
    if (cfg.rotary) rope = rotary(g, seq, act);
    for (const EncoderLayer* l : layers) h = l->forward(g, h, mask, spec.pre_norm, cfg.rotary ? &rope : nullptr);
    if (final_norm) h = final_norm->forward(g, h);
    EncoderOutputs out;
    out.last_hidden_state = h;
    if (!pooler) return out;
    ScopeGuard s(g, "pooler");
    Value first = Squeeze(Slice(h, Ints(g, {0}), Ints(g, {1}), {1}), {1});  // [b, hidden]
    out.pooler_output = Cast(Tanh(Cast(pooler->forward(g, first), DType::Float)), act);
    return out;
  }

  // Positions numbered from the padding index where the family does (RoBERTa's
  // create_position_ids_from_input_ids: cumsum(ids != pad) * (ids != pad) + pad); invalid where
  // they are 0 .. seq-1.
  Value padding_positions(Graph& g, Value input_ids) const {
    if (!spec.positions_from_padding && spec.padding_idx < 0 && !spec.esm_embeddings) return Value();
    const int64_t pad = spec.padding_idx >= 0 ? spec.padding_idx : cfg.pad_token_id;
    Value real = Cast(Not(Equal(input_ids, Int(g, pad))), DType::Int64);
    return Add(Mul(CumSum(real, 1), real), Int(g, pad));
  }

  // The embeddings' sum (word, position, token type; ESM's token dropout) and norm.
  Value embeddings(Graph& g, Value input_ids, Value token_type_ids, Value attention_mask, Value seq, DType act) const {
    Value h = word->forward(g, input_ids, act);  // [b, s, hidden]
    if (spec.esm_embeddings && cfg.token_dropout) h = esm_token_dropout(g, h, input_ids, attention_mask);
    if (!position) {
    } else if (Value pos = padding_positions(g, input_ids); pos.valid()) {
      h = Add(h, position->forward(g, pos, act));
    } else {
      // position_ids = arange(seq): the table's first seq rows.
      Value rows = Slice(position->param(g, "weight"), Ints(g, {0}), seq, {0});
      h = Add(h, Cast(rows, act));
    }
    if (token_type) h = Add(h, token_type->forward(g, token_type_ids, act));
    return embed_norm ? embed_norm->forward(g, h) : h;
  }

  // With ONNX Runtime's operators and float32 activations, the embeddings' sum and norm as one
  // EmbedLayerNormalization (com.microsoft) node: word + position (0 .. seq-1, or numbered from
  // the padding index) + token type, then the LayerNorm; invalid where the family's embeddings
  // are otherwise (no norm, ESM's).
  Value fused_embeddings(Graph& g, Value input_ids, Value token_type_ids, DType act) const {
    if (!ort_ops(g.context()) || act != DType::Float || !embed_norm || !position || spec.esm_embeddings ||
        g.context().weight_dtype() != DType::Float)
      return Value();
    Value ids32 = Cast(input_ids, DType::Int32);
    std::vector<Value> in = {ids32, token_type ? Cast(token_type_ids, DType::Int32) : Value(), word->param(g, "weight"),
                             position->param(g, "weight"), token_type ? token_type->param(g, "weight") : Value(),
                             embed_norm->param(g, "weight", DType::Float), embed_norm->param(g, "bias", DType::Float)};
    if (Value pos = padding_positions(g, input_ids); pos.valid()) {
      in.push_back(Value());  // mask
      in.push_back(Cast(pos, DType::Int32));
    }
    const TensorType out(DType::Float, {input_ids.dim(0), input_ids.dim(1), Dim(cfg.embedding_size)});
    const TensorType mask_index(DType::Int32, {input_ids.dim(0)});  // unused: the attention reads attention_mask
    return g.node("EmbedLayerNormalization", in, {out, mask_index}, {Attr("epsilon", cfg.layer_norm_eps)},
                  "com.microsoft")[0];
  }

  // ESM's token dropout at inference: mask tokens' embeddings zeroed, every row scaled by
  // 0.88 / (1 - mask tokens / real tokens), in float32.
  Value esm_token_dropout(Graph& g, Value h, Value input_ids, Value attention_mask) const {
    ScopeGuard s(g, "token_dropout");
    Value is_mask = Equal(input_ids, Int(g, cfg.mask_token_id));  // [b, s]
    Value hf = Where(Unsqueeze(is_mask, {2}), Scalar(g, DType::Float, 0.0), Cast(h, DType::Float));
    Value ratio = Div(ReduceSum(Cast(is_mask, DType::Float), {1}, true),
                      ReduceSum(Cast(attention_mask, DType::Float), {1}, true));  // [b, 1]
    Value scale = Sub(Scalar(g, DType::Float, 1.0), ratio);
    hf = Div(Mul(hf, Scalar(g, DType::Float, 0.88)), Unsqueeze(scale, {2}));
    return Cast(hf, h.dtype());
  }

  // Rotary angles for positions 0 .. seq-1 (EncoderSpec::rotary), in `act`.
  EncoderRope rotary(Graph& g, Value seq, DType act) const {
    ScopeGuard s(g, "rotary");
    EncoderRope r;
    const int64_t d = cfg.hidden_size / cfg.num_attention_heads;
    if (rotary_table) {
      // RoFormer: the stored table's first seq rows; sin in the first half, cos in the second.
      Value rows = Cast(Slice(rotary_table->param(g, "weight"), Ints(g, {0}), seq, {0}), act);  // [s, d]
      r.sin = Slice(rows, {0}, {d / 2}, {1});
      r.cos = Slice(rows, {d / 2}, {d}, {1});
      r.interleaved = true;
      r.values = cfg.rotary_value;
      return r;
    }
    // inv_freq as transformers computes it; angles pos * inv_freq for both halves (rotate_half).
    return rotary_angles(g, Squeeze(seq, {0}), d, cfg.rope_theta, act);
  }

  // MPNet's relative position bias [1, heads, s, s] (float32): each query-key distance's bucket
  // (T5's bidirectional rule: 16 buckets a side, exact below 8, logarithmic to 128) read from
  // the table; the buckets of every distance a sequence of max_position_embeddings can have are
  // a constant of the graph.
  Value relative_position_bias(Graph& g, Value seq) const {
    ScopeGuard s(g, "relative_position_bias");
    const int64_t span = cfg.max_position_embeddings;  // distances -(span-1) .. span-1
    std::vector<double> bucket(static_cast<size_t>(2 * span - 1));
    const int64_t half = 32 / 2, exact = half / 2;
    for (int64_t n = -(span - 1); n <= span - 1; ++n) {  // n = query - key
      int64_t b = n < 0 ? half : 0;
      const int64_t a = n < 0 ? -n : n;
      if (a < exact) {
        b += a;
      } else {
        const float v = std::log(static_cast<float>(a) / static_cast<float>(exact)) /
                        static_cast<float>(std::log(128.0 / static_cast<double>(exact))) * static_cast<float>(half - exact);
        b += std::min<int64_t>(exact + static_cast<int64_t>(v), half - 1);
      }
      bucket[static_cast<size_t>(n + span - 1)] = static_cast<double>(b);
    }
    Value table = Constant(g, DType::Int64, {2 * span - 1}, bucket, "buckets");
    Value idx = Range(Int(g, 0), Squeeze(seq, {0}), Int(g, 1));                                  // [s]
    Value dist = Add(Sub(Unsqueeze(idx, {1}), Unsqueeze(idx, {0})), Int(g, span - 1));           // [s, s]
    Value rows = Gather(relative_bias->param(g, "weight", DType::Float), Gather(table, dist, 0), 0);  // [s, s, h]
    return Unsqueeze(Transpose(rows, {2, 0, 1}), {0});                                            // [1, h, s, s]
  }

  EncoderConfig cfg;
  const EncoderSpec& spec;
  const Embedding *word, *position = nullptr, *token_type = nullptr, *rotary_table = nullptr,
                         *relative_bias = nullptr;
  const LayerNorm *embed_norm = nullptr, *final_norm = nullptr;
  const Linear* embed_project = nullptr;
  std::vector<const EncoderLayer*> layers;
  const Linear* pooler = nullptr;
};

// A head on the encoder's outputs (EncoderHeadNames), its tensors at the checkpoint's root.
class EncoderHead : public Module {
 public:
  EncoderHead(const EncoderConfig& c, const EncoderSpec& s, const std::string& task, const EncoderModel& encoder)
      : task_(task), encoder_(encoder) {
    const EncoderHeadNames& n = s.heads;
    if (task == "sequence-classification") {
      if (!n.seq_dense.empty()) dense_ = &add<Linear>(n.seq_dense, c.hidden_size, c.hidden_size, true);
      act_ = n.seq_act.empty() ? c.hidden_act : n.seq_act;
      out_ = &add<Linear>(n.seq_out, c.hidden_size, c.num_labels, true);
    } else if (task == "token-classification") {
      out_ = &add<Linear>(n.token_out, c.hidden_size, c.num_labels, true);
    } else if (task == "fill-mask") {
      // The transform maps to the embeddings' width, where the decoder (the word embeddings) is.
      const int64_t e = c.embedding_size;
      dense_ = &add<Linear>(n.mlm_dense, c.hidden_size, e, true);
      act_ = n.mlm_act.empty() ? c.hidden_act : n.mlm_act;
      norm_ = &add<LayerNorm>(n.mlm_norm, e, c.layer_norm_eps);
      if (!c.tie_word_embeddings) decoder_ = &add<Linear>(n.mlm_decoder, e, c.vocab_size, false);
      const size_t dot = n.mlm_bias.rfind('.');
      bias_ = dot == std::string::npos ? &add<VectorParam>("", n.mlm_bias, c.vocab_size)
                                       : &add<VectorParam>(n.mlm_bias.substr(0, dot), n.mlm_bias.substr(dot + 1), c.vocab_size);
    } else {
      throw Error(MOBIUS_ERROR_KIND_PLUGIN, "[plugin] " + s.model_type + ": no encoder head for task " + task);
    }
  }

  Value forward(Graph& g, const EncoderOutputs& enc) const {
    const Value h = enc.last_hidden_state;
    if (task_ == "sequence-classification") {
      if (!dense_) return out_->forward(g, enc.pooler_output);  // classifier(pooler_output)
      Value first = Squeeze(Slice(h, Ints(g, {0}), Ints(g, {1}), {1}), {1});  // h[:, 0]
      return out_->forward(g, activation_f32(act_, dense_->forward(g, first)));
    }
    if (task_ == "token-classification") return out_->forward(g, h);
    Value t = norm_->forward(g, activation_f32(act_, dense_->forward(g, h)));
    // The decoder: the word embeddings' table [vocab, hidden] read transposed, or its own weight.
    Value logits = decoder_ ? decoder_->forward(g, t) : encoder_.word->tied_logits(g, t);
    return Add(logits, Cast(bias_->forward(g), logits.dtype()));
  }

 private:
  std::string task_, act_;
  const EncoderModel& encoder_;
  const Linear *dense_ = nullptr, *out_ = nullptr, *decoder_ = nullptr;
  const LayerNorm* norm_ = nullptr;
  const VectorParam* bias_ = nullptr;
};

}  // namespace

EncoderConfig read_encoder_config(const EncoderSpec& spec, const nlohmann::json& raw) {
  if (!raw.is_object()) throw Error("[config] config.json must be a JSON object");
  ConfigReader r(raw, "config.json");
  const EncoderKeys& k = spec.keys;
  EncoderConfig c;
  c.model_type = spec.model_type;
  c.pad_token_id = r.get_int("pad_token_id", spec.positions_from_padding ? 1 : 0);
  c.vocab_size = r.get_int("vocab_size", c.vocab_size);
  c.hidden_size = r.get_int(k.hidden, c.hidden_size);
  c.num_hidden_layers = r.get_int(k.layers, c.num_hidden_layers);
  c.num_attention_heads = r.get_int(k.heads, c.num_attention_heads);
  c.intermediate_size = r.get_int(k.intermediate, c.intermediate_size);
  if (!k.act.empty()) c.hidden_act = r.get_string(k.act, c.hidden_act);  // ESM: gelu, no key
  c.max_position_embeddings = r.get_int("max_position_embeddings", c.max_position_embeddings);
  c.type_vocab_size = k.type_vocab.empty() ? 0 : r.get_int(k.type_vocab, c.type_vocab_size);
  if (!k.eps.empty()) c.layer_norm_eps = r.get_double(k.eps, c.layer_norm_eps);
  c.embedding_size = k.embedding.empty() ? c.hidden_size : r.get_int(k.embedding, c.hidden_size);
  if (!spec.names.group_layer.empty()) {
    c.num_hidden_groups = r.get_int("num_hidden_groups", 1);
    c.inner_group_num = r.get_int("inner_group_num", 1);
    if (c.num_hidden_groups < 1 || c.num_hidden_groups > c.num_hidden_layers)
      r.fail("num_hidden_groups", "(" + std::to_string(c.num_hidden_groups) + ") must be from 1 to 'num_hidden_layers' (" +
                                      std::to_string(c.num_hidden_layers) + ")");
    if (c.inner_group_num < 1 || c.inner_group_num > 64)
      r.fail("inner_group_num", "(" + std::to_string(c.inner_group_num) + ") must be from 1 to 64");
  }
  c.num_labels = read_num_labels(r);
  c.tie_word_embeddings = r.get_bool("tie_word_embeddings", true);
  // Positions: the family's scheme (EncoderSpec), or, for ESM, position_embedding_type's.
  using Rotary = EncoderSpec::Rotary;
  if (spec.rotary == Rotary::Computed) {
    const std::string pos = r.get_string("position_embedding_type", "absolute");
    if (pos != "absolute" && pos != "rotary")
      r.fail("position_embedding_type", "is " + quote_value(pos) + "; " + spec.model_type +
                                            " has absolute and rotary positions (transformers 5 removed the relative ones)");
    c.rotary = pos == "rotary";
    c.rope_theta = r.get_double("rope_theta", 10000.0);
    if (!(c.rope_theta > 1.0)) r.fail("rope_theta", "must be greater than 1");
  } else if (spec.rotary == Rotary::StoredInterleaved) {
    c.rotary = true;
    c.rotary_value = r.get_bool("rotary_value", false);
    if (r.get_bool("is_decoder", false))
      r.fail("is_decoder", "is true: a causal " + spec.model_type + " decoder is not built (its encoder is)");
  } else if (spec.relative_bias.empty() || r.has("position_embedding_type")) {
    const std::string pos = r.get_string("position_embedding_type", "absolute");
    if (pos != "absolute")
      r.fail("position_embedding_type", "is " + quote_value(pos) +
                                            "; BertModel's relative position schemes are not built yet (known: absolute)");
  }
  c.absolute_positions = spec.absolute_positions && !c.rotary;
  if (!spec.relative_bias.empty()) {
    // The buckets reach 31 whatever the table's size (transformers calls the bucketing with 32).
    c.relative_buckets = r.get_int("relative_attention_num_buckets", 32);
    if (c.relative_buckets < 32 || c.relative_buckets > 4096)
      r.fail("relative_attention_num_buckets", "(" + std::to_string(c.relative_buckets) +
                                                   ") must be from 32 to 4096: " + spec.model_type +
                                                   " looks up 32 buckets in it");
  }
  if (spec.esm_embeddings) {
    c.token_dropout = r.get_bool("token_dropout", false);
    if (c.token_dropout) {
      if (!r.has("mask_token_id")) r.fail("mask_token_id", "is missing; token_dropout rescales by the mask tokens");
      c.mask_token_id = r.get_int("mask_token_id");
    }
    if (r.get_bool("emb_layer_norm_before", false))
      r.fail("emb_layer_norm_before", "is true: the norm of ESM-1b's embeddings is not built yet");
    if (r.get_bool("is_folding_model", false)) r.fail("is_folding_model", "is true: ESMFold is not built");
  }
  if (c.type_vocab_size < 0) r.fail(k.type_vocab, "must not be negative");
  if (c.absolute_positions && (spec.positions_from_padding || (spec.esm_embeddings && !c.rotary)) &&
      (c.pad_token_id < 0 || c.pad_token_id + 1 >= c.max_position_embeddings))
    r.fail("pad_token_id", "(" + std::to_string(c.pad_token_id) + ") leaves no position in the " +
                               std::to_string(c.max_position_embeddings) + " of 'max_position_embeddings': " +
                               spec.model_type + " numbers positions from it");
  EncoderSizes sizes{c.vocab_size, c.hidden_size, c.intermediate_size, c.num_hidden_layers,
                     c.num_attention_heads, c.max_position_embeddings, c.layer_norm_eps, c.hidden_act};
  sizes.hidden_key = k.hidden;
  sizes.intermediate_key = k.intermediate;
  sizes.heads_key = k.heads;
  sizes.act_key = k.act;
  check_encoder_config(r, spec.model_type, sizes);
  return c;
}

void build_encoder(BuildContext& ctx, const EncoderSpec& spec, const EncoderConfig& cfg, const std::string& task) {
  const EncoderNames& n = spec.names;
  const EncoderHeadNames& hn = spec.heads;
  const std::string head = spec.head_prefix;
  const bool weights = !ctx.no_weights();
  // A head's checkpoint holds the encoder under the head prefix; a base model's at the root.
  const std::string prefix = checkpoint_prefix(ctx, head, n.word + ".weight", task);
  // Buffers the embeddings may save (arange of the positions, and the zero token types).
  ctx.ignore_tensors(prefix + "embeddings.position_ids");
  ctx.ignore_tensors(prefix + "embeddings.token_type_ids");
  // Rotary frequencies a checkpoint may keep (ESM: one copy per layer), recomputed here; ESM's
  // contact-prediction head, which no task here reads.
  if (cfg.rotary) ctx.ignore_tensors(prefix + "*rotary_embeddings.inv_freq");
  if (spec.esm_embeddings) ctx.ignore_tensors(prefix + "contact_head.*");
  // What a head's checkpoint holds beside the encoder that this task does not read: the other
  // heads (a classifier's checkpoint built for feature extraction) and an unused pooler.
  const bool seq_pooled = hn.seq_dense.empty() && !n.pooler.empty();
  const bool pooler_used = !n.pooler.empty() && (task == "feature-extraction" || (task == "sequence-classification" && seq_pooled));
  bool pooler = pooler_used;
  if (pooler_used && weights && task == "feature-extraction")
    pooler = ctx.query_tensor(prefix + n.pooler + ".weight").has_value();  // BertModel(add_pooling_layer=False)
  if (!pooler && !n.pooler.empty()) ctx.ignore_tensors(prefix + n.pooler + ".*");
  if (!prefix.empty()) {
    std::vector<std::string> used;
    if (task == "sequence-classification") used = {hn.seq_dense, hn.seq_out};
    if (task == "token-classification") used = {hn.token_out};
    if (task == "fill-mask") used = {hn.mlm_dense, hn.mlm_norm, hn.mlm_decoder, hn.mlm_bias};
    for (const std::string& name : {hn.seq_dense, hn.seq_out, hn.token_out, hn.mlm_dense, hn.mlm_norm, hn.mlm_decoder, hn.mlm_bias})
      if (!name.empty() && std::find(used.begin(), used.end(), name) == used.end()) {
        ctx.ignore_tensors(name);
        ctx.ignore_tensors(name + ".*");
      }
  }
  // A sentence-transformers folder: its pooling and normalization add sentence_embedding.
  const std::optional<SentenceModules> sentence =
      read_sentence_modules(ctx, cfg.hidden_size, task);
  EncoderModel model(cfg, spec, prefix, pooler);
  const auto legacy = legacy_norm_names(ctx);
  model.retarget(legacy);
  Graph& g = ctx.graph();
  const DType act = activation_dtype(ctx);
  const EncoderInputs in = encoder_inputs(g, model.token_type != nullptr);
  EncoderOutputs out = model.forward(g, in.input_ids, in.attention_mask, in.token_type_ids, act);
  if (task == "feature-extraction")
    return output_features(g, out.last_hidden_state, out.pooler_output, sentence, in.attention_mask, act);
  // A classifier's rows are its labels: a config that counts others is refused by name before
  // the weights are planned.
  const std::string out_name = task == "sequence-classification" ? hn.seq_out : hn.token_out;
  if (task != "fill-mask") check_classifier_rows(ctx, out_name, cfg.num_labels);
  EncoderHead heads(cfg, spec, task, model);
  heads.retarget(legacy);
  ScopeGuard s(g, "head");
  g.output(heads.forward(g, out), "logits");
}

std::function<std::optional<std::string>(const std::string&)> legacy_norm_names(const BuildContext& ctx) {
  return [&ctx](const std::string& name) -> std::optional<std::string> {
    if (ctx.no_weights() || ctx.query_tensor(name)) return std::nullopt;
    for (const auto& [now, then] : {std::pair<std::string, std::string>{".weight", ".gamma"}, {".bias", ".beta"}})
      if (name.size() > now.size() && name.compare(name.size() - now.size(), now.size(), now) == 0) {
        const std::string old = name.substr(0, name.size() - now.size()) + then;
        if (ctx.query_tensor(old)) return old;
      }
    return std::nullopt;
  };
}

EncoderInputs encoder_inputs(Graph& g, bool token_types) {
  const TensorType ids_t(DType::Int64, {Dim("batch_size"), Dim("sequence_length")});
  EncoderInputs in;
  in.input_ids = g.input("input_ids", ids_t);
  in.attention_mask = g.input("attention_mask", ids_t);
  if (token_types) in.token_type_ids = g.input("token_type_ids", ids_t);
  return in;
}

void output_features(Graph& g, Value last_hidden_state, Value pooler_output, const std::optional<SentenceModules>& sentence,
                     Value attention_mask, DType act) {
  g.output(last_hidden_state, "last_hidden_state");
  if (pooler_output.valid()) g.output(pooler_output, "pooler_output");
  if (sentence && sentence->pooling.modes() > 0)
    g.output(sentence_embedding(g, *sentence, last_hidden_state, attention_mask, act), "sentence_embedding");
}

int64_t read_num_labels(const ConfigReader& r, int64_t def) {
  if (!r.has("id2label")) {
    const int64_t n = r.get_int("num_labels", def);
    if (n < 1) r.fail("num_labels", "must be at least 1");
    return n;
  }
  const nlohmann::json& labels = r.raw().at("id2label");
  if (!labels.is_object() || labels.empty()) r.fail("id2label", "must be a non-empty object of label names");
  const int64_t n = static_cast<int64_t>(labels.size());
  check_size_key("num_labels", n, "config.json: 'id2label'");
  if (r.has("num_labels") && r.get_int("num_labels") != n)
    r.fail("num_labels", "(" + std::to_string(r.get_int("num_labels")) + ") disagrees with the " + std::to_string(n) +
                             " labels of 'id2label'");
  return n;
}

std::string checkpoint_prefix(const BuildContext& ctx, const std::string& head_prefix, const std::string& probe,
                              const std::string& task) {
  if (head_prefix.empty()) return "";
  const bool under = ctx.no_weights() ? task != "feature-extraction" : ctx.query_tensor(head_prefix + probe).has_value();
  return under ? head_prefix : "";
}

void check_classifier_rows(const BuildContext& ctx, const std::string& name, int64_t num_labels) {
  if (ctx.no_weights()) return;
  if (auto t = ctx.query_tensor(name + ".weight"); t && !t->dims.empty() && t->dims[0] != num_labels)
    throw Error(MOBIUS_ERROR_KIND_CONFIG, "[config] config.json: " + std::to_string(num_labels) +
                                              " labels ('id2label' or 'num_labels'), but the checkpoint's " + name +
                                              ".weight has " + std::to_string(t->dims[0]) + " rows, one per label");
}

void register_encoder(PluginRegistrar& r, const EncoderSpec& spec) {
  r.add_tasks(
      spec.model_type, encoder_tasks(),
      [&spec](const nlohmann::json& raw, const std::string&) { return nlohmann::json(read_encoder_config(spec, raw)); },
      [&spec](BuildContext& ctx, const nlohmann::json& cfg) {
        build_encoder(ctx, spec, cfg.get<EncoderConfig>(), cfg.at("task").get<std::string>());
      });
}

}  // namespace mobius::nn
