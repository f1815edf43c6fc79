// mla.cpp - Multi-head Latent Attention to transformers' DeepSeek-V2/V3 eager semantics.
//
// KV cache layout: the compressed latent, not per-head K/V. Per token and layer the cache holds
// kv_a_layernorm(c_kv) and the rotated shared rope key, kv_lora_rank + qk_rope_head_dim values
// (DeepSeek-V3: 512 + 64 = 576), where decompressed K and V would hold
// heads * (qk_nope + qk_rope + v_head_dim) values (128 * 320 = 40960): 71x less cache memory and
// bandwidth, which is what makes long contexts fit. The price is that attention runs in the
// "absorbed" form: kv_b_proj's key half is folded into the query (q_nope . W_uk per head) and its
// value half is applied after the probabilities, so scores take r + rope = 576 multiply-adds per
// head and key instead of 192. For decoding this is the cheaper side (a decompressed cache would
// have to be read at 71x the size); for a long prefill it costs about 3x the score FLOPs of the
// decompressed form. The results equal transformers' up to float reassociation.
#include "mobius/sdk/mla.hpp"

#include <cmath>

namespace mobius::nn {

using namespace mobius::op;

namespace {

double yarn_mscale(double scale, double m) {
  return scale <= 1 ? 1.0 : 0.1 * m * std::log(scale) + 1.0;
}

}  // namespace

MLAConfig MLAConfig::from(const ArchitectureConfig& c) {
  if (!c.mla) throw Error("[mla] the config has no MLA settings (ArchitectureConfig::mla)");
  MLAConfig m;
  static_cast<mobius::MLAConfig&>(m) = *c.mla;
  m.hidden = c.hidden_size;
  m.heads = c.num_attention_heads;
  m.rope = c.rope;
  m.validate();
  return m;
}

double MLAConfig::softmax_scale() const {
  double s = 1.0 / std::sqrt(static_cast<double>(qk_head_dim()));
  // transformers corrects the softmax for yarn's longer context with mscale_all_dim (V3, and V2
  // since transformers PR #47435).
  if (rope.type != "default" && rope.mscale_all_dim != 0) {
    double m = yarn_mscale(rope.factor, rope.mscale_all_dim);
    s *= m * m;
  }
  return s;
}

void MLAConfig::validate() const {
  auto positive = [](const char* key, int64_t v) {
    if (v <= 0)
      throw Error(std::string("[config] '") + key + "' must be positive, got " + std::to_string(v));
  };
  positive("hidden_size", hidden);
  positive("num_attention_heads", heads);
  mobius::MLAConfig::validate();
  if (rope.partial_rotary_factor != 1.0)
    throw Error("[config] 'partial_rotary_factor' must be 1 for MLA (qk_rope_head_dim is the "
                "rotated part)");
}

Value mla_apply_rope(Value x, Value cos, Value sin, bool interleaved) {
  const Dim& xd = x.dim(-1);
  if (!xd.is_static() || xd.size % 2 != 0)
    throw Error("[mla] the rope dim must be static and even");
  const int64_t d = xd.size, half = d / 2;
  // Float32 as DeepSeek-V2's complex multiply computes it; the rotated dims are few.
  Value xf = Cast(x, DType::Float);
  Value a, b;
  if (interleaved) {
    a = Slice(xf, {0}, {d}, {-1}, {2});
    b = Slice(xf, {1}, {d}, {-1}, {2});
  } else {
    auto parts = Split(xf, {half, half}, -1);
    a = parts[0];
    b = parts[1];
  }
  Value ra = Sub(Mul(a, cos), Mul(b, sin));
  Value rb = Add(Mul(b, cos), Mul(a, sin));
  return Cast(Concat({ra, rb}, -1), x.dtype());
}

MultiHeadLatentAttention::MultiHeadLatentAttention(const MLAConfig& c)
    : cfg(c), scale(c.softmax_scale()) {
  cfg.validate();
  const int64_t qdim = cfg.heads * cfg.qk_head_dim();
  if (cfg.q_lora_rank > 0) {
    q_a_proj = &add<Linear>("q_a_proj", cfg.hidden, cfg.q_lora_rank, cfg.attention_bias);
    // DeepSeek builds both latent norms with the default eps, whatever rms_norm_eps says.
    q_a_layernorm = &add<RMSNorm>("q_a_layernorm", cfg.q_lora_rank, 1e-6);
    q_b_proj = &add<Linear>("q_b_proj", cfg.q_lora_rank, qdim, false);
  } else {
    q_proj = &add<Linear>("q_proj", cfg.hidden, qdim, false);
  }
  kv_a_proj_with_mqa = &add<Linear>("kv_a_proj_with_mqa", cfg.hidden,
                                    cfg.kv_lora_rank + cfg.qk_rope_head_dim, cfg.attention_bias);
  kv_a_layernorm = &add<RMSNorm>("kv_a_layernorm", cfg.kv_lora_rank, 1e-6);
  kv_b_proj = &add<Linear>("kv_b_proj", cfg.kv_lora_rank,
                           cfg.heads * (cfg.qk_nope_head_dim + cfg.v_head_dim), false);
  o_proj = &add<Linear>("o_proj", cfg.heads * cfg.v_head_dim, cfg.hidden, cfg.attention_bias);
}

std::vector<CacheEntry> MultiHeadLatentAttention::cache_entries(DType act) const {
  return {{"latent", act,
           {Dim("batch_size"), Dim(1), Dim("past_sequence_length"),
            Dim(cfg.kv_lora_rank + cfg.qk_rope_head_dim)}}};
}

Value MultiHeadLatentAttention::forward(Graph& g, Value x, SharedInputs& shared,
                                        const CacheMap& past, CacheMap& present) const {
  ScopeGuard s(g, path());
  const int64_t h = cfg.heads, nope = cfg.qk_nope_head_dim, dr = cfg.qk_rope_head_dim;
  const int64_t r = cfg.kv_lora_rank, dv = cfg.v_head_dim;
  const DType act = x.dtype();

  Value q = q_proj ? q_proj->forward(g, x)
                   : q_b_proj->forward(g, q_a_layernorm->forward(g, q_a_proj->forward(g, x)));
  q = Transpose(Reshape(q, {0, 0, h, nope + dr}), {0, 2, 1, 3});  // [batch, heads, seq, qk]
  auto qs = Split(q, {nope, dr}, -1);
  Value q_nope = qs[0], q_pe = qs[1];

  auto kv = Split(kv_a_proj_with_mqa->forward(g, x), {r, dr}, -1);
  Value latent = Unsqueeze(kv_a_layernorm->forward(g, kv[0]), {1});  // [batch, 1, seq, r]
  Value k_pe = Unsqueeze(kv[1], {1});  // one rope key shared by all heads [batch, 1, seq, dr]

  auto [cos, sin] = shared.rope_tables(cfg.rope, dr, false);
  q_pe = mla_apply_rope(q_pe, cos, sin, cfg.rope.interleaved);
  k_pe = mla_apply_rope(k_pe, cos, sin, cfg.rope.interleaved);

  Value cache = Concat({past.at("latent"), Concat({latent, k_pe}, -1)}, 2);  // [b, 1, total, r+dr]
  present["latent"] = cache;

  // kv_b_proj per head: [W_uk (nope rows) | W_uv (v rows)] x r, split while the weights
  // stream into W_uk [heads, nope, r] and W_uv^T [heads, r, dv].
  auto [w_uk, w_uv_t] = absorbed_weights(g, act);
  Value q_lat = MatMul(q_nope, w_uk);  // q_nope . W_uk: [batch, heads, seq, r]
  Value qf = Concat({q_lat, q_pe}, -1);  // scores against [latent | k_pe] in one matmul
  AttentionCore core;
  core.scale = scale;
  Value probs = attention_probs(g, shared, qf, cache, core, 1);  // the latent is one kv head
  // probs . [latent | k_pe], then drop the rope columns: slicing the small product is cheaper
  // than slicing the whole cache every step.
  Value o = Slice(MatMul(probs, cache), {0}, {r}, {-1});  // [batch, heads, seq, r]
  o = MatMul(o, w_uv_t);                                  // . W_uv^T: [batch, heads, seq, dv]
  return o_proj->forward(g, merge_heads(o, h, dv));
}

std::pair<Value, Value> MultiHeadLatentAttention::absorbed_weights(Graph& g, DType act) const {
  BuildContext& ctx = g.context();
  const int64_t h = cfg.heads, nope = cfg.qk_nope_head_dim, r = cfg.kv_lora_rank, dv = cfg.v_head_dim;
  const std::string base = kv_b_proj->full_name("weight");
  const std::vector<std::string> src{kv_b_proj->source_tensor("weight")};
  Value uk = ctx.graph().initializer(base + "_uk", TensorType(act, {Dim(h), Dim(nope), Dim(r)}));
  ctx.plan_transformed(base + "_uk", src, [=](const std::vector<HostTensor>& in, float* out, size_t) {
    const float* w = in[0].data;  // [h * (nope + dv), r]
    for (int64_t i = 0; i < h; ++i)
      for (int64_t j = 0; j < nope; ++j)
        for (int64_t c = 0; c < r; ++c) out[(i * nope + j) * r + c] = w[(i * (nope + dv) + j) * r + c];
  });
  Value uv = ctx.graph().initializer(base + "_uv_t", TensorType(act, {Dim(h), Dim(r), Dim(dv)}));
  ctx.plan_transformed(base + "_uv_t", src, [=](const std::vector<HostTensor>& in, float* out, size_t) {
    const float* w = in[0].data;
    for (int64_t i = 0; i < h; ++i)
      for (int64_t j = 0; j < dv; ++j)
        for (int64_t c = 0; c < r; ++c)
          out[(i * r + c) * dv + j] = w[(i * (nope + dv) + nope + j) * r + c];
  });
  return {uk, uv};
}

MixerFactory mla_mixer() {
  return [](const ArchitectureConfig& c, int64_t, const DecoderSpec&) {
    return std::make_unique<MultiHeadLatentAttention>(MLAConfig::from(c));
  };
}

}  // namespace mobius::nn
