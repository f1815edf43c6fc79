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
  // Copies elements [first_element, first_element + count) of the tensor's row-major data into
  // dst (capacity count * dtype_size(meta.dtype)), so a writer can stream a tensor that has no
  // extent() in bounded pieces. Throws mobius::Error, also for a range beyond the tensor. This
  // default reads from the extent when there is one, else gathers the whole tensor with read();
  // readers whose tensors are computed from others override it to read only what the range needs.
  virtual void read_range(const TensorMeta& meta, uint64_t first_element, uint64_t count,
                          void* dst) const;
  // True when read_range of this tensor reads only what the range covers (it has an extent, or
  // it is computed piece by piece); false when each call gathers the whole tensor (a strided
  // pickle tensor), which a writer should then read() once instead of range by range.
  virtual bool reads_ranges(const TensorMeta& meta) const { return extent(meta).has_value(); }
  // Human-readable description, e.g. "safetensors (2 shards)".
  virtual std::string describe() const = 0;
};

// Opens the checkpoint in a model folder: safetensors whenever the folder has them
// (model.safetensors or model.safetensors.index.json); the pickle format (pytorch_model.bin or
// pytorch_model.bin.index.json, see pytorch_bin.hpp) only when it is all there is. Throws
// mobius::Error naming the file and the reason.
std::unique_ptr<CheckpointReader> open_checkpoint(const std::filesystem::path& dir);

// The same, given the text of the model's config.json (nullptr: none): when its
// quantization_config says the weights are stored quantized (fp8 blocks, mxfp4 experts), the
// reader shows them as float32 tensors dequantized while they are read (quantized_checkpoint.hpp).
// Problems with quantization_config throw ErrorKind::Config naming the key, problems with the
// quantized tensors ErrorKind::Checkpoint naming the file and tensor.
std::unique_ptr<CheckpointReader> open_checkpoint(const std::filesystem::path& dir,
                                                  const std::string* config_text);

// Opens the checkpoint in a model folder: model.safetensors, or the shards named by
// model.safetensors.index.json (or the file names of `names`, e.g. a diffusers component's
// diffusion_pytorch_model.safetensors). Throws mobius::Error naming the file and the reason.
struct CheckpointFormat;
std::unique_ptr<CheckpointReader> open_safetensors_checkpoint(const std::filesystem::path& dir);
std::unique_ptr<CheckpointReader> open_safetensors_checkpoint(const std::filesystem::path& dir,
                                                              const CheckpointFormat& names);

// ONNX TensorProto FLOAT8E4M3FN, safetensors "F8_E4M3": how FP8 block checkpoints store their
// weights. Not a MOBIUS_DTYPE_* of the plugin ABI: plugins only ever see these weights
// dequantized.
inline constexpr int32_t kDtypeFloat8E4M3FN = 17;

// Bytes per element of a MOBIUS_DTYPE_* code (0 for unknown).
size_t dtype_size(int32_t dtype);
// Lower-case name ("float32", "bfloat16", ...) of a MOBIUS_DTYPE_* code.
const char* dtype_name(int32_t dtype);

}  // namespace mobius
