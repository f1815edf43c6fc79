// norms.cpp - RMSNorm, Gemma's (1 + w) norm and LayerNorm (layers.hpp), in float32 as
// transformers computes them, or ONNX Runtime's fused norms.
#include "mobius/sdk/layers.hpp"

#include <algorithm>
#include <cmath>

namespace mobius::nn {

using namespace mobius::op;

RMSNorm::RMSNorm(int64_t d, double e) : dim(d), eps(e) { declare("weight", {d}); }

Value RMSNorm::normalized_f32(Graph& g, Value x) const {
  (void)g;
  Value xf = Cast(x, DType::Float);
  Value var = ReduceMean(Mul(xf, xf), {-1}, true);
  return Mul(xf, Reciprocal(Sqrt(Add(var, Scalar(x.graph(), DType::Float, eps)))));
}

Value RMSNorm::scale(Graph& g, DType dt) const { return param(g, "weight", dt); }

Value RMSNorm::simplified(Graph& g, Value x) const {
  return g.node("SimplifiedLayerNormalization", {x, scale(g, x.dtype())}, {x.type()},
                {Attr("axis", static_cast<int64_t>(-1)), Attr("epsilon", eps),
                 Attr("stash_type", static_cast<int64_t>(1))})[0];
}

LayerNorm::LayerNorm(int64_t d, double e, Compute c, bool b) : dim(d), eps(e), compute(c), bias(b) {
  declare("weight", {d});
  if (bias) declare("bias", {d});
}

LayerNorm::LayerNorm(int64_t d, double e, Params p, double offset)
    : dim(d), eps(e), bias(p == Params::WeightBias), weight(p != Params::None), weight_offset(offset) {
  if (weight) declare("weight", {d});
  if (bias) declare("bias", {d});
}

Value LayerNorm::scale(Graph& g, DType dt) const {
  if (!weight) {
    // Ones: the operator needs a scale; a constant, the same for every such norm of the graph.
    return Constant(g, dt, {dim}, std::vector<double>(static_cast<size_t>(dim), 1.0), "ones");
  }
  if (weight_offset == 0.0) return param(g, "weight", dt);
  BuildContext& ctx = g.context();
  const std::string name = full_name("weight") + "_plus_one";
  if (auto v = ctx.graph().find_initializer(name)) return *v;
  Value v = ctx.graph().initializer(name, TensorType(dt, {Dim(dim)}));
  const auto offset = static_cast<float>(weight_offset);
  ctx.plan_transformed(name, {source_tensor("weight")},
                       [offset](const std::vector<HostTensor>& in, float* out, size_t n) {
                         for (size_t i = 0; i < n; ++i) out[i] = in[0].data[i] + offset;
                       });
  return v;
}

Value LayerNorm::shift(Graph& g, DType dt) const { return bias ? param(g, "bias", dt) : Value(); }

Value LayerNorm::forward(Graph& g, Value x) const {
  ScopeGuard s(g, path());
  const bool f32 = compute == Compute::Float32;
  Value in = f32 ? Cast(x, DType::Float) : x;
  const DType pdt = f32 ? DType::Float : x.dtype();
  std::vector<Value> inputs = {in, scale(g, pdt)};
  if (bias) inputs.push_back(shift(g, pdt));
  Value y = g.node("LayerNormalization", inputs, {in.type()},
                   {Attr("axis", int64_t{-1}), Attr("epsilon", eps), Attr("stash_type", int64_t{1})})[0];
  return f32 ? Cast(y, x.dtype()) : y;
}

std::pair<Value, Value> LayerNorm::forward_skip(Graph& g, Value x, Value skip) const {
  // Fused for a float32 input only: a float16 one is normalized in float32 (Compute::Float32).
  if (!ort_ops(g.context()) || x.dtype() != DType::Float) return Norm::forward_skip(g, x, skip);
  ScopeGuard s(g, path());
  std::vector<Value> inputs{x, skip, scale(g, DType::Float)};
  if (bias) inputs.push_back(shift(g, DType::Float));
  auto out = g.node("SkipLayerNormalization", inputs, {x.type(), TensorType(), TensorType(), x.type()},
                    {Attr("epsilon", eps)}, "com.microsoft");
  return {out[0], out[3]};
}

std::pair<Value, Value> Norm::forward_skip(Graph& g, Value x, Value skip) const {
  Value sum = Add(skip, x);
  return {forward(g, sum), sum};
}

Value RMSNorm::forward(Graph& g, Value x) const {
  ScopeGuard s(g, path());
  if (ort_ops(g.context())) return simplified(g, x);
  Value n = Cast(normalized_f32(g, x), x.dtype());
  return Mul(scale(g, x.dtype()), n);
}

std::pair<Value, Value> RMSNorm::forward_skip(Graph& g, Value x, Value skip) const {
  if (!ort_ops(g.context()) || !fusable(x.dtype())) return Norm::forward_skip(g, x, skip);
  ScopeGuard s(g, path());
  auto out = g.node("SkipSimplifiedLayerNormalization", {x, skip, scale(g, x.dtype())},
                    {x.type(), TensorType(), TensorType(), x.type()},
                    {Attr("epsilon", eps)}, "com.microsoft");
  return {out[0], out[3]};
}

// (1 + w), computed once while the weights stream rather than in the graph.
Value OffsetRMSNorm::scale(Graph& g, DType dt) const {
  BuildContext& ctx = g.context();
  const std::string name = full_name("weight") + "_plus_one";
  if (auto v = ctx.graph().find_initializer(name)) return *v;
  Value v = ctx.graph().initializer(name, TensorType(dt, {Dim(dim)}));
  ctx.plan_transformed(name, {source_tensor("weight")},
                       [](const std::vector<HostTensor>& in, float* out, size_t n) {
                         for (size_t i = 0; i < n; ++i) out[i] = in[0].data[i] + 1.0f;
                       });
  return v;
}

Value OffsetRMSNorm::forward(Graph& g, Value x) const {
  ScopeGuard s(g, path());
  if (ort_ops(g.context())) {
    // (1 + w) rounded to float16 would change the result: a float16 input is normalized and
    // scaled in float32 and cast once after, as transformers does.
    return fusable(x.dtype()) ? simplified(g, x) : Cast(simplified(g, Cast(x, DType::Float)), x.dtype());
  }
  // transformers computes (1 + w) * normalized(x) in float32 and casts after.
  return Cast(Mul(normalized_f32(g, x), scale(g, DType::Float)), x.dtype());
}

NormFactory norm_factory(NormKind kind) {
  using P = LayerNorm::Params;
  switch (kind) {
    case NormKind::RMS: return rms_norm_factory();
    case NormKind::OffsetRMS: return offset_rms_norm_factory();
    case NormKind::Layer: return [](int64_t d, double e) { return std::make_unique<LayerNorm>(d, e, P::WeightBias); };
    case NormKind::LayerNoBias: return [](int64_t d, double e) { return std::make_unique<LayerNorm>(d, e, P::Weight); };
    case NormKind::LayerNoAffine: return [](int64_t d, double e) { return std::make_unique<LayerNorm>(d, e, P::None); };
    case NormKind::LayerOnePlus:
      return [](int64_t d, double e) { return std::make_unique<LayerNorm>(d, e, P::WeightBias, 1.0); };
  }
  throw Error("[norm] unknown norm kind");
}

NormFactory rms_norm_factory() {
  return [](int64_t d, double e) { return std::make_unique<RMSNorm>(d, e); };
}
NormFactory offset_rms_norm_factory() {
  return [](int64_t d, double e) { return std::make_unique<OffsetRMSNorm>(d, e); };
}

}  // namespace mobius::nn
