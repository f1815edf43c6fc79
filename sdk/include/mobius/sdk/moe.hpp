// mobius/sdk/moe.hpp - sparse mixtures of experts: a router, routed experts held in banks the
// weight plan streams, optional always-on shared experts.
//
// One block serves every family; what differs between them is data (MoEConfig's routing, the
// tensor names in MoESpec) or the expert bank (MoESpec::experts):
//   DeepSeek V2/V3  mlp.gate.weight (+ e_score_correction_bias), mlp.shared_experts.*,
//                   mlp.experts.E.{gate,up,down}_proj.weight             GatedExpertBank
//   Mixtral         block_sparse_moe.gate.weight, block_sparse_moe.experts.E.{w1,w3,w2}.weight
//                                                                        GatedExpertBank
//   Qwen3-MoE       mlp.gate.weight, mlp.experts.E.{gate,up,down}_proj.weight  GatedExpertBank
//   gpt-oss         mlp.router.{weight,bias}, mlp.experts.{gate_up_proj,down_proj}{,_bias}
//                   stacked over the experts                             ClampedSwiGLUExpertBank
#pragma once

#include <functional>
#include <memory>
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

// The router: for x [tokens, hidden], the chosen experts [tokens, k] (int64) and their weights
// [tokens, k] (float32), computed in float32. Parameters: weight [E, hidden], bias [E] when
// cfg.router_bias, e_score_correction_bias [E] (float32) with sigmoid scoring.
class MoERouter : public Module {
 public:
  explicit MoERouter(const MoEConfig& cfg);
  std::pair<Value, Value> forward(Graph& g, Value x) const;
  MoEConfig cfg;
};

// The routed experts. forward() runs only the experts some token chose, one iteration of an
// ONNX Loop each (moe.cpp says why), and sums their weighted outputs; what one expert computes
// on its tokens, and how its weights are held, is the bank's own (expert()).
class ExpertBank : public Module {
 public:
  ExpertBank(int64_t experts, int64_t hidden, int64_t intermediate);
  // sum_j weights[t, j] * expert_{idx[t, j]}(x[t]) for x [tokens, hidden] and the router's
  // idx/weights [tokens, top_k]: float32 [tokens, hidden].
  Value forward(Graph& g, Value x, Value idx, Value weights, int64_t top_k) const;
  int64_t experts, hidden, intermediate;

 protected:
  // Expert `e` (int64 scalar of the loop body `b`) on the rows `xe` [n, hidden] of its tokens,
  // in the activation dtype: [n, hidden], same dtype. Weights of the main graph are read through
  // b.outer(), as slices of the expert's own rows only.
  virtual Value expert(Graph& b, Value e, Value xe) const = 0;
};

// The checkpoint names of a sparse MoE block, below its path (spec.names.feed_forward).
struct MoENames {
  std::string router = "gate";  // gpt-oss: "router"
  std::string experts = "experts";
  // Each expert's projections, E.<name>.weight below `experts` (Mixtral: w1, w3, w2). Only
  // separate gate and up projections (MLPNames::gate_up empty).
  MLPNames expert;
  std::string shared_experts = "shared_experts";
};

// Gated MLP experts, down(act(gate(x)) * up(x)), stored per expert in the checkpoint
// (E.<gate|up|down>.weight) and stacked by the weight plan into two banks while the weights
// stream (ctx.plan_expert_bank):
//   gate_up_proj [2E, I, hidden] = (gate_0, up_0, gate_1, up_1, ...), so expert e's gate and up
//                                  rows are the consecutive slices 2e and 2e+1;
//   down_proj    [E, hidden, I].
class GatedExpertBank : public ExpertBank {
 public:
  GatedExpertBank(int64_t experts, int64_t hidden, int64_t intermediate, std::string act,
                  MLPNames names = {});
  Value bank(Graph& g, const std::string& local) const;  // the initializer, planned on first use
  std::string act;
  MLPNames names;

  // With --dtype int4/int8 (ONNX Runtime's operators, hidden and intermediate sizes whole
  // blocks) the banks are stored block-quantized, MatMulNBits' layout seen as
  // [matrices, rows, packed row] (`<bank>_Q4`, `<bank>_scales` and, with --asymmetric,
  // `<bank>_zero_points`), and the loop dequantizes only the experts it runs, with
  // GatherBlockQuantized; otherwise they are float.
  struct Quantized {
    Value data, scales, zero_points;  // zero_points: not valid when symmetric
  };
  bool quantized(const BuildContext& ctx) const;
  Quantized quantized_bank(Graph& g, const std::string& local, DType scales) const;

 protected:
  Value expert(Graph& b, Value e, Value xe) const override;
};

// gpt-oss' experts, stored already stacked (transformers' GptOssExperts layout, which the
// checkpoint reader also presents MXFP4 experts in), each bank streamed as one tensor:
//   gate_up_proj [E, hidden, 2I] (x @ W; gate = even columns, up = odd), gate_up_proj_bias [E, 2I],
//   down_proj [E, I, hidden], down_proj_bias [E, hidden];
// expert(x) = ((up + 1) * gate * sigmoid(alpha * gate)) @ down + down_bias, with
// gate = min(gate, limit) and up = clamp(up, -limit, limit).
class ClampedSwiGLUExpertBank : public ExpertBank {
 public:
  ClampedSwiGLUExpertBank(int64_t experts, int64_t hidden, int64_t intermediate, double limit,
                          double alpha);
  double limit, alpha;

 protected:
  Value expert(Graph& b, Value e, Value xe) const override;
};

// Makes the routed experts of a block.
using ExpertBankFactory =
    std::function<std::unique_ptr<ExpertBank>(const MoEConfig& cfg, const MoENames& names)>;
ExpertBankFactory gated_experts();           // GatedExpertBank of cfg.hidden_act
ExpertBankFactory clamped_swiglu_experts();  // ClampedSwiGLUExpertBank of cfg.swiglu_*

// How a family's MoE block is stored: its tensor names and its expert bank.
struct MoESpec {
  MoENames names;
  ExpertBankFactory experts;  // empty: gated_experts()
};

// Routed experts plus the shared experts (width moe_intermediate_size * n_shared_experts).
class SparseMoE : public FeedForward {
 public:
  explicit SparseMoE(const MoEConfig& cfg, const MoESpec& spec = {});
  Value forward(Graph& g, Value x) const override;  // x [batch, seq, hidden], activation dtype
  MoEConfig cfg;
  const MoERouter* gate;
  const ExpertBank* experts;
  const GatedMLP* shared_experts = nullptr;
};

// The feed-forward of each layer for DecoderSpec: the sparse MoE of cfg's MoE config on its MoE
// layers (MoEConfig::is_moe_layer), stored as `moe` says, and the dense GatedMLP elsewhere.
FeedForwardFactory moe_or_dense(MoESpec moe = {});

}  // namespace mobius::nn
