// mobius/sdk/moe.hpp - sparse mixtures of experts: a router, routed experts held in banks the
// weight plan streams, optional always-on shared experts.
//
// One block serves every family; what differs between them is data (MoEConfig's routing, the
// tensor names in MoESpec) or the expert bank (MoESpec::experts):
//   DeepSeek V2/V3  mlp.gate.weight (+ e_score_correction_bias), mlp.shared_experts.*,
//                   mlp.experts.E.{gate,up,down}_proj.weight             GatedExpertBank
//   Mixtral, PhiMoE block_sparse_moe.gate.weight, block_sparse_moe.experts.E.{w1,w3,w2}.weight
//                                                                        GatedExpertBank
//   Qwen-MoE, OLMoE, GLM-4.5, ERNIE 4.5, HunYuan
//                   mlp.gate.weight (HunYuan: mlp.gate.wg.weight), mlp.experts.E.{gate,up,
//                   down}_proj.weight, shared experts (Qwen2: mlp.shared_expert + its
//                   sigmoid gate, HunYuan: mlp.shared_mlp)             GatedExpertBank
//   Granite-MoE     block_sparse_moe.router.layer.weight, block_sparse_moe.{input,output}_linear
//                   stacked over the experts                           StackedExpertBank
//   DBRX            ffn.router.layer.weight, ffn.experts.mlp.{w1,v1,w2}  StackedExpertBank
//   Llama 4         feed_forward.router.weight, feed_forward.experts.{gate_up,down}_proj,
//                   feed_forward.shared_expert.*                       StackedExpertBank
//   gpt-oss         mlp.router.{weight,bias}, mlp.experts.{gate_up_proj,down_proj}{,_bias}
//                   stacked over the experts                           ClampedSwiGLUExpertBank
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
// [tokens, k] (float32), computed in float32 as cfg's scoring says. Parameters: weight
// [E, hidden], bias [E] when cfg.router_bias. `correction` (float32 [E] or [1, E]) is
// e_score_correction_bias with cfg.correction_bias (SparseMoE holds it: ERNIE stores it beside
// the router).
class MoERouter : public Module {
 public:
  explicit MoERouter(const MoEConfig& cfg);
  std::pair<Value, Value> forward(Graph& g, Value x, Value correction = Value()) const;
  MoEConfig cfg;
};

// The routed experts. forward() runs only the experts some token chose, one iteration of an
// ONNX Loop each (moe.cpp says why), and sums their weighted outputs; what one expert computes
// on its tokens, and how its weights are held, is the bank's own (expert()).
class ExpertBank : public Module {
 public:
  ExpertBank(int64_t experts, int64_t hidden, int64_t intermediate);
  // sum_j weights[t, j] * expert_{idx[t, j]}(x[t]) for x [tokens, hidden] and the router's
  // idx/weights [tokens, top_k]: float32 [tokens, hidden]. With weight_inputs,
  // sum_j expert_{idx[t, j]}(weights[t, j] * x[t]) (Llama 4).
  Value forward(Graph& g, Value x, Value idx, Value weights, int64_t top_k,
                bool weight_inputs = false) const;
  int64_t experts, hidden, intermediate;

 protected:
  // The routed experts as one fused operator instead of the loop, when the bank has one for this
  // build (forward() then returns it); an invalid Value otherwise. Same arguments and result as
  // forward() without weight_inputs.
  virtual Value fused(Graph& g, Value x, Value idx, Value weights, int64_t top_k) const {
    (void)g, (void)x, (void)idx, (void)weights, (void)top_k;
    return Value();
  }
  // Expert `e` (int64 scalar of the loop body `b`) on the rows `xe` [n, hidden] of its tokens,
  // in the activation dtype: [n, hidden], same dtype. Weights of the main graph are read through
  // b.outer(), as slices of the expert's own rows only.
  virtual Value expert(Graph& b, Value e, Value xe) const = 0;
};

// The checkpoint names of a sparse MoE block, below its path (spec.names.feed_forward).
struct MoENames {
  std::string router = "gate";  // gpt-oss: "router", Granite-MoE and DBRX: "router.layer"
  std::string experts = "experts";
  // Each expert's projections, E.<name>.weight below `experts` (Mixtral: w1, w3, w2). Only
  // separate gate and up projections (MLPNames::gate_up empty).
  MLPNames expert;
  std::string shared_experts = "shared_experts";  // Qwen2-MoE: shared_expert
  std::string shared_expert_gate = "shared_expert_gate";  // with MoEConfig::shared_expert_gate
  // e_score_correction_bias, with MoEConfig::correction_bias: [E], or [1, E] when
  // correction_bias_row (ERNIE 4.5's moe_statics.e_score_correction_bias).
  std::string correction_bias = "gate.e_score_correction_bias";
  bool correction_bias_row = false;
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
  // `interleaved`: gate_up_proj's rows as ONNX Runtime's QMoE reads them, each expert's gate and
  // up rows alternating (`<bank>_swiglu_Q<bits>`, `<bank>_swiglu_scales`).
  Quantized quantized_bank(Graph& g, const std::string& local, DType scales,
                           bool interleaved = false) const;
  // Whether the build runs the bank as ONNX Runtime's QMoE (fused()): 4-bit symmetric banks of
  // SiLU experts, for the CPU, where the host lays rows out interleaved, and not for
  // transformers.js (whose WebAssembly runtime has no QMoE) or with --expert-loop.
  bool qmoe(const BuildContext& ctx) const;

 protected:
  Value fused(Graph& g, Value x, Value idx, Value weights, int64_t top_k) const override;
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

// Gated experts stored stacked over the experts in the checkpoint, read as stored (each bank one
// tensor streamed into its initializer; the loop slices expert e out of it):
//   Granite-MoE  gate_up input_linear.weight [E, 2I, H] (e's gate rows, then its up rows),
//                down output_linear.weight [E, H, I]
//   DBRX         gate mlp.w1 and up mlp.v1 [E*I, H], down mlp.w2 [E*I, H] (x @ w2_e)
//   Llama 4      gate_up gate_up_proj [E, H, 2I] (x @ W: gate columns, then up), down_proj
//                [E, I, H] (x @ W)
// expert(x) = down(act(gate(x)) * up(x)). They stay float with --dtype int4/int8.
struct StackedExperts {
  std::string gate_up;   // both projections in one tensor; empty: `gate` and `up`
  std::string gate, up;  // [E*I, H] each
  std::string down;
  bool gate_up_input_major = false;  // [E, H, 2I], used as x @ W
  bool down_input_major = false;     // [E, I, H] (or [E*I, H]), used as x @ W
  bool down_flat = false;            // [E*I, H]: the experts' matrices one after another
};
class StackedExpertBank : public ExpertBank {
 public:
  StackedExpertBank(int64_t experts, int64_t hidden, int64_t intermediate, std::string act,
                    StackedExperts layout);
  std::string act;
  StackedExperts layout;

 protected:
  Value expert(Graph& b, Value e, Value xe) const override;
};

// Makes the routed experts of a block.
using ExpertBankFactory =
    std::function<std::unique_ptr<ExpertBank>(const MoEConfig& cfg, const MoENames& names)>;
ExpertBankFactory gated_experts();           // GatedExpertBank of cfg.hidden_act
ExpertBankFactory clamped_swiglu_experts();  // ClampedSwiGLUExpertBank of cfg.swiglu_*
ExpertBankFactory stacked_experts(StackedExperts layout);  // StackedExpertBank of cfg.hidden_act

// How a family's MoE block is stored: its tensor names and its expert bank.
struct MoESpec {
  MoENames names;
  ExpertBankFactory experts;  // empty: gated_experts()
  // The shared experts are a plain MLP, down(act(up(x))) (Nemotron-H), not a gated one.
  bool plain_shared = false;
};

// Routed experts plus the shared experts (width MoEConfig::shared_width()), those scaled by
// sigmoid(shared_expert_gate(x)) when the config says.
class SparseMoE : public FeedForward {
 public:
  explicit SparseMoE(const MoEConfig& cfg, const MoESpec& spec = {});
  Value forward(Graph& g, Value x) const override;  // x [batch, seq, hidden], activation dtype
  MoEConfig cfg;
  MoENames names;
  const MoERouter* gate;
  const ExpertBank* experts;
  const FeedForward* shared_experts = nullptr;  // GatedMLP, or MLP with MoESpec::plain_shared
  const Linear* shared_expert_gate = nullptr;
};

// The feed-forward of each layer for DecoderSpec: the sparse MoE of cfg's MoE config on its MoE
// layers (MoEConfig::is_moe_layer), stored as `moe` says, and the dense GatedMLP elsewhere.
FeedForwardFactory moe_or_dense(MoESpec moe = {});

}  // namespace mobius::nn
