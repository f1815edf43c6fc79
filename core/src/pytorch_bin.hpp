// pytorch_bin.hpp - legacy PyTorch checkpoints (torch.save zips) behind a restricted unpickler.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "checkpoint.hpp"

namespace mobius {

// Opens the checkpoint in a model folder: pytorch_model.bin, or the shards named by
// pytorch_model.bin.index.json (shard names must stay inside the folder, as for safetensors).
// The pickle inside each archive is interpreted with the semantics of
// torch.load(weights_only=True): only a fixed set of opcodes and globals is accepted, nothing is
// ever called, and the result must map names to tensors. Throws mobius::Error whose message
// starts with "[pytorch] <file>: ".
std::unique_ptr<CheckpointReader> open_pytorch_checkpoint(const std::filesystem::path& dir);

// ---------------------------------------------------------------------------------------------
// Lower-level entry points, used by the tests and the fuzzers.

// One storage named by a persistent id ('storage', <type>, key, location, numel).
struct TorchStorage {
  std::string key;    // the archive entry is <top>/data/<key>
  int32_t dtype = 0;  // MOBIUS_DTYPE_* from the storage type
  uint64_t numel = 0;
};

// One tensor of the state dict: a strided view of a storage, in elements.
struct TorchTensor {
  std::string name;
  size_t storage = 0;  // index into TorchPickle::storages
  uint64_t offset = 0;
  std::vector<int64_t> shape;
  std::vector<int64_t> stride;
};

struct TorchPickle {
  std::vector<TorchStorage> storages;  // unique keys, in order of first use
  std::vector<TorchTensor> tensors;    // sorted by name, names unique
};

// Interprets a data.pkl and checks that it is a state dict of tensors whose views stay inside
// their storages. display names the file in error messages.
TorchPickle parse_torch_pickle(const uint8_t* data, size_t n, const std::string& display);

// Opens a whole torch.save archive held in memory (what the file reader does, minus the file).
// display stands for the file name in messages and TensorMeta::file.
std::unique_ptr<CheckpointReader> open_pytorch_archive_bytes(std::string bytes,
                                                             const std::string& display);

}  // namespace mobius
