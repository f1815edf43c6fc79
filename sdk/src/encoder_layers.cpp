// encoder_layers.cpp - attention over padded sequences without a cache, for the encoders
// (layers.hpp): the config checks every encoder shares, eager and fused bidirectional attention,
// rotary angles by sequence position.
#include "mobius/sdk/layers.hpp"

#include <algorithm>
#include <cfloat>
#include <cmath>

#include "packed.hpp"

namespace mobius::nn {

using namespace mobius::op;

void check_encoder_config(const ConfigReader& r, const std::string& model_type, const EncoderSizes& c) {
  check_activation(r, c.act_key, c.hidden_act);
  if (c.intermediate_size <= 0) r.fail(c.intermediate_key, "must be positive, got " + std::to_string(c.intermediate_size));
  if (c.max_position_embeddings <= 0)
    r.fail("max_position_embeddings", "must be positive, got " + std::to_string(c.max_position_embeddings));
  if (!(c.layer_norm_eps > 0)) r.fail(c.eps_key, "must be positive");
  if (c.num_attention_heads <= 0 || c.hidden_size % c.num_attention_heads != 0)
    r.fail(c.heads_key, "(" + std::to_string(c.num_attention_heads) + ") must divide '" + c.hidden_key + "' (" +
                            std::to_string(c.hidden_size) + ")");
  ArchitectureConfig a;
  a.model_type = model_type;
  a.vocab_size = c.vocab_size;
  a.hidden_size = c.hidden_size;
  a.intermediate_size = c.intermediate_size;
  a.num_hidden_layers = c.num_hidden_layers;
  a.num_attention_heads = a.num_key_value_heads = c.num_attention_heads;
  a.head_dim = c.hidden_size / c.num_attention_heads;
  a.max_position_embeddings = c.max_position_embeddings;
  a.rms_norm_eps = c.layer_norm_eps;
  a.hidden_act = c.hidden_act;
  a.validate();
}

Value encoder_attention(Graph& g, Value q, Value k, Value v, int64_t heads, int64_t head_dim, Value bias,
                        const EncoderRope* rope, double scale) {
  q = Transpose(Reshape(q, {0, 0, heads, head_dim}), {0, 2, 1, 3});  // [b, h, s, d]
  if (rope) {
    k = Transpose(Reshape(k, {0, 0, heads, head_dim}), {0, 2, 1, 3});  // [b, h, s, d]
    q = apply_rope(q, rope->cos, rope->sin, rope->interleaved);
    k = Transpose(apply_rope(k, rope->cos, rope->sin, rope->interleaved), {0, 1, 3, 2});  // [b, h, d, s]
  } else {
    k = Transpose(Reshape(k, {0, 0, heads, head_dim}), {0, 2, 3, 1});  // [b, h, d, s]
  }
  v = Transpose(Reshape(v, {0, 0, heads, head_dim}), {0, 2, 1, 3});  // [b, h, s, d]
  if (rope && rope->values) v = apply_rope(v, rope->cos, rope->sin, rope->interleaved);
  if (scale == 0) scale = 1.0 / std::sqrt(static_cast<double>(head_dim));
  Value scores = Cast(MatMul(q, k), DType::Float);
  scores = Mul(scores, Scalar(g, DType::Float, scale));
  if (bias.valid()) scores = Add(scores, bias);
  Value probs = Cast(Softmax(scores, -1), v.dtype());
  Value o = MatMul(probs, v);                                           // [b, h, s, d]
  return Reshape(Transpose(o, {0, 2, 1, 3}), {0, 0, heads * head_dim});  // [b, s, hidden]
}

Value PaddedAttention::mask_bias(Graph& g) const {
  if (!bias_.valid() && attention_mask.valid()) {
    ScopeGuard s(g, "padding_mask");
    Value masked = Equal(attention_mask, Int(g, 0));  // [b, s]
    bias_ = Unsqueeze(Where(masked, Scalar(g, DType::Float, -FLT_MAX), Scalar(g, DType::Float, 0.0)), {1, 2});
  }
  return bias_;
}

Value PaddedAttention::key_padding(Graph& g) const {
  if (!int32_.valid() && attention_mask.valid()) {
    ScopeGuard s(g, "padding_mask");
    int32_ = Cast(attention_mask, DType::Int32);
  }
  return int32_;
}

EncoderRope rotary_angles(Graph& g, Value seq, int64_t head_dim, double theta, DType act) {
  RopeConfig rope;
  rope.theta = theta;
  const std::vector<float> inv = rope_inv_freq(rope, head_dim, nullptr);
  Value freq = Constant(g, DType::Float, {1, head_dim / 2}, std::vector<double>(inv.begin(), inv.end()), "inv_freq");
  Value pos = Cast(Range(Int(g, 0), seq, Int(g, 1)), DType::Float);  // [s]
  Value angles = Mul(Unsqueeze(pos, {1}), freq);                     // [s, d/2]
  Value both = Concat({angles, angles}, 1);                          // [s, d]
  EncoderRope r;
  r.cos = Cast(Cos(both), act);
  r.sin = Cast(Sin(both), act);
  return r;
}

Value padded_attention(Graph& g, Value q, Value k, Value v, int64_t heads, int64_t head_dim, const PaddedAttention& mask,
                       const EncoderRope* rope, double scale) {
  if (scale == 0) scale = 1.0 / std::sqrt(static_cast<double>(head_dim));
  if (!ort_ops(g.context()) || q.dtype() != DType::Float || (rope && rope->values)) {
    Value padding = mask.mask_bias(g);
    Value bias = !mask.position_bias.valid() ? padding
                 : padding.valid()          ? Add(padding, mask.position_bias)
                                            : mask.position_bias;
    return encoder_attention(g, q, k, v, heads, head_dim, bias, rope, scale);
  }
  if (rope) {
    auto rotate = [&](Value x) {
      Value bhsd = Transpose(Reshape(x, {0, 0, heads, head_dim}), {0, 2, 1, 3});
      return Reshape(Transpose(apply_rope(bhsd, rope->cos, rope->sin, rope->interleaved), {0, 2, 1, 3}),
                     {0, 0, heads * head_dim});
    };
    q = rotate(q);
    k = rotate(k);
  }
  std::vector<Value> inputs = {q, k, v, Value(), mask.key_padding(g)};
  if (mask.position_bias.valid()) inputs.push_back(mask.position_bias);
  return g.node("MultiHeadAttention", inputs, {q.type()},
                {Attr("num_heads", heads), Attr("scale", scale), Attr("mask_filter_value", static_cast<double>(-FLT_MAX))},
                "com.microsoft")[0];
}

Value self_attention(Graph& g, Value x, const std::vector<const Linear*>& qkv, const std::string& name, int64_t heads,
                     int64_t head_dim, const PaddedAttention& mask, const EncoderRope* rope) {
  BuildContext& ctx = g.context();
  bool fusable = ort_ops(ctx) && x.dtype() == DType::Float && !rope && ctx.weight_bits() == 0 && qkv.size() == 3;
  for (const Linear* l : qkv) fusable = fusable && l->has_bias && l->parameter("weight").dtype == DType::Undefined;
  if (!fusable) {
    auto p = packed_linears(g, x, qkv, name);
    return padded_attention(g, p[0], p[1], p[2], heads, head_dim, mask, rope);
  }
  std::vector<std::string> sources, bias_sources;
  int64_t n = 0;
  for (const Linear* l : qkv) {
    sources.push_back(l->source_tensor("weight"));
    bias_sources.push_back(l->source_tensor("bias"));
    n += l->out_features;
  }
  Value w = Cast(weight_in_out(g, name + ".weight", sources, qkv[0]->in_features, n, ctx.weight_dtype()), x.dtype());
  Value b = detail::packed_bias(g, name + ".bias", bias_sources, n, x.dtype());
  std::vector<Value> inputs = {x, w, b, mask.key_padding(g)};
  if (mask.position_bias.valid()) {
    inputs.push_back(Value());  // past
    inputs.push_back(mask.position_bias);
  }
  return g.node("Attention", inputs, {TensorType(x.dtype(), {x.dim(0), x.dim(1), Dim(heads * head_dim)})},
                {Attr("num_heads", heads), Attr("scale", 1.0 / std::sqrt(static_cast<double>(head_dim))),
                 Attr("mask_filter_value", static_cast<double>(-FLT_MAX))},
                "com.microsoft")[0];
}

}  // namespace mobius::nn
