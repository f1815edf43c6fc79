// packed.hpp - what linear.cpp shares with the encoders' fused attention (encoder_layers.cpp).
#pragma once

#include <string>
#include <vector>

#include "mobius/sdk/layers.hpp"

namespace mobius::nn::detail {

// The initializer `name` [n] of `dtype`: the biases `sources` concatenated, made while the weights
// stream (once, however many graphs read it).
Value packed_bias(Graph& g, const std::string& name, const std::vector<std::string>& sources, int64_t n,
                  DType dtype);

}  // namespace mobius::nn::detail
