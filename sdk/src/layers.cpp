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

Value SharedInputs::positions() const {
  if (!position_ids.valid())
    throw Error("[text-generation] a layer reads position_ids, but the model said none does, so "
                "the graph has no such input (CausalLM::reads_position_ids)");
  return position_ids;
}

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

std::pair<Value, Value> SharedInputs::gqa_lengths() {
  if (auto it = cache_.find("gqa/total"); it != cache_.end())
    return {cache_.at("gqa/seqlens_k"), it->second};
  ScopeGuard s(g_, "gqa_lengths");
  // A row's leading padding (ArgMax takes the first of equal maxima: the first one) plus its
  // real tokens, minus one: the last slot of a left-padded (or unpadded) row, the last real
  // token of a right-padded one.
  Value lead = g_.node("ArgMax", {attention_mask}, {TensorType(DType::Int64, {Dim("batch_size")})},
                       {Attr("axis", int64_t{1}), Attr("keepdims", int64_t{0})})[0];
  Value count = ReduceSum(attention_mask, {1}, false);
  Value seqlens = Cast(Sub(Add(lead, count), Int(g_, 1)), DType::Int32);
  Value total32 = Squeeze(Cast(DimOf(attention_mask, 1), DType::Int32), {0});
  cache_["gqa/seqlens_k"] = seqlens;
  cache_["gqa/total"] = total32;
  return {seqlens, total32};
}

Value SharedInputs::gqa_bias() {
  if (auto it = cache_.find("gqa/bias"); it != cache_.end()) return it->second;
  ScopeGuard s(g_, "mask");
  const double lowest = act == DType::Float16 ? -65504.0 : -FLT_MAX;
  // Slots from the row's first real token on are visible: the operator stops at seqlens_k,
  // and past a right-padded prompt's last real token it writes the tokens that follow.
  Value started = Greater(CumSum(attention_mask, 1), Int(g_, 0));  // [batch, total]
  Value row = Where(Unsqueeze(started, {1, 2}), Scalar(g_, act, 0.0), Scalar(g_, act, lowest));
  // The operator reads one row per query: [batch, 1, seq, total].
  Value shape = Concat({DimOf(attention_mask, 0), Ints(g_, {1}), DimOf(input_ids, 1), DimOf(attention_mask, 1)}, 0);
  Value bias = Expand(row, shape, TensorType(act, {Dim("batch_size"), Dim(1), Dim("sequence_length"), Dim("total_sequence_length")}));
  cache_["gqa/bias"] = bias;
  return bias;
}

namespace {

// Rows of a longrope's short table in SharedInputs::rope_caches: a short run's positions are all
// below original_max_position_embeddings; no table goes past the model's max positions.
int64_t longrope_short_rows(const RopeConfig& rope, int64_t max_positions) {
  return std::min(rope.original_max_position_embeddings, max_positions);
}

}  // namespace

Value SharedInputs::long_context(const RopeConfig& rope) {
  const std::string key = "long_context/" + std::to_string(rope.original_max_position_embeddings);
  if (auto it = cache_.find(key); it != cache_.end()) return it->second;
  ScopeGuard s(g_, "long_context");
  // transformers' longrope update: max(position_ids) + 1 > original, over the whole batch.
  Value top = ReduceMax(positions(), {0, 1}, false);
  Value v = GreaterOrEqual(top, Int(g_, rope.original_max_position_embeddings));
  cache_[key] = v;
  return v;
}

Value SharedInputs::rope_positions(const RopeConfig& rope) {
  if (rope.type != "longrope") return positions();
  const int64_t short_rows = longrope_short_rows(rope, max_positions);
  const std::string key = "rope_positions/" + std::to_string(rope.original_max_position_embeddings) +
                          "/" + std::to_string(short_rows);
  if (auto it = cache_.find(key); it != cache_.end()) return it->second;
  Value is_long = long_context(rope);
  ScopeGuard s(g_, "rope_positions");
  Value v = Where(is_long, Add(positions(), Int(g_, short_rows)), positions());
  cache_[key] = v;
  return v;
}

std::pair<Value, Value> SharedInputs::rope_caches(const RopeConfig& rope, int64_t rot) {
  nlohmann::json j = rope;
  const std::string key = "rope_cache/" + j.dump() + "/" + std::to_string(rot);
  if (auto it = cache_.find(key + "/cos"); it != cache_.end()) return {it->second, cache_.at(key + "/sin")};
  if (max_positions <= 0) throw Error("[rope] the rotary caches need max_position_embeddings");
  double scaling = 1.0;
  std::vector<float> inv = rope_inv_freq(rope, rot, &scaling);
  // A longrope's long table follows its short one in the same initializer; rope_positions
  // moves a long run's positions onto it.
  std::vector<float> inv_long;
  int64_t short_rows = max_positions;
  if (rope.type == "longrope") {
    inv_long = rope_inv_freq(rope, rot, nullptr, true);
    short_rows = longrope_short_rows(rope, max_positions);
  }
  const int64_t rows = short_rows + (inv_long.empty() ? 0 : max_positions);
  BuildContext& ctx = g_.context();
  // One pair of caches per distinct rope: named by their order of creation.
  const std::string base = "rope" + (rope_cache_count_ ? std::to_string(rope_cache_count_) : std::string());
  ++rope_cache_count_;
  const TensorType t(act, {Dim(rows), Dim(static_cast<int64_t>(inv.size()))});
  std::pair<Value, Value> out;
  for (int which = 0; which < 2; ++which) {
    const std::string name = base + (which == 0 ? ".cos_cache" : ".sin_cache");
    Value v = ctx.graph().initializer(name, t);
    const auto first_long = static_cast<size_t>(short_rows);
    ctx.plan_transformed(name, {}, [inv, inv_long, first_long, scaling, which](
                                       const std::vector<HostTensor>&, float* out, size_t n) {
      const size_t w = inv.size();
      for (size_t i = 0; i < n; ++i) {
        const size_t row = i / w;
        const bool long_row = !inv_long.empty() && row >= first_long;
        const size_t pos = long_row ? row - first_long : row;
        // position * inv_freq in float32, as transformers' float32 matmul computes it.
        const float angle = static_cast<float>(pos) * (long_row ? inv_long : inv)[i % w];
        const auto c = static_cast<float>(which == 0 ? std::cos(static_cast<double>(angle))
                                                     : std::sin(static_cast<double>(angle)));
        out[i] = scaling == 1.0 ? c : c * static_cast<float>(scaling);
      }
    });
    (which == 0 ? out.first : out.second) = v;
  }
  cache_[key + "/cos"] = out.first;
  cache_[key + "/sin"] = out.second;
  return out;
}

Value RotaryEmbedding(Value x, Value position_ids, Value cos, Value sin, int64_t heads,
                      int64_t rotary_dim, bool interleaved) {
  return x.graph().node("RotaryEmbedding", {x, position_ids, cos, sin}, {x.type()},
                        {Attr("num_heads", heads), Attr("rotary_embedding_dim", rotary_dim),
                         Attr("interleaved", static_cast<int64_t>(interleaved ? 1 : 0))},
                        "com.microsoft")[0];
}

std::vector<float> rope_inv_freq(const RopeConfig& rope, int64_t dim, double* attention_scaling,
                                 bool long_factors) {
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
  } else if (rope.type == "longrope") {
    const std::vector<double>& ext = long_factors ? rope.long_factor : rope.short_factor;
    if (ext.size() != n)
      throw Error("[rope] longrope has " + std::to_string(ext.size()) + " factors for " +
                  std::to_string(n) + " rotated pairs");
    for (size_t i = 0; i < n; ++i) {
      float e = static_cast<float>(2 * i) / static_cast<float>(dim);
      inv[i] = 1.0f / (static_cast<float>(ext[i]) * std::pow(base, e));
    }
    const auto orig = static_cast<double>(rope.original_max_position_embeddings);
    if (rope.attention_factor > 0)
      scaling = rope.attention_factor;
    else if (rope.factor > 1.0)
      scaling = std::sqrt(1.0 + std::log(rope.factor) / std::log(orig));
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
  if (rope.type == "longrope") {
    // The run's factors: a choice between two rows of rot/2 frequencies, made before anything
    // per position is computed.
    std::vector<float> inv_long = rope_inv_freq(rope, rot, nullptr, true);
    Value long_v = Constant(g_, DType::Float, {static_cast<int64_t>(inv_long.size())},
                            std::vector<double>(inv_long.begin(), inv_long.end()), "inv_freq_long");
    inv_v = Where(long_context(rope), long_v, inv_v);
  }
  Value pos = Unsqueeze(Cast(positions(), DType::Float), {2});  // [batch, seq, 1]
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

Value gelu_erf(Value x) {
  Value inner = Erf(Mul(x, ScalarLike(x, M_SQRT1_2)));
  return Mul(Mul(x, ScalarLike(x, 0.5)), Add(inner, ScalarLike(x, 1.0)));
}

Value gelu_tanh(Value x) {
  Value x3 = Mul(Mul(x, x), x);
  Value inner = Mul(ScalarLike(x, std::sqrt(2.0 / M_PI)), Add(x, Mul(ScalarLike(x, 0.044715), x3)));
  return Mul(Mul(x, ScalarLike(x, 0.5)), Add(Tanh(inner), ScalarLike(x, 1.0)));
}

// transformers' ACT2FN, by name (activations.py): each as its module computes it.
struct ActivationRow {
  const char* name;
  Value (*f)(Value);
};
const ActivationRow kActivations[] = {
    {"silu", [](Value x) { return Mul(x, Sigmoid(x)); }},
    {"swish", [](Value x) { return Mul(x, Sigmoid(x)); }},
    {"relu", [](Value x) { return Relu(x); }},
    {"gelu", gelu_erf},          // GELUActivation: the exact erf form
    {"gelu_python", gelu_erf},
    {"gelu_pytorch_tanh", gelu_tanh},  // the tanh approximation, under each of its names
    {"gelu_new", gelu_tanh},
    {"gelu_fast", gelu_tanh},
    {"gelu_tanh", gelu_tanh},
    {"gelu_accurate", gelu_tanh},
    {"quick_gelu", [](Value x) { return Mul(x, Sigmoid(Mul(x, ScalarLike(x, 1.702)))); }},
    {"gelu_10", [](Value x) { return Min(Max(gelu_erf(x), ScalarLike(x, -10.0)), ScalarLike(x, 10.0)); }},
    {"relu6", [](Value x) { return Min(Relu(x), ScalarLike(x, 6.0)); }},
    {"relu2", [](Value x) { Value r = Relu(x); return Mul(r, r); }},
    {"sigmoid", [](Value x) { return Sigmoid(x); }},
    {"tanh", [](Value x) { return Tanh(x); }},
    {"linear", [](Value x) { return x; }},
    {"mish", [](Value x) { return Mul(x, Tanh(Softplus(x))); }},
};

std::string known_activations() {
  std::string known;
  for (const ActivationRow& a : kActivations) known += std::string(known.empty() ? "" : ", ") + a.name;
  return known;
}

}  // namespace

void check_activation(const ConfigReader& r, const std::string& key, const std::string& name) {
  for (const ActivationRow& a : kActivations)
    if (name == a.name) return;
  r.fail(key, "has unknown activation '" + name + "' (known: " + known_activations() + ")");
}

Value activation(const std::string& name, Value x) {
  for (const ActivationRow& a : kActivations)
    if (name == a.name) return a.f(x);
  throw Error("[activation] unknown hidden_act '" + name + "' (known: " + known_activations() + ")");
}

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

Value activation_f32(const std::string& name, Value x) {
  Value xf = x.dtype() == DType::Float16 ? Cast(x, DType::Float) : x;
  return Cast(activation(name, xf), x.dtype());
}

Value encoder_attention(Graph& g, Value q, Value k, Value v, int64_t heads, int64_t head_dim, Value bias,
                        const EncoderRope* rope) {
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
  const double scale = 1.0 / std::sqrt(static_cast<double>(head_dim));
  Value scores = Cast(MatMul(q, k), DType::Float);
  scores = Add(Mul(scores, Scalar(g, DType::Float, scale)), bias);
  Value probs = Cast(Softmax(scores, -1), v.dtype());
  Value o = MatMul(probs, v);                                           // [b, h, s, d]
  return Reshape(Transpose(o, {0, 2, 1, 3}), {0, 0, heads * head_dim});  // [b, s, hidden]
}

bool ort_ops(const BuildContext& ctx) { return ctx.ops() == "ort"; }

Value PaddedAttention::mask_bias(Graph& g) const {
  if (!bias_.valid()) {
    ScopeGuard s(g, "padding_mask");
    Value masked = Equal(attention_mask, Int(g, 0));  // [b, s]
    bias_ = Unsqueeze(Where(masked, Scalar(g, DType::Float, -FLT_MAX), Scalar(g, DType::Float, 0.0)), {1, 2});
  }
  return bias_;
}

Value PaddedAttention::key_padding(Graph& g) const {
  if (!int32_.valid()) {
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
                       const EncoderRope* rope) {
  if (!ort_ops(g.context()) || q.dtype() != DType::Float || (rope && rope->values)) {
    Value bias = mask.position_bias.valid() ? Add(mask.mask_bias(g), mask.position_bias) : mask.mask_bias(g);
    return encoder_attention(g, q, k, v, heads, head_dim, bias, rope);
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
                {Attr("num_heads", heads), Attr("scale", 1.0 / std::sqrt(static_cast<double>(head_dim))),
                 Attr("mask_filter_value", static_cast<double>(-FLT_MAX))},
                "com.microsoft")[0];
}

namespace {
Value packed_bias(Graph& g, const std::string& name, const std::vector<std::string>& sources, int64_t n, DType dtype);
}  // namespace

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
  Value b = packed_bias(g, name + ".bias", bias_sources, n, x.dtype());
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

Value encoder_activation(Graph& g, const std::string& name, Value x) {
  const bool erf = name == "gelu" || name == "gelu_python";
  const bool tanh = name == "gelu_new" || name == "gelu_pytorch_tanh" || name == "gelu_fast" ||
                    name == "gelu_python_tanh" || name == "gelu_accurate";
  if (!ort_ops(g.context()) || !(erf || tanh) || (x.dtype() != DType::Float && x.dtype() != DType::Float16))
    return activation_f32(name, x);
  Value xf = Cast(x, DType::Float);
  Value y = g.node(erf ? "Gelu" : "FastGelu", {xf}, {xf.type()}, {}, "com.microsoft")[0];
  return Cast(y, x.dtype());
}

// ---------------------------------------------------------------------------------------------
// Layers


Linear::Linear(int64_t in, int64_t out, bool bias) : in_features(in), out_features(out), has_bias(bias) {
  declare("weight", {out, in});
  if (bias) declare("bias", {out});
}

namespace {

// x times the weight `name` made of `sources` ([n, k] each): MatMulNBits when the build
// quantizes and `quantizable`, else MatMul on the [k, n] transpose in `dtype`.
// The initializer `name` [n] of `dtype`: the biases `sources` concatenated, made while the weights
// stream (once, however many graphs read it).
Value packed_bias(Graph& g, const std::string& name, const std::vector<std::string>& sources, int64_t n, DType dtype) {
  BuildContext& ctx = g.context();
  if (auto b = ctx.graph().find_initializer(name)) return *b;
  Value b = ctx.graph().initializer(name, TensorType(dtype, {Dim(n)}));
  ctx.plan_transformed(name, sources, [](const std::vector<HostTensor>& in, float* out, size_t) {
    for (const HostTensor& t : in) out = std::copy(t.data, t.data + t.numel, out);
  });
  return b;
}

Value project(Graph& g, Value x, const std::string& name, const std::vector<std::string>& sources,
              int64_t k, int64_t n, DType dtype, bool quantizable) {
  if (g.context().weight_bits() > 0 && quantizable) return matmul_nbits(g, x, name, sources, k, n);
  // A Cast only for bfloat16 weights (computed in float32).
  return MatMul(x, Cast(weight_in_out(g, name, sources, k, n, dtype), x.dtype()));
}

}  // namespace

Value Linear::forward(Graph& g, Value x) const {
  ScopeGuard s(g, path());
  BuildContext& ctx = g.context();
  // The checkpoint stores [out, in]; the graph reads its own initializer in the layout its
  // operator consumes, made while the weights stream: [in, out] for MatMul, blocks for
  // MatMulNBits. A tied weight (lm_head from the embedding table) gets its own copy in that
  // layout, named after this module.
  const std::string name = full_name("weight");
  const std::vector<std::string> sources{source_tensor("weight")};
  // A weight declared with its own dtype (kept precise on purpose) is never quantized.
  const DType declared = parameter("weight").dtype;
  Value y = project(g, x, name, sources, in_features, out_features,
                    declared == DType::Undefined ? ctx.weight_dtype() : declared,
                    declared == DType::Undefined);
  if (has_bias) y = Add(y, param(g, "bias", x.dtype()));
  return y;
}

std::vector<Value> packed_linears(Graph& g, Value x, const std::vector<const Linear*>& parts,
                                  const std::string& name) {
  std::vector<int64_t> sizes;
  for (const Linear* p : parts) sizes.push_back(p->out_features);
  return Split(packed_linear(g, x, parts, name), sizes, -1);
}

Value packed_linear(Graph& g, Value x, const std::vector<const Linear*>& parts,
                    const std::string& name) {
  BuildContext& ctx = g.context();
  std::vector<std::string> sources, bias_sources;
  int64_t n = 0;
  for (const Linear* p : parts) {
    if (p->in_features != parts[0]->in_features || p->has_bias != parts[0]->has_bias ||
        p->parameter("weight").dtype != DType::Undefined)
      throw Error("[linear] '" + name + "' packs linears of one input size, bias and dtype only");
    sources.push_back(p->source_tensor("weight"));
    if (p->has_bias) bias_sources.push_back(p->source_tensor("bias"));
    n += p->out_features;
  }
  Value y = project(g, x, name + ".weight", sources, parts[0]->in_features, n, ctx.weight_dtype(), true);
  if (!bias_sources.empty()) y = Add(y, packed_bias(g, name + ".bias", bias_sources, n, x.dtype()));
  return y;
}

Value weight_in_out(Graph& g, const std::string& name, const std::vector<std::string>& sources,
                    int64_t in, int64_t out, DType dtype) {
  BuildContext& ctx = g.context();
  if (auto w = ctx.graph().find_initializer(name)) return *w;
  Value w = ctx.graph().initializer(name, TensorType(dtype, {Dim(in), Dim(out)}));
  mobius_weight_layout layout{};
  layout.struct_size = sizeof(layout);
  layout.kind = MOBIUS_LAYOUT_TRANSPOSED;
  ctx.plan_layout(name, sources, layout);
  return w;
}

Value matmul_nbits(Graph& g, Value x, const std::string& name,
                   const std::vector<std::string>& sources, int64_t k, int64_t n) {
  BuildContext& ctx = g.context();
  if (!ort_ops(ctx))
    throw Error("[config] --dtype int" + std::to_string(ctx.weight_bits()) +
                " needs ONNX Runtime's MatMulNBits; it has no standard-ONNX form at opset 17 "
                "(use --ops ort)");
  BlockQuant q{ctx.weight_bits(), ctx.block_size(), ctx.symmetric()};
  const std::vector<std::string> parts{name + "_Q" + std::to_string(q.bits), name + "_scales",
                                       name + "_zero_points"};
  const int n_parts = q.symmetric ? 2 : 3;
  std::vector<Value> inputs{x};
  for (int part = 0; part < n_parts; ++part) {
    Value v = ctx.graph().find_initializer(parts[part]).value_or(Value());
    if (!v.valid()) {
      DType dt = part == MOBIUS_QUANT_PART_SCALES ? x.dtype() : DType::UInt8;
      std::vector<Dim> dims;
      for (int64_t d : quant_part_shape(q, part, n, k)) dims.emplace_back(d);
      v = ctx.graph().initializer(parts[part], TensorType(dt, dims));
      mobius_weight_layout layout{};
      layout.struct_size = sizeof(layout);
      layout.kind = MOBIUS_LAYOUT_BLOCK_QUANTIZED;
      layout.bits = q.bits;
      layout.block_size = q.block;
      layout.symmetric = q.symmetric ? 1 : 0;
      layout.part = part;
      ctx.plan_layout(parts[part], sources, layout);
    }
    inputs.push_back(v);
  }
  TensorType t = x.type();
  if (t.rank_known) t.dims.back() = Dim(n);
  return g.node("MatMulNBits", inputs, {t},
                {Attr("K", k), Attr("N", n), Attr("bits", static_cast<int64_t>(q.bits)),
                 Attr("block_size", static_cast<int64_t>(q.block)),
                 Attr("accuracy_level", static_cast<int64_t>(ctx.accuracy_level()))},
                "com.microsoft")[0];
}

Embedding::Embedding(int64_t v, int64_t d) : vocab(v), dim(d) { declare("weight", {v, d}); }

Value Embedding::forward(Graph& g, Value ids, DType act) const {
  ScopeGuard s(g, path());
  return Cast(Gather(param(g, "weight"), ids, 0), act);
}

Value Embedding::tied_logits(Graph& g, Value x) const {
  ScopeGuard s(g, path());
  return MatMul(x, Cast(Transpose(param(g, "weight"), {1, 0}), x.dtype()));
}

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
