// gated_attention.cpp - GatedAttention (see gated_attention.hpp), eager-attention semantics.
#include "mobius/sdk/gated_attention.hpp"

#include <cmath>

namespace mobius::nn {

using namespace mobius::op;

GatedAttention::GatedAttention(const ArchitectureConfig& cfg, int64_t layer,
                               const NormFactory& norm)
    : heads(cfg.num_attention_heads),
      kv_heads(cfg.num_key_value_heads),
      head_dim(cfg.head_dim),
      hidden(cfg.hidden_size),
      window(cfg.is_sliding(layer) ? cfg.sliding_window : 0),
      scale(cfg.attention_multiplier > 0 ? cfg.attention_multiplier
                                         : 1.0 / std::sqrt(static_cast<double>(cfg.head_dim))),
      rope(cfg.rope) {
  q_proj = &add<Linear>("q_proj", hidden, heads * head_dim * 2, cfg.qkv_bias);
  k_proj = &add<Linear>("k_proj", hidden, kv_heads * head_dim, cfg.qkv_bias);
  v_proj = &add<Linear>("v_proj", hidden, kv_heads * head_dim, cfg.qkv_bias);
  o_proj = &add<Linear>("o_proj", heads * head_dim, hidden, cfg.o_bias);
  auto qn = norm(head_dim, cfg.rms_norm_eps);
  auto kn = norm(head_dim, cfg.rms_norm_eps);
  q_norm = qn.get();
  k_norm = kn.get();
  attach("q_norm", std::move(qn));
  attach("k_norm", std::move(kn));
}

std::vector<CacheEntry> GatedAttention::cache_entries(DType act) const {
  std::vector<Dim> dims{Dim("batch_size"), Dim(kv_heads), Dim("past_sequence_length"),
                        Dim(head_dim)};
  return {{"key", act, dims}, {"value", act, dims}};
}

Value GatedAttention::forward(Graph& g, Value x, SharedInputs& shared,
                              const std::map<std::string, Value>& past,
                              std::map<std::string, Value>& present) const {
  ScopeGuard s(g, path());
  // The checkpoint interleaves per head: [query_h | gate_h] for h = 0 .. heads-1.
  Value qg = Reshape(q_proj->forward(g, x), {0, 0, heads, 2 * head_dim});
  auto parts = Split(qg, {head_dim, head_dim}, -1);
  Value q = q_norm->forward(g, parts[0]);  // [batch, seq, heads, head_dim]
  Value gate = Reshape(parts[1], {0, 0, heads * head_dim});
  Value k = k_norm->forward(g, Reshape(k_proj->forward(g, x), {0, 0, kv_heads, head_dim}));
  Value v = Reshape(v_proj->forward(g, x), {0, 0, kv_heads, head_dim});
  q = Transpose(q, {0, 2, 1, 3});  // [batch, heads, seq, head_dim]
  k = Transpose(k, {0, 2, 1, 3});
  v = Transpose(v, {0, 2, 1, 3});
  auto [cos, sin] = shared.rope(rope, head_dim);  // over the first rotary_dim dims only
  q = apply_rope(q, cos, sin, rope.interleaved);
  k = apply_rope(k, cos, sin, rope.interleaved);
  k = Concat({past.at("key"), k}, 2);  // [batch, kv_heads, total, head_dim]
  v = Concat({past.at("value"), v}, 2);
  present["key"] = k;
  present["value"] = v;

  // Grouped queries: the rep query heads of one kv head are rows of one matmul, so K and V are
  // never repeated.
  const int64_t rep = heads / kv_heads;
  Value qr = rep > 1 ? Reshape(q, {0, kv_heads, -1, head_dim}) : q;
  Value scores = Mul(MatMul(qr, Transpose(k, {0, 1, 3, 2})), ScalarLike(qr, scale));
  scores = Add(Cast(scores, DType::Float), shared.attention_bias(window, rep));
  Value probs = Cast(Softmax(scores, -1), x.dtype());
  Value o = MatMul(probs, v);  // [batch, kv_heads, rep*seq, head_dim]
  if (rep > 1) o = Reshape(o, {0, heads, -1, head_dim});
  o = Reshape(Transpose(o, {0, 2, 1, 3}), {0, 0, heads * head_dim});
  return o_proj->forward(g, Mul(o, Sigmoid(gate)));
}

}  // namespace mobius::nn
