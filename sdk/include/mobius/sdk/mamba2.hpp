// mobius/sdk/mamba2.hpp - the Mamba-2 token mixer: a selective state space model computed by
// state space duality (SSD).
//
// Written to transformers' semantics (Mamba2Mixer and its copies in Bamba, FalconH1, NemotronH
// and GraniteMoeHybrid, their torch paths without kernels). Per layer:
//
//   [z | xBC | dt] = in_proj(x * in_multiplier) * projection multipliers   (x zeroed at padding)
//   xBC            = act(depthwise causal conv1d(xBC)), zeroed at padding, split [x | B | C]
//   dt             = softplus(dt + dt_bias), clamped to time_step_limit (multi-token steps only)
//   A              = -exp(A_log);   per head h, per token t (B and C shared by a group of heads):
//   S_t            = exp(dt_t A) S_{t-1} + dt_t x_t B_t^T,   y_t = S_t C_t + D x_t
//   out            = out_proj(gated norm(y, z))
//
// A one-token step on a cache is the recurrence itself; any other step is the chunked SSD form
// (chunk_size tokens per chunk, the states across chunks by a matrix of decays), as transformers
// picks them. Everything from the conv to the gated norm computes in float32. The cache of a
// layer is two tensors whose dims are static except batch_size, so a zero tensor is the empty
// state:
//   conv_state  [batch, conv_dim, conv_kernel]   the last conv_kernel inputs of the conv (xBC
//                                                before the conv; activation dtype)
//   ssm_state   [batch, num_heads, head_dim, state_size]   S (float32)
// transformers.js feeds them as past_conv.N / past_ssm.N (decoder.hpp, cache_io_names).
#pragma once

#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "mobius/sdk/attention.hpp"
#include "mobius/sdk/decoder.hpp"
#include "mobius/sdk/gated_deltanet.hpp"  // CausalConv1d

namespace mobius::nn {

// Where the gate z meets the norm after the scan:
//   GateThenNorm  w * norm(y * silu(z)), normalized per group of intermediate / n_groups
//                 channels (Mamba2RMSNormGated: Mamba-2, Bamba, Nemotron-H, GraniteMoeHybrid;
//                 FalconH1 with mamba_norm_before_gate false)
//   NormThenGate  (w * norm(y)) * silu(z), per group (FalconH1's default)
//   None          y * silu(z), no norm and no weight (FalconH1 with mamba_rms_norm false)
enum class Mamba2GateNorm { GateThenNorm, NormThenGate, None };

// The mixer's settings, as the families' configs give them (Mamba2Config::read).
struct Mamba2Config {
  int64_t hidden = 0;        // the residual stream's width (hidden_size)
  int64_t intermediate = 0;  // the SSM width: num_heads * head_dim
  int64_t num_heads = 0, head_dim = 0, state_size = 0;
  int64_t n_groups = 1;  // B and C are shared by num_heads / n_groups consecutive heads
  int64_t conv_kernel = 4;
  int64_t chunk_size = 256;  // tokens per SSD chunk (any positive size)
  bool conv_bias = true, in_proj_bias = false, out_proj_bias = false;
  std::string act = "silu";  // after the conv
  double norm_eps = 1e-5;    // the gated norm's epsilon
  Mamba2GateNorm gate_norm = Mamba2GateNorm::GateThenNorm;
  // time_step_limit: dt is clamped to [dt_min, dt_max] on multi-token steps (transformers'
  // chunked path; its one-token recurrence does not clamp). Infinite bounds are no clamp.
  double dt_min = 0.0, dt_max = std::numeric_limits<double>::infinity();
  // FalconH1's muP: the input multiplied by in_multiplier before in_proj, and in_proj's output
  // by one multiplier per part [z, x, B, C, dt] (ssm_multipliers); empty: none.
  double in_multiplier = 1.0;
  std::vector<double> projection_multipliers;

  int64_t conv_dim() const { return intermediate + 2 * n_groups * state_size; }
  // Throws mobius::Error ("[config] Mamba-2 mixer: ...") naming the field that cannot work.
  void validate() const;
};

void to_json(nlohmann::json& j, const Mamba2Config& c);    // an infinite bound is written null
void from_json(const nlohmann::json& j, Mamba2Config& c);  // null: an infinite bound

// The config.json keys a family spells the mixer's settings with. An empty key is not read (the
// default stays).
struct Mamba2Keys {
  std::string num_heads = "num_heads", head_dim = "head_dim", state_size = "state_size";
  std::string n_groups = "n_groups", conv_kernel = "conv_kernel", chunk_size = "chunk_size";
  // The SSM width: `intermediate` when the config has it (FalconH1's mamba_d_ssm; absent, the
  // defaults' intermediate when it is set), else int(expand * hidden_size) when `expand` is a key
  // (also for an `intermediate` of null), else num_heads * head_dim (Nemotron-H).
  std::string intermediate, expand = "expand";
  std::string conv_bias = "use_conv_bias", in_proj_bias = "use_bias", out_proj_bias = "use_bias";
  std::string act = "hidden_act", norm_eps = "layer_norm_epsilon";
  std::string time_step_limit = "time_step_limit";
};

// Reads the mixer's settings from a family's config under `keys`; an absent key keeps
// `defaults`' value (transformers' configuration defaults; defaults.head_dim 0 means "auto":
// the width divided by num_heads, as does a head_dim of "auto"; `default_expand` is expand's).
// hidden is the model's hidden_size. Every error names its key, e.g. "[config] config.json:
// 'mamba_n_heads' (6) must divide the SSM width 128 ...". Calls validate().
Mamba2Config read_mamba2_config(const ConfigReader& r, int64_t hidden, const Mamba2Keys& keys,
                                const Mamba2Config& defaults, double default_expand = 2.0);

// time_step_limit as transformers reads it: [min, max], each a number or transformers'
// serialization of a non-finite float ({"__float__": "Infinity"}; also the strings "inf",
// "-inf", "Infinity", "-Infinity"); null or absent: no limit. Throws naming `key` otherwise.
std::pair<double, double> read_time_step_limit(const ConfigReader& r, const std::string& key);

// The mixer. Parameters below its path, as transformers names them: in_proj, conv1d.weight
// [conv_dim, 1, K] (and conv1d.bias), dt_bias, A_log, D (each [num_heads]), norm.weight
// [intermediate] (not with Mamba2GateNorm::None), out_proj.
class Mamba2 : public TokenMixer {
 public:
  explicit Mamba2(const Mamba2Config& cfg);
  // x [batch, seq, hidden] in the activation dtype (after the layer's norm); returns the same.
  // past/present hold "conv_state" and "ssm_state".
  Value forward(Graph& g, Value x, SharedInputs& shared, const CacheMap& past,
                CacheMap& present) const override;
  std::vector<CacheEntry> cache_entries(DType act) const override;
  bool reads_position_ids(const BuildContext& ctx) const override {  // no positions
    (void)ctx;
    return false;
  }

  Mamba2Config cfg;
  const Linear* in_proj;
  const CausalConv1d* conv1d;
  const Module* norm = nullptr;  // none with Mamba2GateNorm::None
  const Linear* out_proj;
};

// The selective scan over a step, all float32, heads first:
//   x [batch, heads, seq, head_dim], dt [batch, heads, seq] (after softplus, not clamped),
//   a [heads] (A = -exp(A_log)), b and c [batch, heads, seq, state] (already repeated from their
//   groups), state [batch, heads, head_dim, state].
// Returns {y [batch, heads, seq, head_dim] without the D skip, the final state}. A one-token step
// on a cache (`decode`, a boolean scalar) takes the recurrence; any other the chunked form with
// dt clamped to [dt_min, dt_max], chunk_size tokens per chunk.
std::pair<Value, Value> mamba2_scan(Graph& g, Value x, Value dt, Value a, Value b, Value c,
                                    Value state, Value decode, int64_t chunk_size, double dt_min,
                                    double dt_max);

// The Mamba-2 mixer with `cfg` on every layer it is asked for (for DecoderSpec::mixer or
// mixer_by_layer_type); cfg.hidden is the model's.
MixerFactory mamba2_mixer(const Mamba2Config& cfg);

}  // namespace mobius::nn
