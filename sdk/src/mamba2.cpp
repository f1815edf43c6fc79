// mamba2.cpp - the Mamba-2 mixer and its selective scan (see mamba2.hpp).
//
// How the scan runs in ONNX. A one-token step on a cache (decoding) is the recurrence, a handful
// of plain ops on the state. Any other step is the chunked SSD form exactly as transformers'
// torch path writes it (mamba2_chunk_scan): within a chunk of C tokens the outputs are one masked
// "attention" (C B^T weighted by the decays exp(segment sums of dt A)) times dt x; each chunk's
// own state contribution is one matmul; the states at the chunk boundaries come from all chunks
// at once through the (chunks + 1)^2 matrix of decays between them, one more matmul, so there is
// no loop at all. An If on the step picks the form: the chunked form would pad a single token to
// a whole chunk.
//
// The segment sums are transformers' segment_sum: cumulative sums of masked copies, not
// differences of one cumulative sum, so exp() never sees the difference of two large sums (a
// long chunk's sums reach hundreds, where float32's spacing is already 3e-5).
#include "mobius/sdk/mamba2.hpp"

#include <climits>
#include <cmath>
#include <tuple>

#include "recurrent.hpp"

namespace mobius::nn {

using detail::node1;

using namespace mobius::op;

namespace {

// transformers' segment_sum over the last axis of x [.., T]: out[.., i, j] = x[j+1] + .. + x[i]
// for j <= i (0 on the diagonal), -inf above it. `strict` (i > j) and `incl` (i >= j) are bool
// [T, T].
Value segment_sum(Value x, Value strict, Value incl) {
  Graph& g = x.graph();
  Value rows = Where(strict, Unsqueeze(x, {-1}), Scalar(g, DType::Float, 0.0));  // [.., T, T]: x_i
  Value sums = CumSum(rows, -2);
  return Where(incl, sums, Scalar(g, DType::Float, -INFINITY));
}

// The masks of segment_sum for T = `n` (an int64 [1]) positions.
std::pair<Value, Value> triangle_masks(Value n) {
  Graph& g = n.graph();
  Value r = Range(Int(g, 0), Squeeze(n, {0}), Int(g, 1));
  Value rows = Unsqueeze(r, {1}), cols = Unsqueeze(r, {0});
  return {Greater(rows, cols), GreaterOrEqual(rows, cols)};
}

// One token on a state (transformers' mamba2_selective_state_update, D left to the caller):
// S = exp(dt A) S + dt x B^T, y = S C.
std::pair<Value, Value> ssd_step(Value x, Value dt, Value a, Value b, Value c, Value s) {
  Value dt4 = Unsqueeze(dt, {-1});                                 // [b, h, 1, 1]
  Value decay = Exp(Mul(dt4, Unsqueeze(a, {-1, -2})));             // a [h] -> [h, 1, 1]
  Value dbx = Mul(Transpose(x, {0, 1, 3, 2}), Mul(dt4, b));        // [b, h, p, 1] * [b, h, 1, n]
  s = Add(Mul(s, decay), dbx);                                     // [b, h, p, n]
  Value y = MatMul(c, Transpose(s, {0, 1, 3, 2}));                 // [b, h, 1, p]
  return {y, s};
}

// Any number of tokens: transformers' mamba2_chunk_scan (see the file comment).
std::pair<Value, Value> ssd_chunked(Value x, Value dt, Value a, Value b, Value c, Value s0,
                                    int64_t chunk, double dt_min, double dt_max) {
  Graph& g = x.graph();
  const Dim batch = x.dim(0), seq = x.dim(2);
  const int64_t h = x.dim(1).size, p = x.dim(3).size, n = b.dim(3).size;
  if (std::isfinite(dt_min)) dt = Max(dt, Scalar(g, DType::Float, dt_min));
  if (std::isfinite(dt_max)) dt = Min(dt, Scalar(g, DType::Float, dt_max));

  // Pad the sequence with zeros to whole chunks (dt A = 0 and x = B = C = 0 there: the padded
  // tokens change no state); their outputs are dropped at the end.
  Value len = DimOf(x, 2);
  Value cc = Ints(g, {chunk});
  Value padded = Mul(Div(Add(len, Ints(g, {chunk - 1})), cc), cc);
  Value extra = Sub(padded, len);
  Value pads4 = Concat({Ints(g, {0, 0, 0, 0, 0, 0}), extra, Ints(g, {0})}, 0);
  Value pads3 = Concat({Ints(g, {0, 0, 0, 0, 0}), extra}, 0);
  auto chunks4 = [&](Value v) {
    const int64_t d = v.dim(3).size;
    v = node1(g, "Pad", {v, pads4}, TensorType(DType::Float, {batch, h, Dim(), d}));
    return Reshape(v, {0, 0, -1, chunk, d});  // [b, h, nc, C, d]
  };
  auto chunks3 = [&](Value v) {
    v = node1(g, "Pad", {v, pads3}, TensorType(DType::Float, {batch, h, Dim()}));
    return Reshape(v, {0, 0, -1, chunk});  // [b, h, nc, C]
  };
  Value xc = chunks4(Mul(x, Unsqueeze(dt, {-1})));  // dt x
  Value bc = chunks4(b), cm = chunks4(c);
  Value ac = chunks3(Mul(dt, Unsqueeze(a, {-1})));  // dt A, <= 0
  Value cum = CumSum(ac, -1);                       // [b, h, nc, C]

  // The chunk's masks from a Range (a chunk of 256 would be two 64 KiB constants per layer).
  auto [strict_c, incl_c] = triangle_masks(cc);

  // 1. Within each chunk: y_diag = ((C B^T) * L) (dt x), L = exp(segment sums of dt A).
  Value decay_in = Exp(segment_sum(ac, strict_c, incl_c));  // [b, h, nc, C, C]
  Value scores = Mul(MatMul(cm, Transpose(bc, {0, 1, 2, 4, 3})), decay_in);
  Value y_diag = MatMul(scores, xc);  // [b, h, nc, C, p]

  // 2. Each chunk's contribution to the state at its end: (dt x)^T (B * decay to the end).
  Value last = Slice(cum, {chunk - 1}, {chunk}, {-1});  // [b, h, nc, 1]
  Value to_end = Exp(Sub(last, cum));
  Value states = MatMul(Transpose(xc, {0, 1, 2, 4, 3}), Mul(bc, Unsqueeze(to_end, {-1})));

  // 3. The state at every chunk boundary, from the initial state and all chunks at once: a
  // (nc + 1)^2 matrix of decays between boundaries times the stacked states.
  Value all = Concat({Unsqueeze(s0, {2}), states}, 2);  // [b, h, nc + 1, p, n]
  Value totals = node1(g, "Pad", {Squeeze(last, {-1}), Ints(g, {0, 0, 1, 0, 0, 0})},
                       TensorType(DType::Float, {batch, h, Dim()}));  // [b, h, nc + 1], 0 first
  auto [strict_n, incl_n] = triangle_masks(DimOf(totals, 2));
  Value decay_across = Exp(segment_sum(totals, strict_n, incl_n));  // [b, h, nc + 1, nc + 1]
  Value bounds = MatMul(decay_across, Reshape(all, {0, 0, 0, p * n}));
  Value starts = Reshape(Slice(bounds, {0}, {-1}, {2}), {0, 0, 0, p, n});  // [b, h, nc, p, n]
  Value final_state = Reshape(Slice(bounds, {-1}, {INT64_MAX}, {2}), {0, 0, p, n});

  // 4. The chunk's start state read by every token: y_off = (C S^T) * exp(cum).
  Value y_off = Mul(MatMul(cm, Transpose(starts, {0, 1, 2, 4, 3})), Unsqueeze(Exp(cum), {-1}));
  Value y = Reshape(Add(y_diag, y_off), {0, 0, -1, p});  // [b, h, padded, p]
  y = node1(g, "Slice", {y, Ints(g, {0}), len, Ints(g, {2})},
            TensorType(DType::Float, {batch, h, seq, p}));
  return {y, final_state};
}

// The norm after the scan with its weight [intermediate] (Mamba2GateNorm).
class GatedGroupNorm : public Module {
 public:
  GatedGroupNorm(int64_t dim, int64_t groups, double eps, Mamba2GateNorm kind)
      : dim(dim), groups(groups), eps(eps), kind(kind) {
    declare("weight", {dim});
  }
  // y float32 [b, seq, dim], gate (silu(z)) float32 [b, seq, dim]; returns float32.
  Value forward(Graph& g, Value y, Value gate) const {
    ScopeGuard s(g, path());
    if (kind == Mamba2GateNorm::GateThenNorm) y = Mul(y, gate);
    Value grouped = Reshape(y, {0, 0, groups, dim / groups});
    Value var = ReduceMean(Mul(grouped, grouped), {-1}, true);
    grouped = Mul(grouped, Reciprocal(Sqrt(Add(var, Scalar(g, DType::Float, eps)))));
    Value out = Mul(param(g, "weight", DType::Float), Reshape(grouped, {0, 0, dim}));
    return kind == Mamba2GateNorm::NormThenGate ? Mul(out, gate) : out;
  }
  int64_t dim, groups;
  double eps;
  Mamba2GateNorm kind;
};

[[noreturn]] void invalid(const std::string& why) {
  throw Error("[config] Mamba-2 mixer: " + why);
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// The scan

std::pair<Value, Value> mamba2_scan(Graph& g, Value x, Value dt, Value a, Value b, Value c,
                                    Value state, Value decode, int64_t chunk_size, double dt_min,
                                    double dt_max) {
  if (chunk_size < 1)
    throw Error("[mamba2_scan] chunk_size must be positive, got " + std::to_string(chunk_size));
  for (Value v : {x, dt, a, b, c, state})
    if (v.dtype() != DType::Float)
      throw Error("[mamba2_scan] inputs are float32, got '" + v.name() + "' " + v.type().str());
  if (x.rank() != 4 || dt.rank() != 3 || a.rank() != 1 || b.rank() != 4 || c.rank() != 4 ||
      state.rank() != 4 || !x.dim(1).is_static() || !x.dim(3).is_static() || !b.dim(3).is_static())
    throw Error(
        "[mamba2_scan] expects x [b, h, seq, p], dt [b, h, seq], a [h], b and c [b, h, seq, n], "
        "state [b, h, p, n] with static heads, head and state dims");
  if (decode.dtype() != DType::Bool || decode.rank() != 0)
    throw Error("[mamba2_scan] decode must be a boolean scalar, got '" + decode.name() + "' " +
                decode.type().str());
  const TensorType y_type(DType::Float, {x.dim(0), x.dim(1), x.dim(2), x.dim(3)});
  const TensorType s_type = state.type();
  auto step = g.subgraph("ssd_step");
  {
    Graph& sg = *step;
    auto [y, s] = ssd_step(sg.outer(x), sg.outer(dt), sg.outer(a), sg.outer(b), sg.outer(c),
                           sg.outer(state));
    sg.output(y, sg.fresh_name("y"));
    sg.output(s, sg.fresh_name("state"));
  }
  auto chunked = g.subgraph("ssd_chunked");
  {
    Graph& sg = *chunked;
    auto [y, s] = ssd_chunked(sg.outer(x), sg.outer(dt), sg.outer(a), sg.outer(b), sg.outer(c),
                              sg.outer(state), chunk_size, dt_min, dt_max);
    sg.output(y, sg.fresh_name("y"));
    sg.output(s, sg.fresh_name("state"));
  }
  auto outs = g.node("If", {decode}, {y_type, s_type},
                     {Attr("then_branch", step), Attr("else_branch", chunked)});
  return {outs[0], outs[1]};
}

// ---------------------------------------------------------------------------------------------
// Config

void Mamba2Config::validate() const {
  auto positive = [](const char* what, int64_t v, int64_t max) {
    if (v <= 0 || v > max)
      invalid(std::string(what) + " must be from 1 to " + std::to_string(max) + ", got " +
              std::to_string(v));
  };
  positive("hidden size", hidden, 1 << 17);
  positive("num_heads", num_heads, 1 << 14);
  positive("head_dim", head_dim, 1 << 12);
  positive("state_size", state_size, 1 << 12);
  positive("n_groups", n_groups, 1 << 14);
  positive("conv_kernel", conv_kernel, 256);
  positive("chunk_size", chunk_size, 1 << 14);
  if (intermediate != num_heads * head_dim)
    invalid("the SSM width " + std::to_string(intermediate) + " is not num_heads (" +
            std::to_string(num_heads) + ") times head_dim (" + std::to_string(head_dim) + ")");
  if (num_heads % n_groups != 0)
    invalid("n_groups (" + std::to_string(n_groups) + ") must divide num_heads (" +
            std::to_string(num_heads) + ")");
  if (!(norm_eps > 0)) invalid("the norm epsilon must be positive");
  if (std::isnan(dt_min) || std::isnan(dt_max) || dt_min > dt_max || dt_min == INFINITY ||
      dt_max == -INFINITY)
    invalid("time_step_limit must be [min, max] with min <= max");
  if (!projection_multipliers.empty() && projection_multipliers.size() != 5)
    invalid("the projection multipliers are one per part [z, x, B, C, dt]: 5, got " +
            std::to_string(projection_multipliers.size()));
  for (double m : projection_multipliers)
    if (!std::isfinite(m)) invalid("a projection multiplier is not a finite number");
  if (!std::isfinite(in_multiplier)) invalid("the input multiplier is not a finite number");
}

NLOHMANN_JSON_SERIALIZE_ENUM(Mamba2GateNorm, {{Mamba2GateNorm::GateThenNorm, "gate_then_norm"},
                                              {Mamba2GateNorm::NormThenGate, "norm_then_gate"},
                                              {Mamba2GateNorm::None, "none"}})

void to_json(nlohmann::json& j, const Mamba2Config& c) {
  auto bound = [](double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr); };
  j = nlohmann::json{{"hidden", c.hidden},
                     {"intermediate", c.intermediate},
                     {"num_heads", c.num_heads},
                     {"head_dim", c.head_dim},
                     {"state_size", c.state_size},
                     {"n_groups", c.n_groups},
                     {"conv_kernel", c.conv_kernel},
                     {"chunk_size", c.chunk_size},
                     {"conv_bias", c.conv_bias},
                     {"in_proj_bias", c.in_proj_bias},
                     {"out_proj_bias", c.out_proj_bias},
                     {"act", c.act},
                     {"norm_eps", c.norm_eps},
                     {"gate_norm", c.gate_norm},
                     {"dt_min", bound(c.dt_min)},
                     {"dt_max", bound(c.dt_max)},
                     {"in_multiplier", c.in_multiplier},
                     {"projection_multipliers", c.projection_multipliers}};
}

void from_json(const nlohmann::json& j, Mamba2Config& c) {
  c.hidden = j.at("hidden").get<int64_t>();
  c.intermediate = j.at("intermediate").get<int64_t>();
  c.num_heads = j.at("num_heads").get<int64_t>();
  c.head_dim = j.at("head_dim").get<int64_t>();
  c.state_size = j.at("state_size").get<int64_t>();
  c.n_groups = j.at("n_groups").get<int64_t>();
  c.conv_kernel = j.at("conv_kernel").get<int64_t>();
  c.chunk_size = j.at("chunk_size").get<int64_t>();
  c.conv_bias = j.at("conv_bias").get<bool>();
  c.in_proj_bias = j.at("in_proj_bias").get<bool>();
  c.out_proj_bias = j.at("out_proj_bias").get<bool>();
  c.act = j.at("act").get<std::string>();
  c.norm_eps = j.at("norm_eps").get<double>();
  c.gate_norm = j.at("gate_norm").get<Mamba2GateNorm>();
  const auto& lo = j.at("dt_min");
  const auto& hi = j.at("dt_max");
  c.dt_min = lo.is_null() ? -INFINITY : lo.get<double>();
  c.dt_max = hi.is_null() ? INFINITY : hi.get<double>();
  c.in_multiplier = j.at("in_multiplier").get<double>();
  c.projection_multipliers = j.at("projection_multipliers").get<std::vector<double>>();
}

std::pair<double, double> read_time_step_limit(const ConfigReader& r, const std::string& key) {
  const double inf = std::numeric_limits<double>::infinity();
  if (!r.has(key)) return {-inf, inf};  // absent or null: no clamp
  const nlohmann::json& v = r.raw().at(key);
  auto number = [&](const nlohmann::json& e) -> double {
    if (e.is_number()) return e.get<double>();
    const nlohmann::json* s = &e;
    if (e.is_object() && e.size() == 1 && e.contains("__float__")) s = &e.at("__float__");
    if (s->is_string()) {
      const std::string t = s->get<std::string>();
      if (t == "Infinity" || t == "inf" || t == "+inf") return inf;
      if (t == "-Infinity" || t == "-inf") return -inf;
    }
    r.fail(key, "must be [min, max] of numbers (an infinite bound as {\"__float__\": "
                "\"Infinity\"}), got " + describe_value(e));
  };
  if (!v.is_array() || v.size() != 2)
    r.fail(key, "must be [min, max], got " + describe_value(v));
  const double lo = number(v[0]), hi = number(v[1]);
  if (!(lo <= hi)) r.fail(key, "must be [min, max] with min <= max");
  return {lo, hi};
}

Mamba2Config read_mamba2_config(const ConfigReader& r, int64_t hidden, const Mamba2Keys& k,
                                const Mamba2Config& d, double default_expand) {
  Mamba2Config c = d;
  c.hidden = hidden;
  auto get_int = [&](const std::string& key, int64_t def, int64_t max) {
    if (key.empty() || !r.has(key)) return def;
    const int64_t v = r.get_int(key);
    if (v <= 0 || v > max)
      r.fail(key, "must be from 1 to " + std::to_string(max) + ", got " + std::to_string(v));
    return v;
  };
  auto get_bool = [&](const std::string& key, bool def) {
    return key.empty() ? def : r.get_bool(key, def);
  };
  c.num_heads = get_int(k.num_heads, d.num_heads, 1 << 14);
  c.state_size = get_int(k.state_size, d.state_size, 1 << 12);
  c.n_groups = get_int(k.n_groups, d.n_groups, 1 << 14);
  c.conv_kernel = get_int(k.conv_kernel, d.conv_kernel, 256);
  c.chunk_size = get_int(k.chunk_size, d.chunk_size, 1 << 14);
  c.conv_bias = get_bool(k.conv_bias, d.conv_bias);
  c.in_proj_bias = get_bool(k.in_proj_bias, d.in_proj_bias);
  c.out_proj_bias = get_bool(k.out_proj_bias, d.out_proj_bias);
  if (!k.act.empty()) c.act = r.get_string(k.act, d.act);
  check_activation(r, k.act.empty() ? "hidden_act" : k.act, c.act);
  if (!k.norm_eps.empty()) c.norm_eps = r.get_double(k.norm_eps, d.norm_eps);
  if (!(c.norm_eps > 0)) r.fail(k.norm_eps, "must be positive");
  if (!k.time_step_limit.empty()) std::tie(c.dt_min, c.dt_max) = read_time_step_limit(r, k.time_step_limit);

  // head_dim: a number, or "auto" (and absent with an "auto" default): the width / num_heads.
  int64_t head_dim = d.head_dim;
  if (!k.head_dim.empty() && r.has(k.head_dim)) {
    const nlohmann::json& v = r.raw().at(k.head_dim);
    head_dim = v.is_string() && v.get<std::string>() == "auto" ? 0 : get_int(k.head_dim, 0, 1 << 12);
  }
  // The width: the config's own key, else expand * hidden_size, else heads * head_dim.
  std::string width_from;
  const bool own_width = !k.intermediate.empty() && (r.has(k.intermediate) ||
                                                     (!r.raw().contains(k.intermediate) && d.intermediate > 0));
  if (own_width) {
    c.intermediate = get_int(k.intermediate, d.intermediate, 1 << 20);
    width_from = "'" + k.intermediate + "'";
  } else if (!k.expand.empty()) {
    const double expand = r.has(k.expand) ? r.get_double(k.expand) : default_expand;
    if (!(expand > 0) || expand > 64) r.fail(k.expand, "must be from 0 to 64");
    c.intermediate = static_cast<int64_t>(expand * static_cast<double>(hidden));
    width_from = "'" + k.expand + "' times 'hidden_size'";
  } else {
    if (head_dim == 0) r.fail(k.head_dim, "is required");
    c.intermediate = c.num_heads * head_dim;
  }
  if (head_dim == 0) {
    if (c.intermediate % c.num_heads != 0)
      r.fail(k.num_heads, "(" + std::to_string(c.num_heads) + ") must divide the SSM width " +
                              std::to_string(c.intermediate) + " (" + width_from + ")");
    head_dim = c.intermediate / c.num_heads;
  }
  c.head_dim = head_dim;
  if (c.num_heads * c.head_dim != c.intermediate)
    r.fail(k.head_dim, "(" + std::to_string(c.head_dim) + ") times '" + k.num_heads + "' (" +
                           std::to_string(c.num_heads) + ") must be the SSM width " +
                           std::to_string(c.intermediate) + " (" + width_from + ")");
  if (c.num_heads % c.n_groups != 0)
    r.fail(k.n_groups, "(" + std::to_string(c.n_groups) + ") must divide '" + k.num_heads +
                           "' (" + std::to_string(c.num_heads) + ")");
  c.validate();
  return c;
}

// ---------------------------------------------------------------------------------------------
// The mixer

Mamba2::Mamba2(const Mamba2Config& c) : cfg(c) {
  cfg.validate();
  const int64_t proj = cfg.intermediate + cfg.conv_dim() + cfg.num_heads;  // [z | xBC | dt]
  in_proj = &add<Linear>("in_proj", cfg.hidden, proj, cfg.in_proj_bias);
  conv1d = &add<CausalConv1d>("conv1d", cfg.conv_dim(), cfg.conv_kernel, DType::Undefined, cfg.conv_bias);
  declare("dt_bias", {cfg.num_heads});
  declare("A_log", {cfg.num_heads});
  declare("D", {cfg.num_heads});
  if (cfg.gate_norm != Mamba2GateNorm::None)
    norm = &add<GatedGroupNorm>("norm", cfg.intermediate, cfg.n_groups, cfg.norm_eps, cfg.gate_norm);
  out_proj = &add<Linear>("out_proj", cfg.intermediate, cfg.hidden, cfg.out_proj_bias);
}

std::vector<CacheEntry> Mamba2::cache_entries(DType act) const {
  return {{"conv_state", act, {Dim("batch_size"), Dim(cfg.conv_dim()), Dim(cfg.conv_kernel)}},
          {"ssm_state",
           DType::Float,
           {Dim("batch_size"), Dim(cfg.num_heads), Dim(cfg.head_dim), Dim(cfg.state_size)}}};
}

namespace {

// Shared by every Mamba-2 layer of a graph: {keep [batch, seq, 1] in the activation dtype, 0
// where a padded input is zeroed, else 1; decode, a boolean scalar: a one-token step on a
// cache}. transformers (create_recurrent_attention_mask, apply_mask_to_padding_states) zeroes
// the padded positions of every multi-token step and never those of a one-token step (a
// generated token is never padding), and takes the recurrence for one token on a cache.
std::pair<Value, Value> step_inputs(Graph& g, SharedInputs& shared) {
  const std::string dkey = "mamba2/decode";
  Value keep = shared.recurrent_keep(shared.act, true);
  if (auto it = shared.memo.find(dkey); it != shared.memo.end()) return {keep, it->second};
  ScopeGuard s(g, "mask");
  Value decode = Squeeze(shared.one_token_on_cache(), {0});
  shared.memo[dkey] = decode;
  return {keep, decode};
}

}  // namespace

Value Mamba2::forward(Graph& g, Value x, SharedInputs& shared, const CacheMap& past,
                      CacheMap& present) const {
  auto [keep, decode] = step_inputs(g, shared);
  ScopeGuard scope(g, path());
  const DType act = x.dtype();
  const int64_t h = cfg.num_heads, p = cfg.head_dim, n = cfg.state_size, groups = cfg.n_groups;
  const int64_t inter = cfg.intermediate, conv_dim = cfg.conv_dim();

  x = Mul(x, keep);
  if (cfg.in_multiplier != 1.0) x = Mul(x, ScalarLike(x, cfg.in_multiplier));
  Value proj = in_proj->forward(g, x);  // [b, seq, z | xBC | dt]
  if (!cfg.projection_multipliers.empty()) {
    // FalconH1's mup_vector: one multiplier per part, [z, x, B, C, dt].
    const auto& m = cfg.projection_multipliers;
    std::vector<double> v;
    const int64_t sizes[] = {inter, inter, groups * n, groups * n, h};
    std::string key = "mamba2/mup_vector";  // one constant for every layer that has these
    for (size_t i = 0; i < 5; ++i) {
      v.insert(v.end(), static_cast<size_t>(sizes[i]), m[i]);
      key += "/" + std::to_string(sizes[i]) + ":" + std::to_string(m[i]);
    }
    auto it = shared.memo.find(key);
    if (it == shared.memo.end())
      it = shared.memo.emplace(key, Constant(g, act, {static_cast<int64_t>(v.size())}, v, "mup_vector")).first;
    proj = Mul(proj, it->second);
  }
  auto parts = Split(proj, {inter, conv_dim, h}, -1);
  Value z = parts[0], xbc = parts[1], dt = parts[2];

  // float32 from the conv on, as transformers' scan.
  Value conv = conv1d->forward(g, past.at("conv_state"), Transpose(xbc, {0, 2, 1}),
                               present["conv_state"]);
  xbc = Mul(Transpose(activation(cfg.act, conv), {0, 2, 1}), Cast(keep, DType::Float));
  auto xs = Split(xbc, {inter, groups * n, groups * n}, -1);

  // Heads first: x [b, h, seq, p], B and C [b, h, seq, n] (each group's repeated for its heads).
  Value xh = Transpose(Reshape(xs[0], {0, 0, h, p}), {0, 2, 1, 3});
  Value bh = Transpose(detail::repeat_groups(Reshape(xs[1], {0, 0, groups, n}), h / groups), {0, 2, 1, 3});
  Value ch = Transpose(detail::repeat_groups(Reshape(xs[2], {0, 0, groups, n}), h / groups), {0, 2, 1, 3});
  Value dtf = Softplus(Add(Cast(dt, DType::Float), param(g, "dt_bias", DType::Float)));
  dtf = Transpose(dtf, {0, 2, 1});  // [b, h, seq]
  Value a = Neg(Exp(param(g, "A_log", DType::Float)));

  auto [y, state] = mamba2_scan(g, xh, dtf, a, bh, ch, past.at("ssm_state"), decode,
                                cfg.chunk_size, cfg.dt_min, cfg.dt_max);
  present["ssm_state"] = state;
  // The D skip, on the step's x.
  y = Add(y, Mul(xh, Unsqueeze(param(g, "D", DType::Float), {-1, -2})));
  y = Reshape(Transpose(y, {0, 2, 1, 3}), {0, 0, inter});  // [b, seq, inter]

  Value gate = activation("silu", Cast(z, DType::Float));
  if (norm) y = static_cast<const GatedGroupNorm*>(norm)->forward(g, y, gate);
  else y = Mul(y, gate);
  return out_proj->forward(g, Cast(y, act));
}

MixerFactory mamba2_mixer(const Mamba2Config& cfg) {
  return [cfg](const ArchitectureConfig&, int64_t, const DecoderSpec&) {
    return std::make_unique<Mamba2>(cfg);
  };
}

}  // namespace mobius::nn
