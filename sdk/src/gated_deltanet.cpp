// gated_deltanet.cpp - Gated DeltaNet and the gated delta rule (see gated_deltanet.hpp).
//
// How the rule runs in ONNX. A step of one token (decoding) is the recurrence itself, a handful
// of plain ops. A longer step uses the chunked form transformers' torch_chunk_gated_delta_rule
// uses: within a chunk of C tokens every token's correction u is found at once from a unit
// lower-triangular system (I + A) U = B, and only the state S [dk, dv] passes from chunk to
// chunk, through an ONNX Scan whose body is four matmuls. An If on the step length picks the form.
//
// Why this shape, for ONNX Runtime 1.30 on the CPU:
// - A Scan or Loop over single tokens runs its body subgraph once per token: every iteration
//   pays the subgraph dispatch plus ~10 kernel launches, each streaming the whole state (hv * dk
//   * dv floats: 2 MiB per sequence at Qwen3.5's 32 x 128 x 128) through memory. The chunked
//   form touches the state once per C = 64 tokens and turns the rest into batched matmuls
//   (MLAS GEMMs), so a prefill costs ~L/64 Scan iterations instead of L.
// - The triangular system is solved without a loop by block doubling: the inverse of a unit
//   lower-triangular matrix is built from 1x1 blocks to CxC in log2(C) levels, each level
//   [[Ta, 0], [-Tb A_ba Ta, Tb]] over all blocks at once. This is as stable as forward
//   substitution (it computes the same entries); the loop-free alternative of a Neumann
//   product (I + N)(I + N^2)(I + N^4)... is not: with near-parallel keys (repeated tokens) its
//   partial products reach ~2^60 and cancel catastrophically in float32.
// - The If keeps decoding at the cost of the plain recurrence: the chunked form would pad one
//   token to a chunk of 64 and do ~64x the work.
// Everything in the rule computes in float32, as transformers does whatever the model dtype.
#include "mobius/sdk/gated_deltanet.hpp"

#include <climits>
#include <cmath>

#include "recurrent.hpp"

namespace mobius::nn {

using detail::node1;

using namespace mobius::op;

namespace {

// ONNX Pad (constant 0) with the result type given by the caller.
Value pad(Value x, Value pads, const TensorType& t) {
  return node1(x.graph(), "Pad", {x, pads}, t);
}

// Cumulative sum over the last axis. (op::CumSum passes x.type() by reference while its axis
// constant may grow the graph's value table, which can leave that reference dangling.)
Value cumsum_last(Value x) {
  Value axis = Int(x.graph(), -1);
  TensorType t = x.type();
  return node1(x.graph(), "CumSum", {x, axis}, t);
}

Value l2norm(Value x) {
  Value ss = ReduceSum(Mul(x, x), {-1}, true);
  return Mul(x, Reciprocal(Sqrt(Add(ss, ScalarLike(x, 1e-6)))));
}

// The blocks of A just below the diagonal blocks of size s, one per pair of neighbouring
// diagonal blocks: A[(2p+1)s .. (2p+2)s, 2p s .. (2p+1)s], as [b, h, n, C/(2s), s, s].
Value blocks_below(Value a, int64_t s, int64_t c) {
  Graph& g = a.graph();
  const int64_t m = c / s;
  Value x = Reshape(a, {0, 0, 0, m, s, m, s});
  x = Transpose(x, {0, 1, 2, 3, 5, 4, 6});  // [.., row block, column block, s, s]
  x = Reshape(x, {0, 0, 0, m * m, s, s});
  std::vector<int64_t> idx;
  for (int64_t p = 0; p < m / 2; ++p) idx.push_back((2 * p + 1) * m + 2 * p);
  return Gather(x, Ints(g, idx), 3);
}

// (I + A)^-1 for A [b, h, n, C, C] strictly lower triangular, C a power of two, by block
// doubling (see the file comment).
Value unit_lower_inverse(Value a, int64_t c) {
  Graph& g = a.graph();
  if (c == 1) return Constant(g, DType::Float, {1, 1}, {1.0});
  // Level 1: each 2x2 block is [[1, 0], [-a, 1]].
  Value eye2 = Constant(g, DType::Float, {2, 2}, {1, 0, 0, 1});
  Value e21 = Constant(g, DType::Float, {2, 2}, {0, 0, 1, 0});
  Value t = Add(eye2, Mul(Neg(blocks_below(a, 1, c)), e21));  // [.., C/2, 2, 2]
  for (int64_t s = 2; s < c; s *= 2) {
    Value ta = Slice(t, {0}, {INT64_MAX}, {3}, {2});  // upper-left blocks of each pair
    Value tb = Slice(t, {1}, {INT64_MAX}, {3}, {2});  // lower-right blocks
    Value off = Neg(MatMul(MatMul(tb, blocks_below(a, s, c)), ta));
    TensorType top_t = ta.type();
    top_t.dims[5] = Dim(2 * s);
    Value top = pad(ta, Ints(g, {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, s}), top_t);
    t = Concat({top, Concat({off, tb}, -1)}, -2);  // [.., C/(2s), 2s, 2s]: each pair merged
  }
  return Squeeze(t, {3});
}

// One token: the recurrence as transformers' torch_recurrent_gated_delta_rule writes it.
std::pair<Value, Value> delta_step(Value q, Value k, Value v, Value beta, Value gate, Value s) {
  s = Mul(s, Exp(Unsqueeze(gate, {-1})));                      // [b, hv, dk, dv]
  Value u = Mul(Sub(v, MatMul(k, s)), Unsqueeze(beta, {-1}));  // [b, hv, 1, dv]
  s = Add(s, MatMul(Transpose(k, {0, 1, 3, 2}), u));
  return {MatMul(q, s), s};
}

// Any number of tokens: the chunked form of torch_chunk_gated_delta_rule (UT transform within
// a chunk, the state carried across chunks by a Scan).
std::pair<Value, Value> delta_chunked(Value q, Value k, Value v, Value beta, Value gate, Value s0,
                                      int64_t c) {
  Graph& g = q.graph();
  const Dim b = q.dim(0), seq = q.dim(2);
  const int64_t hv = v.dim(1).size, dk = q.dim(3).size, dv = v.dim(3).size;

  // Pad the sequence to whole chunks. Padded tokens have k = 0 and g = 0, so they leave the
  // state as it is; their outputs are dropped at the end.
  Value len = DimOf(q, 2);
  Value cc = Ints(g, {c});
  Value padded = Mul(Div(Add(len, Ints(g, {c - 1})), cc), cc);
  Value extra = Sub(padded, len);
  Value pads4 = Concat({Ints(g, {0, 0, 0, 0, 0, 0}), extra, Ints(g, {0})}, 0);
  Value pads3 = Concat({Ints(g, {0, 0, 0, 0, 0}), extra}, 0);
  auto chunks4 = [&](Value x) {
    int64_t d = x.dim(3).size;
    x = pad(x, pads4, TensorType(DType::Float, {b, hv, Dim(), d}));
    return Reshape(x, {0, 0, -1, c, d});  // [b, hv, n, C, d]
  };
  auto chunks3 = [&](Value x) {
    x = pad(x, pads3, TensorType(DType::Float, {b, hv, Dim()}));
    return Reshape(x, {0, 0, -1, c});  // [b, hv, n, C]
  };
  Value qc = chunks4(q), kc = chunks4(k), vc = chunks4(v);
  Value bc = chunks3(beta), gc = chunks3(gate);

  std::vector<double> incl(static_cast<size_t>(c * c)), strict(incl.size());
  for (int64_t i = 0; i < c; ++i)
    for (int64_t j = 0; j < c; ++j) {
      incl[static_cast<size_t>(i * c + j)] = j <= i;
      strict[static_cast<size_t>(i * c + j)] = j < i;
    }
  Value incl_m = Constant(g, DType::Bool, {c, c}, incl, "causal_incl");
  Value strict_m = Constant(g, DType::Bool, {c, c}, strict, "causal_strict");

  // Log decay accumulated within the chunk, and the pairwise decays exp(cum_i - cum_j) for
  // j <= i (the rest masked before the exp, where the difference could overflow).
  Value cum = cumsum_last(gc);
  Value diff = Sub(Unsqueeze(cum, {-1}), Unsqueeze(cum, {-2}));  // [b, hv, n, C, C]
  Value decay = Exp(Where(incl_m, diff, Scalar(g, DType::Float, -INFINITY)));
  Value beta_col = Unsqueeze(bc, {-1});  // [b, hv, n, C, 1]
  Value kt = Transpose(kc, {0, 1, 2, 4, 3});
  Value a = Where(strict_m, Mul(MatMul(kc, kt), decay), Scalar(g, DType::Float, 0.0));
  a = Mul(a, beta_col);
  Value tinv = unit_lower_inverse(a, c);

  // new values W = T (beta v) and the decayed keys reading the old state KC = T (beta e^cum k),
  // in one matmul.
  Value ecum = Exp(cum);
  Value rhs = Concat({Mul(vc, beta_col), Mul(kc, Unsqueeze(Mul(bc, ecum), {-1}))}, -1);
  auto wk = Split(MatMul(tinv, rhs), {dv, dk}, -1);
  Value qd = Mul(qc, Unsqueeze(ecum, {-1}));
  Value intra = Mul(MatMul(qc, kt), decay);
  Value last = Slice(cum, {c - 1}, {c}, {-1});  // [b, hv, n, 1]
  Value kd = Mul(kc, Unsqueeze(Exp(Sub(last, cum)), {-1}));
  Value chunk_decay = Unsqueeze(Exp(last), {-1});  // [b, hv, n, 1, 1]

  // Scan over chunks (axis 2): v_new = W - KC S; o = Qd S + intra v_new;
  // S' = e^last S + Kd^T v_new. KC S and Qd S are one MatMul, so that every read of S is an
  // ancestor of S' (a runtime may bind the present state onto the past state's memory).
  Value kq = Concat({wk[1], qd}, 3);  // [b, hv, n, 2C, dk]
  auto body = g.subgraph("chunk_scan");
  Graph& sb = *body;
  auto in = [&](const char* name, std::vector<Dim> dims) {
    return sb.input(sb.fresh_name(name), TensorType(DType::Float, std::move(dims)));
  };
  Value s = in("state", {b, hv, dk, dv});
  Value w_i = in("w", {b, hv, c, dv});
  Value kq_i = in("kq", {b, hv, 2 * c, dk});
  Value intra_i = in("intra", {b, hv, c, c});
  Value kd_i = in("kd", {b, hv, c, dk});
  Value cd_i = in("chunk_decay", {b, hv, 1, 1});
  auto ks_qs = Split(MatMul(kq_i, s), {c, c}, 2);
  Value v_new = Sub(w_i, ks_qs[0]);
  Value o_i = Add(ks_qs[1], MatMul(intra_i, v_new));
  Value s_next = Add(Mul(s, cd_i), MatMul(Transpose(kd_i, {0, 1, 3, 2}), v_new));
  sb.output(s_next, sb.fresh_name("state_out"));
  sb.output(o_i, sb.fresh_name("o"));
  auto outs = g.node("Scan", {s0, wk[0], kq, intra, kd, chunk_decay},
                     {s0.type(), TensorType(DType::Float, {b, hv, Dim(), c, dv})},
                     {Attr("body", body), Attr("num_scan_inputs", int64_t{5}),
                      Attr("scan_input_axes", std::vector<int64_t>(5, 2)),
                      Attr("scan_output_axes", std::vector<int64_t>{2})});
  Value o = Reshape(outs[1], {0, 0, -1, dv});
  o = node1(g, "Slice", {o, Ints(g, {0}), len, Ints(g, {2})},
            TensorType(DType::Float, {b, hv, seq, dv}));
  return {o, outs[0]};
}

}  // namespace

std::pair<Value, Value> gated_delta_rule(Graph& g, Value q, Value k, Value v, Value beta,
                                         Value gate, Value state, int64_t chunk_size) {
  if (chunk_size < 1 || (chunk_size & (chunk_size - 1)) != 0)
    throw Error("[gated_delta_rule] chunk_size must be a power of two, got " +
                std::to_string(chunk_size));
  for (Value x : {q, k, v, beta, gate, state})
    if (x.dtype() != DType::Float)
      throw Error("[gated_delta_rule] inputs are float32, got '" + x.name() + "' " +
                  x.type().str());
  if (q.rank() != 4 || k.rank() != 4 || v.rank() != 4 || beta.rank() != 3 || gate.rank() != 3 ||
      state.rank() != 4 || !v.dim(1).is_static() || !q.dim(3).is_static() || !v.dim(3).is_static())
    throw Error(
        "[gated_delta_rule] expects q, k [b, hv, seq, dk], v [b, hv, seq, dv], beta and g "
        "[b, hv, seq], state [b, hv, dk, dv] with static heads and head dims");

  const TensorType o_type(DType::Float, {q.dim(0), v.dim(1), q.dim(2), v.dim(3)});
  const TensorType s_type = state.type();
  Value one_token = Squeeze(Equal(DimOf(q, 2), Ints(g, {1})), {0});

  auto step = g.subgraph("delta_step");
  {
    Graph& sg = *step;
    auto [o, s] = delta_step(sg.outer(q), sg.outer(k), sg.outer(v), sg.outer(beta), sg.outer(gate),
                             sg.outer(state));
    sg.output(o, sg.fresh_name("o"));
    sg.output(s, sg.fresh_name("state"));
  }
  auto chunked = g.subgraph("delta_chunked");
  {
    Graph& sg = *chunked;
    auto [o, s] = delta_chunked(sg.outer(q), sg.outer(k), sg.outer(v), sg.outer(beta),
                                sg.outer(gate), sg.outer(state), chunk_size);
    sg.output(o, sg.fresh_name("o"));
    sg.output(s, sg.fresh_name("state"));
  }
  auto outs = g.node("If", {one_token}, {o_type, s_type},
                     {Attr("then_branch", step), Attr("else_branch", chunked)});
  return {outs[0], outs[1]};
}

// ---------------------------------------------------------------------------------------------

GatedDeltaNetOptions GatedDeltaNetOptions::from_config(const ArchitectureConfig& cfg) {
  GatedDeltaNetOptions o;
  if (cfg.linear_attn) static_cast<GatedDeltaNetConfig&>(o) = *cfg.linear_attn;
  o.hidden = cfg.hidden_size;
  o.norm_eps = cfg.rms_norm_eps;
  o.act = cfg.hidden_act;
  return o;
}

void GatedDeltaNetOptions::validate() const {
  auto positive = [](const char* what, int64_t v) {
    if (v <= 0)
      throw Error(std::string("[gated_deltanet] ") + what + " must be positive, got " +
                  std::to_string(v));
  };
  positive("hidden size", hidden);
  positive("linear_num_key_heads", num_k_heads);
  positive("linear_num_value_heads", num_v_heads);
  positive("linear_key_head_dim", k_head_dim);
  positive("linear_value_head_dim", v_head_dim);
  positive("linear_conv_kernel_dim", conv_kernel);
  if (num_v_heads % num_k_heads != 0)
    throw Error("[gated_deltanet] linear_num_value_heads (" + std::to_string(num_v_heads) +
                ") must be a multiple of linear_num_key_heads (" + std::to_string(num_k_heads) +
                ")");
  if (chunk_size < 1 || (chunk_size & (chunk_size - 1)) != 0)
    throw Error("[gated_deltanet] chunk_size must be a power of two, got " +
                std::to_string(chunk_size));
  if (!(norm_eps > 0)) throw Error("[gated_deltanet] norm epsilon must be positive");
}

CausalConv1d::CausalConv1d(int64_t c, int64_t k, DType dtype, bool bias)
    : channels(c), kernel(k), has_bias(bias) {
  declare("weight", {c, 1, k}, dtype);
  if (bias) declare("bias", {c}, dtype);
}

Value CausalConv1d::forward(Graph& g, Value state, Value x, Value& present) const {
  Value xs = x.dtype() == state.dtype() ? x : Cast(x, state.dtype());
  Value full = Concat({state, xs}, 2);  // [batch, channels, K + seq]
  present = node1(g, "Slice", {full, Ints(g, {-kernel}), Ints(g, {INT64_MAX}), Ints(g, {2})},
                  TensorType(state.dtype(), {x.dim(0), Dim(channels), Dim(kernel)}));
  std::vector<Value> in{Cast(Slice(full, {1}, {INT64_MAX}, {2}), DType::Float),
                        param(g, "weight", DType::Float)};
  if (has_bias) in.push_back(param(g, "bias", DType::Float));
  return node1(g, "Conv", in, TensorType(DType::Float, {x.dim(0), Dim(channels), x.dim(2)}),
               {Attr("group", channels), Attr("kernel_shape", std::vector<int64_t>{kernel})});
}

namespace {

// A bias-free Linear whose weight has a fixed dtype (Undefined: the build's weight dtype).
class TypedLinear : public Linear {
 public:
  TypedLinear(int64_t in, int64_t out, DType dtype) : Linear(in, out, false) {
    declare("weight", {out, in}, dtype);
  }
};

}  // namespace

Value GatedRMSNorm::forward(Graph& g, Value x, Value gate) const {
  ScopeGuard s(g, path());
  Value n = Cast(normalized_f32(g, x), x.dtype());
  n = Cast(Mul(param(g, "weight", x.dtype()), n), DType::Float);
  return Cast(Mul(n, activation("silu", Cast(gate, DType::Float))), x.dtype());
}

GatedDeltaNet::GatedDeltaNet(const GatedDeltaNetOptions& o) : opt(o) {
  opt.validate();
  key_dim = opt.num_k_heads * opt.k_head_dim;
  value_dim = opt.num_v_heads * opt.v_head_dim;
  conv_dim = 2 * key_dim + value_dim;
  const DType in_dtype = opt.float32_inputs ? DType::Float : DType::Undefined;
  if (opt.fused_projections) {
    in_proj_qkvz = &add<TypedLinear>("in_proj_qkvz", opt.hidden, conv_dim + value_dim, in_dtype);
    in_proj_ba = &add<TypedLinear>("in_proj_ba", opt.hidden, 2 * opt.num_v_heads, in_dtype);
  } else {
    in_proj_qkv = &add<TypedLinear>("in_proj_qkv", opt.hidden, conv_dim, in_dtype);
    in_proj_z = &add<TypedLinear>("in_proj_z", opt.hidden, value_dim, in_dtype);
    in_proj_b = &add<TypedLinear>("in_proj_b", opt.hidden, opt.num_v_heads, in_dtype);
    in_proj_a = &add<TypedLinear>("in_proj_a", opt.hidden, opt.num_v_heads, in_dtype);
  }
  conv1d = &add<CausalConv1d>("conv1d", conv_dim, opt.conv_kernel, in_dtype);
  declare("A_log", {opt.num_v_heads}, in_dtype);
  declare("dt_bias", {opt.num_v_heads}, in_dtype);
  norm = &add<GatedRMSNorm>("norm", opt.v_head_dim, opt.norm_eps);
  out_proj = &add<Linear>("out_proj", value_dim, opt.hidden, false);
}

std::vector<CacheEntry> GatedDeltaNet::cache_entries(DType act) const {
  const DType conv = opt.float32_inputs ? DType::Float : act;
  const std::vector<Dim> state{Dim("batch_size"), Dim(opt.num_v_heads), Dim(opt.k_head_dim),
                               Dim(opt.v_head_dim)};
  return {{"conv_state", conv, {Dim("batch_size"), Dim(conv_dim), Dim(opt.conv_kernel)}},
          {"recurrent_state", DType::Float, state}};
}

namespace {


}  // namespace

Value GatedDeltaNet::forward(Graph& g, Value x, SharedInputs& shared, const CacheMap& past,
                             CacheMap& present) const {
  const int64_t hk = opt.num_k_heads, hv = opt.num_v_heads, dk = opt.k_head_dim,
                dv = opt.v_head_dim;
  Value keep = shared.recurrent_keep(shared.act);
  ScopeGuard scope(g, path());
  const DType out_dtype = x.dtype();
  x = Mul(x, keep);
  if (opt.float32_inputs) x = Cast(x, DType::Float);
  const DType act = x.dtype();  // of the block up to out_proj
  Value mixed, z, b, a;          // mixed [b, seq, conv_dim]: all q heads | k heads | v heads
  if (opt.fused_projections) {
    // Per key head j: [q_j | k_j | v, z of value heads j*r .. j*r + r - 1] and [b | a] of those
    // (transformers' fix_query_key_value_ordering); regrouped into Qwen3.5's layout.
    const int64_t r = hv / hk;
    auto qkvz = Split(Reshape(in_proj_qkvz->forward(g, x), {0, 0, hk, 2 * dk + 2 * r * dv}),
                      {dk, dk, r * dv, r * dv}, 3);
    mixed = Concat({Reshape(qkvz[0], {0, 0, key_dim}), Reshape(qkvz[1], {0, 0, key_dim}),
                    Reshape(qkvz[2], {0, 0, value_dim})},
                   -1);
    z = Reshape(qkvz[3], {0, 0, value_dim});
    auto ba = Split(Reshape(in_proj_ba->forward(g, x), {0, 0, hk, 2 * r}), {r, r}, 3);
    b = Reshape(ba[0], {0, 0, hv});
    a = Reshape(ba[1], {0, 0, hv});
  } else {
    mixed = in_proj_qkv->forward(g, x);
    z = in_proj_z->forward(g, x);
    b = in_proj_b->forward(g, x);
    a = in_proj_a->forward(g, x);
  }

  // float32 from the conv on, as transformers' delta rule.
  Value conv = conv1d->forward(g, past.at("conv_state"), Transpose(mixed, {0, 2, 1}),
                               present["conv_state"]);
  Value qkv = Transpose(activation(opt.act, conv), {0, 2, 1});  // [b, seq, conv_dim]
  auto parts = Split(qkv, {key_dim, key_dim, value_dim}, -1);
  Value q = Reshape(parts[0], {0, 0, hk, dk});
  Value k = Reshape(parts[1], {0, 0, hk, dk});
  Value v = Reshape(parts[2], {0, 0, hv, dv});
  q = Mul(l2norm(q), Scalar(g, DType::Float, 1.0 / std::sqrt(static_cast<double>(dk))));
  k = l2norm(k);
  q = Transpose(detail::repeat_groups(q, hv / hk), {0, 2, 1, 3});  // [b, hv, seq, dk]
  k = Transpose(detail::repeat_groups(k, hv / hk), {0, 2, 1, 3});
  v = Transpose(v, {0, 2, 1, 3});  // [b, hv, seq, dv]

  Value beta = Transpose(Sigmoid(Cast(b, DType::Float)), {0, 2, 1});  // [b, hv, seq]
  Value a_log = param(g, "A_log", DType::Float);
  Value dt_bias = param(g, "dt_bias", DType::Float);
  Value decay = Mul(Neg(Exp(a_log)), Softplus(Add(Cast(a, DType::Float), dt_bias)));
  decay = Transpose(decay, {0, 2, 1});

  auto [o, state] =
      gated_delta_rule(g, q, k, v, beta, decay, past.at("recurrent_state"), opt.chunk_size);
  present["recurrent_state"] = state;

  o = Cast(Transpose(o, {0, 2, 1, 3}), act);  // [b, seq, hv, dv]
  Value y = norm->forward(g, o, Reshape(z, {0, 0, hv, dv}));
  return out_proj->forward(g, Cast(Reshape(y, {0, 0, value_dim}), out_dtype));
}

MixerFactory gated_deltanet_mixer(bool float32_inputs) {
  return [float32_inputs](const ArchitectureConfig& c, int64_t, const DecoderSpec&) {
    auto opt = GatedDeltaNetOptions::from_config(c);
    opt.float32_inputs = float32_inputs;
    return std::make_unique<GatedDeltaNet>(opt);
  };
}

}  // namespace mobius::nn
