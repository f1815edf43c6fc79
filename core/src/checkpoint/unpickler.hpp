// unpickler.hpp - the restricted unpickler of torch.save's data.pkl, with the semantics of
// torch.load(weights_only=True): a fixed set of opcodes, globals only from an allowlist checked
// when the global is named (so nothing else is ever looked up, let alone called), and a result
// that must map names to tensors. Nothing is ever executed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "mobius/error.hpp"

namespace mobius {

// The largest data.pkl accepted.
inline constexpr uint64_t kMaxPickleBytes = uint64_t{64} << 20;

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

// Interprets a data.pkl and checks that it is a state dict of tensors: every tensor names a
// known storage, its size and stride have the same rank (at most 64) and no negative entry, and
// each storage's byte size fits in int64. Whether a view stays inside its storage is checked
// when the tensors are assembled (open_pytorch_archive_bytes). display names the file in error
// messages: it throws mobius::Error, whose message starts with "[pytorch] <display>: data.pkl: ".
TorchPickle parse_torch_pickle(const uint8_t* data, size_t n, const std::string& display);

}  // namespace mobius
