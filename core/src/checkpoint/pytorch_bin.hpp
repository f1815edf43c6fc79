// pytorch_bin.hpp - legacy PyTorch checkpoints (torch.save zips) behind a restricted unpickler.
//
// Three layers: the zip container (zip_reader.hpp), the unpickler of its data.pkl
// (unpickler.hpp), and here the assembly of tensors from the storages the pickle names.
#pragma once

#include <filesystem>
#include <memory>
#include <string>

#include "checkpoint/checkpoint.hpp"
#include "checkpoint/unpickler.hpp"

namespace mobius {

// Opens the checkpoint in a model folder: pytorch_model.bin, or the shards named by
// pytorch_model.bin.index.json (shard names must stay inside the folder, as for safetensors).
// The pickle inside each archive is interpreted with the semantics of
// torch.load(weights_only=True): only a fixed set of opcodes and globals is accepted, nothing is
// ever called, and the result must map names to tensors whose strided views stay inside their
// storages. Throws mobius::Error whose message starts with "[pytorch] <file>: ".
std::unique_ptr<CheckpointReader> open_pytorch_checkpoint(const std::filesystem::path& dir);
std::unique_ptr<CheckpointReader> open_pytorch_checkpoint(const std::filesystem::path& dir,
                                                          const CheckpointFormat& names);

// Opens a whole torch.save archive held in memory (what the file reader does, minus the file),
// for the tests and the fuzzers. display stands for the file name in messages and
// TensorMeta::file.
std::unique_ptr<CheckpointReader> open_pytorch_archive_bytes(std::string bytes,
                                                             const std::string& display);

}  // namespace mobius
