// layout_input.hpp - what the plan's checks and its writers share about a layout source: the
// [n, k] matrix it reads and the key the parts of one quantization share.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "checkpoint/checkpoint.hpp"
#include "weights/weight_plan.hpp"

namespace mobius::weights {

uint64_t numel(const std::vector<int64_t>& shape);

// What the parts of one quantization share: the tensors, bits, block and symmetry.
std::string quantization_key(const StreamingLayoutSource& src);

// The [n, k] matrix a layout source reads: its tensors, in order.
struct LayoutInput {
  std::vector<const TensorMeta*> tensors;
  uint64_t n = 0, k = 0;
  size_t group = 1;  // the layout's interleave: rows alternate between `group` tensors at a time
};

// A layout source's input when its bytes are made; preflight has reported any problem before.
// Throws the first problem when there is one (or no checkpoint).
LayoutInput layout_input(const PlannedInitializer& init, const StreamingLayoutSource& src,
                         const CheckpointReader* cp);

}  // namespace mobius::weights
