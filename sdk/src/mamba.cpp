// mamba.cpp - the Mamba mixer and the selective scan (see mamba.hpp).
//
// How the scan runs in ONNX. A step of one token (decoding) is the recurrence itself, a handful
// of plain ops. A longer step runs the same ops as the body of an ONNX Scan over the tokens,
// carrying the state. Mamba-1's decay exp(dt A) differs per channel and per state index, so the
// state cannot leave the loop the way Mamba-2's or Gated DeltaNet's chunked forms move it (their
// decay is one scalar per head, which turns the work inside a chunk into matmuls): each token's
// update touches the whole state once, which is also the least work the recurrence needs.
// Measured on mamba-130m's shapes with ONNX Runtime 1.30 on the CPU (prefill of 256 and 1024
// tokens, CPU time), a Scan over single tokens cost the least of the forms tried: chunks of 4 to
// 16 tokens per iteration (their decays and inputs computed at once, then split to the tokens)
// took 6 to 9% more for the whole model, a Scan over chunks of 64 around a Scan over their tokens
// 30% more. What batching saves in iterations it spends copying the chunk's slices: the scan is
// bound by the state's memory traffic, not by the loop.
// The state is laid out [batch, N, I], transposed from transformers' [batch, I, N]: every
// broadcast of the body (dt across the N rows of A, B[n] across a row of I) then runs along
// contiguous rows of I, which ONNX Runtime's elementwise kernels vectorize; in the other layout
// each broadcast is a loop over spans of N = 16.
// An If on the step length picks the form, so decoding pays for the recurrence alone.
// Everything in the scan computes in float32, as transformers does whatever the model dtype.
#include "mobius/sdk/mamba.hpp"

#include <climits>
#include <cmath>

#include "mobius/sdk/gated_deltanet.hpp"

#include "recurrent.hpp"

namespace mobius::nn {

using detail::node1;

using namespace mobius::op;

namespace {

// One token of transformers' mamba_selective_state_update (no D, no gate): dt and dt u [b, 1, I],
// b [b, N, 1], c [b, 1, N], at [N, I], h [b, N, I]. Returns {y [b, 1, I], the new state}.
std::pair<Value, Value> scan_token(Value dt, Value dtu, Value at, Value b, Value c, Value h) {
  Value decay = Exp(Mul(dt, at));  // [b, N, I]
  h = Add(Mul(h, decay), Mul(dtu, b));
  return {MatMul(c, h), h};
}

// Any number of tokens: a Scan over them, its body scan_token (see the file comment).
std::pair<Value, Value> scan_tokens(Value dt, Value dtu, Value at, Value b, Value c, Value s0) {
  Graph& g = dt.graph();
  const Dim batch = dt.dim(0), seq = dt.dim(1);
  const int64_t i = dt.dim(2).size, n = b.dim(2).size;
  auto body = g.subgraph("selective_scan");
  Graph& sb = *body;
  auto in = [&](const char* name, std::vector<Dim> dims) {
    return sb.input(sb.fresh_name(name), TensorType(DType::Float, std::move(dims)));
  };
  Value h = in("state", {batch, n, i});
  Value dt_t = in("dt", {batch, 1, i});
  Value dtu_t = in("dtu", {batch, 1, i});
  Value b_t = in("b", {batch, n, 1});
  Value c_t = in("c", {batch, 1, n});
  auto [y, h_next] = scan_token(dt_t, dtu_t, sb.outer(at), b_t, c_t, h);
  sb.output(h_next, sb.fresh_name("state_out"));
  sb.output(y, sb.fresh_name("y"));
  // Each token's slice arrives in the shape scan_token takes: [b, 1, I], [b, N, 1], [b, 1, N].
  auto outs = g.node("Scan", {s0, Unsqueeze(dt, {2}), Unsqueeze(dtu, {2}), Unsqueeze(b, {3}),
                              Unsqueeze(c, {2})},
                     {s0.type(), TensorType(DType::Float, {batch, seq, 1, i})},
                     {Attr("body", body), Attr("num_scan_inputs", int64_t{4}),
                      Attr("scan_input_axes", std::vector<int64_t>(4, 1)),
                      Attr("scan_output_axes", std::vector<int64_t>{1})});
  return {Reshape(outs[1], {0, 0, i}), outs[0]};
}

}  // namespace

std::pair<Value, Value> selective_scan(Graph& g, Value u, Value dt, Value a, Value b, Value c,
                                       Value state) {
  for (Value x : {u, dt, a, b, c, state})
    if (x.dtype() != DType::Float)
      throw Error("[selective_scan] inputs are float32, got '" + x.name() + "' " + x.type().str());
  if (u.rank() != 3 || dt.rank() != 3 || a.rank() != 2 || b.rank() != 3 || c.rank() != 3 ||
      state.rank() != 3 || !u.dim(2).is_static() || !b.dim(2).is_static() ||
      !(a.dim(0) == b.dim(2)) || !(a.dim(1) == u.dim(2)))
    throw Error(
        "[selective_scan] expects u, dt [b, seq, I], a [N, I], b, c [b, seq, N], state [b, N, I] "
        "with static I and N");

  const TensorType y_type(DType::Float, {u.dim(0), u.dim(1), u.dim(2)});
  const TensorType s_type = state.type();
  const int64_t n = b.dim(2).size;
  Value one_token = Squeeze(Equal(DimOf(u, 1), Ints(g, {1})), {0});
  Value dtu = Mul(dt, u);
  auto step = g.subgraph("scan_step");
  {
    Graph& sg = *step;
    auto [y, s] = scan_token(sg.outer(dt), sg.outer(dtu), sg.outer(a),
                             Reshape(sg.outer(b), {0, n, 1}), sg.outer(c), sg.outer(state));
    sg.output(y, sg.fresh_name("y"));
    sg.output(s, sg.fresh_name("state"));
  }
  auto tokens = g.subgraph("scan_tokens");
  {
    Graph& sg = *tokens;
    auto [y, s] = scan_tokens(sg.outer(dt), sg.outer(dtu), sg.outer(a), sg.outer(b),
                              sg.outer(c), sg.outer(state));
    sg.output(y, sg.fresh_name("y"));
    sg.output(s, sg.fresh_name("state"));
  }
  auto outs = g.node("If", {one_token}, {y_type, s_type},
                     {Attr("then_branch", step), Attr("else_branch", tokens)});
  return {outs[0], outs[1]};
}

// ---------------------------------------------------------------------------------------------

MambaConfig MambaConfig::read(const ConfigReader& r, const std::string& model_type,
                              int64_t hidden_size) {
  const bool jamba = model_type == "jamba";
  if (!jamba && model_type != "mamba")
    throw Error("[mamba] no config keys are known for model type '" + model_type + "'");
  auto key = [jamba](const char* mamba_key, const char* jamba_key) {
    return std::string(jamba ? jamba_key : mamba_key);
  };
  auto bounded = [&r](const std::string& k, int64_t def, int64_t max) {
    const int64_t v = r.get_int(k, def);
    if (v < 1 || v > max)
      r.fail(k, "must be from 1 to " + std::to_string(max) + ", got " + std::to_string(v));
    return v;
  };
  MambaConfig c;
  c.hidden = hidden_size;
  // MambaConfig's and JambaConfig's defaults.
  c.state_size = bounded(key("state_size", "mamba_d_state"), 16, 1024);
  c.conv_kernel = bounded(key("conv_kernel", "mamba_d_conv"), 4, 256);
  const std::string expand_key = key("expand", "mamba_expand");
  const int64_t expand = bounded(expand_key, 2, 64);
  c.intermediate = expand * hidden_size;
  if (c.intermediate > (int64_t{1} << 20))
    r.fail(expand_key, "times 'hidden_size' gives " + std::to_string(c.intermediate) +
                           " channels, more than the 1048576 mobius accepts");
  // "auto" (the default) is ceil(hidden_size / 16), as both configs' __post_init__ set it.
  const std::string rank_key = key("time_step_rank", "mamba_dt_rank");
  const nlohmann::json& raw = r.raw();
  const auto rank = raw.find(rank_key);
  const bool automatic = rank == raw.end() || rank->is_null() ||
                         (rank->is_string() && rank->get<std::string>() == "auto");
  if (automatic)
    c.dt_rank = (hidden_size + 15) / 16;
  else
    c.dt_rank = bounded(rank_key, 0, int64_t{1} << 17);
  c.proj_bias = r.get_bool(key("use_bias", "mamba_proj_bias"), false);
  c.conv_bias = r.get_bool(key("use_conv_bias", "mamba_conv_bias"), true);
  c.act = r.get_string("hidden_act", "silu");
  check_activation(r, "hidden_act", c.act);
  if (jamba) {
    c.dt_bc_norms = true;
    c.norm_eps = r.get_double("rms_norm_eps", 1e-6);
    if (!(c.norm_eps > 0)) r.fail("rms_norm_eps", "must be positive");
  }
  c.validate();
  return c;
}

void MambaConfig::validate() const {
  auto positive = [](const char* what, int64_t v) {
    if (v <= 0)
      throw Error(std::string("[mamba] ") + what + " must be positive, got " + std::to_string(v));
  };
  positive("hidden size", hidden);
  positive("intermediate size", intermediate);
  positive("state_size", state_size);
  positive("conv_kernel", conv_kernel);
  positive("time_step_rank", dt_rank);
  if (dt_bc_norms && !(norm_eps > 0))
    throw Error("[mamba] the dt/B/C norms' epsilon must be positive");
}

namespace {

// softplus(x) = max(x, 0) + log(1 + exp(-|x|)), as plain ops: ONNX Runtime 1.30's Softplus
// kernel is not vectorized and took about 8% of a mamba-130m prefill on its own. The result
// differs from torch's log1p(exp(x)) by less than 6e-8, where exp(-|x|) vanishes beside 1.
Value softplus(Value x) {
  Value one = ScalarLike(x, 1.0);
  return Add(Relu(x), Log(Add(Exp(Neg(Abs(x))), one)));
}

// A Linear whose weight (and bias) keep a fixed dtype: float32 here, never quantized.
class TypedLinear : public Linear {
 public:
  TypedLinear(int64_t in, int64_t out, bool bias, DType dtype) : Linear(in, out, bias) {
    declare("weight", {out, in}, dtype);
    if (bias) declare("bias", {out}, dtype);
  }
};



}  // namespace

Mamba::Mamba(const MambaConfig& c) : cfg(c) {
  cfg.validate();
  const int64_t i = cfg.intermediate, n = cfg.state_size;
  in_proj = &add<Linear>("in_proj", cfg.hidden, 2 * i, cfg.proj_bias);
  conv1d = &add<CausalConv1d>("conv1d", i, cfg.conv_kernel, DType::Float, cfg.conv_bias);
  x_proj = &add<TypedLinear>("x_proj", i, cfg.dt_rank + 2 * n, false, DType::Float);
  dt_proj = &add<TypedLinear>("dt_proj", cfg.dt_rank, i, true, DType::Float);
  declare("A_log", {i, n}, DType::Float);
  declare("D", {i}, DType::Float);
  out_proj = &add<Linear>("out_proj", i, cfg.hidden, cfg.proj_bias);
  if (cfg.dt_bc_norms) {
    auto norm = [&](const char* name, int64_t dim) -> const Norm* {
      return &add<RMSNorm>(name, dim, cfg.norm_eps);
    };
    dt_layernorm = norm("dt_layernorm", cfg.dt_rank);
    b_layernorm = norm("b_layernorm", n);
    c_layernorm = norm("c_layernorm", n);
  }
}

std::vector<CacheEntry> Mamba::cache_entries(DType act) const {
  const Dim b("batch_size"), i(cfg.intermediate);
  return {{"conv_state", act, {b, i, Dim(cfg.conv_kernel)}},
          {"ssm_state", DType::Float, {b, Dim(cfg.state_size), i}}};
}

Value Mamba::a_transposed(Graph& g) const {
  BuildContext& ctx = g.context();
  const std::string name = full_name("A_log") + "_neg_exp_t";
  if (auto v = ctx.graph().find_initializer(name)) return *v;
  const int64_t i = cfg.intermediate, n = cfg.state_size;
  Value v = ctx.graph().initializer(name, TensorType(DType::Float, {Dim(n), Dim(i)}));
  const std::string source = source_tensor("A_log");
  // The transform sees the tensor only while the weights stream; a wrong shape is found here,
  // before anything is written, from the checkpoint's header.
  if (auto t = ctx.query_tensor(source); t && t->dims != std::vector<int64_t>{i, n})
    throw Error("[checkpoint] tensor '" + source + "' has shape " + shape_text(t->dims) +
                ", the graph expects " + shape_text({i, n}) + " (intermediate size, state size)");
  auto transform = [i, n, source](const std::vector<HostTensor>& in, float* out, size_t) {
    if (in.size() != 1 || in[0].dims != std::vector<int64_t>{i, n})
      throw Error("[mamba] '" + source + "' must have shape " + shape_text({i, n}) + ", got " +
                  (in.empty() ? std::string("none") : shape_text(in[0].dims)));
    for (int64_t r = 0; r < i; ++r)
      for (int64_t k = 0; k < n; ++k) out[k * i + r] = -std::exp(in[0].data[r * n + k]);
  };
  ctx.plan_transformed(name, {source}, transform);
  return v;
}

Value Mamba::forward(Graph& g, Value x, SharedInputs& shared, const CacheMap& past,
                     CacheMap& present) const {
  const int64_t i = cfg.intermediate, n = cfg.state_size, r = cfg.dt_rank;
  const DType act = x.dtype();
  Value keep = shared.recurrent_keep(act);
  Value keep_f = shared.recurrent_keep(DType::Float);
  ScopeGuard scope(g, path());
  auto xz = Split(in_proj->forward(g, Mul(x, keep)), {i, i}, -1);  // [b, seq, I] each

  Value conv = conv1d->forward(g, past.at("conv_state"), Transpose(xz[0], {0, 2, 1}),
                               present["conv_state"]);
  Value u = Mul(Transpose(activation(cfg.act, conv), {0, 2, 1}), keep_f);  // [b, seq, I]

  auto dbc = Split(x_proj->forward(g, u), {r, n, n}, -1);
  Value dt = dbc[0], b = dbc[1], c = dbc[2];
  if (cfg.dt_bc_norms) {
    dt = dt_layernorm->forward(g, dt);
    b = b_layernorm->forward(g, b);
    c = c_layernorm->forward(g, c);
  }
  dt = softplus(dt_proj->forward(g, dt));  // dt_proj's bias is the scan's delta_bias
  auto [y, state] = selective_scan(g, u, dt, a_transposed(g), b, c, past.at("ssm_state"));
  present["ssm_state"] = state;

  y = Add(y, Mul(u, param(g, "D", DType::Float)));
  y = Mul(y, activation("silu", Cast(xz[1], DType::Float)));
  return out_proj->forward(g, Cast(y, act));
}

MixerFactory mamba_mixer(const MambaConfig& cfg) {
  return [cfg](const ArchitectureConfig&, int64_t, const DecoderSpec&) {
    return std::make_unique<Mamba>(cfg);
  };
}

}  // namespace mobius::nn
