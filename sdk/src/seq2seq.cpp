// seq2seq.cpp - the encoder and the merged decoder of an encoder-decoder row
// (mobius/sdk/seq2seq.hpp).
#include "mobius/sdk/seq2seq.hpp"

#include <array>
#include <cfloat>
#include <cmath>
#include <memory>

#include "mobius/sdk/layers.hpp"
#include "mobius/sdk/speech_encoder.hpp"

namespace mobius::nn {

using namespace mobius::op;

namespace {

using Style = Seq2SeqSpec::Style;

// One attention block's projections: q, k, v, o (T5: q, k, v, o without biases; BART:
// q_proj, k_proj, v_proj, out_proj with them, Whisper's k_proj without).
class Attention : public Module {
 public:
  Attention(const Seq2SeqSpec& s, const Seq2SeqConfig& c, int64_t heads, int64_t head_dim)
      : heads(heads), head_dim(head_dim) {
    const bool t5 = s.style == Style::T5;
    const int64_t inner = heads * head_dim;
    q = &add<Linear>(t5 ? "q" : "q_proj", c.d_model, inner, !t5);
    k = &add<Linear>(t5 ? "k" : "k_proj", c.d_model, inner, !t5 && s.key_bias);
    v = &add<Linear>(t5 ? "v" : "v_proj", c.d_model, inner, !t5);
    o = &add<Linear>(t5 ? "o" : "out_proj", inner, c.d_model, !t5);
    scale = t5 ? 1.0 : 1.0 / std::sqrt(static_cast<double>(head_dim));
  }
  // The queries of x, scaled, [b, heads, s, head_dim]. The scale multiplies the projection (s
  // values a head, as BART's q_proj(x) * scaling) rather than the scores (s * t): ONNX Runtime
  // would fold a scale next to q . K^T into that MatMul's alpha, and its CPU kernel takes a
  // decoder step's product with a long cross cache at a third of the speed when alpha is not 1.
  Value query(Graph& g, Value x) const {
    Value y = q->forward(g, x);
    return heads_first(scale != 1.0 ? Mul(y, ScalarLike(y, scale)) : y);
  }
  // x [b, s, heads * head_dim] -> [b, heads, s, head_dim]
  Value heads_first(Value x) const { return Transpose(Reshape(x, {0, 0, heads, head_dim}), {0, 2, 1, 3}); }
  // softmax(q k^T + bias) v over [b, h, s, d] values (q from query(), scaled), scores and
  // softmax in float32, back to [b, s, h * d] (attend: and through o).
  Value attend_heads(Graph& g, Value qh, Value kh, Value vh, Value bias) const {
    Value scores = Cast(MatMul(qh, Transpose(kh, {0, 1, 3, 2})), DType::Float);
    if (bias.valid()) scores = Add(scores, bias);
    Value probs = Cast(Softmax(scores, -1), vh.dtype());
    return Reshape(Transpose(MatMul(probs, vh), {0, 2, 1, 3}), {0, 0, heads * head_dim});
  }
  Value attend(Graph& g, Value qh, Value kh, Value vh, Value bias) const {
    return o->forward(g, attend_heads(g, qh, kh, vh, bias));
  }
  const Linear *q, *k, *v, *o;
  int64_t heads, head_dim;
  double scale;
};

// The feed-forward block: fc2(act(fc1(x))) (BART), wo(act(wi(x))) or wo(act(wi_0(x)) * wi_1(x)) (T5).
class FeedForward : public Module {
 public:
  FeedForward(const Seq2SeqSpec& s, const Seq2SeqConfig& c, int64_t ffn) : act(c.act) {
    const bool t5 = s.style == Style::T5;
    if (t5 && c.gated) {
      in = &add<Linear>("DenseReluDense.wi_0", c.d_model, ffn, false);
      gate = &add<Linear>("DenseReluDense.wi_1", c.d_model, ffn, false);
    } else {
      in = &add<Linear>(t5 ? "DenseReluDense.wi" : "fc1", c.d_model, ffn, !t5);
    }
    out = &add<Linear>(t5 ? "DenseReluDense.wo" : "fc2", ffn, c.d_model, !t5);
  }
  Value forward(Graph& g, Value x) const {
    Value h = encoder_activation(g, act, in->forward(g, x));
    if (gate) h = Mul(h, gate->forward(g, x));
    return out->forward(g, h);
  }
  std::string act;
  const Linear *in, *gate = nullptr, *out;
};

// BART's final_logits_bias [1, vocab], a buffer at the model's root.
class LogitsBias : public Module {
 public:
  explicit LogitsBias(int64_t vocab) { declare("final_logits_bias", {1, vocab}); }
  Value forward(Graph& g, DType act) const { return param(g, "final_logits_bias", act); }
};

std::unique_ptr<Norm> make_norm(const Seq2SeqSpec& s, const Seq2SeqConfig& c) {
  if (s.style == Style::T5) return std::make_unique<RMSNorm>(c.d_model, c.eps);
  return std::make_unique<LayerNorm>(c.d_model, c.eps);
}

// Where each sublayer of a layer sits and what its norm is called.
struct Sublayer {
  const Norm* norm;
  const Module* block;
};

// An encoder or decoder layer: self-attention, (decoder) cross-attention, feed-forward, each with
// its norm, pre-norm (T5, mBART, Pegasus, M2M, Blenderbot, Whisper) or post-norm (BART, Marian,
// BlenderbotSmall).
class Layer : public Module {
 public:
  Layer(const Seq2SeqSpec& s, const Seq2SeqConfig& c, bool decoder, bool relative_bias) {
    const int64_t heads = decoder ? c.decoder_heads : c.encoder_heads;
    const bool t5 = s.style == Style::T5;
    const int64_t head_dim = decoder ? c.decoder_head_dim : c.head_dim;
    self = &add<Attention>(t5 ? "layer.0.SelfAttention" : "self_attn", s, c, heads, head_dim);
    self_norm = &attach_norm(t5 ? "layer.0.layer_norm" : "self_attn_layer_norm", s, c);
    if (relative_bias) bias_table = &add<Embedding>("layer.0.SelfAttention.relative_attention_bias", c.relative_buckets, heads);
    if (decoder) {
      cross = &add<Attention>(t5 ? "layer.1.EncDecAttention" : "encoder_attn", s, c, heads, head_dim);
      cross_norm = &attach_norm(t5 ? "layer.1.layer_norm" : "encoder_attn_layer_norm", s, c);
    }
    const std::string ff = t5 ? (decoder ? "layer.2" : "layer.1") : "";
    ffn = &add<FeedForward>(ff, s, c, decoder ? c.decoder_ffn : c.encoder_ffn);
    ffn_norm = &attach_norm(t5 ? ff + ".layer_norm" : "final_layer_norm", s, c);
  }
  const Norm& attach_norm(const std::string& name, const Seq2SeqSpec& s, const Seq2SeqConfig& c) {
    auto n = make_norm(s, c);
    const Norm& ref = *n;
    attach(name, std::move(n));
    return ref;
  }
  const Attention *self, *cross = nullptr;
  const Norm *self_norm, *cross_norm = nullptr, *ffn_norm;
  const FeedForward* ffn;
  const Embedding* bias_table = nullptr;
};

// x + f(norm(x)) (pre-norm) or norm(x + f(x)) (post-norm).
template <class F>
Value residual(Graph& g, bool pre_norm, const Norm& norm, Value x, F f) {
  if (pre_norm) return Add(x, f(norm.forward(g, x)));
  return norm.forward(g, Add(x, f(x)));
}

// T5's relative position buckets of each (query, key) pair (_relative_position_bucket), int64:
// `rel` = key position - query position.
Value t5_buckets(Graph& g, Value rel, bool bidirectional, int64_t buckets, int64_t max_distance) {
  Value ret;
  Value n;
  if (bidirectional) {
    buckets /= 2;
    ret = Mul(Cast(Greater(rel, Int(g, 0)), DType::Int64), Int(g, buckets));
    n = Abs(rel);
  } else {
    n = Neg(Min(rel, Int(g, 0)));
  }
  const int64_t exact = buckets / 2;
  Value small = Less(n, Int(g, exact));
  // log(n / exact) / log(max_distance / exact) * (buckets - exact) in float32, as torch computes
  // it; n below `exact` takes the other branch (clamped to 1 so the log stays finite).
  Value nf = Cast(Max(n, Int(g, 1)), DType::Float);
  Value large = Div(Log(Div(nf, Scalar(g, DType::Float, static_cast<double>(exact)))),
                    Scalar(g, DType::Float, std::log(static_cast<double>(max_distance) / static_cast<double>(exact))));
  large = Add(Cast(Mul(large, Scalar(g, DType::Float, static_cast<double>(buckets - exact))), DType::Int64), Int(g, exact));
  large = Min(large, Int(g, buckets - 1));
  Value b = Where(small, n, large);
  return ret.valid() ? Add(ret, b) : b;
}

// The bias table's rows at the buckets: [1, heads, q, k] float32.
Value t5_position_bias(Graph& g, const Embedding& table, Value q_pos, Value k_pos, bool bidirectional,
                       const Seq2SeqConfig& c) {
  ScopeGuard s(g, "position_bias");
  Value rel = Sub(Unsqueeze(k_pos, {0}), Unsqueeze(q_pos, {1}));  // [q, k]
  Value buckets = t5_buckets(g, rel, bidirectional, c.relative_buckets, c.relative_max_distance);
  Value rows = Gather(table.param(g, "weight", DType::Float), buckets, 0);  // [q, k, h]
  return Unsqueeze(Transpose(rows, {2, 0, 1}), {0});
}

// The sinusoidal position tables of Marian/Pegasus and M2M-100, [rows, d] float32, made while
// the weights are written.
Value sinusoid_table(Graph& g, const std::string& name, int64_t rows, int64_t d, bool fairseq, int64_t padding_idx) {
  BuildContext& ctx = g.context();
  if (auto v = ctx.graph().find_initializer(name)) return *v;
  Value t = ctx.graph().initializer(name, TensorType(DType::Float, {rows, d}));
  ctx.plan_transformed(name, {}, [rows, d, fairseq, padding_idx](const std::vector<HostTensor>&, float* out, size_t) {
    const int64_t half = d / 2;
    for (int64_t p = 0; p < rows; ++p) {
      float* row = out + p * d;
      for (int64_t j = 0; j < d; ++j) row[j] = 0.0f;
      if (fairseq) {
        // get_embedding: float32 throughout, sin then cos, the padding row zero.
        const float step = static_cast<float>(std::log(10000.0) / static_cast<double>(half - 1));
        for (int64_t k = 0; k < half; ++k) {
          const float f = std::exp(static_cast<float>(k) * -step);
          const float a = static_cast<float>(p) * f;
          row[k] = std::sin(a);
          row[half + k] = std::cos(a);
        }
        if (p == padding_idx) for (int64_t j = 0; j < d; ++j) row[j] = 0.0f;
      } else {
        // MarianSinusoidalPositionalEmbedding.create_weight: float64 angles pos / 10000^(2k/d),
        // sin in the first ceil(d/2) columns, cos after.
        const int64_t sentinel = d % 2 == 0 ? half : half + 1;
        for (int64_t j = 0; j < d; ++j) {
          const double angle = static_cast<double>(p) / std::pow(10000.0, 2.0 * static_cast<double>(j / 2) / static_cast<double>(d));
          if (j % 2 == 0) row[j / 2] = static_cast<float>(std::sin(angle));
          else row[sentinel + j / 2] = static_cast<float>(std::cos(angle));
        }
      }
    }
  });
  return t;
}


class Seq2SeqModel : public Module {
 public:
  Seq2SeqModel(BuildContext& ctx, const Seq2SeqSpec& s, const Seq2SeqConfig& c) : spec(s), cfg(c) {
    const bool t5 = s.style == Style::T5;
    const std::string enc = s.prefix + "encoder.", dec = s.prefix + "decoder.";
    // The token table: T5's and BART's shared one (or, in a checkpoint without it, the copy
    // each side keeps), Whisper's decoder.embed_tokens.
    auto has = [&](const std::string& n) { return ctx.no_weights() || ctx.query_tensor(n).has_value(); };
    // An untied checkpoint (tie_word_embeddings false) keeps a table per side beside the shared
    // one, and each side reads its own (BART's embed_tokens are tied to shared only when the
    // config ties the embeddings).
    std::string table = s.prefix + "shared", encoder_table = table;
    const bool untied = !t5 && !c.tied_head && !ctx.no_weights();
    if (s.audio || !has(table + ".weight") || (untied && ctx.query_tensor(dec + "embed_tokens.weight")))
      table = dec + "embed_tokens";
    if (!s.audio && (!has(encoder_table + ".weight") || (untied && ctx.query_tensor(enc + "embed_tokens.weight"))))
      encoder_table = enc + "embed_tokens";
    embed = &add<Embedding>(table, c.vocab_size, c.d_model);
    encoder_embed = encoder_table == table ? embed : &add<Embedding>(encoder_table, c.vocab_size, c.d_model);
    for (int64_t i = 0; i < c.encoder_layers; ++i)
      encoder_layers.push_back(&add<Layer>(enc + (t5 ? "block." : "layers.") + std::to_string(i), s, c, false,
                                           t5 && (i == 0 || s.bias_every_layer)));
    for (int64_t i = 0; i < c.decoder_layers; ++i)
      decoder_layers.push_back(&add<Layer>(dec + (t5 ? "block." : "layers.") + std::to_string(i), s, c, true,
                                           t5 && (i == 0 || s.bias_every_layer)));
    if (t5 || s.final_norms) {
      encoder_final = &attach_norm(enc + (t5 ? "final_layer_norm" : "layer_norm"));
      decoder_final = &attach_norm(dec + (t5 ? "final_layer_norm" : "layer_norm"));
    }
    if (!t5 && s.embedding_norm) {
      encoder_embed_norm = &attach_norm(enc + "layernorm_embedding");
      decoder_embed_norm = &attach_norm(dec + "layernorm_embedding");
    }
    if (!t5 && (s.positions == Seq2SeqSpec::Positions::Learned ||
                (s.positions == Seq2SeqSpec::Positions::Sinusoidal && has(enc + "embed_positions.weight")))) {
      const int64_t rows = c.max_positions + s.position_offset;
      decoder_positions = &add<Embedding>(dec + "embed_positions", rows, c.d_model);
      if (!s.audio) encoder_positions = &add<Embedding>(enc + "embed_positions", rows, c.d_model);
    }
    if (s.audio) {
      conv1 = &add<Conv1d>(enc + "conv1", c.num_mel_bins, c.d_model, 3);
      conv2 = &add<Conv1d>(enc + "conv2", c.d_model, c.d_model, 3, 2);
      encoder_positions = &add<Embedding>(enc + "embed_positions", c.max_source_positions, c.d_model);
    }
    // The head: the checkpoint's own (UMT5, FLAN-T5, an untied BART), else the embedding table.
    const std::string head = s.head + ".weight";
    own_head = ctx.no_weights() ? !c.tied_head : ctx.query_tensor(head).has_value() && !(c.tied_head && !t5);
    if (own_head) lm_head = &add<Linear>(s.head, c.d_model, c.vocab_size, false);
    else embed->tied_head = true;
    if (!t5 && s.final_logits_bias) logits_bias = &add<LogitsBias>("", c.vocab_size);
  }

  const Norm& attach_norm(const std::string& name) {
    auto n = make_norm(spec, cfg);
    const Norm& ref = *n;
    attach(name, std::move(n));
    return ref;
  }

  // Token embeddings (times the scale), positions and the embedding norm; `positions` int64
  // [s] or [b, s] absolute positions of the tokens, `ids` for M2M's numbering from padding.
  Value embed_tokens(Graph& g, Value ids, Value positions, bool decoder, DType act) const {
    Value h = (decoder ? embed : encoder_embed)->forward(g, ids, act);
    if (cfg.embed_scale != 1.0 && (!decoder || spec.decoder_embed_scale)) h = Mul(h, ScalarLike(h, cfg.embed_scale));
    if (spec.style == Style::T5) return h;
    const Norm* norm = decoder ? decoder_embed_norm : encoder_embed_norm;
    if (norm && decoder && spec.decoder_norm_before_positions) h = norm->forward(g, h);
    Value pos;
    if (const Embedding* table = decoder ? decoder_positions : encoder_positions) {
      pos = table->forward(g, Add(positions, Int(g, spec.position_offset)), act);
    } else if (spec.positions == Seq2SeqSpec::Positions::Fairseq) {
      const int64_t rows = cfg.max_positions + 2;
      pos = Cast(Gather(sinusoid_table(g, "embed_positions.sinusoids", rows, cfg.d_model, true, cfg.pad_token_id), positions, 0), act);
    } else {
      pos = Cast(Gather(sinusoid_table(g, "embed_positions.sinusoids", cfg.max_positions, cfg.d_model, false, -1), positions, 0), act);
    }
    h = Add(h, pos);
    if (norm && !(decoder && spec.decoder_norm_before_positions)) h = norm->forward(g, h);
    return h;
  }

  // M2M-100's positions (create_position_ids_from_input_ids): (cumsum(ids != pad) + past) *
  // (ids != pad) + pad, [b, s].
  Value fairseq_positions(Graph& g, Value ids, Value past) const {
    Value real = Cast(Not(Equal(ids, Int(g, cfg.pad_token_id))), DType::Int64);
    return Add(Mul(Add(CumSum(real, 1), past), real), Int(g, cfg.pad_token_id));
  }

  void build_encoder(BuildContext& ctx, Graph& g) const {
    const DType act = activation_dtype(ctx);
    const Dim b("batch_size"), s("encoder_sequence_length");
    Value h, bias;
    // The padding, as the eager form's additive bias and as MultiHeadAttention's key mask (made
    // once, before the layers, which copy it); Whisper's encoder has none.
    PaddedAttention padding{Value()};
    if (spec.audio) {
      // WhisperEncoder: gelu(conv1(x)), gelu(conv2(.)) (stride 2), [b, frames / 2, d] plus the
      // stored sinusoids of as many positions. GenAI feeds 3000 frames as audio_features.
      const char* name = genai ? "audio_features" : "input_features";
      // GenAI's features come in the encoder's dtype (its processor reads it from the graph) and
      // its hidden-states buffer takes theirs.
      Value x = genai ? g.input(name, TensorType(act, {b, cfg.num_mel_bins, 2 * cfg.max_source_positions}))
                      : g.input(name, TensorType(DType::Float, {b, cfg.num_mel_bins, Dim("encoder_sequence_length_in")}));
      x = Cast(x, act);
      x = encoder_activation(g, "gelu", conv1->forward(g, x, 1, 1));
      x = encoder_activation(g, "gelu", conv2->forward(g, x, 1, 1));
      h = Transpose(x, {0, 2, 1});
      Value n = DimOf(h, 1);
      Value table = encoder_positions->param(g, "weight", act);
      h = Add(h, Slice(table, Ints(g, {0}), n, {0}));
    } else {
      Value ids = g.input("input_ids", TensorType(DType::Int64, {b, s}));
      Value mask = g.input("attention_mask", TensorType(DType::Int64, {b, s}));
      padding = PaddedAttention(mask);
      bias = padding.mask_bias(g);
      if (ort_ops(ctx) && act == DType::Float) padding.key_padding(g);
      Value n = Squeeze(DimOf(ids, 1), {0});
      Value positions = spec.positions == Seq2SeqSpec::Positions::Fairseq ? fairseq_positions(g, ids, Int(g, 0))
                                                                           : Range(Int(g, 0), n, Int(g, 1));
      h = embed_tokens(g, ids, positions, false, act);
      if (spec.style == Style::T5) {
        Value pos = Range(Int(g, 0), n, Int(g, 1));
        shared_bias = t5_position_bias(g, *encoder_layers[0]->bias_table, pos, pos, true, cfg);
      }
    }
    for (const Layer* l : encoder_layers) {
      ScopeGuard sg(g, l->path());
      // T5's position bias: the first layer's table (every layer's own in UMT5), computed once
      // per table.
      Value pb;
      if (spec.style == Style::T5) {
        pb = shared_bias;
        if (l->bias_table && l != encoder_layers[0]) {
          Value n = Squeeze(DimOf(h, 1), {0});
          Value pos = Range(Int(g, 0), n, Int(g, 1));
          pb = t5_position_bias(g, *l->bias_table, pos, pos, true, cfg);
        }
      }
      h = residual(g, pre_norm(), *l->self_norm, h, [&](Value x) {
        const Attention& a = *l->self;
        if (ort_ops(ctx) && x.dtype() == DType::Float) {
          // One MultiHeadAttention (its CPU kernel computes the scores and softmax in float32, as
          // the eager form): the padding as its key mask, T5's position bias as its bias, the
          // family's scale.
          PaddedAttention layer_mask = padding;
          layer_mask.position_bias = pb;
          return a.o->forward(g, padded_attention(g, a.q->forward(g, x), a.k->forward(g, x), a.v->forward(g, x), a.heads,
                                                  a.head_dim, layer_mask, nullptr, a.scale));
        }
        Value b = pb.valid() ? (bias.valid() ? Add(bias, pb) : pb) : bias;
        return a.attend(g, a.query(g, x), a.heads_first(a.k->forward(g, x)),
                        a.heads_first(a.v->forward(g, x)), b);
      });
      h = residual(g, pre_norm(), *l->ffn_norm, h, [&](Value x) { return l->ffn->forward(g, x); });
    }
    if (encoder_final) h = encoder_final->forward(g, h);
    if (!genai) {
      g.output(h, "last_hidden_state");
      return;
    }
    // GenAI's Whisper encoder also computes every decoder layer's cross-attention keys and
    // values, [b, heads, frames, head_dim], which its decoder then reads as inputs.
    g.output(h, "encoder_hidden_states");
    for (size_t i = 0; i < decoder_layers.size(); ++i) {
      const Attention& a = *decoder_layers[i]->cross;
      g.output(a.heads_first(a.k->forward(g, h)), "present_key_cross_" + std::to_string(i));
      g.output(a.heads_first(a.v->forward(g, h)), "present_value_cross_" + std::to_string(i));
    }
  }

  bool pre_norm() const { return spec.style == Style::T5 || spec.pre_norm; }

  // The decoder's cache names: transformers.js's and Optimum's past_key_values.<i>.decoder.key
  // and present.<i>.decoder.key, or GenAI's past_key_self_<i> and present_key_self_<i>; the
  // cross-attention entries past_key_values.<i>.encoder.key, or GenAI's past_key_cross_<i>.
  std::string self_cache_name(bool past, int64_t i, const std::string& kv) const {
    if (genai) return (past ? "past_" : "present_") + kv + "_self_" + std::to_string(i);
    return (past ? "past_key_values." : "present.") + std::to_string(i) + ".decoder." + kv;
  }
  std::string cross_cache_name(int64_t i, const std::string& kv) const {
    if (genai) return "past_" + kv + "_cross_" + std::to_string(i);
    return "past_key_values." + std::to_string(i) + ".encoder." + kv;
  }
  std::string cross_present_name(int64_t i, const std::string& kv) const {
    return "present." + std::to_string(i) + ".encoder." + kv;
  }

  void build_decoder(BuildContext& ctx, Graph& g) const {
    const DType act = activation_dtype(ctx);
    const int64_t heads = cfg.decoder_heads, hd = cfg.decoder_head_dim;
    const Dim b("batch_size"), s("decoder_sequence_length"), es("encoder_sequence_length");
    const Dim past("past_decoder_sequence_length"), cross_len("encoder_sequence_length_out");
    Value ids = g.input("input_ids", TensorType(DType::Int64, {b, s}));
    Value enc_mask, enc;
    if (!spec.audio) enc_mask = g.input("encoder_attention_mask", TensorType(DType::Int64, {b, es}));
    if (!genai) enc = g.input("encoder_hidden_states", TensorType(act, {b, es, cfg.d_model}));
    std::vector<std::array<Value, 4>> pasts;
    for (int64_t i = 0; i < cfg.decoder_layers; ++i) {
      const TensorType self_t(act, {b, heads, past, hd});
      const TensorType cross_t(act, {b, heads, genai ? Dim(cfg.max_source_positions) : cross_len, hd});
      pasts.push_back({g.input(self_cache_name(true, i, "key"), self_t), g.input(self_cache_name(true, i, "value"), self_t),
                       g.input(cross_cache_name(i, "key"), cross_t), g.input(cross_cache_name(i, "value"), cross_t)});
    }
    if (genai) {
      // GenAI's decoder reads the cross-attention keys and values its encoder computed.
      for (const auto& [name, v] : decoder_body(g, ids, enc_mask, enc, pasts, Cross::Inputs)) g.output(v, name);
      return;
    }
    // Two branches of one If on use_cache_branch, the decoder in each: the first step's projects
    // the cross-attention keys and values from encoder_hidden_states and returns them; the later
    // steps' reads them from the past entries where they are (no copy) and returns empty
    // placeholders for them, as Optimum's merged decoders do. One If, so a step pays one
    // subgraph's overhead, not one per layer.
    Value cached = Squeeze(g.input("use_cache_branch", TensorType(DType::Bool, {1})), {0});
    std::vector<std::pair<std::string, Value>> branch_outputs[2];
    std::shared_ptr<Graph> branches[2];
    for (int k = 0; k < 2; ++k) {
      branches[k] = g.subgraph(k == 0 ? "cached" : "first_step");
      Graph& sg = *branches[k];
      auto outer = [&](Value v) { return v.valid() ? sg.outer(v) : Value(); };
      std::vector<std::array<Value, 4>> sub_pasts;
      for (const auto& p : pasts) sub_pasts.push_back({outer(p[0]), outer(p[1]), outer(p[2]), outer(p[3])});
      branch_outputs[k] = decoder_body(sg, outer(ids), outer(enc_mask), outer(enc), sub_pasts,
                                       k == 0 ? Cross::Cached : Cross::Computed);
      for (const auto& [name, v] : branch_outputs[k]) sg.output(v, sg.fresh_name(name));
    }
    std::vector<TensorType> types;
    for (size_t i = 0; i < branch_outputs[1].size(); ++i) {
      TensorType t = branch_outputs[1][i].second.type();
      for (size_t d = 0; d < t.dims.size(); ++d)  // a dim the branches disagree on is left unnamed
        if (!(t.dims[d] == branch_outputs[0][i].second.type().dims[d])) t.dims[d] = Dim();
      types.push_back(t);
    }
    auto outs = g.node("If", {cached}, types, {Attr("then_branch", branches[0]), Attr("else_branch", branches[1])});
    for (size_t i = 0; i < outs.size(); ++i) g.output(outs[i], branch_outputs[1][i].first);
  }

  // Where a decoder step's cross-attention keys and values come from: the past inputs (GenAI's
  // decoder: its encoder computed them; returned nowhere), the past inputs of a cached step (the
  // present entries are empty placeholders), or the encoder's output on a first step (projected,
  // and returned as the present entries).
  enum class Cross { Inputs, Cached, Computed };

  // The decoder on `g` (the graph or a branch of its If): the named outputs, logits first.
  std::vector<std::pair<std::string, Value>> decoder_body(Graph& g, Value ids, Value enc_mask, Value enc,
                                                         const std::vector<std::array<Value, 4>>& pasts,
                                                         Cross cross) const {
    const DType act = activation_dtype(g.context());
    std::vector<std::pair<std::string, Value>> outputs = {{"logits", Value()}};
    // Positions past .. past + s - 1 (the cache's length is the step's offset).
    Value past_len = DimOf(pasts[0][0], 2);
    Value n = DimOf(ids, 1);
    Value q_pos = Range(Squeeze(past_len, {0}), Squeeze(Add(past_len, n), {0}), Int(g, 1));  // [s]
    Value k_pos = Range(Int(g, 0), Squeeze(Add(past_len, n), {0}), Int(g, 1));                 // [t]
    Value positions = spec.positions == Seq2SeqSpec::Positions::Fairseq && spec.style != Style::T5
                          ? fairseq_positions(g, ids, past_len)
                          : q_pos;
    Value h = embed_tokens(g, ids, positions, true, act);
    // Causal: key j visible from query i when j <= past + i.
    Value causal;
    {
      ScopeGuard sg(g, "causal_mask");
      Value hidden = Greater(Unsqueeze(k_pos, {0}), Unsqueeze(q_pos, {1}));  // [s, t]
      causal = Unsqueeze(Where(hidden, Scalar(g, DType::Float, -FLT_MAX), Scalar(g, DType::Float, 0.0)), {0, 1});
    }
    Value self_bias = causal;
    if (spec.style == Style::T5)
      self_bias = Add(causal, t5_position_bias(g, *decoder_layers[0]->bias_table, q_pos, k_pos, false, cfg));
    Value cross_bias = enc_mask.valid() ? PaddedAttention(enc_mask).mask_bias(g) : Value();

    for (size_t i = 0; i < decoder_layers.size(); ++i) {
      const Layer* l = decoder_layers[i];
      ScopeGuard sg(g, l->path());
      Value layer_bias = self_bias;
      if (spec.style == Style::T5 && l->bias_table && i > 0)
        layer_bias = Add(causal, t5_position_bias(g, *l->bias_table, q_pos, k_pos, false, cfg));
      h = residual(g, pre_norm(), *l->self_norm, h, [&](Value x) {
        const Attention& a = *l->self;
        Value k = Concat({pasts[i][0], a.heads_first(a.k->forward(g, x))}, 2);
        Value v = Concat({pasts[i][1], a.heads_first(a.v->forward(g, x))}, 2);
        outputs.emplace_back(self_cache_name(false, static_cast<int64_t>(i), "key"), k);
        outputs.emplace_back(self_cache_name(false, static_cast<int64_t>(i), "value"), v);
        return a.attend(g, a.query(g, x), k, v, layer_bias);
      });
      h = residual(g, pre_norm(), *l->cross_norm, h, [&](Value x) {
        const Attention& a = *l->cross;
        Value q = a.query(g, x);
        if (cross != Cross::Computed) {
          if (cross == Cross::Cached) {
            outputs.emplace_back(cross_present_name(static_cast<int64_t>(i), "key"), Slice(pasts[i][2], {0}, {0}, {2}));
            outputs.emplace_back(cross_present_name(static_cast<int64_t>(i), "value"), Slice(pasts[i][3], {0}, {0}, {2}));
          }
          return a.attend(g, q, pasts[i][2], pasts[i][3], cross_bias);
        }
        Value k = a.heads_first(a.k->forward(g, enc)), v = a.heads_first(a.v->forward(g, enc));
        outputs.emplace_back(cross_present_name(static_cast<int64_t>(i), "key"), k);
        outputs.emplace_back(cross_present_name(static_cast<int64_t>(i), "value"), v);
        return a.attend(g, q, k, v, cross_bias);
      });
      h = residual(g, pre_norm(), *l->ffn_norm, h, [&](Value x) { return l->ffn->forward(g, x); });
    }
    if (decoder_final) h = decoder_final->forward(g, h);
    if (cfg.scale_logits) h = Mul(h, ScalarLike(h, 1.0 / std::sqrt(static_cast<double>(cfg.d_model))));
    Value logits = own_head ? lm_head->forward(g, h) : embed->tied_logits(g, h);
    if (logits_bias) logits = Add(logits, logits_bias->forward(g, logits.dtype()));
    outputs.front().second = logits;
    return outputs;
  }


  const Seq2SeqSpec& spec;
  Seq2SeqConfig cfg;
  Embedding* embed = nullptr;                  // the decoder's token table (and a tied head's)
  const Embedding* encoder_embed = nullptr;    // the encoder's: the same, or its own when untied
  std::vector<const Layer*> encoder_layers, decoder_layers;
  const Norm *encoder_final = nullptr, *decoder_final = nullptr, *encoder_embed_norm = nullptr,
             *decoder_embed_norm = nullptr;
  const Embedding *encoder_positions = nullptr, *decoder_positions = nullptr;
  const Conv1d *conv1 = nullptr, *conv2 = nullptr;
  bool own_head = false;
  const Linear* lm_head = nullptr;
  const LogitsBias* logits_bias = nullptr;
  mutable Value shared_bias;
  // The graphs are laid out for ONNX Runtime GenAI (its Whisper runner's encoder and decoder).
  bool genai = false;
};

}  // namespace

void build_seq2seq(BuildContext& ctx, const Seq2SeqSpec& spec, const Seq2SeqConfig& cfg) {
  check_seq2seq_checkpoint(ctx, spec, cfg);
  Seq2SeqModel m(ctx, spec, cfg);
  if (spec.audio && ctx.runtime() == "ort-genai") {
    std::string why;
    m.genai = whisper_genai_runs(cfg, &why);
    if (!m.genai && !ctx.runtime_is_default())
      throw Error(MOBIUS_ERROR_KIND_CONFIG, "[config] --runtime ort-genai: " + why + "; use --runtime onnxruntime or transformers.js");
    if (!m.genai && ctx.graph_name() == "encoder_model")
      ctx.log(MOBIUS_LOG_WARNING, "laid out for ONNX Runtime: " + why);
    if (m.genai) add_whisper_genai_files(ctx, cfg);
  }
  Graph& g = ctx.graph();
  const std::string enc = spec.prefix + "encoder.", dec = spec.prefix + "decoder.";
  // Copies of the token table a checkpoint may keep beside the one read, and the other graph's
  // tensors.
  for (const std::string& copy : {spec.prefix + "shared.weight", enc + "embed_tokens.weight", dec + "embed_tokens.weight"})
    if (copy != m.embed->full_name("weight") && copy != m.encoder_embed->full_name("weight")) ctx.ignore_tensors(copy);
  if (!m.own_head) ctx.ignore_tensors(spec.head + ".weight");
  if (ctx.graph_name() == "encoder_model") {
    ctx.ignore_tensors(dec + "*");
    ctx.ignore_tensors(spec.head + ".*");
    ctx.ignore_tensors("final_logits_bias");
    m.build_encoder(ctx, g);
  } else if (ctx.graph_name() == "decoder_model_merged") {
    ctx.ignore_tensors(enc + "*");
    if (m.genai) {  // GenAI's encoder projects the cross-attention keys and values
      ctx.ignore_tensors(dec + "layers.*.encoder_attn.k_proj.*");
      ctx.ignore_tensors(dec + "layers.*.encoder_attn.v_proj.*");
    }
    m.build_decoder(ctx, g);
  } else {
    throw Error(MOBIUS_ERROR_KIND_PLUGIN, "[plugin] " + spec.model_type + ": no graph '" + ctx.graph_name() + "'");
  }
}

}  // namespace mobius::nn
