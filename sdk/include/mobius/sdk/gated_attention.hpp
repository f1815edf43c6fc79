// mobius/sdk/gated_attention.hpp - grouped-query attention with a sigmoid output gate.
//
// The full-attention layers of Qwen3-Next / Qwen3.5 (transformers' Qwen3_5Attention): q_proj
// yields per head [query | gate]; q/k are normalized per head (OffsetRMSNorm by default) before
// a possibly partial rope; sigmoid(gate) multiplies the attention output before o_proj. The KV
// cache is the usual "key" / "value" [batch, kv_heads, past, head_dim].
#pragma once

#include <map>
#include <string>
#include <vector>

#include "mobius/sdk/nn.hpp"

namespace mobius::nn {

class GatedAttention : public Module {
 public:
  GatedAttention(const ArchitectureConfig& cfg, int64_t layer,
                 const NormFactory& norm = offset_rms_norm_factory());
  Value forward(Graph& g, Value x, SharedInputs& shared, const std::map<std::string, Value>& past,
                std::map<std::string, Value>& present) const;
  std::vector<CacheEntry> cache_entries(DType act) const;

  int64_t heads, kv_heads, head_dim, hidden;
  int64_t window = 0;  // sliding window of this layer; 0 for global attention
  double scale;
  RopeConfig rope;
  const Linear* q_proj;  // [hidden -> heads * 2 * head_dim], per head [query | gate]
  const Linear* k_proj;
  const Linear* v_proj;
  const Linear* o_proj;
  const RMSNorm* q_norm;
  const RMSNorm* k_norm;
};

}  // namespace mobius::nn
