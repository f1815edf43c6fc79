// layers.cpp - the values shared by every layer of a graph (masks, rope tables) and the rotary
// embedding (layers.hpp), written to transformers' eager semantics. Linear and Embedding are
// linear.cpp, the norms norms.cpp, the activations activations.cpp.
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

Value SharedInputs::query_slots() {
  if (auto it = cache_.find("query_slots"); it != cache_.end()) return it->second;
  ScopeGuard s(g_, "mask");
  Value total = Squeeze(DimOf(attention_mask, 1), {0});
  Value past = Sub(total, Squeeze(DimOf(input_ids, 1), {0}));
  Value v = Range(past, total, Int(g_, 1));  // [seq]
  cache_["query_slots"] = v;
  return v;
}

Value SharedInputs::left_padding() {
  if (auto it = cache_.find("left_padding"); it != cache_.end()) return it->second;
  ScopeGuard s(g_, "mask");
  // transformers' (attention_mask.cumsum(-1) == 0).sum(-1).
  Value before = Cast(Equal(CumSum(attention_mask, 1), Int(g_, 0)), DType::Int64);
  Value v = ReduceSum(before, {1}, false);  // [batch]
  cache_["left_padding"] = v;
  return v;
}

Value SharedInputs::chunk_start(int64_t chunk, bool gqa) {
  const std::string key = "chunk_start/" + std::to_string(chunk) + (gqa ? "/gqa" : "");
  if (auto it = cache_.find(key); it != cache_.end()) return it->second;
  Value q = gqa ? Unsqueeze(gqa_query_slots(), {1, 3})    // [batch, 1, seq, 1]
                : Unsqueeze(query_slots(), {0, 1, 3});    // [1, 1, seq, 1]
  Value lead = Unsqueeze(left_padding(), {1, 2, 3});      // [batch, 1, 1, 1]
  ScopeGuard s(g_, "mask");
  // Key j shares query i's chunk iff floor((j - lead) / chunk) == floor((i - lead) / chunk); for
  // j <= i that is j >= i - ((i - lead) mod chunk). Mod with fmod 0 takes the divisor's sign, so
  // the left padding's own queries (i < lead) get floor's chunks too.
  Value off = Sub(q, lead);
  Value mod = g_.node("Mod", {off, Int(g_, chunk)}, {off.type()}, {Attr("fmod", int64_t{0})})[0];
  Value v = Sub(q, mod);  // [batch, 1, seq, 1]
  cache_[key] = v;
  return v;
}

Value SharedInputs::visible(int64_t window, int64_t chunk) {
  std::string key = "visible/" + std::to_string(window) + (chunk > 0 ? "/chunk" + std::to_string(chunk) : "");
  if (auto it = cache_.find(key); it != cache_.end()) return it->second;
  Value qpos = query_slots();                        // query slots [seq]
  Value start = chunk > 0 ? chunk_start(chunk, false) : Value();
  ScopeGuard s(g_, "mask");
  Value t0 = Squeeze(DimOf(attention_mask, 1), {0});
  Value kpos = Range(Int(g_, 0), t0, Int(g_, 1));                    // key slots [total]
  Value k2 = Unsqueeze(kpos, {0});                                   // [1, total]
  Value q2 = Unsqueeze(qpos, {1});                                   // [seq, 1]
  Value allowed = LessOrEqual(k2, q2);                               // causal
  if (window > 0) allowed = And(allowed, Greater(k2, Sub(q2, Int(g_, window))));
  Value real_keys = Unsqueeze(Cast(attention_mask, DType::Bool), {1, 2});  // [batch, 1, 1, total]
  Value v = And(Unsqueeze(allowed, {0, 1}), real_keys);              // [batch, 1, seq, total]
  if (chunk > 0) v = And(v, GreaterOrEqual(Unsqueeze(k2, {0, 1}), start));  // in the query's chunk
  cache_[key] = v;
  return v;
}

Value SharedInputs::attention_bias(int64_t window, int64_t rep, int64_t chunk) {
  std::string key = "bias/" + std::to_string(window) + "/" + std::to_string(rep) +
                    (chunk > 0 ? "/chunk" + std::to_string(chunk) : "");
  if (auto it = cache_.find(key); it != cache_.end()) return it->second;
  Value vis = visible(window, chunk);
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

Value SharedInputs::one_token_on_cache() {
  const std::string key = "one_token_on_cache";
  if (auto it = cache_.find(key); it != cache_.end()) return it->second;
  ScopeGuard s(g_, "mask");
  Value seq = DimOf(input_ids, 1);
  Value past = Sub(DimOf(attention_mask, 1), seq);
  Value has_past = Greater(past, Ints(g_, {0}));
  Value one = Equal(seq, Ints(g_, {1}));
  Value v = And(has_past, one);  // [1]
  cache_[key] = v;
  return v;
}

Value SharedInputs::recurrent_keep(DType dt, bool one_token_kept) {
  const std::string key = std::string("recurrent_keep/") + to_string(dt) + (one_token_kept ? "/one" : "");
  if (auto it = cache_.find(key); it != cache_.end()) return it->second;
  Value real = query_is_real();  // [batch, seq]
  Value kept;
  if (one_token_kept) {
    ScopeGuard s(g_, "mask");
    kept = Equal(DimOf(input_ids, 1), Ints(g_, {1}));  // [1]
  } else {
    kept = one_token_on_cache();
  }
  ScopeGuard s(g_, "mask");
  Value v = Unsqueeze(Cast(Or(real, kept), dt), {-1});
  cache_[key] = v;
  return v;
}

Value SharedInputs::key_positions() {
  const std::string key = "key_positions";
  if (auto it = cache_.find(key); it != cache_.end()) return it->second;
  ScopeGuard s(g_, "mask");
  Value m = Cast(attention_mask, DType::Float);
  Value pos = Mul(Sub(CumSum(m, 1), Scalar(g_, DType::Float, 1.0)), m);
  Value v = Unsqueeze(pos, {1, 2});
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

Value SharedInputs::gqa_query_slots() {
  if (auto it = cache_.find("gqa/query_slots"); it != cache_.end()) return it->second;
  Value seqlens = gqa_lengths().first;
  ScopeGuard s(g_, "gqa_query_slots");
  Value seq = Squeeze(DimOf(input_ids, 1), {0});
  Value total = Squeeze(DimOf(attention_mask, 1), {0});
  Value i = Unsqueeze(Range(Int(g_, 0), seq, Int(g_, 1)), {0});  // [1, seq]
  // The operator's past length of a row: 0 on a first prompt, else seqlens_k + 1 - seq.
  Value past = Add(Cast(seqlens, DType::Int64), Sub(Int(g_, 1), seq));  // [batch]
  past = Where(Equal(seq, total), Int(g_, 0), past);
  Value v = Add(Unsqueeze(past, {1}), i);  // [batch, seq]
  cache_["gqa/query_slots"] = v;
  return v;
}

Value SharedInputs::gqa_bias(int64_t chunk) {
  const std::string key = "gqa/bias" + (chunk > 0 ? "/chunk" + std::to_string(chunk) : std::string());
  if (auto it = cache_.find(key); it != cache_.end()) return it->second;
  Value start = chunk > 0 ? chunk_start(chunk, true) : Value();
  ScopeGuard s(g_, "mask");
  const double lowest = act == DType::Float16 ? -65504.0 : -FLT_MAX;
  // Slots from the row's first real token on are visible: the operator stops at seqlens_k,
  // and past a right-padded prompt's last real token it writes the tokens that follow.
  Value started = Unsqueeze(Greater(CumSum(attention_mask, 1), Int(g_, 0)), {1, 2});  // [batch, 1, 1, total]
  const TensorType full(act, {Dim("batch_size"), Dim(1), Dim("sequence_length"), Dim("total_sequence_length")});
  Value bias;
  if (chunk > 0) {
    Value t0 = Squeeze(DimOf(attention_mask, 1), {0});
    Value kpos = Unsqueeze(Range(Int(g_, 0), t0, Int(g_, 1)), {0, 1, 2});  // [1, 1, 1, total]
    Value vis = And(started, GreaterOrEqual(kpos, start));                 // [batch, 1, seq, total]
    bias = Where(vis, Scalar(g_, act, 0.0), Scalar(g_, act, lowest));
  } else {
    Value row = Where(started, Scalar(g_, act, 0.0), Scalar(g_, act, lowest));
    // The operator reads one row per query: [batch, 1, seq, total].
    Value shape = Concat({DimOf(attention_mask, 0), Ints(g_, {1}), DimOf(input_ids, 1), DimOf(attention_mask, 1)}, 0);
    bias = Expand(row, shape, full);
  }
  cache_[key] = bias;
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
  const int64_t width_bytes = act == DType::Float ? 4 : 2;
  const int64_t bytes = rows * static_cast<int64_t>(inv.size()) * 2 * width_bytes;
  if (inv_long.empty() && bytes > kMaxStoredRopeBytes) {
    // The rows this run reads: every cache slot (the attention mask's width) and every position
    // id, which a caller's own positions may put past it.
    ScopeGuard s(g_, "rope");
    Value rows_needed = DimOf(attention_mask, 1);  // [1]
    if (position_ids.valid()) {
      Value top = Add(ReduceMax(Reshape(position_ids, {-1}), {0}, true), Ints(g_, {1}));
      rows_needed = Max(rows_needed, top);
    }
    Value pos = Cast(Range(Int(g_, 0), Squeeze(rows_needed, {0}), Int(g_, 1)), DType::Float);
    std::vector<double> inv_d(inv.begin(), inv.end());
    Value freqs = Constant(g_, DType::Float, {1, static_cast<int64_t>(inv.size())}, inv_d, "inv_freq");
    Value angle = Mul(Unsqueeze(pos, {1}), freqs);  // [rows, rotary_dim / 2], float32 products
    Value cos = Cos(angle);
    Value sin = Sin(angle);
    if (scaling != 1.0) {
      cos = Mul(cos, Scalar(g_, DType::Float, scaling));
      sin = Mul(sin, Scalar(g_, DType::Float, scaling));
    }
    std::pair<Value, Value> out{Cast(cos, act), Cast(sin, act)};
    cache_[key + "/cos"] = out.first;
    cache_[key + "/sin"] = out.second;
    return out;
  }
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

bool ort_ops(const BuildContext& ctx) { return ctx.ops() == "ort"; }

}  // namespace mobius::nn
