// attention.cpp - the attention core and Attention (attention.hpp), eager-attention semantics.
#include "mobius/sdk/attention.hpp"

#include <cmath>
#include <tuple>

#include "mobius/sdk/half.hpp"
#include "packed.hpp"

namespace mobius::nn {

using namespace mobius::op;

Value attention_probs(Graph& g, SharedInputs& shared, Value q, Value k, const AttentionCore& core,
                      int64_t rep, Value sinks) {
  Value scores = Mul(MatMul(q, Transpose(k, {0, 1, 3, 2})), ScalarLike(q, core.scale));
  scores = Cast(scores, DType::Float);
  if (core.softcap > 0) {
    Value cap = Scalar(g, DType::Float, core.softcap);
    scores = Mul(Tanh(Div(scores, cap)), cap);
  }
  if (!core.alibi.empty()) {
    // One slope per query head: the rep heads of a group are consecutive row blocks of seq rows.
    const Dim& groups = q.dim(1);
    if (!groups.is_static() || groups.size * rep != static_cast<int64_t>(core.alibi.size()))
      throw Error("[attention] ALiBi needs one slope per head");
    std::vector<double> s;
    for (double v : core.alibi)
      s.push_back(core.alibi_bf16 ? bf16_to_float(float_to_bf16(static_cast<float>(v))) : v * core.alibi_scale);
    const int64_t heads = groups.size * rep;
    Value slopes = Constant(g, DType::Float, {1, heads, 1, 1}, s, "alibi_slopes");
    Value bias;  // [batch, heads, 1, total]
    if (core.alibi_bf16) {
      auto bf16 = [](Value v) { return Cast(Cast(v, DType::BFloat16), DType::Float); };
      bias = Div(bf16(Mul(slopes, bf16(shared.key_positions()))),
                 Scalar(g, DType::Float, 1.0 / core.alibi_scale));
    } else {
      bias = Mul(slopes, shared.key_positions());
    }
    if (rep == 1) scores = Add(scores, bias);
    else scores = Reshape(Add(Reshape(scores, {0, heads, -1, 0}), bias), {0, groups.size, -1, 0});
  }
  scores = Add(scores, shared.attention_bias(core.window, rep, core.chunk));
  if (!sinks.valid()) return Cast(Softmax(scores, -1), q.dtype());
  // Per query head: the rows of one head are contiguous, so [batch, groups, rep * seq, total]
  // is [batch, heads, seq, total] as it lies. The softmax of [scores | sink] without its last
  // column: the sink joins the maximum and the denominator, as transformers' eager attention
  // computes it.
  const Dim& groups = q.dim(1);
  if (!groups.is_static()) throw Error("[attention] sinks need a static head count");
  const int64_t heads = groups.size * rep;
  Value s = Reshape(scores, {0, heads, -1, 0});
  Value sink = Reshape(sinks, {1, heads, 1, 1});
  Value m = Max(ReduceMax(s, {-1}, true), sink);
  Value e = Exp(Sub(s, m));
  Value p = Div(e, Add(ReduceSum(e, {-1}, true), Exp(Sub(sink, m))));
  return Cast(Reshape(p, {0, groups.size, -1, 0}), q.dtype());
}

Value merge_heads(Value o, int64_t heads, int64_t head_dim) {
  return Reshape(Transpose(o, {0, 2, 1, 3}), {0, 0, heads * head_dim});
}

Value grouped_attention(Graph& g, SharedInputs& shared, Value q, Value k, Value v,
                        const AttentionCore& core, int64_t heads, int64_t kv_heads, Value sinks) {
  const int64_t rep = heads / kv_heads;
  const Dim& d = q.dim(-1);
  const Dim& dv = v.dim(-1);
  if (!d.is_static() || !dv.is_static()) throw Error("[attention] head dims must be static");
  Value qg = rep > 1 ? Reshape(q, {0, kv_heads, -1, d.size}) : q;
  Value o = MatMul(attention_probs(g, shared, qg, k, core, rep, sinks), v);  // [b, kv, rep*seq, dv]
  if (rep > 1) o = Reshape(o, {0, heads, -1, dv.size});
  return merge_heads(o, heads, dv.size);
}

Attention::Attention(const ArchitectureConfig& cfg, int64_t layer, const NormFactory& norm,
                     const AttentionNames& names, bool gate)
    : heads(cfg.num_attention_heads),
      kv_heads(cfg.num_key_value_heads),
      head_dim(cfg.head_dim),
      hidden(cfg.hidden_size),
      output_gate(gate),
      qk_norm(cfg.qk_norm),
      rotates(cfg.uses_rope(layer)),
      alibi(cfg.position_embedding == "alibi"),
      alibi_slopes(cfg.alibi),
      alibi_bias_max(cfg.alibi_bias_max),
      clip_qkv(cfg.clip_qkv),
      qkv_layout(names.qkv_layout),
      qk_norm_after_rope(names.qk_norm_after_rope),
      rope(cfg.has_sliding_rope && cfg.is_sliding(layer) ? cfg.sliding_rope : cfg.rope) {
  core.scale = cfg.attention_multiplier > 0 ? cfg.attention_multiplier
                                            : 1.0 / std::sqrt(static_cast<double>(cfg.head_dim));
  if (cfg.attention_scale_by_layer) core.scale /= static_cast<double>(layer + 1);
  core.softcap = cfg.attn_logit_softcapping;
  core.window = cfg.is_sliding(layer) ? cfg.sliding_window : 0;
  if (alibi) {
    core.alibi = nn::alibi_slopes(heads, alibi_slopes, alibi_bias_max);
    if (names.falcon_alibi) {
      core.alibi_scale = 1.0 / std::sqrt(static_cast<double>(head_dim));
      core.alibi_bf16 = true;
    }
  }
  const int64_t q_out = heads * head_dim * (output_gate ? 2 : 1);
  if (!names.qkv.empty()) {
    if (output_gate) throw Error("[attention] a fused qkv projection has no output gate");
    if (qkv_layout == QkvLayout::PerHead && kv_heads != heads)
      throw Error("[attention] a per-head qkv layout has as many key/value heads as heads");
    if (qkv_layout == QkvLayout::CodeGen && heads % 4 != 0)
      throw Error("[config] CodeGen's qkv_proj splits the heads in 4: 'n_head' (" + std::to_string(heads) +
                  ") must be a multiple of 4");
    qkv_proj = &add<Linear>(names.qkv, hidden, q_out + 2 * kv_heads * head_dim, cfg.qkv_bias, names.in_out);
  } else {
    q_proj = &add<Linear>(names.q, hidden, q_out, cfg.qkv_bias, names.in_out);
    k_proj = &add<Linear>(names.k, hidden, kv_heads * head_dim, cfg.qkv_bias, names.in_out);
    v_proj = &add<Linear>(names.v, hidden, kv_heads * head_dim, cfg.qkv_bias, names.in_out);
  }
  o_proj = &add<Linear>(names.o, heads * head_dim, hidden, cfg.o_bias, names.in_out);
  if (qk_norm == "head_each") {
    auto qn = std::make_unique<PerHeadLayerNorm>(heads, head_dim, cfg.rms_norm_eps, names.qk_norm_per_head_tensors);
    auto kn = std::make_unique<PerHeadLayerNorm>(kv_heads, head_dim, cfg.rms_norm_eps, names.qk_norm_per_head_tensors);
    q_norm = qn.get();
    k_norm = kn.get();
    attach(names.q_norm, std::move(qn));
    attach(names.k_norm, std::move(kn));
  } else if (qk_norm == "head" || qk_norm == "full") {
    bool full = qk_norm == "full";
    auto qn = norm(full ? heads * head_dim : head_dim, cfg.rms_norm_eps);
    auto kn = norm(full ? kv_heads * head_dim : head_dim, cfg.rms_norm_eps);
    q_norm = qn.get();
    k_norm = kn.get();
    attach(names.q_norm, std::move(qn));
    attach(names.k_norm, std::move(kn));
  } else if (qk_norm == "head_weightless") {
    // No parameters: the modules hold no checkpoint tensor.
    auto qn = std::make_unique<WeightlessRMSNorm>(cfg.rms_norm_eps);
    auto kn = std::make_unique<WeightlessRMSNorm>(cfg.rms_norm_eps);
    q_norm = qn.get();
    k_norm = kn.get();
    attach(names.q_norm, std::move(qn));
    attach(names.k_norm, std::move(kn));
  } else if (qk_norm != "none") {
    throw Error("[attention] unknown qk_norm '" + qk_norm + "'");
  }
}

std::vector<CacheEntry> Attention::cache_entries(DType act) const {
  std::vector<Dim> dims{Dim("batch_size"), Dim(kv_heads), Dim("past_sequence_length"), Dim(head_dim)};
  return {{"key", act, dims}, {"value", act, dims}};
}

namespace {

// A fused projection's output [batch, seq, (heads + 2 kv_heads) * d] as q [.., heads * d], k and
// v [.., kv_heads * d], from the layout its rows are stored in.
std::vector<Value> split_qkv(Value qkv, QkvLayout layout, int64_t heads, int64_t kv_heads, int64_t d) {
  switch (layout) {
    case QkvLayout::Blocks:
      return Split(qkv, {heads * d, kv_heads * d, kv_heads * d}, -1);
    case QkvLayout::PerHead: {
      auto p = Split(Reshape(qkv, {0, 0, heads, 3 * d}), {d, d, d}, -1);
      for (auto& t : p) t = Reshape(t, {0, 0, heads * d});
      return p;
    }
    case QkvLayout::PerGroup: {
      const int64_t rep = heads / kv_heads;
      auto p = Split(Reshape(qkv, {0, 0, kv_heads, (rep + 2) * d}), {rep * d, d, d}, -1);
      return {Reshape(p[0], {0, 0, heads * d}), Reshape(p[1], {0, 0, kv_heads * d}),
              Reshape(p[2], {0, 0, kv_heads * d})};
    }
    case QkvLayout::CodeGen: {
      // Four blocks of [q | v | k], each a quarter of the heads; head h is block h / (heads / 4).
      const int64_t local = heads * d / 4;
      auto p = Split(Reshape(qkv, {0, 0, 4, 3 * local}), {local, local, local}, -1);
      return {Reshape(p[0], {0, 0, heads * d}), Reshape(p[2], {0, 0, heads * d}),
              Reshape(p[1], {0, 0, heads * d})};
    }
  }
  throw Error("[attention] unknown qkv layout");
}

}  // namespace

Value Attention::forward(Graph& g, Value x, SharedInputs& shared, const CacheMap& past,
                         CacheMap& present) const {
  ScopeGuard s(g, path());
  BuildContext& ctx = g.context();
  const bool fuse = fused(ctx, shared.act);
  const bool in_out = (qkv_proj ? qkv_proj : q_proj)->in_out;
  Value q, k, v, gate;
  if (fuse && !output_gate && qk_norm == "none" && !temperature.enabled() && !rotary_outside(ctx) &&
      qkv_layout == QkvLayout::Blocks && clip_qkv == 0 && (qkv_proj || !in_out)) {
    // One tensor [batch, seq, (heads + 2 kv_heads) * head_dim] for the operator, as the
    // projection packs it.
    Value qkv = qkv_proj ? qkv_proj->forward(g, x)
                         : packed_linear(g, x, {q_proj, k_proj, v_proj}, full_name("qkv_packed"));
    return o_proj->forward(g, fused_attention(g, qkv, Value(), Value(), shared, past, present));
  }
  if (qkv_proj) {
    auto parts = split_qkv(qkv_proj->forward(g, x), qkv_layout, heads, kv_heads, head_dim);
    q = parts[0];
    k = parts[1];
    v = parts[2];
  } else if (fuse && !in_out) {
    // One projection for q, k and v, as ONNX Runtime's fused graphs have it.
    auto parts = packed_linears(g, x, {q_proj, k_proj, v_proj}, full_name("qkv_packed"));
    q = parts[0];
    k = parts[1];
    v = parts[2];
  } else {
    q = q_proj->forward(g, x);
    k = k_proj->forward(g, x);
    v = v_proj->forward(g, x);
  }
  if (clip_qkv > 0) {
    auto clip = [&](Value t) { return Min(Max(t, ScalarLike(t, -clip_qkv)), ScalarLike(t, clip_qkv)); };
    q = clip(q);
    k = clip(k);
    v = clip(v);
  }
  if (output_gate) {
    // The checkpoint interleaves per head: [query_h | gate_h] for h = 0 .. heads-1.
    auto parts = Split(Reshape(q, {0, 0, heads, 2 * head_dim}), {head_dim, head_dim}, -1);
    q = parts[0];  // [batch, seq, heads, head_dim]
    gate = Reshape(parts[1], {0, 0, heads * head_dim});
  }
  if (qk_norm == "full") {
    q = q_norm->forward(g, q);
    k = k_norm->forward(g, k);
  }
  if (fuse) {
    Value o = fused_attention(g, q, k, v, shared, past, present);
    if (output_gate) o = Mul(o, Sigmoid(gate));
    return o_proj->forward(g, o);
  }
  if (!output_gate) q = Reshape(q, {0, 0, heads, head_dim});
  k = Reshape(k, {0, 0, kv_heads, head_dim});
  v = Reshape(v, {0, 0, kv_heads, head_dim});
  const bool per_head = head_norms();
  if (per_head && !qk_norm_after_rope) {
    q = q_norm->forward(g, q);
    k = k_norm->forward(g, k);
  }
  q = Transpose(q, {0, 2, 1, 3});  // [batch, heads, seq, head_dim]
  k = Transpose(k, {0, 2, 1, 3});
  v = Transpose(v, {0, 2, 1, 3});
  if (rotates) {
    auto [cos, sin] = shared.rope(rope, head_dim);  // over the first rotary_dim dims only
    q = apply_rope(q, cos, sin, rope.interleaved);
    k = apply_rope(k, cos, sin, rope.interleaved);
  }
  if (per_head && qk_norm_after_rope) {
    q = q_norm->forward(g, q);
    k = k_norm->forward(g, k);
  }
  q = apply_temperature(g, shared, q, false);
  k = Concat({past.at("key"), k}, 2);  // [batch, kv_heads, total, head_dim]
  v = Concat({past.at("value"), v}, 2);
  present["key"] = k;
  present["value"] = v;
  Value o = grouped_attention(g, shared, q, k, v, core, heads, kv_heads,
                              head_sinks(g, DType::Float));
  if (output_gate) o = Mul(o, Sigmoid(gate));
  return o_proj->forward(g, o);
}

bool Attention::head_norms() const {
  return qk_norm == "head" || qk_norm == "head_each" || qk_norm == "head_weightless";
}

Value Attention::apply_temperature(Graph& g, SharedInputs& shared, Value q, bool gqa) const {
  if (!temperature.enabled()) return q;
  const std::string key = "query_temperature/" + std::to_string(temperature.floor_scale) + "/" +
                          std::to_string(temperature.scale) + (gqa ? "/gqa" : "");
  Value factor;
  if (auto it = shared.memo.find(key); it != shared.memo.end()) {
    factor = it->second;
  } else {
    Value slots = gqa ? shared.gqa_query_slots() : shared.query_slots();  // [batch, seq] or [seq]
    ScopeGuard s(g, "query_temperature");
    // transformers: log1p(floor((slot + 1) / floor_scale)) * attn_scale + 1, in float32; the floor
    // is a whole number, so log(1 + it) is log1p's value.
    Value pos = Add(Cast(slots, DType::Float), Scalar(g, DType::Float, 1.0));
    Value fl = Div(pos, Scalar(g, DType::Float, temperature.floor_scale));
    fl = g.node("Floor", {fl}, {fl.type()})[0];
    Value t = Add(Mul(Log(Add(fl, Scalar(g, DType::Float, 1.0))), Scalar(g, DType::Float, temperature.scale)),
                  Scalar(g, DType::Float, 1.0));
    factor = Unsqueeze(t, {-1});  // [batch, seq, 1] or [seq, 1]
    shared.memo[key] = factor;
  }
  // (q * scales).to(q.dtype): the product in float32, rounded once.
  return Cast(Mul(Cast(q, DType::Float), factor), q.dtype());
}

int64_t Attention::rotary_dim() const {
  return rotates ? static_cast<int64_t>(static_cast<double>(head_dim) * rope.partial_rotary_factor) : 0;
}

bool Attention::rotary_outside(const BuildContext& ctx) const {
  const int64_t rot = rotary_dim();
  // ONNX Runtime's operator rotates inside for a head size that is a multiple of 16 and a
  // rotated width that is a multiple of 16 (its cos cache [positions, rot / 2]), at cache slots:
  // not when the graph takes the caller's positions (--position-ids input).
  return rot > 0 && (ctx.positions() == "input" || rope.type == "longrope" || head_dim % 16 != 0 ||
                     rot % 16 != 0 || qk_norm_after_rope);
}

bool Attention::reads_position_ids(const BuildContext& ctx) const {
  if (!rotates) return false;
  const DType w = ctx.weight_dtype();
  return !fused(ctx, w == DType::BFloat16 ? DType::Float : w) || rotary_outside(ctx);
}

bool Attention::fused(const BuildContext& ctx, DType act) const {
  // ALiBi's per-head bias is spelled out in standard operators.
  if (!ort_ops(ctx) || alibi) return false;
  // GroupQueryAttention runs float32 on the CPU; on CUDA it has float16 and bfloat16 kernels
  // only, so a float32 CUDA graph keeps the standard attention.
  return ctx.execution_provider() != "cuda" || act != DType::Float;
}

Value Attention::fused_attention(Graph& g, Value q, Value k, Value v, SharedInputs& shared,
                                 const CacheMap& past, CacheMap& present) const {
  // q [batch, seq, heads * head_dim] (or [.., heads, head_dim] after the output-gate split);
  // k and v [batch, seq, kv_heads * head_dim]; or q the packed projection and k, v invalid.
  const bool packed = !k.valid();
  if (output_gate) q = Reshape(q, {0, 0, heads * head_dim});
  const bool per_head = head_norms();
  auto norm_heads = [&]() {
    q = Reshape(q_norm->forward(g, Reshape(q, {0, 0, heads, head_dim})), {0, 0, heads * head_dim});
    k = Reshape(k_norm->forward(g, Reshape(k, {0, 0, kv_heads, head_dim})), {0, 0, kv_heads * head_dim});
  };
  if (per_head && !qk_norm_after_rope) norm_heads();
  const int64_t rot = rotary_dim();
  Value cos, sin;
  if (rot > 0) std::tie(cos, sin) = shared.rope_caches(rope, rot);
  const bool outside = rot > 0 && rotary_outside(g.context());
  if (outside) {
    Value rows = shared.rope_positions(rope);  // position_ids, or a longrope's rows of this run
    q = RotaryEmbedding(q, rows, cos, sin, heads, rot, rope.interleaved);
    k = RotaryEmbedding(k, rows, cos, sin, kv_heads, rot, rope.interleaved);
  }
  if (per_head && qk_norm_after_rope) norm_heads();
  // The temperature multiplies each query by a number: before the operator's own rotary it
  // scales the rotated query alike. At the operator's slots (gqa_query_slots), which are
  // query_slots() but on a right-padded row. A packed projection is never scaled (forward
  // unpacks it).
  if (packed && temperature.enabled()) throw Error("[attention] the query temperature needs q unpacked");
  q = apply_temperature(g, shared, q, true);
  // Otherwise the operator rotates q and k itself, each token at its slot (gqa_lengths). A
  // left-padded row's slots are its positions plus its padding, the same offset for every
  // token of the row; a right-padded row's tokens are written from slot 0 on, over its
  // padding. Rotary scores depend on the difference of two positions only, so the logits are
  // transformers' at the position_ids generation computes (cumsum(attention_mask) - 1). The
  // cache holds keys rotated by slot.
  const bool inside = rot > 0 && !outside;
  auto [seqlens_k, total] = shared.gqa_lengths();
  std::vector<Attr> attrs{Attr("num_heads", heads), Attr("kv_num_heads", kv_heads),
                          Attr("scale", core.scale)};
  if (inside) {
    attrs.emplace_back("do_rotary", int64_t{1});
    attrs.emplace_back("rotary_interleaved", static_cast<int64_t>(rope.interleaved ? 1 : 0));
  }
  if (core.softcap > 0) attrs.emplace_back("softcap", core.softcap);
  // local_window_size w: key slot j is visible to query slot i iff i - w < j <= i, the window
  // transformers applies.
  if (core.window > 0) attrs.emplace_back("local_window_size", core.window);
  const Value none;
  const Value past_k = past.at("key"), past_v = past.at("value");
  std::vector<Value> inputs{q, packed ? none : k, packed ? none : v, past_k, past_v, seqlens_k, total,
                            inside ? cos : none, inside ? sin : none, none, shared.gqa_bias(core.chunk)};
  if (Value sinks = head_sinks(g, q.dtype()); sinks.valid()) inputs.push_back(sinks);  // head_sink
  auto out = g.node("GroupQueryAttention", inputs,
                    {TensorType(q.dtype(), {Dim("batch_size"), Dim("sequence_length"), Dim(heads * head_dim)}),
                     TensorType(past_k.dtype(), {Dim("batch_size"), Dim(kv_heads), Dim("total_sequence_length"), Dim(head_dim)}),
                     TensorType(past_v.dtype(), {Dim("batch_size"), Dim(kv_heads), Dim("total_sequence_length"), Dim(head_dim)})},
                    attrs, "com.microsoft");
  present["key"] = out[1];
  present["value"] = out[2];
  return out[0];
}

// ---------------------------------------------------------------------------------------------
// Per-head norms and ALiBi

Value WeightlessRMSNorm::forward(Graph& g, Value x) const {
  ScopeGuard s(g, path());
  Value xf = Cast(x, DType::Float);
  Value ms = ReduceMean(Mul(xf, xf), {-1}, true);
  Value inv = Reciprocal(Sqrt(Add(ms, Scalar(g, DType::Float, eps))));
  return Cast(Mul(xf, inv), x.dtype());
}

PerHeadLayerNorm::PerHeadLayerNorm(int64_t h, int64_t d, double e, bool st)
    : heads(h), head_dim(d), eps(e), stacked(st) {
  if (stacked) {
    for (int64_t i = 0; i < heads; ++i) add<VectorParam>("norms." + std::to_string(i), "weight", d);
  } else {
    declare("weight", {h, d});
  }
}

Value PerHeadLayerNorm::forward(Graph& g, Value x) const {
  ScopeGuard s(g, path());
  Value w;
  if (stacked) {
    // One [heads, head_dim] initializer from the per-head tensors, made while the weights stream.
    std::vector<std::string> sources;
    for (int64_t i = 0; i < heads; ++i) sources.push_back(full_name("norms." + std::to_string(i) + ".weight"));
    w = detail::concatenated(g, full_name("weight_stacked"), sources, {heads, head_dim}, DType::Float);
  } else {
    w = param(g, "weight", DType::Float);
  }
  Value xf = Cast(x, DType::Float);
  Value ones = Constant(g, DType::Float, {head_dim}, std::vector<double>(static_cast<size_t>(head_dim), 1.0), "ones");
  Value n = g.node("LayerNormalization", {xf, ones}, {xf.type()},
                   {Attr("axis", int64_t{-1}), Attr("epsilon", eps), Attr("stash_type", int64_t{1})})[0];
  return Cast(Mul(n, w), x.dtype());
}

std::vector<double> alibi_slopes(int64_t heads, const std::string& style, double bias_max) {
  std::vector<double> slopes;
  if (style == "mpt") {
    // MPT: 1 / 2^(k * bias_max / n2) for k = 1 .. n2 (n2 the next power of two), the odd then
    // the even entries when heads is not a power of two.
    const auto n2 = static_cast<int64_t>(std::pow(2.0, std::ceil(std::log2(static_cast<double>(heads)))));
    std::vector<double> all;
    for (int64_t k = 1; k <= n2; ++k)
      all.push_back(1.0 / std::pow(2.0, static_cast<double>(k) * (bias_max / static_cast<double>(n2))));
    if (n2 == heads) return all;
    for (size_t i = 1; i < all.size(); i += 2) slopes.push_back(all[i]);
    for (size_t i = 0; i < all.size(); i += 2) slopes.push_back(all[i]);
    slopes.resize(static_cast<size_t>(heads));
    return slopes;
  }
  // BLOOM: base^k for k = 1 .. c (c the largest power of two up to heads), then the odd powers of
  // the next power's base for the remaining heads.
  const auto c = static_cast<int64_t>(std::pow(2.0, std::floor(std::log2(static_cast<double>(heads)))));
  const double base = std::pow(2.0, -std::pow(2.0, -(std::log2(static_cast<double>(c)) - 3.0)));
  for (int64_t k = 1; k <= c; ++k) slopes.push_back(std::pow(base, static_cast<double>(k)));
  if (c != heads) {
    const double extra = std::pow(2.0, -std::pow(2.0, -(std::log2(static_cast<double>(2 * c)) - 3.0)));
    const int64_t remaining = std::min(c, heads - c);
    for (int64_t k = 1; k <= 2 * remaining; k += 2) slopes.push_back(std::pow(extra, static_cast<double>(k)));
  }
  return slopes;
}

// ---------------------------------------------------------------------------------------------
// Attention with sinks

SinkAttention::SinkAttention(const ArchitectureConfig& cfg, int64_t layer, const NormFactory& norm,
                             const AttentionNames& names)
    : Attention(cfg, layer, norm, names) {
  declare("sinks", {heads});
}

Value SinkAttention::head_sinks(Graph& g, DType dt) const { return param(g, "sinks", dt); }

}  // namespace mobius::nn
