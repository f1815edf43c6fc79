// mobius/sdk/gated_deltanet.hpp - Gated DeltaNet: linear attention with a gated delta rule.
//
// The token mixer of Qwen3-Next / Qwen3.5 linear-attention layers, written to transformers'
// semantics (Qwen3_5GatedDeltaNet with its torch fallbacks). Per layer it carries two cache
// tensors whose dims are static except batch_size, so a zero tensor is the empty state:
//   conv_state       [batch, conv_dim, K]  the last K conv inputs (activation dtype; float32
//                                          with float32_inputs)
//   recurrent_state  [batch, hv, dk, dv]   the delta-rule state S (float32, as in transformers)
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "mobius/sdk/attention.hpp"
#include "mobius/sdk/decoder.hpp"

namespace mobius::nn {

// The component's settings: the Gated DeltaNet family config (mobius::GatedDeltaNetConfig,
// family_config.hpp: num_k_heads hk, num_v_heads hv, k_head_dim dk, v_head_dim dv, conv_kernel
// K) plus the decoder fields it uses and options of the build alone.
struct GatedDeltaNetOptions : GatedDeltaNetConfig {
  int64_t hidden = 0;
  double norm_eps = 1e-6;    // the gated RMSNorm's epsilon
  std::string act = "silu";  // applied after the conv (transformers passes hidden_act)
  int64_t chunk_size = 64;   // tokens per chunk of the chunked delta rule (a power of two)
  // Keeps the input side (in_proj_qkv/z/b/a, conv1d, A_log, dt_bias) in float32 in a narrower
  // build, and computes the block in float32 up to out_proj; the conv state is float32 too.
  // For float32 checkpoints built to float16: the rounding of these weights is what this block
  // amplifies most (see the qwen35 plugin).
  bool float32_inputs = false;
  // Qwen3-Next's checkpoint layout of the input projections: in_proj_qkvz [2 key_dim + 2
  // value_dim, hidden] and in_proj_ba [2 hv, hidden], their rows grouped per key head (key head
  // j: its q, its k, then the v and the z of its hv/hk value heads; its b, then its a), instead
  // of Qwen3.5's in_proj_qkv (all q | all k | all v), in_proj_z, in_proj_b and in_proj_a. The
  // block computes the same either way.
  bool fused_projections = false;

  // cfg.linear_attn (none: Qwen3.5's defaults) with hidden_size, rms_norm_eps and hidden_act
  // from cfg.
  static GatedDeltaNetOptions from_config(const ArchitectureConfig& cfg);
  // Throws mobius::Error naming the offending field.
  void validate() const;
};

// The depthwise causal conv1d of the recurrent mixers (Gated DeltaNet, LFM2's short conv, Mamba,
// Mamba-2), with its state: weight [channels, 1, K] and, with `bias`, bias [channels] (torch's
// Conv1d(channels, channels, K, groups=channels), the checkpoint's conv1d.*). dtype Undefined:
// the build's weight dtype.
class CausalConv1d : public Module {
 public:
  CausalConv1d(int64_t channels, int64_t kernel, DType dtype = DType::Undefined, bool bias = false);
  // The conv of this step's inputs x [batch, channels, seq] over the cached last K inputs `state`
  // [batch, channels, K] (transformers' conv_states) followed by x: float32 [batch, channels,
  // seq], bias added (ONNX Runtime's CPU Conv kernel is float32's whatever the build dtype).
  // `present`: the new state, the last K inputs, in state's dtype.
  Value forward(Graph& g, Value state, Value x, Value& present) const;
  int64_t channels, kernel;
  bool has_bias;
};

// y = (w * normalized(x)) * silu(z): per value head, a plain weight (not 1 + w), normalized in
// float32 and cast back before the weight, the gate applied in float32 (Qwen3_5RMSNormGated).
class GatedRMSNorm : public RMSNorm {
 public:
  using RMSNorm::RMSNorm;
  Value forward(Graph& g, Value x, Value gate) const;
};

class GatedDeltaNet : public TokenMixer {
 public:
  explicit GatedDeltaNet(const GatedDeltaNetOptions& opt);
  // x [batch, seq, hidden] in the activation dtype (after input_layernorm); returns the same
  // dtype. past/present hold "conv_state" and "recurrent_state".
  Value forward(Graph& g, Value x, SharedInputs& shared, const CacheMap& past,
                CacheMap& present) const override;
  std::vector<CacheEntry> cache_entries(DType act) const override;
  bool reads_position_ids(const BuildContext& ctx) const override {  // no rope
    (void)ctx;
    return false;
  }

  GatedDeltaNetOptions opt;
  int64_t key_dim, value_dim, conv_dim;
  const Linear* in_proj_qkv = nullptr;  // these four without fused_projections
  const Linear* in_proj_z = nullptr;
  const Linear* in_proj_b = nullptr;
  const Linear* in_proj_a = nullptr;
  const Linear* in_proj_qkvz = nullptr;  // these two with fused_projections
  const Linear* in_proj_ba = nullptr;
  const CausalConv1d* conv1d;
  const GatedRMSNorm* norm;
  const Linear* out_proj;
};

// The gated delta rule over a sequence, all float32:
//   q, k [batch, hv, seq, dk] (normalized, q already scaled), v [batch, hv, seq, dv],
//   beta, g [batch, hv, seq] (g is the log decay, <= 0), state [batch, hv, dk, dv].
// Per token: S = exp(g) S; u = beta (v - S^T k); S += k u^T; o = S^T q.
// Returns {o [batch, hv, seq, dv], final state}. One-token steps take the recurrence directly;
// longer ones the chunked form (chunk_size tokens per Scan iteration).
std::pair<Value, Value> gated_delta_rule(Graph& g, Value q, Value k, Value v, Value beta,
                                         Value gate, Value state, int64_t chunk_size = 64);

// The Gated DeltaNet mixer from cfg (for DecoderSpec::mixer); float32_inputs as in
// GatedDeltaNetOptions.
MixerFactory gated_deltanet_mixer(bool float32_inputs = false);

}  // namespace mobius::nn
