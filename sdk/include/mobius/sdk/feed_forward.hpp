// mobius/sdk/feed_forward.hpp - feed-forward blocks, the per-position part of a decoder layer.
//
// The gated MLP here (with separate or fused gate/up projections) and the sparse mixture of
// experts (moe.hpp) are feed-forwards; a family with a new one derives from FeedForward.
#pragma once

#include <string>

#include "mobius/sdk/layers.hpp"

namespace mobius::nn {

class FeedForward : public Module {
 public:
  // x [batch, seq, hidden] in the activation dtype; returns the same shape and dtype.
  virtual Value forward(Graph& g, Value x) const = 0;
};

// The checkpoint names of a gated MLP's weights, below its path.
struct MLPNames {
  std::string gate = "gate_proj", up = "up_proj", down = "down_proj";
  std::string gate_up;  // non-empty: one fused projection [gate | up] under this name (Phi-3)
  bool in_out = false;  // weights stored [in, out] (GPT-2's Conv1D)
};

// down(act(gate(x)) * up(x)).
class GatedMLP : public FeedForward {
 public:
  GatedMLP(int64_t hidden, int64_t intermediate, bool bias, std::string act,
           const MLPNames& names = {});
  Value forward(Graph& g, Value x) const override;
  int64_t intermediate;
  std::string act;
  const Linear* gate_proj = nullptr;
  const Linear* up_proj = nullptr;
  const Linear* gate_up_proj = nullptr;  // fused, instead of gate/up_proj
  const Linear* down_proj;
};

// down(act(up(x))), no gate: GPT-2 (c_fc, c_proj), GPT-NeoX, GPT-J, Phi, OPT, StarCoder 2, BLOOM,
// Nemotron (relu2) and their kin, under names.up and names.down. Activation "xielu" (Apertus) is
// xIELU with this layer's learned act_fn.{alpha_p, alpha_n, beta, eps}:
// x > 0: softplus(alpha_p) x^2 + beta x; else (expm1(min(x, eps)) - x)(beta + softplus(alpha_n)) + beta x,
// in float32.
class MLP : public FeedForward {
 public:
  MLP(int64_t hidden, int64_t intermediate, bool bias, std::string act, const MLPNames& names = {});
  Value forward(Graph& g, Value x) const override;
  std::string act;
  const Linear* up_proj;
  const Linear* down_proj;
  const Module* xielu = nullptr;
};

}  // namespace mobius::nn
