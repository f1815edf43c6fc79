// linear.cpp - Linear, the packed projections, the MatMul and MatMulNBits weight layouts, and
// Embedding (layers.hpp).
#include "mobius/sdk/layers.hpp"

#include <algorithm>
#include <cmath>

#include "packed.hpp"

namespace mobius::nn {

using namespace mobius::op;

Linear::Linear(int64_t in, int64_t out, bool bias, bool stored_in_out)
    : in_features(in), out_features(out), has_bias(bias), in_out(stored_in_out) {
  if (in_out) declare("weight", {in, out});
  else declare("weight", {out, in});
  if (bias) declare("bias", {out});
}

namespace detail {

Value concatenated(Graph& g, const std::string& name, const std::vector<std::string>& sources,
                   const std::vector<int64_t>& dims, DType dtype) {
  BuildContext& ctx = g.context();
  if (auto v = ctx.graph().find_initializer(name)) return *v;
  std::vector<Dim> d;
  for (int64_t n : dims) d.emplace_back(n);
  Value v = ctx.graph().initializer(name, TensorType(dtype, d));
  ctx.plan_transformed(name, sources, [](const std::vector<HostTensor>& in, float* out, size_t) {
    for (const HostTensor& t : in) out = std::copy(t.data, t.data + t.numel, out);
  });
  return v;
}

}  // namespace detail

namespace {

// x times the weight `name` made of `sources` ([n, k] each): MatMulNBits when the build
// quantizes and `quantizable`, else MatMul on the [k, n] transpose in `dtype`.
Value project(Graph& g, Value x, const std::string& name, const std::vector<std::string>& sources,
              int64_t k, int64_t n, DType dtype, bool quantizable) {
  if (g.context().weight_bits() > 0 && quantizable) return matmul_nbits(g, x, name, sources, k, n);
  // A Cast only for bfloat16 weights (computed in float32).
  return MatMul(x, Cast(weight_in_out(g, name, sources, k, n, dtype), x.dtype()));
}

}  // namespace

Value Linear::forward(Graph& g, Value x) const {
  ScopeGuard s(g, path());
  BuildContext& ctx = g.context();
  // The checkpoint stores [out, in]; the graph reads its own initializer in the layout its
  // operator consumes, made while the weights stream: [in, out] for MatMul, blocks for
  // MatMulNBits. A weight tied to another tensor name gets its own initializer in that layout,
  // named after this module (a head tied to the embedding table reads the table itself instead:
  // Embedding::tied_logits).
  const std::string name = full_name("weight");
  const std::vector<std::string> sources{source_tensor("weight")};
  // A weight declared with its own dtype (kept precise on purpose) is never quantized.
  const DType declared = parameter("weight").dtype;
  if (in_out) {
    // Stored as MatMul reads it: the tensor itself, cast while it streams.
    const DType dt = declared == DType::Undefined ? ctx.weight_dtype() : declared;
    Value w = ctx.graph().find_initializer(name).value_or(Value());
    if (!w.valid()) {
      w = ctx.graph().initializer(name, TensorType(dt, {Dim(in_features), Dim(out_features)}));
      ctx.plan_tensor(name, sources.front());
    }
    Value y = MatMul(x, Cast(w, x.dtype()));
    return has_bias ? Add(y, param(g, "bias", x.dtype())) : y;
  }
  Value y = project(g, x, name, sources, in_features, out_features,
                    declared == DType::Undefined ? ctx.weight_dtype() : declared,
                    declared == DType::Undefined);
  if (has_bias) y = Add(y, param(g, "bias", x.dtype()));
  return y;
}

std::vector<Value> packed_linears(Graph& g, Value x, const std::vector<const Linear*>& parts,
                                  const std::string& name) {
  std::vector<int64_t> sizes;
  for (const Linear* p : parts) sizes.push_back(p->out_features);
  return Split(packed_linear(g, x, parts, name), sizes, -1);
}

Value packed_linear(Graph& g, Value x, const std::vector<const Linear*>& parts,
                    const std::string& name) {
  BuildContext& ctx = g.context();
  std::vector<std::string> sources, bias_sources;
  int64_t n = 0;
  for (const Linear* p : parts) {
    if (p->in_features != parts[0]->in_features || p->has_bias != parts[0]->has_bias || p->in_out ||
        p->parameter("weight").dtype != DType::Undefined)
      throw Error("[linear] '" + name + "' packs linears of one input size, bias and dtype only");
    sources.push_back(p->source_tensor("weight"));
    if (p->has_bias) bias_sources.push_back(p->source_tensor("bias"));
    n += p->out_features;
  }
  Value y = project(g, x, name + ".weight", sources, parts[0]->in_features, n, ctx.weight_dtype(), true);
  if (!bias_sources.empty()) y = Add(y, detail::packed_bias(g, name + ".bias", bias_sources, n, x.dtype()));
  return y;
}

Value weight_in_out(Graph& g, const std::string& name, const std::vector<std::string>& sources,
                    int64_t in, int64_t out, DType dtype) {
  BuildContext& ctx = g.context();
  if (auto w = ctx.graph().find_initializer(name)) return *w;
  Value w = ctx.graph().initializer(name, TensorType(dtype, {Dim(in), Dim(out)}));
  mobius_weight_layout layout{};
  layout.struct_size = sizeof(layout);
  layout.kind = MOBIUS_LAYOUT_TRANSPOSED;
  ctx.plan_layout(name, sources, layout);
  return w;
}

std::vector<Value> quantized_weight(Graph& g, const std::string& name,
                                    const std::vector<std::string>& sources, int64_t k, int64_t n,
                                    DType scales_dtype) {
  BuildContext& ctx = g.context();
  if (!ort_ops(ctx))
    throw Error("[config] --dtype int" + std::to_string(ctx.weight_bits()) +
                " needs ONNX Runtime's MatMulNBits; it has no standard-ONNX form at opset 17 "
                "(use --ops ort)");
  BlockQuant q{ctx.weight_bits(), ctx.block_size(), ctx.symmetric()};
  const std::vector<std::string> parts{name + "_Q" + std::to_string(q.bits), name + "_scales",
                                       name + "_zero_points"};
  const int n_parts = q.symmetric ? 2 : 3;
  std::vector<Value> out;
  for (int part = 0; part < n_parts; ++part) {
    Value v = ctx.graph().find_initializer(parts[part]).value_or(Value());
    if (!v.valid()) {
      DType dt = part == MOBIUS_QUANT_PART_SCALES ? scales_dtype : DType::UInt8;
      std::vector<Dim> dims;
      for (int64_t d : quant_part_shape(q, part, n, k)) dims.emplace_back(d);
      v = ctx.graph().initializer(parts[part], TensorType(dt, dims));
      mobius_weight_layout layout{};
      layout.struct_size = sizeof(layout);
      layout.kind = MOBIUS_LAYOUT_BLOCK_QUANTIZED;
      layout.bits = q.bits;
      layout.block_size = q.block;
      layout.symmetric = q.symmetric ? 1 : 0;
      layout.part = part;
      ctx.plan_layout(parts[part], sources, layout);
    }
    out.push_back(v);
  }
  return out;
}

Value matmul_nbits(Graph& g, Value x, const std::string& name,
                   const std::vector<std::string>& sources, int64_t k, int64_t n) {
  BuildContext& ctx = g.context();
  std::vector<Value> inputs{x};
  for (Value v : quantized_weight(g, name, sources, k, n, x.dtype())) inputs.push_back(v);
  TensorType t = x.type();
  if (t.rank_known) t.dims.back() = Dim(n);
  return g.node("MatMulNBits", inputs, {t},
                {Attr("K", k), Attr("N", n), Attr("bits", static_cast<int64_t>(ctx.weight_bits())),
                 Attr("block_size", static_cast<int64_t>(ctx.block_size())),
                 Attr("accuracy_level", static_cast<int64_t>(ctx.accuracy_level()))},
                "com.microsoft")[0];
}

Embedding::Embedding(int64_t v, int64_t d) : vocab(v), dim(d) { declare("weight", {v, d}); }

bool Embedding::shares_quantized_table(const BuildContext& ctx) const {
  // GatherBlockQuantized reads MatMulNBits' blocks for 4 bits (ONNX Runtime's kernels for
  // other widths are not in every runtime that loads the folder).
  return tied_head && ctx.weight_bits() == 4 && parameter("weight").dtype == DType::Undefined;
}

Value Embedding::forward(Graph& g, Value ids, DType act) const {
  ScopeGuard s(g, path());
  BuildContext& ctx = g.context();
  if (!shares_quantized_table(ctx)) return Cast(Gather(param(g, "weight"), ids, 0), act);
  // The rows of the head's block-quantized table: [vocab, blocks, block * bits / 8] bytes with
  // [vocab, blocks] scales (and packed zero points). Symmetric blocks are gathered in that
  // layout (the scales viewed as [vocab, blocks, 1]: no copy of the table); zero points are
  // packed along the blocks, so asymmetric ones are gathered from the table viewed as rows.
  const std::vector<Value> q = quantized_weight(g, full_name("weight"), {source_tensor("weight")},
                                                dim, vocab, act);
  const int64_t block = ctx.block_size(), blocks = (dim + block - 1) / block;
  const int64_t row_bytes = blocks * block * ctx.weight_bits() / 8;
  const bool symmetric = ctx.symmetric();
  std::vector<Value> in;
  if (symmetric) in = {q[0], ids, Reshape(q[1], {vocab, blocks, 1})};
  else in = {Reshape(q[0], {vocab, row_bytes}), ids, q[1], q[2]};
  TensorType t = ids.type();
  if (t.rank_known) {
    if (symmetric) t.dims.insert(t.dims.end(), {Dim(blocks), Dim(block)});
    else t.dims.emplace_back(blocks * block);
  }
  t.dtype = act;
  const int64_t rank = symmetric ? 3 : 2;
  Value e = g.node("GatherBlockQuantized", in, {t},
                   {Attr("bits", static_cast<int64_t>(ctx.weight_bits())), Attr("block_size", block),
                    Attr("gather_axis", int64_t{0}), Attr("quantize_axis", rank - 1)},
                   "com.microsoft")[0];
  if (symmetric) {
    std::vector<int64_t> shape(ids.type().rank_known ? ids.type().dims.size() : 0, 0);
    if (shape.empty()) throw Error("[embedding] token ids of unknown rank");
    shape.push_back(blocks * block);
    e = Reshape(e, shape);
  }
  // Rows padded to whole blocks lose their padding.
  if (blocks * block != dim) e = Slice(e, {0}, {dim}, {-1});
  return e;
}

Value Embedding::tied_logits(Graph& g, Value x) const {
  ScopeGuard s(g, path());
  BuildContext& ctx = g.context();
  if (shares_quantized_table(ctx))
    return matmul_nbits(g, x, full_name("weight"), {source_tensor("weight")}, dim, vocab);
  // Gemm reads the [vocab, dim] table as stored (transB): the embedding and the head are one
  // initializer, with no transposed copy on disk nor one made when a session folds a Transpose.
  Value w = Cast(param(g, "weight"), x.dtype());
  const TensorType xt = x.type();
  if (!xt.rank_known || xt.dims.size() < 2) throw Error("[embedding] tied logits of a vector");
  Value rows = xt.dims.size() == 2 ? x : Reshape(x, {-1, dim});
  Value y = g.node("Gemm", {rows, w}, {TensorType(x.dtype(), {xt.dims.size() == 2 ? xt.dims[0] : Dim(), Dim(vocab)})},
                   {Attr("transB", int64_t{1})})[0];
  if (xt.dims.size() == 2) return y;
  TensorType out = xt;
  out.dims.back() = Dim(vocab);
  const int64_t lead = static_cast<int64_t>(xt.dims.size()) - 1;
  return Reshape(y, Concat({Shape(x, 0, lead), Ints(g, {vocab})}, 0), out);
}

}  // namespace mobius::nn
