// mobius/sdk/mla.hpp - Multi-head Latent Attention (DeepSeek-V2/V3) with a compressed-latent cache.
//
// Parameter names follow the DeepSeek checkpoints: q_proj, or q_a_proj -> q_a_layernorm ->
// q_b_proj (with q_lora_rank); kv_a_proj_with_mqa -> kv_a_layernorm; kv_b_proj; o_proj.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "mobius/sdk/attention.hpp"
#include "mobius/sdk/decoder.hpp"

namespace mobius::nn {

// The component's settings: the MLA family config (mobius::MLAConfig, family_config.hpp: ranks,
// head dims, attention_bias, qk_head_dim()) plus the decoder fields it uses.
struct MLAConfig : mobius::MLAConfig {
  int64_t hidden = 0;
  int64_t heads = 0;
  // Rope over qk_rope_head_dim. `interleaved`: rotate adjacent pairs (V2, and V3 with
  // rope_interleave); otherwise rotate_half over the two halves.
  RopeConfig rope;

  // cfg.mla with hidden_size, num_attention_heads and rope from cfg; throws when cfg.mla is
  // empty.
  static MLAConfig from(const ArchitectureConfig& cfg);
  // qk_head_dim**-0.5, times yarn's mscale(factor, mscale_all_dim)**2 when the rope is scaled.
  double softmax_scale() const;
  // Throws naming the first size that cannot work.
  void validate() const;
};

// The cache holds, per token, the normalized latent and the rotated shared rope key:
// "latent" [batch, 1, past, kv_lora_rank + qk_rope_head_dim].
class MultiHeadLatentAttention : public TokenMixer {
 public:
  explicit MultiHeadLatentAttention(const MLAConfig& cfg);
  Value forward(Graph& g, Value x, SharedInputs& shared, const CacheMap& past,
                CacheMap& present) const override;
  std::vector<CacheEntry> cache_entries(DType act) const override;

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

 private:
  // kv_b_proj split per head into W_uk [heads, nope, r] and W_uv^T [heads, r, dv] (dtype act).
  std::pair<Value, Value> absorbed_weights(Graph& g, DType act) const;
};

// Rotates x [..., rotary_dim] in float32 with SharedInputs::rope_tables(rope, rotary_dim, false), pairing (2i, 2i+1)
// when interleaved and (i, i + d/2) otherwise. The result holds the rotated pairs as
// [first of each pair | second of each pair]: one fixed permutation of the dims, which leaves
// every q.k product unchanged as long as q and k go through the same call.
Value mla_apply_rope(Value x, Value cos, Value sin, bool interleaved);

// The MLA mixer of every layer, from cfg.mla (for DecoderSpec::mixer).
MixerFactory mla_mixer();

}  // namespace mobius::nn
