// moe.cpp - routing (DeepSeek V2/V3, Mixtral, Qwen-MoE, gpt-oss) and the routed experts as an
// ONNX Loop over the experts hit.
//
// The form, and what it costs per layer and step for N tokens, k experts per token, E experts of
// width I over hidden H:
//   - router: one float32 [N, H] x [H, E] matmul, softmax or sigmoid, TopK (group TopKs first
//     when the routing is group-limited);
//   - Unique over the N*k chosen ids, then a Loop over only the U <= min(E, N*k) experts that
//     some token chose. Iteration e gathers the rows of the tokens routed to e, gathers e's
//     slices of the banks (3*I*H weights, one copy of exactly the weights that its matmuls
//     then read), runs its MLP on those rows only (the bank's expert()), and scatter-adds the
//     weighted result into a float32 [N, H] accumulator.
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

#include <climits>
#include <cmath>

namespace mobius::nn {

using namespace mobius::op;

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
  // Router biases decide between nearly equal logits: kept in float32 whatever the weight dtype.
  if (cfg.router_bias) declare("bias", {cfg.n_routed_experts}, DType::Float);
}

// PhiMoE's sparse mixer at inference (transformers' sparsemixer, training off): the best logit
// m of `scores` (the others masked to -inf) chooses the expert; its weight is the softmax, over
// the logits s still in the running whose (m - s) / max(|s|, m) is at most 2 * eps, at that
// expert. `running` holds the logits left to choose from (-inf where taken).
static std::pair<Value, Value> sparsemixer_step(Graph& g, Value scores, Value running, double eps) {
  auto [best, idx] = TopK(running, Ints(g, {1}), -1);                    // [N, 1]
  Value factor = Max(Abs(scores), best);
  Value far = Greater(Div(Sub(best, scores), factor), Scalar(g, DType::Float, 2.0 * eps));
  Value masked = Where(far, Scalar(g, DType::Float, -INFINITY), running);
  Value weight = GatherElements(Softmax(masked, -1), idx, 1);           // [N, 1]
  return {idx, weight};
}

std::pair<Value, Value> MoERouter::forward(Graph& g, Value x, Value correction) const {
  ScopeGuard s(g, path());
  const int64_t E = cfg.n_routed_experts, G = cfg.n_group, k = cfg.num_experts_per_tok;
  Value w = weight_in_out(g, full_name("weight"), {source_tensor("weight")}, cfg.hidden,
                          cfg.n_routed_experts, DType::Float);
  Value logits = MatMul(Cast(x, DType::Float), w);  // [N, E]
  if (cfg.router_bias) logits = Add(logits, param(g, "bias"));
  auto scaled = [&](Value weights) {
    if (cfg.routed_scaling_factor != 1.0)
      weights = Mul(weights, Scalar(g, DType::Float, cfg.routed_scaling_factor));
    return weights;
  };
  if (cfg.scoring == "topk_softmax" || cfg.scoring == "topk_sigmoid") {
    // gpt-oss, Granite-MoE: the k largest logits, then a softmax over those k only. Llama 4:
    // the sigmoid of each of them.
    auto [top, idx] = TopK(logits, Ints(g, {k}), -1);
    return {idx, scaled(cfg.scoring == "topk_softmax" ? Softmax(top, -1) : Sigmoid(top))};
  }
  if (cfg.scoring == "sparsemixer") {
    auto [idx1, w1] = sparsemixer_step(g, logits, logits, cfg.jitter_eps);
    Value minus_inf = ConstantOfShape(Shape(idx1), DType::Float, -INFINITY, 2);
    Value taken = ScatterElements(logits, idx1, minus_inf, 1);  // the first choice out
    auto [idx2, w2] = sparsemixer_step(g, logits, taken, cfg.jitter_eps);
    return {Concat({idx1, idx2}, 1), scaled(Concat({w1, w2}, 1))};
  }
  const bool sigmoid = cfg.scoring == "sigmoid";
  Value scores = sigmoid ? Sigmoid(logits) : Softmax(logits, -1);
  Value choice = scores;
  if (cfg.correction_bias) {
    if (!correction.valid())
      throw Error("[moe] '" + path() + "': the routing has a correction bias and none was given");
    choice = Add(scores, Reshape(correction, {E}));
  }
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
  Value idx = TopK(choice, Ints(g, {k}), -1).second;  // [N, k]
  Value weights = GatherElements(scores, idx, 1);  // unbiased scores
  if (cfg.norm_topk_prob) {
    Value norm;
    if (cfg.norm_topk_p == 1.0) {
      norm = Add(ReduceSum(weights, {-1}, true), Scalar(g, DType::Float, 1e-20));
    } else {  // DBRX: the Lp norm (torch.norm)
      Value p = Scalar(g, DType::Float, cfg.norm_topk_p);
      norm = Pow(ReduceSum(Pow(Abs(weights), p), {-1}, true), Scalar(g, DType::Float, 1.0 / cfg.norm_topk_p));
    }
    weights = Div(weights, norm);
  }
  return {idx, scaled(weights)};
}

// ---------------------------------------------------------------------------------------------
// Routed experts: the loop over the experts hit

ExpertBank::ExpertBank(int64_t e, int64_t h, int64_t i) : experts(e), hidden(h), intermediate(i) {}

Value ExpertBank::forward(Graph& g, Value x, Value idx, Value weights, int64_t k,
                         bool weight_inputs) const {
  ScopeGuard s(g, path());
  if (!weight_inputs)
    if (Value y = fused(g, x, idx, weights, k); y.valid()) return y;
  const int64_t H = hidden;
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
  Value yw;
  if (weight_inputs) {  // Llama 4: the weight scales the expert's input
    Value y = expert(b, e, Mul(xe, Cast(Unsqueeze(we, {1}), xe.dtype())));
    yw = Cast(y, DType::Float);
  } else {
    Value y = expert(b, e, xe);                          // [n, H]
    yw = Mul(Cast(y, DType::Float), Unsqueeze(we, {1}));
  }
  Value acc_out = b.node("ScatterND", {acc, Unsqueeze(tokens, {1}), yw}, {acc.type()},
                         {Attr("reduction", "add")})[0];
  b.output(Identity(cond), b.fresh_name("cond_out"));
  b.output(acc_out, b.fresh_name("acc_out"));

  Value keep_going = Constant(g, DType::Bool, {}, {1.0});
  return g.node("Loop", {trips, keep_going, acc0}, {TensorType(DType::Float, {Dim(), Dim(H)})},
                {Attr("body", body_ptr)})[0];
}

// ---------------------------------------------------------------------------------------------
// Gated experts, stacked from per-expert tensors while the weights stream

GatedExpertBank::GatedExpertBank(int64_t e, int64_t h, int64_t i, std::string a, MLPNames n)
    : ExpertBank(e, h, i), act(std::move(a)), names(std::move(n)) {
  if (!names.gate_up.empty())
    throw Error("[moe] '" + names.gate_up + "': experts with a fused gate/up projection per "
                "expert are not supported");
  declare("gate_up_proj", {2 * e, i, h});
  declare("down_proj", {e, h, i});
}

Value GatedExpertBank::bank(Graph& g, const std::string& local) const {
  BuildContext& ctx = g.context();
  Graph& main = ctx.graph();
  const std::string name = full_name(local);
  if (auto v = main.find_initializer(name)) return *v;
  auto tensor = [&](int64_t e, const std::string& proj) {
    return full_name(std::to_string(e) + "." + proj + ".weight");
  };
  std::vector<std::string> sources;
  std::vector<Dim> dims;
  if (local == "gate_up_proj") {
    for (int64_t e = 0; e < experts; ++e) {
      sources.push_back(tensor(e, names.gate));
      sources.push_back(tensor(e, names.up));
    }
    dims = {2 * experts, intermediate, hidden};
  } else if (local == "down_proj") {
    for (int64_t e = 0; e < experts; ++e) sources.push_back(tensor(e, names.down));
    dims = {experts, hidden, intermediate};
  } else {
    throw Error("[moe] '" + path() + "' has no bank '" + local + "'");
  }
  Value v = main.initializer(name, TensorType(ctx.weight_dtype(), dims));
  ctx.plan_expert_bank(name, sources);
  return v;
}

bool GatedExpertBank::quantized(const BuildContext& ctx) const {
  return ctx.weight_bits() > 0 && ctx.ops() == "ort" &&
         hidden % ctx.block_size() == 0 && intermediate % ctx.block_size() == 0;
}

bool GatedExpertBank::qmoe(const BuildContext& ctx) const {
  return quantized(ctx) && ctx.weight_bits() == 4 && ctx.symmetric() && act == "silu" &&
         ctx.execution_provider() == "cpu" && ctx.runtime() != "transformers.js" &&
         !ctx.expert_loop() && ctx.interleaved_layouts();
}

GatedExpertBank::Quantized GatedExpertBank::quantized_bank(Graph& g, const std::string& local,
                                                           DType scales, bool interleaved) const {
  BuildContext& ctx = g.context();
  Graph& main = ctx.graph();
  const int bits = ctx.weight_bits(), block = ctx.block_size();
  const std::string base = full_name(local) + (interleaved ? "_swiglu" : "");
  const std::string data_name = base + "_Q" + std::to_string(bits), scales_name = base + "_scales",
                    zp_name = base + "_zero_points";
  const bool symmetric = ctx.symmetric();
  if (auto d = main.find_initializer(data_name))
    return {*d, *main.find_initializer(scales_name),
            symmetric ? Value() : *main.find_initializer(zp_name)};
  std::vector<std::string> sources;
  int64_t mats = 0, rows = 0, cols = 0;  // [mats, rows, cols] as the checkpoint stores it
  for (int64_t e = 0; e < experts; ++e) {
    const std::string x = full_name(std::to_string(e) + ".");
    if (local == "gate_up_proj") {
      sources.push_back(x + names.gate + ".weight");
      sources.push_back(x + names.up + ".weight");
    } else {
      sources.push_back(x + names.down + ".weight");
    }
  }
  if (local == "gate_up_proj" && interleaved) {
    mats = experts, rows = 2 * intermediate, cols = hidden;  // QMoE's fc1 [E, 2I, H / 2]
  } else if (local == "gate_up_proj") {
    mats = 2 * experts, rows = intermediate, cols = hidden;
  } else {
    mats = experts, rows = hidden, cols = intermediate;
  }
  // MatMulNBits' layout of the rows of every expert, seen as [mats, rows, cols packed]: the
  // layout GatherBlockQuantized reads (low nibble first; the zero point 2^(bits-1) when
  // symmetric, else per block, two to a byte for 4 bits, as MatMulNBits stores them).
  const int64_t blocks = cols / block;
  Value data = main.initializer(data_name, TensorType(DType::UInt8, {Dim(mats), Dim(rows), Dim(cols * bits / 8)}));
  Value sc = main.initializer(scales_name, TensorType(scales, {Dim(mats), Dim(rows), Dim(blocks)}));
  Value zp = symmetric ? Value()
                       : main.initializer(zp_name, TensorType(DType::UInt8, {Dim(mats), Dim(rows),
                                                                             Dim((blocks * bits + 7) / 8)}));
  for (int part : {MOBIUS_QUANT_PART_DATA, MOBIUS_QUANT_PART_SCALES, MOBIUS_QUANT_PART_ZERO_POINTS}) {
    if (part == MOBIUS_QUANT_PART_ZERO_POINTS && symmetric) continue;
    mobius_weight_layout layout{};
    layout.struct_size = sizeof(layout);
    layout.kind = MOBIUS_LAYOUT_BLOCK_QUANTIZED;
    layout.bits = bits;
    layout.block_size = block;
    layout.symmetric = symmetric ? 1 : 0;
    layout.part = part;
    layout.interleave = interleaved ? 2 : 0;  // (gate_e, up_e) pairs, row by row
    ctx.plan_layout(part == MOBIUS_QUANT_PART_DATA ? data_name : part == MOBIUS_QUANT_PART_SCALES ? scales_name : zp_name,
                    sources, layout);
  }
  return {data, sc, zp};
}

// The float rows of bank slices `index` (as Gather along axis 0 would give them) from a
// quantized bank.
static Value gather_dequantized(Graph& b, const GatedExpertBank::Quantized& q, Value index,
                                int64_t rows, int64_t cols, int bits, int block, DType out) {
  std::vector<Dim> dims;
  if (index.type().rank_known && !index.type().dims.empty()) dims.push_back(index.type().dims[0]);
  dims.emplace_back(rows);
  dims.emplace_back(cols);
  std::vector<Value> inputs{b.outer(q.data), index, b.outer(q.scales)};
  if (q.zero_points.valid()) inputs.push_back(b.outer(q.zero_points));
  return b.node("GatherBlockQuantized", inputs,
                {TensorType(out, dims)},
                {Attr("gather_axis", int64_t{0}), Attr("quantize_axis", int64_t{2}),
                 Attr("block_size", static_cast<int64_t>(block)),
                 Attr("bits", static_cast<int64_t>(bits))},
                "com.microsoft")[0];
}

// ONNX Runtime's QMoE (com.microsoft, CPU): one operator for the routed experts of all tokens,
// int4 weights dequantized in float32 blocks as GatherBlockQuantized does, so it computes what
// the loop computes (to float rounding), in a fraction of the time at decode (bench/moe_qmoe.sh).
// The routing stays the router's: QMoE takes the top k of router_probs and weighs them by
// router_weights when that input is given, so router_probs ranks the chosen experts k..1 (0
// elsewhere) and router_weights holds their weights. Its SwiGLU with alpha 1, beta 0 and no limit
// is silu(gate) * up, on gate and up rows interleaved (swiglu_fusion 1, the only form its CPU
// kernel takes). Not for 8 bits: there the CPU kernel quantizes the activations to int8 too.
Value GatedExpertBank::fused(Graph& g, Value x, Value idx, Value weights, int64_t k) const {
  BuildContext& ctx = g.context();
  if (!qmoe(ctx)) return Value();
  const DType adt = x.dtype();
  Value rows = Slice(Shape(x), {0}, {1}, {0});
  Value zeros = ConstantOfShape(Concat({rows, Ints(g, {experts})}, 0), DType::Float, 0.0, 2);
  std::vector<double> rank;
  for (int64_t j = 0; j < k; ++j) rank.push_back(static_cast<double>(k - j));
  Value ranks = Add(Mul(weights, Scalar(g, DType::Float, 0.0)), Constant(g, DType::Float, {k}, rank));
  Value probs = ScatterElements(zeros, idx, ranks, 1);
  Value routed = ScatterElements(zeros, idx, weights, 1);
  if (adt != DType::Float) {
    probs = Cast(probs, adt);
    routed = Cast(routed, adt);
  }
  const Quantized fc1 = quantized_bank(g, "gate_up_proj", adt, true);
  const Quantized fc2 = quantized_bank(g, "down_proj", adt);
  Value y = g.node("QMoE",
                   {x, probs, fc1.data, fc1.scales, Value(), fc2.data, fc2.scales, Value(), Value(),
                    Value(), Value(), Value(), Value(), Value(), routed},
                   {TensorType(adt, {Dim(), Dim(hidden)})},
                   {Attr("activation_type", "swiglu"), Attr("k", k),
                    Attr("normalize_routing_weights", int64_t{0}),
                    Attr("expert_weight_bits", static_cast<int64_t>(ctx.weight_bits())),
                    Attr("block_size", static_cast<int64_t>(ctx.block_size())),
                    Attr("swiglu_fusion", int64_t{1}), Attr("activation_alpha", 1.0),
                    Attr("activation_beta", 0.0), Attr("swiglu_limit", 3.0e38)},
                   "com.microsoft")[0];
  return adt == DType::Float ? y : Cast(y, DType::Float);
}

Value GatedExpertBank::expert(Graph& b, Value e, Value xe) const {
  const DType adt = xe.dtype();
  const int64_t I = intermediate, H = hidden;
  // Bank slices 2e and 2e+1 are e's gate and up rows; reshaping the gathered copy is free.
  Value rows = Add(Mul(e, Int(b, 2)), Ints(b, {0, 1}));
  BuildContext& ctx = b.context();
  if (quantized(ctx)) {
    // Block-quantized banks (--dtype int4/int8): only expert e's rows are dequantized.
    const int bits = ctx.weight_bits(), block = ctx.block_size();
    Value wgu = Reshape(gather_dequantized(b, quantized_bank(b, "gate_up_proj", adt), rows, I, H,
                                           bits, block, adt),
                        {2 * I, H});
    Value gu = MatMul(wgu, Transpose(xe, {1, 0}));  // [2I, n]
    auto parts = Split(gu, {I, I}, 0);
    Value mid = Mul(activation(act, parts[0]), parts[1]);  // [I, n]
    Value wd = gather_dequantized(b, quantized_bank(b, "down_proj", adt), e, H, I, bits, block, adt);
    return Transpose(MatMul(wd, mid), {1, 0});  // [n, H]
  }
  Value gate_up = b.outer(bank(b, "gate_up_proj"));
  Value down = b.outer(bank(b, "down_proj"));
  Value wgu = Reshape(Cast(Gather(gate_up, rows, 0), adt), {2 * I, H});
  // Weights on the left so no weight is ever transposed; only the n token rows are.
  Value gu = MatMul(wgu, Transpose(xe, {1, 0}));  // [2I, n]
  auto parts = Split(gu, {I, I}, 0);
  Value mid = Mul(activation(act, parts[0]), parts[1]);           // [I, n]
  Value y = MatMul(Cast(Gather(down, e, 0), adt), mid);           // [H, n]
  return Transpose(y, {1, 0});                                    // [n, H]
}

// ---------------------------------------------------------------------------------------------
// gpt-oss' experts: stacked banks with biases, interleaved gate/up, clamped SwiGLU

ClampedSwiGLUExpertBank::ClampedSwiGLUExpertBank(int64_t e, int64_t h, int64_t i, double lim,
                                                 double a)
    : ExpertBank(e, h, i), limit(lim), alpha(a) {
  declare("gate_up_proj", {e, h, 2 * i});
  declare("gate_up_proj_bias", {e, 2 * i});
  declare("down_proj", {e, i, h});
  declare("down_proj_bias", {e, h});
}

Value ClampedSwiGLUExpertBank::expert(Graph& b, Value e, Value xe) const {
  const DType adt = xe.dtype();
  // Each bank is one checkpoint tensor streamed into its initializer; the loop reads expert e's
  // slice of it only.
  auto slice = [&](const char* local) { return Cast(Gather(b.outer(param(b, local)), e, 0), adt); };
  Value gu = Add(MatMul(xe, slice("gate_up_proj")), slice("gate_up_proj_bias"));  // [n, 2I]
  // Gate and up interleave along the columns: even and odd.
  Value gate = Slice(gu, {0}, {INT64_MAX}, {1}, {2});
  Value up = Slice(gu, {1}, {INT64_MAX}, {1}, {2});
  gate = Min(gate, ScalarLike(gate, limit));
  up = Max(Min(up, ScalarLike(up, limit)), ScalarLike(up, -limit));
  Value glu = Mul(gate, Sigmoid(Mul(gate, ScalarLike(gate, alpha))));
  Value mid = Mul(Add(up, ScalarLike(up, 1.0)), glu);                                // [n, I]
  return Add(MatMul(mid, slice("down_proj")), slice("down_proj_bias"));              // [n, H]
}

// ---------------------------------------------------------------------------------------------
// Gated experts stacked in the checkpoint (Granite-MoE, DBRX, Llama 4)

StackedExpertBank::StackedExpertBank(int64_t e, int64_t h, int64_t i, std::string a,
                                     StackedExperts l)
    : ExpertBank(e, h, i), act(std::move(a)), layout(std::move(l)) {
  if (layout.gate_up.empty() == (layout.gate.empty() || layout.up.empty()))
    throw Error("[moe] stacked experts need one gate_up tensor or a gate and an up tensor");
  if (!layout.gate_up.empty())
    declare(layout.gate_up, layout.gate_up_input_major ? std::vector<int64_t>{e, h, 2 * i}
                                                       : std::vector<int64_t>{e, 2 * i, h});
  else
    for (const auto& name : {layout.gate, layout.up}) declare(name, {e * i, h});
  if (layout.down_flat)
    declare(layout.down, {e * i, h});
  else
    declare(layout.down, layout.down_input_major ? std::vector<int64_t>{e, i, h}
                                                 : std::vector<int64_t>{e, h, i});
}

Value StackedExpertBank::expert(Graph& b, Value e, Value xe) const {
  const DType adt = xe.dtype();
  const int64_t I = intermediate;
  // Expert e's matrix of a bank: a Gather of its slice, or, for [E*I, H], its I rows.
  auto slice = [&](const std::string& local, bool flat) {
    Value w = b.outer(param(b, local));
    if (!flat) return Cast(Gather(w, e, 0), adt);
    Value start = Unsqueeze(Mul(e, Int(b, I)), {0});
    return Cast(Slice(w, start, Add(start, Ints(b, {I})), {0}), adt);
  };
  // x @ W for W [in, out]; for W [out, in] the weights stay on the left (never transposed).
  auto project = [&](Value x, Value w, bool input_major) {
    return input_major ? MatMul(x, w) : Transpose(MatMul(w, Transpose(x, {1, 0})), {1, 0});
  };
  Value gate, up;
  if (!layout.gate_up.empty()) {
    Value gu = project(xe, slice(layout.gate_up, false), layout.gate_up_input_major);  // [n, 2I]
    auto parts = Split(gu, {I, I}, -1);
    gate = parts[0], up = parts[1];
  } else {
    gate = project(xe, slice(layout.gate, true), false);
    up = project(xe, slice(layout.up, true), false);
  }
  Value mid = Mul(activation(act, gate), up);  // [n, I]
  return project(mid, slice(layout.down, layout.down_flat), layout.down_input_major || layout.down_flat);
}

ExpertBankFactory stacked_experts(StackedExperts layout) {
  return [layout](const MoEConfig& c, const MoENames&) -> std::unique_ptr<ExpertBank> {
    return std::make_unique<StackedExpertBank>(c.n_routed_experts, c.hidden,
                                               c.moe_intermediate_size, c.hidden_act, layout);
  };
}

ExpertBankFactory gated_experts() {
  return [](const MoEConfig& c, const MoENames& n) -> std::unique_ptr<ExpertBank> {
    return std::make_unique<GatedExpertBank>(c.n_routed_experts, c.hidden,
                                             c.moe_intermediate_size, c.hidden_act, n.expert);
  };
}

ExpertBankFactory clamped_swiglu_experts() {
  return [](const MoEConfig& c, const MoENames&) -> std::unique_ptr<ExpertBank> {
    return std::make_unique<ClampedSwiGLUExpertBank>(c.n_routed_experts, c.hidden,
                                                     c.moe_intermediate_size, c.swiglu_limit,
                                                     c.swiglu_alpha);
  };
}

// ---------------------------------------------------------------------------------------------
// The MoE block

SparseMoE::SparseMoE(const MoEConfig& c, const MoESpec& spec) : cfg(c), names(spec.names) {
  cfg.validate();
  if (cfg.n_routed_experts <= 0) throw Error("[moe] a sparse MoE block needs routed experts");
  gate = &add<MoERouter>(names.router, cfg);
  auto bank = (spec.experts ? spec.experts : gated_experts())(cfg, names);
  experts = bank.get();
  attach(names.experts, std::move(bank));
  // The correction bias decides between nearly equal scores: float32 whatever the weight dtype
  // (a float32 buffer in transformers).
  if (cfg.correction_bias)
    declare(names.correction_bias,
            names.correction_bias_row ? std::vector<int64_t>{1, cfg.n_routed_experts}
                                      : std::vector<int64_t>{cfg.n_routed_experts},
            DType::Float);
  if (cfg.shared_width() > 0 && spec.plain_shared)
    shared_experts = &add<MLP>(names.shared_experts, cfg.hidden, cfg.shared_width(), cfg.mlp_bias,
                               cfg.hidden_act);
  else if (cfg.shared_width() > 0)
    shared_experts = &add<GatedMLP>(names.shared_experts, cfg.hidden, cfg.shared_width(),
                                    cfg.mlp_bias, cfg.hidden_act);
  if (shared_experts && cfg.shared_expert_gate)
    shared_expert_gate = &add<Linear>(names.shared_expert_gate, cfg.hidden, 1, false);
}

Value SparseMoE::forward(Graph& g, Value x) const {
  ScopeGuard s(g, path());
  Value flat = Reshape(x, {-1, cfg.hidden});  // [N, H]
  Value correction = cfg.correction_bias ? param(g, names.correction_bias) : Value();
  auto [idx, weights] = gate->forward(g, flat, correction);
  Value routed = Cast(experts->forward(g, flat, idx, weights, cfg.num_experts_per_tok,
                                       cfg.weight_inputs),
                      x.dtype());
  routed = Reshape(routed, Shape(x), x.type());
  if (shared_experts) {
    Value shared = shared_experts->forward(g, x);
    if (shared_expert_gate) shared = Mul(Sigmoid(shared_expert_gate->forward(g, x)), shared);
    routed = Add(routed, shared);
  }
  return routed;
}

FeedForwardFactory moe_or_dense(MoESpec moe) {
  return [moe = std::move(moe)](const ArchitectureConfig& c, int64_t layer,
                                const DecoderSpec& spec) -> std::unique_ptr<FeedForward> {
    MoEConfig m = MoEConfig::from(c);
    if (m.is_moe_layer(layer)) return std::make_unique<SparseMoE>(m, moe);
    return gated_mlp()(c, layer, spec);
  };
}

}  // namespace mobius::nn
