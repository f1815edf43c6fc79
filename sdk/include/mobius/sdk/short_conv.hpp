// mobius/sdk/short_conv.hpp - the gated short convolution: LFM2's token mixer on its "conv"
// layers, written to transformers' semantics (Lfm2ShortConv with its torch fallbacks).
//
// For x [batch, seq, hidden] (after the layer's input norm):
//   B, C, u = split(in_proj(x)) into three hidden-wide parts (in that order)
//   y = out_proj(C * conv(B * u))
// where conv is a causal depthwise convolution of kernel K over the sequence: output t reads the
// gated inputs t-K+1 .. t, the last tap multiplying the current one. The layer carries one cache
// tensor whose dims are static except batch_size, so a zero tensor is the empty state:
//   conv_state  [batch, hidden, K]  the last K gated inputs B * u (activation dtype)
// which is what transformers keeps (its conv cache), what transformers.js feeds as past_conv.N
// (shapes from the graph's inputs) and what ONNX Runtime GenAI's LFM2 runner allocates (rank 3
// [B, H, L] from the graph).
//
// Left padding as transformers has it (create_recurrent_attention_mask): on a step of more than
// one token, x is zeroed at the padded positions before in_proj, so padding leaves zeros in the
// state; a one-token step is never masked.
#pragma once

#include <cstdint>

#include "mobius/sdk/attention.hpp"
#include "mobius/sdk/decoder.hpp"
#include "mobius/sdk/gated_deltanet.hpp"

namespace mobius::nn {

struct ShortConvOptions {
  int64_t hidden = 0;
  int64_t kernel = 3;  // K: LFM2's conv_L_cache
  bool bias = false;   // LFM2's conv_bias: biases on in_proj, the conv and out_proj
  // Throws mobius::Error naming the offending config key.
  void validate() const;
};

class ShortConv : public TokenMixer {
 public:
  explicit ShortConv(const ShortConvOptions& opt);
  // x [batch, seq, hidden] in the activation dtype; returns the same dtype. past/present hold
  // "conv_state".
  Value forward(Graph& g, Value x, SharedInputs& shared, const CacheMap& past,
                CacheMap& present) const override;
  std::vector<CacheEntry> cache_entries(DType act) const override;
  bool reads_position_ids(const BuildContext& ctx) const override {  // no rope
    (void)ctx;
    return false;
  }

  ShortConvOptions opt;
  const Linear* in_proj;       // [3 hidden, hidden]: B | C | u
  const CausalConv1d* conv;    // conv.weight [hidden, 1, K] (+ conv.bias [hidden])
  const Linear* out_proj;
};

// The short convolution mixer (for DecoderSpec::mixer), hidden from cfg.hidden_size and the
// kernel and biases from `opt`.
MixerFactory short_conv_mixer(ShortConvOptions opt);

}  // namespace mobius::nn
