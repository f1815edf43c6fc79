// checkpoint.cpp - which reader opens a model folder's checkpoint, and the readers' default
// range read.
#include "checkpoint/checkpoint.hpp"

#include <cstring>
#include <vector>

#include "checkpoint/checkpoint_files.hpp"
#include "checkpoint/pytorch_bin.hpp"
#include "checkpoint/quantized_checkpoint.hpp"

namespace mobius {

void CheckpointReader::read_range(const TensorMeta& meta, uint64_t first_element, uint64_t count,
                                  void* dst) const {
  const size_t es = dtype_size(meta.dtype);
  const auto fail = [&](const std::string& why, ErrorKind kind = ErrorKind::Checkpoint) {
    throw Error(kind, "[checkpoint] " + describe() + ": tensor " + quote_name(meta.name) + ": " + why);
  };
  if (es == 0) fail("elements of dtype " + std::string(dtype_name(meta.dtype)) + " have no size");
  const uint64_t n = meta.nbytes / es;
  if (first_element > n || count > n - first_element)
    fail("elements from " + std::to_string(first_element) + ", " + std::to_string(count) +
         " of them, requested of " + std::to_string(n));
  if (count == 0) return;
  if (const std::optional<FileExtent> ext = extent(meta)) {
    const int r = pread_exact(ext->fd, static_cast<char*>(dst), count * es,
                              ext->offset + first_element * es);
    if (r != 0)
      fail(r < 0 ? "the file ended before the tensor did (file truncated?)"
                 : "read failed: " + errno_text(r),
           ErrorKind::Io);
    return;
  }
  // No extent (e.g. a strided pickle tensor): the reader gathers it whole, once per call.
  std::vector<uint8_t> whole(meta.nbytes);
  read(meta, whole.data());
  std::memcpy(dst, whole.data() + first_element * es, count * es);
}

// The first of kWeightFormats the folder has: safetensors whenever there is one; the pickle
// format only when it is all there is, and then through the restricted unpickler.
std::unique_ptr<CheckpointReader> open_checkpoint(const std::filesystem::path& dir) {
  for (const CheckpointFormat& f : kWeightFormats) {
    if (!has_checkpoint(dir, f)) continue;
    if (std::string_view(f.tag) == kSafetensorsFormat.tag) return open_safetensors_checkpoint(dir, f);
    return open_pytorch_checkpoint(dir, f);
  }
  std::string names;
  for (const CheckpointFormat& f : kWeightFormats)
    names += std::string(names.empty() ? "" : ", ") + f.single_name + ", " + f.index_name;
  throw Error(ErrorKind::Checkpoint, "[checkpoint] " + dir.string() + ": no weights (looked for " + names + ")");
}

std::unique_ptr<CheckpointReader> open_checkpoint(const std::filesystem::path& dir,
                                                  const std::string* config_text) {
  std::unique_ptr<CheckpointReader> base = open_checkpoint(dir);
  if (!config_text) return base;
  return dequantizing_checkpoint(std::move(base), dir, *config_text);
}

}  // namespace mobius
