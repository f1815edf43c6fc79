// pytorch_bin.cpp - legacy torch.save checkpoints: tensors assembled from the storages of a
// bounds-checked zip archive (zip_reader.hpp) as its restricted unpickler (unpickler.hpp) describes
// them, and read with pread straight from the stored entries.
#include "checkpoint/pytorch_bin.hpp"

#include <algorithm>
#include <cstring>
#include <optional>

#include "checkpoint/checkpoint_files.hpp"
#include "mobius/plugin.h"
#include "checkpoint/zip_reader.hpp"

namespace mobius {
namespace {

namespace fs = std::filesystem;

constexpr const CheckpointFormat& kFormat = kPytorchFormat;
// A view larger than its storage (stride 0, overlapping strides) may not exceed this.
constexpr uint64_t kMaxRepeatedBytes = uint64_t{64} << 20;
// Bytes buffered at once when gathering a non-contiguous tensor. The fuzzer shrinks it so that
// its small inputs reach the windowed paths too.
#ifdef MOBIUS_GATHER_WINDOW_BYTES
constexpr uint64_t kGatherWindow = MOBIUS_GATHER_WINDOW_BYTES;
#else
constexpr uint64_t kGatherWindow = uint64_t{16} << 20;
#endif

[[noreturn]] void fail(const std::string& file, const std::string& reason) {
  kFormat.fail(file, reason);
}

// ---------------------------------------------------------------------------------------------
// Archives

// The view (offset, size, stride) must stay inside its storage; all arithmetic is checked.
void check_view(const TorchTensor& t, const TorchStorage& s, const std::string& display) {
  const std::string who = "tensor " + quote_name(t.name);
  int64_t product = 1;
  bool empty = false;
  for (int64_t d : t.shape) {
    if (d == 0) empty = true;
    if (__builtin_mul_overflow(product, std::max<int64_t>(d, 1), &product)) {
      fail(display, "data.pkl: " + who + " size " + dims_text(t.shape) + " has too many elements");
    }
  }
  uint64_t nbytes;
  if (__builtin_mul_overflow(static_cast<uint64_t>(product), dtype_size(s.dtype), &nbytes)) {
    fail(display, "data.pkl: " + who + " size " + dims_text(t.shape) + " has too many bytes");
  }
  if (empty) {
    if (t.offset > s.numel) {
      fail(display, "data.pkl: " + who + " storage_offset " + std::to_string(t.offset) +
                        " is beyond storage " + quote_name(s.key) + " of " +
                        std::to_string(s.numel) + " elements");
    }
    return;
  }
  uint64_t last = t.offset;
  for (size_t i = 0; i < t.shape.size(); ++i) {
    uint64_t span;
    if (__builtin_mul_overflow(static_cast<uint64_t>(t.shape[i] - 1),
                               static_cast<uint64_t>(t.stride[i]), &span) ||
        __builtin_add_overflow(last, span, &last)) {
      fail(display, "data.pkl: " + who + " size " + dims_text(t.shape) + " with stride " +
                        dims_text(t.stride) + " overflows");
    }
  }
  if (last >= s.numel) {
    fail(display, "data.pkl: " + who + " (offset " + std::to_string(t.offset) + ", size " +
                      dims_text(t.shape) + ", stride " + dims_text(t.stride) +
                      ") reaches element " + std::to_string(last) + " of storage " +
                      quote_name(s.key) + ", which has " + std::to_string(s.numel) + " elements");
  }
  // Stride 0 (expand) or overlapping strides repeat elements: harmless for a small buffer,
  // but a few bytes of storage must not make the reader materialize terabytes.
  const uint64_t storage_bytes = s.numel * dtype_size(s.dtype);
  if (nbytes > storage_bytes && nbytes > kMaxRepeatedBytes) {
    fail(display, "data.pkl: " + who + " size " + dims_text(t.shape) + " with stride " +
                      dims_text(t.stride) + " repeats elements to " + std::to_string(nbytes) +
                      " bytes from a storage of " + std::to_string(storage_bytes) +
                      " (limit for such views: 64 MiB)");
  }
}

// Where a tensor's bytes are: a view into a stored entry.
struct TensorLoc {
  size_t shard = 0;
  uint64_t data_offset = 0;  // source offset of the storage's first byte
  uint64_t elem = 0;         // bytes per element
  uint64_t offset = 0;       // in elements
  std::vector<int64_t> shape;
  std::vector<int64_t> stride;
};

struct Shard {
  std::string display;
  fs::path path;
  std::shared_ptr<ByteSource> source;
  std::vector<TensorMeta> tensors;  // sorted by name
  std::vector<TensorLoc> locs;      // parallel to tensors
};

// Validates the archive layout and the pickle, and locates every tensor's bytes.
void load_archive(Shard& shard) {
  const std::string& d = shard.display;
  const ByteSource& src = *shard.source;
  const std::vector<ZipEntry> entries = read_zip_directory(src, d);

  // The records live under one top folder, named after the file torch.save wrote.
  const ZipEntry* pkl = nullptr;
  for (const ZipEntry& z : entries) {
    const size_t slash = z.name.find('/');
    if (slash != std::string::npos && z.name.compare(slash, std::string::npos, "/data.pkl") == 0) {
      if (pkl) {
        fail(d,
             "two pickles in the archive, " + quote_name(pkl->name) + " and " + quote_name(z.name));
      }
      pkl = &z;
    }
  }
  if (!pkl) fail(d, "no <name>/data.pkl in the archive (not a torch.save checkpoint)");
  const std::string top = pkl->name.substr(0, pkl->name.size() - 8);  // "<name>/"

  if (const ZipEntry* bo = find_zip_entry(entries, top + "byteorder")) {
    if (bo->method != 0) fail(d, "byteorder record is " + zip_method_text(bo->method));
    if (bo->usize > 16) fail(d, "byteorder record of " + std::to_string(bo->usize) + " bytes");
    std::string order(static_cast<size_t>(bo->usize), '\0');
    read_or_fail(src, d, order.data(), bo->usize, bo->data_offset, "the byteorder record");
    if (order != "little") {
      fail(d, "byteorder is " + quote_name(order) + "; only little-endian archives are supported");
    }
  }

  if (pkl->method != 0) {
    fail(d, "data.pkl is " + zip_method_text(pkl->method) +
                "; only stored (uncompressed) entries are supported, as torch.save writes them");
  }
  if (pkl->usize > kMaxPickleBytes) {
    fail(d, "data.pkl is " + std::to_string(pkl->usize) + " bytes, over the 64 MiB limit");
  }
  TorchPickle pickle;
  {
    std::vector<uint8_t> bytes(static_cast<size_t>(pkl->usize));
    read_or_fail(src, d, bytes.data(), pkl->usize, pkl->data_offset, "data.pkl");
    if (zip_crc32(bytes.data(), bytes.size()) != pkl->crc) fail(d, "data.pkl fails its CRC check");
    pickle = parse_torch_pickle(bytes.data(), bytes.size(), d);
  }
  for (const TorchTensor& t : pickle.tensors) check_view(t, pickle.storages[t.storage], d);

  std::vector<uint64_t> storage_offsets(pickle.storages.size());
  for (size_t i = 0; i < pickle.storages.size(); ++i) {
    const TorchStorage& s = pickle.storages[i];
    const std::string entry_name = top + "data/" + s.key;
    const std::string who = "storage " + quote_name(s.key);
    const ZipEntry* z = find_zip_entry(entries, entry_name);
    if (!z) fail(d, who + " has no archive entry " + quote_name(entry_name));
    if (z->method != 0) {
      fail(d, who + " entry is " + zip_method_text(z->method) +
                  "; only stored (uncompressed) storages can be read in place");
    }
    const uint64_t want = s.numel * dtype_size(s.dtype);  // bounded by the unpickler
    if (z->usize != want) {
      fail(d, who + " entry holds " + std::to_string(z->usize) + " bytes, but " +
                  std::to_string(s.numel) + " " + dtype_name(s.dtype) + " elements need " +
                  std::to_string(want));
    }
    storage_offsets[i] = z->data_offset;
  }

  shard.tensors.reserve(pickle.tensors.size());
  shard.locs.reserve(pickle.tensors.size());
  for (TorchTensor& t : pickle.tensors) {
    const TorchStorage& s = pickle.storages[t.storage];
    uint64_t count = 1;
    for (int64_t dim : t.shape) count *= static_cast<uint64_t>(dim);  // checked by check_view
    const uint64_t elem = dtype_size(s.dtype);
    shard.locs.push_back(
        TensorLoc{0, storage_offsets[t.storage], elem, t.offset, t.shape, std::move(t.stride)});
    shard.tensors.push_back(
        TensorMeta{std::move(t.name), s.dtype, std::move(t.shape), shard.path, count * elem});
  }
}

// Copies a strided view into row-major order. Dimensions are visited in storage order
// (largest stride first) so that the storage is read in a few large windows; a dimension whose
// span does not fit one window is split across several.
class Gather {
 public:
  Gather(const ByteSource& src, const TensorLoc& loc, char* dst, const std::string& display,
         const std::string& who)
      : src_(src), loc_(loc), dst_(dst), display_(display), who_(who) {
    const size_t rank = loc.shape.size();
    std::vector<int64_t> out_stride(rank);
    int64_t acc = 1;
    for (size_t i = rank; i-- > 0;) {
      out_stride[i] = acc;
      acc *= loc.shape[i];
    }
    for (size_t i = 0; i < rank; ++i) {
      if (loc.shape[i] > 1) {
        dims_.push_back(Dim{static_cast<uint64_t>(loc.shape[i]),
                            static_cast<uint64_t>(loc.stride[i]),
                            static_cast<uint64_t>(out_stride[i])});
      }
    }
    std::stable_sort(dims_.begin(), dims_.end(),
                     [](const Dim& a, const Dim& b) { return a.stride > b.stride; });
    // extent_[l]: elements spanned by dimensions l.. (1 for none).
    extent_.assign(dims_.size() + 1, 1);
    for (size_t l = dims_.size(); l-- > 0;) {
      extent_[l] = extent_[l + 1] + (dims_[l].size - 1) * dims_[l].stride;
    }
  }

  void run() { process(0, loc_.offset, 0); }

 private:
  struct Dim {
    uint64_t size;
    uint64_t stride;      // in the storage
    uint64_t out_stride;  // in the row-major output
  };

  void process(size_t level, uint64_t src_base, uint64_t dst_base) {
    const uint64_t window = kGatherWindow / loc_.elem;
    if (extent_[level] <= window) {
      copy(level, 0, level < dims_.size() ? dims_[level].size : 1, src_base, dst_base);
      return;
    }
    const Dim& dim = dims_[level];
    if (extent_[level + 1] <= window) {
      // Several indices of this dimension per window.
      const uint64_t per = std::max<uint64_t>(1, (window - extent_[level + 1]) / dim.stride + 1);
      for (uint64_t i0 = 0; i0 < dim.size; i0 += per) {
        copy(level, i0, std::min(per, dim.size - i0), src_base, dst_base);
      }
      return;
    }
    for (uint64_t i = 0; i < dim.size; ++i) {
      process(level + 1, src_base + i * dim.stride, dst_base + i * dim.out_stride);
    }
  }

  // Reads the storage window covering indices [i0, i0 + count) of dimension `level` (and all of
  // the dimensions after it), then scatters its elements to the output.
  void copy(size_t level, uint64_t i0, uint64_t count, uint64_t src_base, uint64_t dst_base) {
    const uint64_t elem = loc_.elem;
    uint64_t first = src_base, span = extent_[level];
    if (level < dims_.size()) {
      first += i0 * dims_[level].stride;
      span = (count - 1) * dims_[level].stride + extent_[level + 1];
    }
    buf_.resize(static_cast<size_t>(span * elem));
    check_read(src_.read_at(buf_.data(), span * elem, loc_.data_offset + first * elem), kFormat,
               display_, who_, " (file truncated?)");
    if (level >= dims_.size()) {
      std::memcpy(dst_ + dst_base * elem, buf_.data(), static_cast<size_t>(elem));
      return;
    }
    // Odometer over dimensions level.. with the first limited to [i0, i0 + count). Source
    // offsets are relative to the window; the innermost dimension is the inner loop.
    const size_t n = dims_.size() - level;
    const Dim& inner = dims_.back();
    const uint64_t inner_begin = n == 1 ? i0 : 0;
    const uint64_t inner_count = n == 1 ? count : inner.size;
    std::vector<uint64_t> idx(n - 1, 0);  // counters of the outer dimensions
    for (;;) {
      uint64_t s = 0, o = dst_base;
      for (size_t k = 0; k < idx.size(); ++k) {
        const Dim& dim = dims_[level + k];
        s += idx[k] * dim.stride;
        o += (idx[k] + (k == 0 ? i0 : 0)) * dim.out_stride;
      }
      for (uint64_t j = 0; j < inner_count; ++j) {
        std::memcpy(dst_ + (o + (inner_begin + j) * inner.out_stride) * elem,
                    buf_.data() + (s + j * inner.stride) * elem, static_cast<size_t>(elem));
      }
      size_t k = idx.size();
      while (k > 0) {
        --k;
        const uint64_t limit = k == 0 ? count : dims_[level + k].size;
        if (++idx[k] < limit) break;
        idx[k] = 0;
        if (k == 0) return;
      }
      if (idx.empty()) return;
    }
  }

  const ByteSource& src_;
  const TensorLoc& loc_;
  char* dst_;
  const std::string& display_;
  const std::string& who_;
  std::vector<Dim> dims_;
  std::vector<uint64_t> extent_;
  std::vector<char> buf_;
};

bool is_contiguous(const TensorLoc& loc) {
  int64_t expect = 1;
  for (size_t i = loc.shape.size(); i-- > 0;) {
    if (loc.shape[i] == 1) continue;
    if (loc.stride[i] != expect) return false;
    expect *= loc.shape[i];
  }
  return true;
}

// Sources are read with pread, so concurrent calls are safe.
class PytorchReader final : public TableReader<TensorLoc> {
 public:
  PytorchReader(std::vector<TensorMeta> tensors, std::vector<TensorLoc> locs,
                std::vector<std::shared_ptr<ByteSource>> sources,
                std::vector<std::string> shard_names, std::string description)
      : TableReader(kFormat, std::move(tensors), std::move(locs), std::move(shard_names),
                    std::move(description)),
        sources_(std::move(sources)) {}

  void read(const TensorMeta& meta, void* dst) const override {
    const TensorLoc& loc = locate_for_read(meta);
    if (meta.nbytes == 0) return;
    const ByteSource& src = *sources_[loc.shard];
    const std::string& display = shard_display(loc);
    const std::string who = "tensor " + quote_name(meta.name);
    if (is_contiguous(loc)) {
      check_read(src.read_at(static_cast<char*>(dst), meta.nbytes,
                             loc.data_offset + loc.offset * loc.elem),
                 kFormat, display, who, " (file truncated?)");
      return;
    }
    Gather(src, loc, static_cast<char*>(dst), display, who).run();
  }

  // Contiguous tensors of a file-backed archive lie in one stretch of a stored entry.
  std::optional<FileExtent> extent(const TensorMeta& meta) const override {
    const TensorLoc* loc = locate(meta);
    if (!loc) return std::nullopt;
    const int fd = sources_[loc->shard]->fd();
    if (fd < 0 || !is_contiguous(*loc)) return std::nullopt;
    return FileExtent{fd, loc->data_offset + loc->offset * loc->elem};
  }

 private:
  std::vector<std::shared_ptr<ByteSource>> sources_;  // one per shard
};

// Loaded shards, gathered into a reader.
std::unique_ptr<CheckpointReader> make_reader(std::vector<Shard> shards, std::string description) {
  std::vector<TensorMeta> tensors;
  std::vector<TensorLoc> locs;
  std::vector<std::shared_ptr<ByteSource>> sources;
  std::vector<std::string> names;
  for (size_t s = 0; s < shards.size(); ++s) {
    for (size_t i = 0; i < shards[s].tensors.size(); ++i) {
      shards[s].locs[i].shard = s;
      tensors.push_back(std::move(shards[s].tensors[i]));
      locs.push_back(std::move(shards[s].locs[i]));
    }
    sources.push_back(std::move(shards[s].source));
    names.push_back(std::move(shards[s].display));
  }
  return std::make_unique<PytorchReader>(std::move(tensors), std::move(locs), std::move(sources),
                                         std::move(names), std::move(description));
}

std::unique_ptr<CheckpointReader> open_single(const fs::path& dir, const ModelFolder& folder,
                                              const CheckpointFormat& fmt) {
  std::vector<Shard> shards(1);
  Shard& shard = shards[0];
  shard.display = fmt.single_name;
  shard.path = dir / fmt.single_name;
  shard.source = std::make_shared<FileSource>(
      folder.open(fmt.single_name, shard.display, fmt.tag));
  load_archive(shard);
  return make_reader(std::move(shards),
                     checkpoint_description(fmt, CheckpointLayout::Single, 1));
}

std::unique_ptr<CheckpointReader> open_sharded(const fs::path& dir, const ModelFolder& folder,
                                               const CheckpointFormat& fmt) {
  const ShardIndex index = read_shard_index(folder, fmt);
  std::vector<Shard> shards(index.shard_ids.size());
  open_shards(dir, folder, index, fmt,
              [&](size_t id, const fs::path& path, const std::string& display, OpenedFile file) {
                Shard& shard = shards[id];
                shard.display = display;
                shard.path = path;
                shard.source = std::make_shared<FileSource>(std::move(file));
                load_archive(shard);
              });
  std::vector<std::vector<std::string_view>> names(shards.size());
  std::vector<std::string> displays;
  for (size_t s = 0; s < shards.size(); ++s) {
    for (const TensorMeta& t : shards[s].tensors) names[s].push_back(t.name);
    displays.push_back(shards[s].display);
  }
  check_shards_against_index(folder.path(), index, names, displays, fmt);
  const size_t n = shards.size();
  return make_reader(std::move(shards),
                     checkpoint_description(fmt, CheckpointLayout::Sharded, n));
}

}  // namespace

std::unique_ptr<CheckpointReader> open_pytorch_archive_bytes(std::string bytes,
                                                             const std::string& display) {
  std::vector<Shard> shards(1);
  shards[0].display = display;
  shards[0].path = display;
  shards[0].source = std::make_shared<MemorySource>(std::move(bytes));
  load_archive(shards[0]);
  return make_reader(std::move(shards),
                     checkpoint_description(kFormat, CheckpointLayout::Single, 1));
}

std::unique_ptr<CheckpointReader> open_pytorch_checkpoint(const std::filesystem::path& dir,
                                                         const CheckpointFormat& fmt) {
  const CheckpointLayout layout = checkpoint_layout(dir, fmt);
  const ModelFolder folder(dir);  // every file below is opened through its rule
  if (layout == CheckpointLayout::Single) return open_single(dir, folder, fmt);
  return open_sharded(dir, folder, fmt);
}

std::unique_ptr<CheckpointReader> open_pytorch_checkpoint(const std::filesystem::path& dir) {
  return open_pytorch_checkpoint(dir, kPytorchFormat);
}

}  // namespace mobius
