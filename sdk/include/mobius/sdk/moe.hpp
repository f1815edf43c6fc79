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

#include "mobius/sdk/nn.hpp"

namespace mobius::nn {

struct MoEConfig {
  int64_t hidden = 0;
  int64_t moe_intermediate_size = 0;
  int64_t n_routed_experts = 0;
  int64_t n_shared_experts = 0;  // 0: none
  int64_t num_experts_per_tok = 0;
  int64_t first_k_dense_replace = 0;  // layers below this one use the dense MLP
  // softmax: V2 (float32 softmax over the router logits); sigmoid: V3 (sigmoid scores, plus
  // e_score_correction_bias for the choice of experts only).
  std::string scoring = "softmax";
  // greedy: top-k over all experts; group_limited_greedy: only in the topk_group groups of the
  // highest max score; noaux_tc: only in the topk_group groups of the highest sum of their two
  // best (biased) scores.
  std::string topk_method = "greedy";
  int64_t n_group = 1;
  int64_t topk_group = 1;
  bool norm_topk_prob = false;  // weights / (sum + 1e-20) before the scaling
  double routed_scaling_factor = 1.0;
  std::string hidden_act = "silu";
  bool mlp_bias = false;  // shared experts (routed experts have no biases)

  // Reads the keys a plugin stored in cfg.extra (n_routed_experts, n_shared_experts,
  // moe_intermediate_size, num_experts_per_tok, first_k_dense_replace, scoring_func,
  // topk_method, n_group, topk_group, norm_topk_prob, routed_scaling_factor).
  static MoEConfig from(const ArchitectureConfig& cfg);
  bool is_moe_layer(int64_t layer) const {
    return n_routed_experts > 0 && layer >= first_k_dense_replace;
  }
  // Throws naming the key whose value cannot work.
  void validate() const;
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
class SparseMoE : public Module {
 public:
  explicit SparseMoE(const MoEConfig& cfg);
  Value forward(Graph& g, Value x) const;  // x [batch, seq, hidden] in the activation dtype
  MoEConfig cfg;
  const MoERouter* gate;
  const ExpertBank* experts;
  const GatedMLP* shared_experts = nullptr;
};

}  // namespace mobius::nn
