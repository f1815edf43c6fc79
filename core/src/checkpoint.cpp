// checkpoint.cpp - which reader opens a model folder's checkpoint.
#include "checkpoint.hpp"

#include "checkpoint_files.hpp"
#include "pytorch_bin.hpp"

namespace mobius {

// safetensors whenever the folder has it; the pickle format only when it is all there is, and
// then through the restricted unpickler.
std::unique_ptr<CheckpointReader> open_checkpoint(const std::filesystem::path& dir) {
  if (has_checkpoint(dir, kSafetensorsFormat)) return open_safetensors_checkpoint(dir);
  if (has_checkpoint(dir, kPytorchFormat)) return open_pytorch_checkpoint(dir);
  throw Error("[checkpoint] " + dir.string() + ": no " + kSafetensorsFormat.single_name + ", " +
              kSafetensorsFormat.index_name + ", " + kPytorchFormat.single_name + " or " +
              kPytorchFormat.index_name);
}

}  // namespace mobius
