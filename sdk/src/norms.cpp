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

Value LayerNorm::forward(Graph& g, Value x) const {
  ScopeGuard s(g, path());
  const bool f32 = compute == Compute::Float32;
  Value in = f32 ? Cast(x, DType::Float) : x;
  const DType pdt = f32 ? DType::Float : x.dtype();
  std::vector<Value> inputs = {in, param(g, "weight", pdt)};
  if (bias) inputs.push_back(param(g, "bias", pdt));
  Value y = g.node("LayerNormalization", inputs, {in.type()},
                   {Attr("axis", int64_t{-1}), Attr("epsilon", eps), Attr("stash_type", int64_t{1})})[0];
  return f32 ? Cast(y, x.dtype()) : y;
}

Value RMSNorm::forward(Graph& g, Value x) const {
  ScopeGuard s(g, path());
  if (ort_ops(g.context())) return simplified(g, x);
  Value n = Cast(normalized_f32(g, x), x.dtype());
  return Mul(scale(g, x.dtype()), n);
}

std::pair<Value, Value> RMSNorm::forward_skip(Graph& g, Value x, Value skip) const {
  if (!ort_ops(g.context()) || !fusable(x.dtype())) {
    Value sum = Add(skip, x);
    return {forward(g, sum), sum};
  }
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
  return kind == NormKind::OffsetRMS ? offset_rms_norm_factory() : rms_norm_factory();
}

NormFactory rms_norm_factory() {
  return [](int64_t d, double e) { return std::make_unique<RMSNorm>(d, e); };
}
NormFactory offset_rms_norm_factory() {
  return [](int64_t d, double e) { return std::make_unique<OffsetRMSNorm>(d, e); };
}

}  // namespace mobius::nn