// checkpoint.hpp - read-only access to a checkpoint's tensors: metadata from headers, bytes by offset.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "mobius/error.hpp"

namespace mobius {

// Metadata of one stored tensor. dtype uses the ONNX TensorProto codes of mobius/plugin.h
// (MOBIUS_DTYPE_*). Formats whose tensors are not contiguous describe them so that
// CheckpointReader::read still returns row-major bytes.
struct TensorMeta {
  std::string name;
  int32_t dtype = 0;
  std::vector<int64_t> shape;
  std::filesystem::path file;  // the file holding the bytes
  uint64_t nbytes = 0;         // byte length of the row-major data
};

// A whole checkpoint (one file or all shards). Thread-safe for concurrent reads.
class CheckpointReader {
 public:
  virtual ~CheckpointReader() = default;
  // All tensors, sorted by name; names are unique.
  virtual const std::vector<TensorMeta>& tensors() const = 0;
  // nullptr when absent.
  virtual const TensorMeta* find(std::string_view name) const = 0;
  // Copies the tensor's row-major bytes into dst (capacity meta.nbytes). Throws mobius::Error.
  virtual void read(const TensorMeta& meta, void* dst) const = 0;
  // Where a tensor's row-major bytes lie contiguously in an open file (valid for the reader's
  // lifetime), so a writer can stream it in chunks or copy it in the kernel; nullopt when the
  // format stores it otherwise (then use read()).
  struct FileExtent {
    int fd;
    uint64_t offset;
  };
  virtual std::optional<FileExtent> extent(const TensorMeta& meta) const {
    (void)meta;
    return std::nullopt;
  }
  // Human-readable description, e.g. "safetensors (2 shards)".
  virtual std::string describe() const = 0;
};

// Opens the checkpoint in a model folder: safetensors whenever the folder has them
// (model.safetensors or model.safetensors.index.json); the pickle format (pytorch_model.bin or
// pytorch_model.bin.index.json, see pytorch_bin.hpp) only when it is all there is. Throws
// mobius::Error naming the file and the reason.
std::unique_ptr<CheckpointReader> open_checkpoint(const std::filesystem::path& dir);

// Opens the checkpoint in a model folder: model.safetensors, or the shards named by
// model.safetensors.index.json. Throws mobius::Error naming the file and the reason.
std::unique_ptr<CheckpointReader> open_safetensors_checkpoint(const std::filesystem::path& dir);

// Bytes per element of a MOBIUS_DTYPE_* code (0 for unknown).
size_t dtype_size(int32_t dtype);
// Lower-case name ("float32", "bfloat16", ...) of a MOBIUS_DTYPE_* code.
const char* dtype_name(int32_t dtype);

}  // namespace mobius
