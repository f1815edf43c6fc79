// mobius/sdk/mamba.hpp - Mamba (Mamba-1): the selective state-space token mixer.
//
// The mixer of Mamba layers (transformers' MambaMixer) and of Jamba's Mamba layers
// (JambaMambaMixer: the same block with RMS norms on dt, B and C), written to transformers' torch
// path (causal_conv1d_fn / _update, mamba_selective_scan, mamba_selective_state_update). For
// x [batch, seq, hidden]:
//   x, z   = in_proj(x) split in two halves of `intermediate` channels (I)
//   x      = act(causal depthwise conv1d over the last K inputs, with its bias)
//   dt, B, C = x_proj(x) split [R | N | N]  (Jamba: each through its RMS norm)
//   dt     = softplus(dt_proj(dt))          (dt_proj's bias added before the softplus)
//   per token t, per channel i and state n, with A = -exp(A_log) [I, N]:
//     h[i, n] = exp(dt[i] A[i, n]) h[i, n] + dt[i] B[n] x[i]
//     y[i]    = sum_n h[i, n] C[n] + D[i] x[i]
//   out    = out_proj(y * silu(z))
// Padded positions (attention_mask 0) are zeroed before in_proj and after the conv, as
// transformers' apply_mask_to_padding_states does: a left-padded prompt then reaches its first
// real token with an empty state.
//
// Per layer it carries two cache tensors whose dims are static except batch_size, so a zero
// tensor is the empty state and the graph needs no past length (the attention mask says how many
// positions came before):
//   conv_state  [batch, I, K]  the last K conv inputs, as transformers' cache keeps them
//                              (activation dtype)
//   ssm_state   [batch, N, I]  the state h (float32, as transformers computes the scan), stored
//                              transposed from transformers' [batch, I, N]: every broadcast of
//                              the scan then runs along contiguous rows of I (mamba.cpp)
// Everything from the conv to out_proj computes in float32 whatever the build dtype (the scan's
// exp(dt A) and its long products are where rounding would grow); the small parameters it reads
// (conv1d, x_proj, dt_proj, A = -exp(A_log), D, the norms) are stored in float32 for that reason,
// and never quantized. in_proj and out_proj, nearly all of the weights, take the build's dtype.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "mobius/sdk/attention.hpp"
#include "mobius/sdk/decoder.hpp"
#include "mobius/sdk/gated_deltanet.hpp"  // CausalConv1d

namespace mobius::nn {

// The mixer's settings, with transformers' names of the keys (MambaConfig; JambaConfig's mamba_*).
struct MambaConfig {
  int64_t hidden = 0;        // hidden_size
  int64_t intermediate = 0;  // I = expand * hidden_size (Jamba: mamba_expand * hidden_size)
  int64_t state_size = 16;   // N: state_size (mamba_d_state)
  int64_t conv_kernel = 4;   // K: conv_kernel (mamba_d_conv)
  int64_t dt_rank = 0;       // R: time_step_rank (mamba_dt_rank); "auto" is ceil(hidden_size / 16)
  bool proj_bias = false;    // biases on in_proj and out_proj: use_bias (mamba_proj_bias)
  bool conv_bias = true;     // a bias on conv1d: use_conv_bias (mamba_conv_bias)
  std::string act = "silu";  // after the conv: hidden_act
  // Jamba: dt, B and C each through an RMS norm of their own (dt_layernorm, b_layernorm,
  // c_layernorm) of epsilon norm_eps (rms_norm_eps) before dt_proj and the scan.
  bool dt_bc_norms = false;
  double norm_eps = 1e-6;

  // Reads `model_type`'s keys from config.json: "mamba" (state_size, conv_kernel, expand,
  // time_step_rank, use_bias, use_conv_bias, hidden_act) or "jamba" (mamba_d_state,
  // mamba_d_conv, mamba_expand, mamba_dt_rank, mamba_proj_bias, mamba_conv_bias, hidden_act,
  // rms_norm_eps), with transformers' defaults for keys a config omits and hidden_size as given.
  // Throws "[config] ..." naming the key of a value that cannot work.
  static MambaConfig read(const ConfigReader& r, const std::string& model_type,
                          int64_t hidden_size);
  // Throws mobius::Error naming the offending field.
  void validate() const;
};
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(MambaConfig, hidden, intermediate, state_size,
                                                conv_kernel, dt_rank, proj_bias, conv_bias, act,
                                                dt_bc_norms, norm_eps)

class Mamba : public TokenMixer {
 public:
  explicit Mamba(const MambaConfig& cfg);
  // x [batch, seq, hidden] in the activation dtype (after the layer's norm); returns the same
  // dtype. past/present hold "conv_state" and "ssm_state". A step of several tokens on top of a
  // state continues from it, as one forward over the whole sequence computes (transformers'
  // cached multi-token step restarts its scan from zeros, which its own code calls wrong;
  // generation never takes such a step).
  Value forward(Graph& g, Value x, SharedInputs& shared, const CacheMap& past,
                CacheMap& present) const override;
  std::vector<CacheEntry> cache_entries(DType act) const override;
  bool reads_position_ids(const BuildContext& ctx) const override {  // no positions at all
    (void)ctx;
    return false;
  }

  MambaConfig cfg;
  const Linear* in_proj;
  const CausalConv1d* conv1d;
  const Linear* x_proj;
  const Linear* dt_proj;
  const Linear* out_proj;
  const Norm* dt_layernorm = nullptr;  // Jamba
  const Norm* b_layernorm = nullptr;
  const Norm* c_layernorm = nullptr;

 private:
  // A = -exp(A_log) transposed to [N, I], float32: an initializer computed while the weights
  // stream, so no step pays for the exp.
  Value a_transposed(Graph& g) const;
};

// The selective scan, all float32: u and dt [batch, seq, I], a = -exp(A_log) transposed [N, I],
// b and c [batch, seq, N], state [batch, N, I]. Per token: h = exp(dt a) h + b (dt u);
// y = c h (no D skip, no gate). Returns {y [batch, seq, I], the state after the last token}.
// One-token steps take the recurrence directly; longer ones a Scan over the tokens.
std::pair<Value, Value> selective_scan(Graph& g, Value u, Value dt, Value a, Value b, Value c,
                                       Value state);

// The Mamba mixer of `cfg` on every layer it is asked for (for DecoderSpec::mixer).
MixerFactory mamba_mixer(const MambaConfig& cfg);

}  // namespace mobius::nn
