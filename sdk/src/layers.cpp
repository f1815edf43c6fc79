// layers.cpp - the building blocks of layers.hpp, written to transformers' eager semantics.
#include "mobius/sdk/layers.hpp"

#include <algorithm>
#include <cfloat>
#include <climits>
#include <cmath>

namespace mobius::nn {

using namespace mobius::op;

DType activation_dtype(BuildContext& ctx) {
  DType w = ctx.weight_dtype();
  return w == DType::BFloat16 ? DType::Float : w;
}

// ---------------------------------------------------------------------------------------------
// Shared inputs: masks and rope tables, built once per graph.

SharedInputs::SharedInputs(Graph& g, Value ids, Value mask, Value pos, DType a)
    : input_ids(ids), attention_mask(mask), position_ids(pos), act(a), g_(g) {}

Value SharedInputs::visible(int64_t window) {
  std::string key = "visible/" + std::to_string(window);
  if (auto it = cache_.find(key); it != cache_.end()) return it->second;
  ScopeGuard s(g_, "mask");
  Value total = DimOf(attention_mask, 1);  // [1]
  Value seq = DimOf(input_ids, 1);         // [1]
  Value past = Sub(total, seq);
  Value t0 = Squeeze(total, {0});
  Value kpos = Range(Int(g_, 0), t0, Int(g_, 1));                    // key slots [total]
  Value qpos = Range(Squeeze(past, {0}), t0, Int(g_, 1));            // query slots [seq]
  Value k2 = Unsqueeze(kpos, {0});                                   // [1, total]
  Value q2 = Unsqueeze(qpos, {1});                                   // [seq, 1]
  Value allowed = LessOrEqual(k2, q2);                               // causal
  if (window > 0) allowed = And(allowed, Greater(k2, Sub(q2, Int(g_, window))));
  Value real_keys = Unsqueeze(Cast(attention_mask, DType::Bool), {1, 2});  // [batch, 1, 1, total]
  Value v = And(Unsqueeze(allowed, {0, 1}), real_keys);              // [batch, 1, seq, total]
  cache_[key] = v;
  return v;
}

Value SharedInputs::attention_bias(int64_t window, int64_t rep) {
  std::string key = "bias/" + std::to_string(window) + "/" + std::to_string(rep);
  if (auto it = cache_.find(key); it != cache_.end()) return it->second;
  Value vis = visible(window);
  ScopeGuard s(g_, "mask");
  // transformers adds finfo(float32).min at hidden slots (not -inf), so fully padded query rows
  // stay finite.
  Value bias = Where(vis, Scalar(g_, DType::Float, 0.0), Scalar(g_, DType::Float, -FLT_MAX));
  if (rep > 1) {
    TensorType t = bias.type();
    if (t.rank_known) t.dims[2] = Dim();
    bias = Tile(bias, Ints(g_, {1, 1, rep, 1}), t);
  }
  cache_[key] = bias;
  return bias;
}

Value SharedInputs::query_is_real() {
  std::string key = "query_is_real";
  if (auto it = cache_.find(key); it != cache_.end()) return it->second;
  ScopeGuard s(g_, "mask");
  Value seq = DimOf(input_ids, 1);
  Value m = Slice(attention_mask, Neg(seq), Ints(g_, {INT64_MAX}), {1});  // last seq columns
  Value v = Cast(m, DType::Bool);
  cache_[key] = v;
  return v;
}

std::vector<float> rope_inv_freq(const RopeConfig& rope, int64_t dim, double* attention_scaling) {
  // Computed in float32 arithmetic, the way transformers' float32 tensors compute it.
  const auto n = static_cast<size_t>(dim / 2);
  std::vector<float> inv(n);
  const auto base = static_cast<float>(rope.theta);
  for (size_t i = 0; i < n; ++i) {
    float e = static_cast<float>(2 * i) / static_cast<float>(dim);
    inv[i] = 1.0f / std::pow(base, e);
  }
  double scaling = 1.0;
  if (rope.type == "linear") {
    for (float& f : inv) f /= static_cast<float>(rope.factor);
  } else if (rope.type == "llama3") {
    const auto factor = static_cast<float>(rope.factor);
    const auto low = static_cast<float>(rope.low_freq_factor);
    const auto high = static_cast<float>(rope.high_freq_factor);
    const auto old_ctx = static_cast<float>(rope.original_max_position_embeddings);
    const float low_wavelen = old_ctx / low;
    const float high_wavelen = old_ctx / high;
    const auto two_pi = static_cast<float>(2 * M_PI);
    const auto span = static_cast<float>(rope.high_freq_factor - rope.low_freq_factor);
    for (float& f : inv) {
      float wavelen = two_pi / f;
      float scaled = wavelen > low_wavelen ? f / factor : f;
      float smooth = (old_ctx / wavelen - low) / span;
      float smoothed = (1.0f - smooth) * scaled / factor + smooth * scaled;
      bool medium = !(wavelen < high_wavelen) && !(wavelen > low_wavelen);
      f = medium ? smoothed : scaled;
    }
  } else if (rope.type == "yarn") {
    auto get_mscale = [](double scale, double m) {
      return scale <= 1 ? 1.0 : 0.1 * m * std::log(scale) + 1.0;
    };
    double factor = rope.factor;
    if (rope.attention_factor > 0) {
      scaling = rope.attention_factor;
    } else if (rope.mscale != 0 && rope.mscale_all_dim != 0) {
      scaling = get_mscale(factor, rope.mscale) / get_mscale(factor, rope.mscale_all_dim);
    } else {
      scaling = get_mscale(factor, 1.0);
    }
    double max_pos = static_cast<double>(rope.original_max_position_embeddings);
    auto correction_dim = [&](double rot) {
      return (static_cast<double>(dim) * std::log(max_pos / (rot * 2 * M_PI))) / (2 * std::log(rope.theta));
    };
    double lo = correction_dim(rope.beta_fast), hi = correction_dim(rope.beta_slow);
    if (rope.truncate) {
      lo = std::floor(lo);
      hi = std::ceil(hi);
    }
    lo = std::max(lo, 0.0);
    hi = std::min(hi, static_cast<double>(dim - 1));
    if (lo == hi) hi += 0.001;
    for (size_t i = 0; i < n; ++i) {
      float pos_freq = std::pow(base, static_cast<float>(2 * i) / static_cast<float>(dim));
      float extrap = 1.0f / pos_freq;
      float interp = 1.0f / (static_cast<float>(factor) * pos_freq);
      auto ramp = static_cast<float>(std::clamp((static_cast<double>(i) - lo) / (hi - lo), 0.0, 1.0));
      float extrap_factor = 1.0f - ramp;
      inv[i] = interp * (1.0f - extrap_factor) + extrap * extrap_factor;
    }
  }
  // "dynamic" (NTK) equals the default inside max_position_embeddings, which the exported
  // graph assumes; "default" needs nothing more.
  if (attention_scaling) *attention_scaling = scaling;
  return inv;
}

std::pair<Value, Value> SharedInputs::rope_tables(const RopeConfig& rope, int64_t rot,
                                                  bool full_width) {
  nlohmann::json j = rope;
  std::string key = std::string(full_width ? "rope/" : "rope-pairs/") + j.dump() + "/" + std::to_string(rot);
  if (auto it = cache_.find(key + "/cos"); it != cache_.end()) return {it->second, cache_.at(key + "/sin")};
  ScopeGuard s(g_, full_width ? "rope" : "rope_pairs");
  double scaling = 1.0;
  std::vector<float> inv = rope_inv_freq(rope, rot, &scaling);
  std::vector<double> invd(inv.begin(), inv.end());
  Value inv_v = Constant(g_, DType::Float, {static_cast<int64_t>(inv.size())}, invd, "inv_freq");
  Value pos = Unsqueeze(Cast(position_ids, DType::Float), {2});  // [batch, seq, 1]
  Value freqs = Mul(pos, inv_v);                                   // [batch, seq, rot/2]
  Value emb = !full_width || rope.interleaved ? freqs : Concat({freqs, freqs}, -1);
  Value cos = Cos(emb), sin = Sin(emb);
  if (scaling != 1.0) {
    cos = Mul(cos, Scalar(g_, DType::Float, scaling));
    sin = Mul(sin, Scalar(g_, DType::Float, scaling));
  }
  if (full_width) {
    cos = Cast(cos, act);
    sin = Cast(sin, act);
  }
  cos = Unsqueeze(cos, {1});  // [batch, 1, seq, width]
  sin = Unsqueeze(sin, {1});
  cache_[key + "/cos"] = cos;
  cache_[key + "/sin"] = sin;
  return {cos, sin};
}

std::pair<Value, Value> SharedInputs::rope(const RopeConfig& rope, int64_t head_dim) {
  auto rot = static_cast<int64_t>(static_cast<double>(head_dim) * rope.partial_rotary_factor);
  rot -= rot % 2;
  return rope_tables(rope, rot, true);
}

Value apply_rope(Value x, Value cos, Value sin, bool interleaved) {
  const Dim& rd = cos.dim(-1);
  const Dim& xd = x.dim(-1);
  if (!rd.is_static() || !xd.is_static()) throw Error("[rope] head and rotary dims must be static");
  // An interleaved table holds one angle per rotated pair, so it is half the rotary width.
  int64_t rot = interleaved ? 2 * rd.size : rd.size, d = xd.size;
  Value xr = rot < d ? Slice(x, {0}, {rot}, {-1}) : x;
  Value out;
  if (!interleaved) {
    Value x1 = Slice(xr, {0}, {rot / 2}, {-1});
    Value x2 = Slice(xr, {rot / 2}, {rot}, {-1});
    out = Add(Mul(xr, cos), Mul(Concat({Neg(x2), x1}, -1), sin));
  } else {
    // Adjacent pairs (x0, x1) rotate together; cos/sin hold one angle per pair.
    Value pairs = Reshape(xr, {0, 0, 0, rot / 2, 2});
    auto parts = Split(pairs, {1, 1}, -1);
    Value a = Squeeze(parts[0], {-1}), b = Squeeze(parts[1], {-1});
    Value ra = Sub(Mul(a, cos), Mul(b, sin));
    Value rb = Add(Mul(b, cos), Mul(a, sin));
    out = Reshape(Concat({Unsqueeze(ra, {-1}), Unsqueeze(rb, {-1})}, -1), {0, 0, 0, rot});
  }
  if (rot < d) out = Concat({out, Slice(x, {rot}, {d}, {-1})}, -1);
  return out;
}

namespace {
const char* const kActivations[] = {"silu", "swish", "relu", "gelu", "gelu_pytorch_tanh",
                                    "gelu_new", "gelu_fast", "gelu_tanh"};
}  // namespace

void check_activation(const ConfigReader& r, const std::string& key, const std::string& name) {
  for (const char* a : kActivations)
    if (name == a) return;
  std::string known;
  for (const char* a : kActivations) known += std::string(known.empty() ? "" : ", ") + a;
  r.fail(key, "has unknown activation '" + name + "' (known: " + known + ")");
}

Value activation(const std::string& name, Value x) {
  if (name == "silu" || name == "swish") return Mul(x, Sigmoid(x));
  if (name == "relu") return Relu(x);
  if (name == "gelu") {
    Value inner = Erf(Mul(x, ScalarLike(x, M_SQRT1_2)));
    return Mul(Mul(x, ScalarLike(x, 0.5)), Add(inner, ScalarLike(x, 1.0)));
  }
  if (name == "gelu_pytorch_tanh" || name == "gelu_new" || name == "gelu_fast" ||
      name == "gelu_tanh") {
    Value x3 = Mul(Mul(x, x), x);
    Value inner = Mul(ScalarLike(x, std::sqrt(2.0 / M_PI)), Add(x, Mul(ScalarLike(x, 0.044715), x3)));
    return Mul(Mul(x, ScalarLike(x, 0.5)), Add(Tanh(inner), ScalarLike(x, 1.0)));
  }
  throw Error("[activation] unknown hidden_act '" + name +
              "' (known: silu, swish, relu, gelu, gelu_pytorch_tanh, gelu_new, gelu_fast)");
}

// ---------------------------------------------------------------------------------------------
// Layers

Linear::Linear(int64_t in, int64_t out, bool bias) : in_features(in), out_features(out), has_bias(bias) {
  declare("weight", {out, in});
  if (bias) declare("bias", {out});
}

Value Linear::forward(Graph& g, Value x) const {
  ScopeGuard s(g, path());
  Value w = Cast(param(g, "weight"), x.dtype());
  Value y = MatMul(x, Transpose(w, {1, 0}));
  if (has_bias) y = Add(y, Cast(param(g, "bias"), x.dtype()));
  return y;
}

Embedding::Embedding(int64_t v, int64_t d) : vocab(v), dim(d) { declare("weight", {v, d}); }

Value Embedding::forward(Graph& g, Value ids, DType act) const {
  ScopeGuard s(g, path());
  return Cast(Gather(param(g, "weight"), ids, 0), act);
}

RMSNorm::RMSNorm(int64_t d, double e) : dim(d), eps(e) { declare("weight", {d}); }

Value RMSNorm::normalized_f32(Graph& g, Value x) const {
  (void)g;
  Value xf = Cast(x, DType::Float);
  Value var = ReduceMean(Mul(xf, xf), {-1}, true);
  return Mul(xf, Reciprocal(Sqrt(Add(var, Scalar(x.graph(), DType::Float, eps)))));
}

Value RMSNorm::forward(Graph& g, Value x) const {
  ScopeGuard s(g, path());
  Value n = Cast(normalized_f32(g, x), x.dtype());
  return Mul(Cast(param(g, "weight"), x.dtype()), n);
}

Value OffsetRMSNorm::forward(Graph& g, Value x) const {
  ScopeGuard s(g, path());
  Value n = normalized_f32(g, x);
  Value w = Add(Cast(param(g, "weight"), DType::Float), Scalar(g, DType::Float, 1.0));
  return Cast(Mul(n, w), x.dtype());
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
