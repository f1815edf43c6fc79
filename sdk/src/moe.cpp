// moe.cpp - DeepSeek V2/V3 routing and the routed experts as an ONNX Loop over the experts hit.
//
// The form, and what it costs per layer and step for N tokens, k experts per token, E experts of
// width I over hidden H:
//   - router: one float32 [N, H] x [H, E] matmul, softmax or sigmoid, TopK (group TopKs first
//     when the routing is group-limited);
//   - Unique over the N*k chosen ids, then a Loop over only the U <= min(E, N*k) experts that
//     some token chose. Iteration e gathers the rows of the tokens routed to e, gathers e's
//     slices of the two banks (3*I*H weights, one copy of exactly the weights that its matmuls
//     then read), runs its gated MLP on those rows only, and scatter-adds the weighted result
//     into a float32 [N, H] accumulator.
// So the matmul work is exactly the N*k*3*I*H multiply-adds the math needs, no expert ever runs
// on a token not routed to it, and the weights touched are those of the U experts hit. The
// overheads: the weight-slice copy (at most 2x the weight traffic of the matmuls), the per-
// iteration cost of ONNX Runtime's Loop (tens of microseconds; U is k for one decoded token),
// and the accumulator, which Loop hands from one iteration to the next and ScatterND copies
// (N*H*4 bytes per iteration).
// Rejected alternatives: gathering every token's k weight slices and batch-matmuls
// ([N, k, I, H] per bank) does the same FLOPs but materialises N*k*3*I*H weights per layer
// (DeepSeek-V3: 0.7 GB per prompt token in bf16), which makes a prefill infeasible; a dense
// evaluation of all E experts for all tokens wastes E/k of the work (32x for V3).
// Expert outputs are summed in float32 in ascending expert order, as transformers' loop does.
#include "mobius/sdk/moe.hpp"

#include <cmath>

namespace mobius::nn {

using namespace mobius::op;

namespace {

std::string expert_name(int64_t e, const char* proj) {
  return std::to_string(e) + "." + proj + ".weight";
}

}  // namespace

MoEConfig MoEConfig::from(const ArchitectureConfig& c) {
  MoEConfig m;
  if (c.moe) static_cast<mobius::MoEConfig&>(m) = *c.moe;
  m.hidden = c.hidden_size;
  m.hidden_act = c.hidden_act;
  m.mlp_bias = c.mlp_bias;
  m.validate();
  return m;
}

// ---------------------------------------------------------------------------------------------
// Router

MoERouter::MoERouter(const MoEConfig& c) : cfg(c) {
  declare("weight", {cfg.n_routed_experts, cfg.hidden});
  // A float32 buffer in transformers: it decides between nearly equal scores, so it keeps its
  // precision whatever the weight dtype.
  if (cfg.scoring == "sigmoid")
    declare("e_score_correction_bias", {cfg.n_routed_experts}, DType::Float);
}

std::pair<Value, Value> MoERouter::forward(Graph& g, Value x) const {
  ScopeGuard s(g, path());
  const int64_t E = cfg.n_routed_experts, G = cfg.n_group;
  Value w = weight_in_out(g, full_name("weight"), {source_tensor("weight")}, cfg.hidden,
                          cfg.n_routed_experts, DType::Float);
  Value logits = MatMul(Cast(x, DType::Float), w);  // [N, E]
  const bool sigmoid = cfg.scoring == "sigmoid";
  Value scores = sigmoid ? Sigmoid(logits) : Softmax(logits, -1);
  Value choice = sigmoid ? Add(scores, param(g, "e_score_correction_bias")) : scores;
  if (cfg.topk_method != "greedy" && G > 1 && cfg.topk_group < G) {
    Value grouped = Reshape(choice, {-1, G, E / G});
    Value group_score = cfg.topk_method == "noaux_tc"
                            ? ReduceSum(TopK(grouped, Ints(g, {2}), -1).first, {-1}, false)
                            : ReduceMax(grouped, {-1}, false);  // [N, G]
    Value top_groups = TopK(group_score, Ints(g, {cfg.topk_group}), -1).second;
    Value zeros = ConstantOfShape(Shape(group_score), DType::Float, 0.0, 2);
    Value ones = ConstantOfShape(Shape(top_groups), DType::Float, 1.0, 2);
    Value keep = Cast(Unsqueeze(ScatterElements(zeros, top_groups, ones, 1), {-1}), DType::Bool);
    // Experts of other groups score 0.0 (not -inf), as transformers' masked_fill does.
    choice = Reshape(Where(keep, grouped, Scalar(g, DType::Float, 0.0)), {-1, E});
  }
  Value idx = TopK(choice, Ints(g, {cfg.num_experts_per_tok}), -1).second;  // [N, k]
  Value weights = GatherElements(scores, idx, 1);  // unbiased scores
  if (cfg.norm_topk_prob)
    weights = Div(weights, Add(ReduceSum(weights, {-1}, true), Scalar(g, DType::Float, 1e-20)));
  if (cfg.routed_scaling_factor != 1.0)
    weights = Mul(weights, Scalar(g, DType::Float, cfg.routed_scaling_factor));
  return {idx, weights};
}

// ---------------------------------------------------------------------------------------------
// Routed experts

ExpertBank::ExpertBank(int64_t e, int64_t h, int64_t i, std::string a)
    : experts(e), hidden(h), intermediate(i), act(std::move(a)) {
  declare("gate_up_proj", {2 * e, i, h});
  declare("down_proj", {e, h, i});
}

Value ExpertBank::bank(Graph& g, const std::string& local) const {
  BuildContext& ctx = g.context();
  Graph& main = ctx.graph();
  const std::string name = full_name(local);
  if (auto v = main.find_initializer(name)) return *v;
  std::vector<std::string> sources;
  std::vector<Dim> dims;
  if (local == "gate_up_proj") {
    for (int64_t e = 0; e < experts; ++e) {
      sources.push_back(full_name(expert_name(e, "gate_proj")));
      sources.push_back(full_name(expert_name(e, "up_proj")));
    }
    dims = {2 * experts, intermediate, hidden};
  } else if (local == "down_proj") {
    for (int64_t e = 0; e < experts; ++e) sources.push_back(full_name(expert_name(e, "down_proj")));
    dims = {experts, hidden, intermediate};
  } else {
    throw Error("[moe] '" + path() + "' has no bank '" + local + "'");
  }
  Value v = main.initializer(name, TensorType(ctx.weight_dtype(), dims));
  ctx.plan_expert_bank(name, sources);
  return v;
}

Value ExpertBank::forward(Graph& g, Value x, Value idx, Value weights, int64_t k) const {
  ScopeGuard s(g, path());
  const DType adt = x.dtype();
  const int64_t I = intermediate, H = hidden;
  Value gate_up = bank(g, "gate_up_proj");
  Value down = bank(g, "down_proj");
  Value flat_idx = Reshape(idx, {-1});    // [N*k], slot j of token t at t*k + j
  Value flat_w = Reshape(weights, {-1});  // [N*k] float32
  Value hit = g.node("Unique", {flat_idx}, {TensorType(DType::Int64, {Dim()})},
                     {Attr("sorted", int64_t{1})})[0];  // ascending expert ids
  Value trips = g.node("Size", {hit}, {TensorType(DType::Int64, {})})[0];
  Value acc0 = ConstantOfShape(Shape(x), DType::Float, 0.0, 2);

  auto body_ptr = g.subgraph("experts_loop");
  Graph& b = *body_ptr;
  Value iter = b.input(b.fresh_name("iter"), TensorType(DType::Int64, {}));
  Value cond = b.input(b.fresh_name("cond"), TensorType(DType::Bool, {}));
  Value acc = b.input(b.fresh_name("acc"), TensorType(DType::Float, {Dim(), Dim(H)}));
  Value e = Gather(b.outer(hit), iter, 0);  // rank 0
  Value slots = b.node("NonZero", {Equal(b.outer(flat_idx), e)},
                       {TensorType(DType::Int64, {Dim(1), Dim()})})[0];
  slots = Reshape(slots, {-1});                          // [n]: the slots routed to e
  Value tokens = Div(slots, Int(b, k));                  // [n]: their tokens (one slot each)
  Value xe = Gather(b.outer(x), tokens, 0);              // [n, H]
  Value we = Gather(b.outer(flat_w), slots, 0);          // [n]
  // Bank slices 2e and 2e+1 are e's gate and up rows; reshaping the gathered copy is free.
  Value rows = Add(Mul(e, Int(b, 2)), Ints(b, {0, 1}));
  Value wgu = Reshape(Cast(Gather(b.outer(gate_up), rows, 0), adt), {2 * I, H});
  // Weights on the left so no weight is ever transposed; only the n token rows are.
  Value gu = MatMul(wgu, Transpose(xe, {1, 0}));  // [2I, n]
  auto parts = Split(gu, {I, I}, 0);
  Value mid = Mul(activation(act, parts[0]), parts[1]);                 // [I, n]
  Value y = MatMul(Cast(Gather(b.outer(down), e, 0), adt), mid);        // [H, n]
  Value yw = Transpose(Mul(Cast(y, DType::Float), Unsqueeze(we, {0})), {1, 0});  // [n, H]
  Value acc_out = b.node("ScatterND", {acc, Unsqueeze(tokens, {1}), yw}, {acc.type()},
                         {Attr("reduction", "add")})[0];
  b.output(Identity(cond), b.fresh_name("cond_out"));
  b.output(acc_out, b.fresh_name("acc_out"));

  Value keep_going = Constant(g, DType::Bool, {}, {1.0});
  return g.node("Loop", {trips, keep_going, acc0}, {TensorType(DType::Float, {Dim(), Dim(H)})},
                {Attr("body", body_ptr)})[0];
}

// ---------------------------------------------------------------------------------------------
// The MoE block

SparseMoE::SparseMoE(const MoEConfig& c) : cfg(c) {
  cfg.validate();
  if (cfg.n_routed_experts <= 0) throw Error("[moe] a sparse MoE block needs routed experts");
  gate = &add<MoERouter>("gate", cfg);
  experts = &add<ExpertBank>("experts", cfg.n_routed_experts, cfg.hidden,
                             cfg.moe_intermediate_size, cfg.hidden_act);
  if (cfg.n_shared_experts > 0)
    shared_experts = &add<GatedMLP>("shared_experts", cfg.hidden,
                                    cfg.moe_intermediate_size * cfg.n_shared_experts, cfg.mlp_bias,
                                    cfg.hidden_act);
}

Value SparseMoE::forward(Graph& g, Value x) const {
  ScopeGuard s(g, path());
  Value flat = Reshape(x, {-1, cfg.hidden});  // [N, H]
  auto [idx, weights] = gate->forward(g, flat);
  Value routed = Cast(experts->forward(g, flat, idx, weights, cfg.num_experts_per_tok), x.dtype());
  routed = Reshape(routed, Shape(x), x.type());
  if (shared_experts) routed = Add(routed, shared_experts->forward(g, x));
  return routed;
}

FeedForwardFactory moe_or_dense() {
  return [](const ArchitectureConfig& c, int64_t layer,
            const DecoderSpec& spec) -> std::unique_ptr<FeedForward> {
    MoEConfig moe = MoEConfig::from(c);
    if (moe.is_moe_layer(layer)) return std::make_unique<SparseMoE>(moe);
    return gated_mlp()(c, layer, spec);
  };
}

}  // namespace mobius::nn
