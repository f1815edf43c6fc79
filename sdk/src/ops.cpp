// ops.cpp - operator builders with type inference and build-time checks.
#include "mobius/sdk/ops.hpp"

#include <algorithm>
#include <climits>
#include <cstring>

#include "mobius/sdk/context.hpp"
#include "mobius/sdk/half.hpp"

namespace mobius::op {
namespace {

[[noreturn]] void fail(const std::string& op, const std::string& msg) {
  throw Error("[" + op + "] " + msg);
}

std::string desc(Value v) { return "'" + v.name() + "' " + v.type().str(); }

// Picks the graph a node goes into: the innermost one among its inputs (subgraphs may read
// outer values, never the reverse).
Graph& target_graph(const std::vector<Value>& vs) {
  Graph* g = nullptr;
  for (const Value& v : vs)
    if (v.valid()) {
      // A value of a subgraph is never visible outside it; prefer the graph that is not
      // the main graph when inputs mix (the subgraph sees the outer values by name).
      if (!g || &v.graph() != &v.graph().context().graph()) g = &v.graph();
    }
  if (!g) throw Error("[graph] node without valid inputs");
  return *g;
}

Value single(const std::string& op, const std::vector<Value>& ins, const TensorType& out,
             const std::vector<Attr>& attrs = {}, const std::string& domain = "") {
  return target_graph(ins).node(op, ins, {out}, attrs, domain)[0];
}

int64_t norm_axis(const std::string& op, int64_t axis, int rank, Value v) {
  if (rank < 0) return axis;
  int64_t a = axis < 0 ? axis + rank : axis;
  if (a < 0 || a >= rank)
    fail(op, "axis " + std::to_string(axis) + " out of range for " + desc(v));
  return a;
}

Dim broadcast_dim(const std::string& op, const Dim& a, const Dim& b, Value va, Value vb) {
  if (a == b) return a;
  if (a.is_static() && a.size == 1) return b;
  if (b.is_static() && b.size == 1) return a;
  if (a.is_static() && b.is_static())
    fail(op, "shapes do not broadcast: " + desc(va) + " and " + desc(vb));
  if (a.is_static()) return a;
  if (b.is_static()) return b;
  if (!a.known()) return b;
  if (!b.known()) return a;
  return Dim();  // two different symbols: unknown until run time
}

TensorType broadcast(const std::string& op, Value a, Value b, DType out) {
  const TensorType& ta = a.type();
  const TensorType& tb = b.type();
  if (!ta.rank_known || !tb.rank_known) return TensorType::unranked(out);
  size_t r = std::max(ta.dims.size(), tb.dims.size());
  std::vector<Dim> dims(r);
  for (size_t i = 0; i < r; ++i) {
    Dim da = i < r - ta.dims.size() ? Dim(1) : ta.dims[i - (r - ta.dims.size())];
    Dim db = i < r - tb.dims.size() ? Dim(1) : tb.dims[i - (r - tb.dims.size())];
    dims[i] = broadcast_dim(op, da, db, a, b);
  }
  return TensorType(out, dims);
}

void same_dtype(const std::string& op, Value a, Value b) {
  if (a.dtype() != b.dtype())
    fail(op, "dtype mismatch: " + desc(a) + " vs " + desc(b));
}

Value binary(const std::string& op, Value a, Value b) {
  same_dtype(op, a, b);
  return single(op, {a, b}, broadcast(op, a, b, a.dtype()));
}

Value compare(const std::string& op, Value a, Value b) {
  same_dtype(op, a, b);
  return single(op, {a, b}, broadcast(op, a, b, DType::Bool));
}

Value logical(const std::string& op, Value a, Value b) {
  if (a.dtype() != DType::Bool || b.dtype() != DType::Bool)
    fail(op, "needs bool inputs, got " + desc(a) + " and " + desc(b));
  return single(op, {a, b}, broadcast(op, a, b, DType::Bool));
}

Value unary(const std::string& op, Value x, bool float_only = true) {
  if (float_only && !is_floating(x.dtype())) fail(op, "needs a floating input, got " + desc(x));
  return single(op, {x}, x.type());
}

std::vector<uint8_t> encode(DType dtype, const std::vector<double>& values) {
  std::vector<uint8_t> bytes;
  auto put = [&](const void* p, size_t n) {
    const auto* b = static_cast<const uint8_t*>(p);
    bytes.insert(bytes.end(), b, b + n);
  };
  for (double v : values) {
    switch (dtype) {
      case DType::Float: {
        float f = static_cast<float>(v);
        put(&f, 4);
        break;
      }
      case DType::Double: put(&v, 8); break;
      case DType::Float16: {
        uint16_t h = float_to_f16(static_cast<float>(v));
        put(&h, 2);
        break;
      }
      case DType::BFloat16: {
        uint16_t h = float_to_bf16(static_cast<float>(v));
        put(&h, 2);
        break;
      }
      case DType::Int64: {
        auto i = static_cast<int64_t>(v);
        put(&i, 8);
        break;
      }
      case DType::Int32: {
        auto i = static_cast<int32_t>(v);
        put(&i, 4);
        break;
      }
      case DType::Bool:
      case DType::UInt8: {
        auto i = static_cast<uint8_t>(v != 0);
        if (dtype == DType::UInt8) i = static_cast<uint8_t>(v);
        put(&i, 1);
        break;
      }
      case DType::Int8: {
        auto i = static_cast<int8_t>(v);
        put(&i, 1);
        break;
      }
      case DType::Int16: {
        auto i = static_cast<int16_t>(v);
        put(&i, 2);
        break;
      }
      default: fail("Constant", std::string("unsupported dtype ") + to_string(dtype));
    }
  }
  return bytes;
}

}  // namespace

// ---- constants -----------------------------------------------------------------------------

Value Constant(Graph& g, DType dtype, const std::vector<int64_t>& dims,
               const std::vector<double>& values, const std::string& hint) {
  int64_t n = 1;
  std::vector<Dim> d;
  for (int64_t x : dims) {
    if (x < 0) fail("Constant", "negative dimension");
    n *= x;
    d.emplace_back(x);
  }
  if (static_cast<size_t>(n) != values.size())
    fail("Constant", "shape holds " + std::to_string(n) + " values, got " +
                         std::to_string(values.size()));
  auto bytes = encode(dtype, values);
  return g.constant(TensorType(dtype, d), bytes.data(), bytes.size(), hint);
}

Value Scalar(Graph& g, DType dtype, double v) { return Constant(g, dtype, {}, {v}); }

Value Ints(Graph& g, const std::vector<int64_t>& v) {
  std::vector<Dim> d{Dim(static_cast<int64_t>(v.size()))};
  return g.constant(TensorType(DType::Int64, d), v.data(), v.size() * sizeof(int64_t), "ints");
}

Value Int(Graph& g, int64_t v) {
  return g.constant(TensorType(DType::Int64, {}), &v, sizeof(v), "int");
}

Value ScalarLike(Value x, double v) { return Scalar(x.graph(), x.dtype(), v); }

// ---- elementwise -----------------------------------------------------------------------------

Value Add(Value a, Value b) { return binary("Add", a, b); }
Value Sub(Value a, Value b) { return binary("Sub", a, b); }
Value Mul(Value a, Value b) { return binary("Mul", a, b); }
Value Div(Value a, Value b) { return binary("Div", a, b); }
Value Pow(Value a, Value b) {
  return single("Pow", {a, b}, broadcast("Pow", a, b, a.dtype()));
}
Value Max(Value a, Value b) { return binary("Max", a, b); }
Value Min(Value a, Value b) { return binary("Min", a, b); }
Value Equal(Value a, Value b) { return compare("Equal", a, b); }
Value Less(Value a, Value b) { return compare("Less", a, b); }
Value LessOrEqual(Value a, Value b) { return compare("LessOrEqual", a, b); }
Value Greater(Value a, Value b) { return compare("Greater", a, b); }
Value GreaterOrEqual(Value a, Value b) { return compare("GreaterOrEqual", a, b); }
Value And(Value a, Value b) { return logical("And", a, b); }
Value Or(Value a, Value b) { return logical("Or", a, b); }

Value Where(Value cond, Value a, Value b) {
  if (cond.dtype() != DType::Bool) fail("Where", "condition must be bool, got " + desc(cond));
  same_dtype("Where", a, b);
  TensorType ab = broadcast("Where", a, b, a.dtype());
  TensorType out = ab;
  if (ab.rank_known && cond.type().rank_known) {
    // Broadcast the condition's shape in as well.
    size_t r = std::max(ab.dims.size(), cond.type().dims.size());
    std::vector<Dim> dims(r);
    const std::vector<Dim> tc = cond.type().dims;
    for (size_t i = 0; i < r; ++i) {
      Dim x = i < r - ab.dims.size() ? Dim(1) : ab.dims[i - (r - ab.dims.size())];
      Dim c = i < r - tc.size() ? Dim(1) : tc[i - (r - tc.size())];
      dims[i] = broadcast_dim("Where", x, c, a, cond);
    }
    out = TensorType(a.dtype(), dims);
  } else {
    out = TensorType::unranked(a.dtype());
  }
  return single("Where", {cond, a, b}, out);
}

Value Neg(Value x) { return unary("Neg", x, false); }
Value Abs(Value x) { return unary("Abs", x, false); }
Value Sqrt(Value x) { return unary("Sqrt", x); }
Value Reciprocal(Value x) { return unary("Reciprocal", x); }
Value Exp(Value x) { return unary("Exp", x); }
Value Log(Value x) { return unary("Log", x); }
Value Tanh(Value x) { return unary("Tanh", x); }
Value Sigmoid(Value x) { return unary("Sigmoid", x); }
Value Softplus(Value x) { return unary("Softplus", x); }
Value Relu(Value x) { return unary("Relu", x); }
Value Erf(Value x) { return unary("Erf", x); }
Value Cos(Value x) { return unary("Cos", x); }
Value Sin(Value x) { return unary("Sin", x); }
Value Not(Value x) {
  if (x.dtype() != DType::Bool) fail("Not", "needs a bool input, got " + desc(x));
  return unary("Not", x, false);
}
Value Identity(Value x) { return unary("Identity", x, false); }

Value Cast(Value x, DType to) {
  if (x.dtype() == to) return x;
  TensorType t = x.type();
  t.dtype = to;
  return single("Cast", {x}, t, {Attr("to", static_cast<int64_t>(to))});
}

// ---- linear algebra and reductions -------------------------------------------------------

Value MatMul(Value a, Value b) {
  same_dtype("MatMul", a, b);
  const TensorType& ta = a.type();
  const TensorType& tb = b.type();
  if (!ta.rank_known || !tb.rank_known) return single("MatMul", {a, b}, TensorType::unranked(a.dtype()));
  if (ta.dims.empty() || tb.dims.empty()) fail("MatMul", "scalar operand: " + desc(a) + " x " + desc(b));
  std::vector<Dim> da = ta.dims, db = tb.dims;
  bool va = da.size() == 1, vb = db.size() == 1;
  if (va) da.insert(da.begin(), Dim(1));
  if (vb) db.emplace_back(1);
  const Dim& k1 = da.back();
  const Dim& k2 = db[db.size() - 2];
  if (k1.is_static() && k2.is_static() && k1.size != k2.size)
    fail("MatMul", "inner dimensions differ: " + desc(a) + " x " + desc(b));
  size_t ba = da.size() - 2, bb = db.size() - 2, r = std::max(ba, bb);
  std::vector<Dim> out(r);
  for (size_t i = 0; i < r; ++i) {
    Dim x = i < r - ba ? Dim(1) : da[i - (r - ba)];
    Dim y = i < r - bb ? Dim(1) : db[i - (r - bb)];
    out[i] = broadcast_dim("MatMul", x, y, a, b);
  }
  if (!va) out.push_back(da[da.size() - 2]);
  if (!vb) out.push_back(db.back());
  return single("MatMul", {a, b}, TensorType(a.dtype(), out));
}

Value Softmax(Value x, int64_t axis) {
  if (!is_floating(x.dtype())) fail("Softmax", "needs a floating input, got " + desc(x));
  norm_axis("Softmax", axis, x.rank(), x);
  return single("Softmax", {x}, x.type(), {Attr("axis", axis)});
}

namespace {
TensorType reduced(const std::string& op, Value x, const std::vector<int64_t>& axes,
                   bool keepdims) {
  if (!x.type().rank_known) return TensorType::unranked(x.dtype());
  int r = x.rank();
  std::vector<bool> hit(static_cast<size_t>(r), false);
  for (int64_t a : axes) hit[static_cast<size_t>(norm_axis(op, a, r, x))] = true;
  std::vector<Dim> out;
  for (int i = 0; i < r; ++i) {
    if (!hit[static_cast<size_t>(i)]) out.push_back(x.type().dims[static_cast<size_t>(i)]);
    else if (keepdims) out.emplace_back(1);
  }
  return TensorType(x.dtype(), out);
}
}  // namespace

Value ReduceMean(Value x, const std::vector<int64_t>& axes, bool keepdims) {
  return single("ReduceMean", {x}, reduced("ReduceMean", x, axes, keepdims),
                {Attr("axes", axes), Attr("keepdims", static_cast<int64_t>(keepdims))});
}

Value ReduceMax(Value x, const std::vector<int64_t>& axes, bool keepdims) {
  return single("ReduceMax", {x}, reduced("ReduceMax", x, axes, keepdims),
                {Attr("axes", axes), Attr("keepdims", static_cast<int64_t>(keepdims))});
}

Value ReduceSum(Value x, const std::vector<int64_t>& axes, bool keepdims) {
  TensorType t = reduced("ReduceSum", x, axes, keepdims);
  return single("ReduceSum", {x, Ints(x.graph(), axes)}, t,
                {Attr("keepdims", static_cast<int64_t>(keepdims))});
}

Value CumSum(Value x, int64_t axis) {
  norm_axis("CumSum", axis, x.rank(), x);
  // Copy the type first: creating the axis constant may grow the graph's value table.
  TensorType t = x.type();
  return single("CumSum", {x, Int(x.graph(), axis)}, t);
}

// ---- shape manipulation ------------------------------------------------------------------

Value Reshape(Value x, const std::vector<int64_t>& shape) {
  const TensorType& t = x.type();
  std::vector<Dim> out;
  int infer = -1;
  for (size_t i = 0; i < shape.size(); ++i) {
    int64_t s = shape[i];
    if (s == 0) {
      if (!t.rank_known || i >= t.dims.size())
        fail("Reshape", "0 at position " + std::to_string(i) + " has no input dim in " + desc(x));
      out.push_back(t.dims[i]);
    } else if (s == -1) {
      if (infer >= 0) fail("Reshape", "more than one -1 in target shape");
      infer = static_cast<int>(i);
      out.emplace_back();
    } else if (s < 0) {
      fail("Reshape", "invalid target dim " + std::to_string(s));
    } else {
      out.emplace_back(s);
    }
  }
  if (infer >= 0 && t.rank_known) {
    // Static inference when every input dim and every other target dim is static, or when
    // the symbolic dims cancel exactly (the same symbols kept in place).
    int64_t in_static = 1, out_static = 1;
    std::vector<std::string> in_sym, out_sym;
    bool unknown = false;
    for (const Dim& d : t.dims) {
      if (d.is_static()) in_static *= d.size;
      else if (d.is_symbolic()) in_sym.push_back(d.param);
      else unknown = true;
    }
    for (size_t i = 0; i < out.size(); ++i) {
      if (static_cast<int>(i) == infer) continue;
      if (out[i].is_static()) out_static *= out[i].size;
      else if (out[i].is_symbolic()) out_sym.push_back(out[i].param);
      else unknown = true;
    }
    std::sort(in_sym.begin(), in_sym.end());
    std::sort(out_sym.begin(), out_sym.end());
    if (!unknown && in_sym == out_sym && out_static > 0) {
      if (in_static % out_static != 0)
        fail("Reshape", "cannot reshape " + desc(x) + " to the requested shape");
      out[static_cast<size_t>(infer)] = Dim(in_static / out_static);
    }
  } else if (infer < 0 && t.rank_known) {
    bool all_static = true;
    int64_t a = 1, b = 1;
    for (const Dim& d : t.dims) all_static &= d.is_static(), a *= d.is_static() ? d.size : 1;
    for (const Dim& d : out) all_static &= d.is_static(), b *= d.is_static() ? d.size : 1;
    if (all_static && a != b) fail("Reshape", "cannot reshape " + desc(x) + " to the requested shape");
  }
  return single("Reshape", {x, Ints(x.graph(), shape)}, TensorType(x.dtype(), out));
}

Value Reshape(Value x, Value shape, const TensorType& result) {
  if (shape.dtype() != DType::Int64) fail("Reshape", "shape must be int64, got " + desc(shape));
  TensorType r = result;
  r.dtype = x.dtype();
  return single("Reshape", {x, shape}, r);
}

Value Transpose(Value x, const std::vector<int64_t>& perm) {
  const TensorType& t = x.type();
  if (t.rank_known && perm.size() != t.dims.size())
    fail("Transpose", "perm has " + std::to_string(perm.size()) + " axes for " + desc(x));
  std::vector<Dim> out;
  if (t.rank_known) {
    std::vector<bool> seen(perm.size(), false);
    for (int64_t p : perm) {
      if (p < 0 || p >= static_cast<int64_t>(perm.size()) || seen[static_cast<size_t>(p)])
        fail("Transpose", "perm is not a permutation");
      seen[static_cast<size_t>(p)] = true;
      out.push_back(t.dims[static_cast<size_t>(p)]);
    }
  }
  return single("Transpose", {x},
                t.rank_known ? TensorType(x.dtype(), out) : TensorType::unranked(x.dtype()),
                {Attr("perm", perm)});
}

Value Concat(const std::vector<Value>& xs, int64_t axis) {
  if (xs.empty()) fail("Concat", "no inputs");
  Value first = xs[0];
  TensorType out = first.type();
  int r = first.rank();
  int64_t a = norm_axis("Concat", axis, r, first);
  for (size_t i = 1; i < xs.size(); ++i) {
    same_dtype("Concat", first, xs[i]);
    const TensorType& t = xs[i].type();
    if (!out.rank_known || !t.rank_known) {
      out = TensorType::unranked(first.dtype());
      continue;
    }
    if (t.dims.size() != out.dims.size())
      fail("Concat", "rank mismatch: " + desc(first) + " vs " + desc(xs[i]));
    for (size_t d = 0; d < t.dims.size(); ++d) {
      Dim& o = out.dims[d];
      const Dim& n = t.dims[d];
      if (static_cast<int64_t>(d) == a) {
        o = (o.is_static() && n.is_static()) ? Dim(o.size + n.size) : Dim();
      } else if (o.is_static() && n.is_static() && o.size != n.size) {
        fail("Concat", "dimension " + std::to_string(d) + " differs: " + desc(first) + " vs " +
                           desc(xs[i]));
      } else if (!(o == n)) {
        o = o.is_static() ? o : n.is_static() ? n : (o.known() ? o : n);
      }
    }
  }
  return single("Concat", xs, out, {Attr("axis", axis)});
}

Value Unsqueeze(Value x, const std::vector<int64_t>& axes) {
  const TensorType& t = x.type();
  TensorType out = TensorType::unranked(x.dtype());
  if (t.rank_known) {
    int r = static_cast<int>(t.dims.size() + axes.size());
    std::vector<bool> ins(static_cast<size_t>(r), false);
    for (int64_t a : axes) ins[static_cast<size_t>(norm_axis("Unsqueeze", a, r, x))] = true;
    std::vector<Dim> d;
    size_t k = 0;
    for (int i = 0; i < r; ++i) d.push_back(ins[static_cast<size_t>(i)] ? Dim(1) : t.dims[k++]);
    out = TensorType(x.dtype(), d);
  }
  return single("Unsqueeze", {x, Ints(x.graph(), axes)}, out);
}

Value Squeeze(Value x, const std::vector<int64_t>& axes) {
  const TensorType& t = x.type();
  TensorType out = TensorType::unranked(x.dtype());
  if (t.rank_known) {
    int r = x.rank();
    std::vector<bool> drop(static_cast<size_t>(r), false);
    for (int64_t a : axes) {
      auto i = static_cast<size_t>(norm_axis("Squeeze", a, r, x));
      if (t.dims[i].is_static() && t.dims[i].size != 1)
        fail("Squeeze", "axis " + std::to_string(a) + " is not 1 in " + desc(x));
      drop[i] = true;
    }
    std::vector<Dim> d;
    for (int i = 0; i < r; ++i)
      if (!drop[static_cast<size_t>(i)]) d.push_back(t.dims[static_cast<size_t>(i)]);
    out = TensorType(x.dtype(), d);
  }
  return single("Squeeze", {x, Ints(x.graph(), axes)}, out);
}

Value Slice(Value x, const std::vector<int64_t>& starts, const std::vector<int64_t>& ends,
            const std::vector<int64_t>& axes, const std::vector<int64_t>& steps) {
  if (starts.size() != ends.size() || starts.size() != axes.size() ||
      (!steps.empty() && steps.size() != axes.size()))
    fail("Slice", "starts/ends/axes/steps lengths differ");
  TensorType out = x.type();
  if (out.rank_known) {
    for (size_t i = 0; i < axes.size(); ++i) {
      auto a = static_cast<size_t>(norm_axis("Slice", axes[i], x.rank(), x));
      int64_t step = steps.empty() ? 1 : steps[i];
      if (step == 0) fail("Slice", "step 0");
      Dim& d = out.dims[a];
      if (d.is_static() && step > 0) {
        int64_t n = d.size;
        auto clampi = [n](int64_t v) { return std::clamp(v < 0 ? v + n : v, int64_t{0}, n); };
        int64_t s = clampi(starts[i]), e = clampi(ends[i]);
        d = Dim(e > s ? (e - s + step - 1) / step : 0);
      } else if (step == 1 && starts[i] >= 0 && ends[i] >= 0 && ends[i] != INT64_MAX) {
        d = Dim();  // bounded by the slice but the input size is not known
      } else {
        d = Dim();
      }
    }
  }
  std::vector<Value> ins{x, Ints(x.graph(), starts), Ints(x.graph(), ends),
                         Ints(x.graph(), axes)};
  if (!steps.empty()) ins.push_back(Ints(x.graph(), steps));
  return single("Slice", ins, out);
}

Value Slice(Value x, Value starts, Value ends, const std::vector<int64_t>& axes) {
  TensorType out = x.type();
  if (out.rank_known)
    for (int64_t a : axes) out.dims[static_cast<size_t>(norm_axis("Slice", a, x.rank(), x))] = Dim();
  return single("Slice", {x, starts, ends, Ints(x.graph(), axes)}, out);
}

std::vector<Value> Split(Value x, const std::vector<int64_t>& sizes, int64_t axis) {
  int64_t a = norm_axis("Split", axis, x.rank(), x);
  std::vector<TensorType> outs;
  int64_t total = 0;
  for (int64_t s : sizes) {
    TensorType t = x.type();
    if (t.rank_known) t.dims[static_cast<size_t>(a)] = Dim(s);
    outs.push_back(t);
    total += s;
  }
  if (x.type().rank_known) {
    const Dim d = x.type().dims[static_cast<size_t>(a)];
    if (d.is_static() && d.size != total)
      fail("Split", "sizes add up to " + std::to_string(total) + " but " + desc(x) + " axis " +
                        std::to_string(axis) + " is " + std::to_string(d.size));
  }
  Graph& g = x.graph();
  return g.node("Split", {x, Ints(g, sizes)}, outs, {Attr("axis", axis)});
}

Value Expand(Value x, Value shape, const TensorType& result) {
  TensorType r = result;
  r.dtype = x.dtype();
  return single("Expand", {x, shape}, r);
}

Value Tile(Value x, Value repeats, const TensorType& result) {
  TensorType r = result;
  r.dtype = x.dtype();
  return single("Tile", {x, repeats}, r);
}

Value Gather(Value data, Value indices, int64_t axis) {
  if (indices.dtype() != DType::Int64 && indices.dtype() != DType::Int32)
    fail("Gather", "indices must be int32/int64, got " + desc(indices));
  const TensorType& td = data.type();
  const TensorType& ti = indices.type();
  TensorType out = TensorType::unranked(data.dtype());
  if (td.rank_known && ti.rank_known) {
    auto a = static_cast<size_t>(norm_axis("Gather", axis, data.rank(), data));
    std::vector<Dim> d(td.dims.begin(), td.dims.begin() + static_cast<long>(a));
    d.insert(d.end(), ti.dims.begin(), ti.dims.end());
    d.insert(d.end(), td.dims.begin() + static_cast<long>(a) + 1, td.dims.end());
    out = TensorType(data.dtype(), d);
  }
  return single("Gather", {data, indices}, out, {Attr("axis", axis)});
}

Value GatherElements(Value data, Value indices, int64_t axis) {
  TensorType out = indices.type();
  out.dtype = data.dtype();
  return single("GatherElements", {data, indices}, out, {Attr("axis", axis)});
}

Value ScatterElements(Value data, Value indices, Value updates, int64_t axis) {
  same_dtype("ScatterElements", data, updates);
  return single("ScatterElements", {data, indices, updates}, data.type(), {Attr("axis", axis)});
}

Value Shape(Value x) {
  Dim n = x.type().rank_known ? Dim(x.rank()) : Dim();
  return single("Shape", {x}, TensorType(DType::Int64, {n}));
}

Value Shape(Value x, int64_t start, int64_t end) {
  Dim n;
  if (x.type().rank_known) {
    int64_t r = x.rank();
    auto c = [r](int64_t v) { return std::clamp(v < 0 ? v + r : v, int64_t{0}, r); };
    n = Dim(std::max<int64_t>(0, c(end) - c(start)));
  }
  return single("Shape", {x}, TensorType(DType::Int64, {n}),
                {Attr("start", start), Attr("end", end)});
}

Value DimOf(Value x, int64_t axis) {
  int64_t a = norm_axis("DimOf", axis, x.rank(), x);
  return Shape(x, a, a + 1);
}

Value Range(Value start, Value limit, Value delta) {
  same_dtype("Range", start, limit);
  same_dtype("Range", start, delta);
  return single("Range", {start, limit, delta}, TensorType(start.dtype(), {Dim()}));
}

Value ConstantOfShape(Value shape, DType dtype, double value, int rank) {
  auto bytes = encode(dtype, {value});
  Attr::TensorData td{dtype, {1}, bytes};
  std::vector<Dim> dims(static_cast<size_t>(std::max(rank, 0)));
  return single("ConstantOfShape", {shape},
                rank >= 0 ? TensorType(dtype, dims) : TensorType::unranked(dtype),
                {Attr("value", td)});
}

std::pair<Value, Value> TopK(Value x, Value k, int64_t axis, bool largest) {
  TensorType vt = x.type();
  if (vt.rank_known) vt.dims[static_cast<size_t>(norm_axis("TopK", axis, x.rank(), x))] = Dim();
  TensorType it = vt;
  it.dtype = DType::Int64;
  auto outs = x.graph().node("TopK", {x, k}, {vt, it},
                             {Attr("axis", axis), Attr("largest", static_cast<int64_t>(largest)),
                              Attr("sorted", int64_t{1})});
  return {outs[0], outs[1]};
}

Value Trilu(Value x, Value k, bool upper) {
  return single("Trilu", {x, k}, x.type(), {Attr("upper", static_cast<int64_t>(upper))});
}

}  // namespace mobius::op
