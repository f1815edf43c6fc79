// recurrent.hpp - what the recurrent token mixers (gated_deltanet.cpp, mamba.cpp, mamba2.cpp)
// share: a one-output node of a given type, and heads repeated for groups.
#pragma once

#include <string>
#include <vector>

#include "mobius/sdk/ops.hpp"

namespace mobius::nn::detail {

// A node of one output whose type the caller gives (for ops the op:: helpers do not type).
inline Value node1(Graph& g, const std::string& op, const std::vector<Value>& in,
                   const TensorType& t, const std::vector<Attr>& attrs = {}) {
  return g.node(op, in, {t}, attrs)[0];
}

// [.., L, groups, d] -> [.., L, groups * r, d]: group j serves heads j*r .. j*r + r - 1
// (transformers' repeat_interleave over the heads).
inline Value repeat_groups(Value x, int64_t r) {
  if (r == 1) return x;
  Graph& g = x.graph();
  const int64_t groups = x.dim(2).size, d = x.dim(3).size;
  Value u = op::Unsqueeze(x, {3});
  TensorType t = u.type();
  t.dims[3] = Dim(r);
  u = op::Tile(u, op::Ints(g, {1, 1, 1, r, 1}), t);
  return op::Reshape(u, {0, 0, groups * r, d});
}

}  // namespace mobius::nn::detail
