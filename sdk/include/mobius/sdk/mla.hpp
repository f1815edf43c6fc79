// mobius/sdk/mla.hpp - Multi-head Latent Attention (DeepSeek-V2/V3) with a compressed-latent cache.
//
// Parameter names follow the DeepSeek checkpoints: q_proj, or q_a_proj -> q_a_layernorm ->
// q_b_proj (with q_lora_rank); kv_a_proj_with_mqa -> kv_a_layernorm; kv_b_proj; o_proj.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "mobius/sdk/nn.hpp"

namespace mobius::nn {

struct MLAConfig {
  int64_t hidden = 0;
  int64_t heads = 0;
  int64_t q_lora_rank = 0;  // 0: a plain q_proj
  int64_t kv_lora_rank = 0;
  int64_t qk_nope_head_dim = 0;
  int64_t qk_rope_head_dim = 0;
  int64_t v_head_dim = 0;
  bool attention_bias = false;  // on q_a_proj, kv_a_proj_with_mqa and o_proj only
  // Rope over qk_rope_head_dim. `interleaved`: rotate adjacent pairs (V2, and V3 with
  // rope_interleave); otherwise rotate_half over the two halves.
  RopeConfig rope;

  // Reads the DeepSeek keys a plugin stored in cfg.extra (q_lora_rank, kv_lora_rank,
  // qk_nope_head_dim, qk_rope_head_dim, v_head_dim, attention_bias); the rest from cfg.
  static MLAConfig from(const ArchitectureConfig& cfg);
  int64_t qk_head_dim() const { return qk_nope_head_dim + qk_rope_head_dim; }
  // qk_head_dim**-0.5, times yarn's mscale(factor, mscale_all_dim)**2 when the rope is scaled.
  double softmax_scale() const;
  // Throws naming the first size that cannot work.
  void validate() const;
};

// The cache holds, per token, the normalized latent and the rotated shared rope key:
// "latent" [batch, 1, past, kv_lora_rank + qk_rope_head_dim].
class MultiHeadLatentAttention : public Module {
 public:
  explicit MultiHeadLatentAttention(const MLAConfig& cfg);
  Value forward(Graph& g, Value x, SharedInputs& shared, const std::map<std::string, Value>& past,
                std::map<std::string, Value>& present) const;
  std::vector<CacheEntry> cache_entries(DType act) const;

  MLAConfig cfg;
  double scale;
  const Linear* q_proj = nullptr;
  const Linear* q_a_proj = nullptr;
  const RMSNorm* q_a_layernorm = nullptr;
  const Linear* q_b_proj = nullptr;
  const Linear* kv_a_proj_with_mqa;
  const RMSNorm* kv_a_layernorm;
  const Linear* kv_b_proj;
  const Linear* o_proj;
};

// Rotary tables for MLA, float32 [batch, 1, seq, rotary_dim / 2] (one angle per rotated pair,
// attention scaling applied), built once per graph and rope config (kept in shared.memo).
std::pair<Value, Value> mla_rope_tables(Graph& g, SharedInputs& shared, const RopeConfig& rope,
                                        int64_t rotary_dim);
// Rotates x [..., rotary_dim] in float32 with tables of mla_rope_tables, pairing (2i, 2i+1)
// when interleaved and (i, i + d/2) otherwise. The result holds the rotated pairs as
// [first of each pair | second of each pair]: one fixed permutation of the dims, which leaves
// every q.k product unchanged as long as q and k go through the same call.
Value mla_apply_rope(Value x, Value cos, Value sin, bool interleaved);

}  // namespace mobius::nn
