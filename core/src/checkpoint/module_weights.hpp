// module_weights.hpp - the weights of a sentence-transformers folder's modules beside the
// model's own: each module folder modules.json lists (a Dense layer's model.safetensors or
// pytorch_model.bin) shown under "<module folder>/<tensor>" ("2_Dense/linear.weight") in one
// reader with the model's tensors.
#pragma once

#include <filesystem>
#include <memory>

#include "checkpoint/checkpoint.hpp"

namespace mobius {

// `base` with the weights of every module folder the checkpoint folder's modules.json lists
// (when it has one): a folder named by one path component, a real folder inside `dir` (never a
// link, which could lead out of it), holding weights. modules.json that cannot be read, or a path
// that is not such a folder, adds nothing: the plugin that reads modules.json reports it. Throws
// mobius::Error for weights a module folder holds but that cannot be read.
std::unique_ptr<CheckpointReader> with_module_weights(std::unique_ptr<CheckpointReader> base,
                                                      const std::filesystem::path& dir);

}  // namespace mobius
