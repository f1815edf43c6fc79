// mobius/sdk/ops.hpp - ONNX operators as free functions over Value, checked when built.
//
// Each function infers its output type (dtype, rank, static or symbolic sizes where known)
// and throws mobius::Error prefixed with the op name when its inputs cannot fit, e.g.
// "[MatMul] inner dimensions differ: 'x' float32[b,s,64] x 'w' float32[32,128]".
// Opset: ai.onnx 17 (ReduceMean/ReduceMax take axes as an attribute; ReduceSum as an input).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "mobius/sdk/graph.hpp"

namespace mobius::op {

// ---- constants -----------------------------------------------------------------------------
// A constant tensor of `dtype` with the given dims, values converted from double.
Value Constant(Graph& g, DType dtype, const std::vector<int64_t>& dims,
               const std::vector<double>& values, const std::string& hint = "const");
Value Scalar(Graph& g, DType dtype, double v);  // rank 0
Value Ints(Graph& g, const std::vector<int64_t>& v);  // int64 rank-1
Value Int(Graph& g, int64_t v);  // int64 rank 0
// A scalar of x's dtype (for scaling, eps, ...).
Value ScalarLike(Value x, double v);

// ---- elementwise -----------------------------------------------------------------------------
Value Add(Value a, Value b);
Value Sub(Value a, Value b);
Value Mul(Value a, Value b);
Value Div(Value a, Value b);
Value Pow(Value a, Value b);
Value Max(Value a, Value b);
Value Min(Value a, Value b);
Value Equal(Value a, Value b);
Value Less(Value a, Value b);
Value LessOrEqual(Value a, Value b);
Value Greater(Value a, Value b);
Value GreaterOrEqual(Value a, Value b);
Value And(Value a, Value b);
Value Or(Value a, Value b);
Value Where(Value cond, Value a, Value b);

Value Neg(Value x);
Value Abs(Value x);
Value Sqrt(Value x);
Value Reciprocal(Value x);
Value Exp(Value x);
Value Log(Value x);
Value Tanh(Value x);
Value Sigmoid(Value x);
Value Softplus(Value x);
Value Relu(Value x);
Value Erf(Value x);
Value Cos(Value x);
Value Sin(Value x);
Value Not(Value x);
Value Identity(Value x);
Value Cast(Value x, DType to);

// ---- linear algebra and reductions -------------------------------------------------------
Value MatMul(Value a, Value b);
Value Softmax(Value x, int64_t axis = -1);
Value ReduceMean(Value x, const std::vector<int64_t>& axes, bool keepdims = true);
Value ReduceMax(Value x, const std::vector<int64_t>& axes, bool keepdims = true);
Value ReduceSum(Value x, const std::vector<int64_t>& axes, bool keepdims = true);
Value CumSum(Value x, int64_t axis);

// ---- shape manipulation ------------------------------------------------------------------
// `shape` uses ONNX Reshape semantics: 0 copies the input dim, -1 is inferred.
Value Reshape(Value x, const std::vector<int64_t>& shape);
// A dynamic target shape (int64 rank-1), with the result's type given by the caller.
Value Reshape(Value x, Value shape, const TensorType& result);
Value Transpose(Value x, const std::vector<int64_t>& perm);
Value Concat(const std::vector<Value>& xs, int64_t axis);
Value Unsqueeze(Value x, const std::vector<int64_t>& axes);
Value Squeeze(Value x, const std::vector<int64_t>& axes);
// Static slice along `axes` (INT64_MAX for "to the end").
Value Slice(Value x, const std::vector<int64_t>& starts, const std::vector<int64_t>& ends,
            const std::vector<int64_t>& axes, const std::vector<int64_t>& steps = {});
// Dynamic slice (int64 rank-1 starts/ends, static axes).
Value Slice(Value x, Value starts, Value ends, const std::vector<int64_t>& axes);
std::vector<Value> Split(Value x, const std::vector<int64_t>& sizes, int64_t axis);
Value Expand(Value x, Value shape, const TensorType& result);
Value Tile(Value x, Value repeats, const TensorType& result);
Value Gather(Value data, Value indices, int64_t axis = 0);
Value GatherElements(Value data, Value indices, int64_t axis);
Value ScatterElements(Value data, Value indices, Value updates, int64_t axis);
// Shape of x, optionally the dims [start, end).
Value Shape(Value x);
Value Shape(Value x, int64_t start, int64_t end);
// One dimension of x as an int64 rank-1 tensor of length 1.
Value DimOf(Value x, int64_t axis);
Value Range(Value start, Value limit, Value delta);
Value ConstantOfShape(Value shape, DType dtype, double value, int rank);
std::pair<Value, Value> TopK(Value x, Value k, int64_t axis = -1, bool largest = true);
Value Trilu(Value x, Value k, bool upper);

}  // namespace mobius::op
