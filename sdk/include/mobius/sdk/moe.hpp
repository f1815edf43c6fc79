// mobius/sdk/moe.hpp - DeepSeek-style mixture of experts: V2/V3 routers, routed experts stacked
// into banks at save time, always-on shared experts.
//
// Parameter names follow the hub checkpoints: mlp.gate.weight, mlp.gate.e_score_correction_bias
// (V3), mlp.shared_experts.{gate,up,down}_proj.weight, and per expert
// mlp.experts.E.{gate,up,down}_proj.weight, which the weight plan stacks into two banks.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "mobius/sdk/decoder.hpp"
#include "mobius/sdk/feed_forward.hpp"

namespace mobius::nn {

// The component's settings: the MoE family config (mobius::MoEConfig, family_config.hpp: expert
// counts and widths, routing, is_moe_layer(), validate()) plus the decoder fields it uses.
struct MoEConfig : mobius::MoEConfig {
  int64_t hidden = 0;
  std::string hidden_act = "silu";
  bool mlp_bias = false;  // shared experts (routed experts have no biases)

  // cfg.moe (none: no routed experts, every layer dense) with hidden_size, hidden_act and
  // mlp_bias from cfg; validated.
  static MoEConfig from(const ArchitectureConfig& cfg);
};

// The router ("gate"): for x [tokens, hidden], the chosen experts [tokens, k] (int64) and their
// weights [tokens, k] (float32), computed in float32.
class MoERouter : public Module {
 public:
  explicit MoERouter(const MoEConfig& cfg);
  std::pair<Value, Value> forward(Graph& g, Value x) const;
  MoEConfig cfg;
};

// The routed experts ("experts"), held as two banks planned from the per-expert hub tensors:
//   gate_up_proj [2E, I, hidden] = (gate_0, up_0, gate_1, up_1, ...), so expert e's gate and up
//                                  rows are the consecutive slices 2e and 2e+1;
//   down_proj    [E, hidden, I].
class ExpertBank : public Module {
 public:
  ExpertBank(int64_t experts, int64_t hidden, int64_t intermediate, std::string act);
  // sum_j weights[t, j] * expert_{idx[t, j]}(x[t]) for x [tokens, hidden] and the router's
  // idx/weights [tokens, top_k]: float32 [tokens, hidden].
  Value forward(Graph& g, Value x, Value idx, Value weights, int64_t top_k) const;
  Value bank(Graph& g, const std::string& local) const;  // the initializer, planned on first use
  int64_t experts, hidden, intermediate;
  std::string act;
};

// Routed experts plus the shared experts (width moe_intermediate_size * n_shared_experts).
class SparseMoE : public FeedForward {
 public:
  explicit SparseMoE(const MoEConfig& cfg);
  Value forward(Graph& g, Value x) const override;  // x [batch, seq, hidden], activation dtype
  MoEConfig cfg;
  const MoERouter* gate;
  const ExpertBank* experts;
  const GatedMLP* shared_experts = nullptr;
};

// The feed-forward of each layer for DecoderSpec: the sparse MoE of cfg's MoE config on its MoE
// layers (MoEConfig::is_moe_layer), the dense GatedMLP elsewhere.
FeedForwardFactory moe_or_dense();

}  // namespace mobius::nn
