// packed.hpp - what linear.cpp shares with the encoders' fused attention (encoder_layers.cpp).
#pragma once

#include <string>
#include <vector>

#include "mobius/sdk/layers.hpp"

namespace mobius::nn::detail {

// The initializer `name` of `dims` and `dtype`: the tensors `sources` concatenated in order, made
// while the weights stream (once, however many graphs read it).
Value concatenated(Graph& g, const std::string& name, const std::vector<std::string>& sources,
                   const std::vector<int64_t>& dims, DType dtype);
// concatenated() of biases: [n].
inline Value packed_bias(Graph& g, const std::string& name, const std::vector<std::string>& sources, int64_t n,
                         DType dtype) {
  return concatenated(g, name, sources, {n}, dtype);
}

}  // namespace mobius::nn::detail
