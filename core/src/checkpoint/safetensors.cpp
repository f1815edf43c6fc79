// safetensors.cpp - validating reader for safetensors checkpoints (one file or indexed shards).
//
// Checkpoints come from strangers, so every header field is checked before it is trusted: the
// reader must never crash, hang, over-allocate or read outside the checkpoint folder. Headers
// are parsed with nlohmann's SAX interface straight into small structs (json_sax.hpp). Opening
// files, the index and the shard rules are the checkpoint layer's (checkpoint_files.hpp).
#include <algorithm>
#include <limits>
#include <set>
#include <utility>

#include <nlohmann/json.hpp>

#include "checkpoint/checkpoint.hpp"
#include "checkpoint/checkpoint_files.hpp"
#include "checkpoint/json_sax.hpp"
#include "mobius/plugin.h"

namespace mobius {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

constexpr const CheckpointFormat& kFormat = kSafetensorsFormat;
// Same order of magnitude as the reference implementation's limit; real headers are < 1 MiB.
constexpr uint64_t kMaxHeaderBytes = uint64_t{100} << 20;
// No real tensor comes close; the cap stops a header of "[0,0,0,...]" from costing 4x its size.
constexpr size_t kMaxRank = 64;

[[noreturn]] void fail(const std::string& file, const std::string& reason) {
  kFormat.fail(file, reason);
}

void read_or_fail(const OpenedFile& file, const std::string& display, char* dst, uint64_t n,
                  uint64_t off, const std::string& what) {
  check_read(pread_exact(file.fd.get(), dst, n, off), kFormat, display, what);
}

// ---------------------------------------------------------------------------------------------
// Header parsing (SAX)

struct DtypeEntry {
  std::string_view name;
  int32_t code;
};

constexpr DtypeEntry kDtypes[] = {
    {"F64", MOBIUS_DTYPE_DOUBLE},    {"F32", MOBIUS_DTYPE_FLOAT},  {"F16", MOBIUS_DTYPE_FLOAT16},
    {"BF16", MOBIUS_DTYPE_BFLOAT16}, {"I64", MOBIUS_DTYPE_INT64},  {"I32", MOBIUS_DTYPE_INT32},
    {"I16", MOBIUS_DTYPE_INT16},     {"I8", MOBIUS_DTYPE_INT8},    {"U64", MOBIUS_DTYPE_UINT64},
    {"U32", MOBIUS_DTYPE_UINT32},    {"U16", MOBIUS_DTYPE_UINT16}, {"U8", MOBIUS_DTYPE_UINT8},
    {"BOOL", MOBIUS_DTYPE_BOOL},     {"F8_E4M3", kDtypeFloat8E4M3FN},
};

// One tensor of a safetensors header. The SAX handler fills name, dtype, shape and the offsets
// (type-checked only); parse_safetensors validates them and sets nbytes. Kept compact because
// a hostile 100 MiB header can hold about two million of them.
struct Entry {
  std::string name;
  int32_t dtype = 0;
  uint8_t noffsets = 0;  // how many data_offsets values were seen
  std::vector<int64_t> shape;
  uint64_t begin = 0;  // data_offsets, relative to the data region
  uint64_t end = 0;
  uint64_t nbytes = 0;
};

// What the next value of a header must be.
enum class HeaderExpect {
  Root,       // the header itself: an object
  Key,        // inside an object, between values
  Metadata,   // the value of "__metadata__": an object
  MetaValue,  // a metadata value: a string
  Entry,      // a tensor entry: an object
  Dtype,      // a string
  Shape,      // an array of dimensions
  Dim,        // inside shape: a non-negative integer
  Offsets,    // data_offsets: an array
  Offset,     // inside data_offsets: a non-negative integer
  Ignored,    // an unknown field's value, of any type
  End         // the header object has closed
};

// Parses {"name": {"dtype": s, "shape": [n...], "data_offsets": [b, e]}, "__metadata__": {s: s}}.
// Unknown fields inside a tensor entry are skipped, as the reference implementation does.
class HeaderSax : public SaxHandler<HeaderSax, HeaderExpect> {
 public:
  HeaderSax() : SaxHandler("header") {}
  std::vector<Entry> entries;

  bool number_integer(json::number_integer_t v) {
    if (v >= 0) return number_unsigned(static_cast<uint64_t>(v));
    if (skipping()) return true;
    if (expect_ == Expect::Ignored) return done();
    if (expect_ == Expect::Dim) {
      return reject("tensor " + quote_name(cur().name) + " has negative dimension " +
                    std::to_string(v));
    }
    if (expect_ == Expect::Offset) {
      return reject("tensor " + quote_name(cur().name) + " has negative data offset " +
                    std::to_string(v));
    }
    return wrong_type();
  }
  bool number_unsigned(json::number_unsigned_t v) {
    if (skipping()) return true;
    if (expect_ == Expect::Ignored) return done();
    if (expect_ == Expect::Dim) {
      if (v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        return reject("tensor " + quote_name(cur().name) + " has dimension " + std::to_string(v) +
                      " that is too large");
      }
      if (cur().shape.size() >= kMaxRank) {
        return reject("tensor " + quote_name(cur().name) + " has more than " +
                      std::to_string(kMaxRank) + " dimensions");
      }
      cur().shape.push_back(static_cast<int64_t>(v));
      return true;
    }
    if (expect_ == Expect::Offset) {
      Entry& e = cur();
      if (e.noffsets >= 2) return wrong_type();
      (e.noffsets++ == 0 ? e.begin : e.end) = v;
      return true;
    }
    return wrong_type();
  }
  bool string(json::string_t& s) {
    if (skipping()) return true;
    switch (expect_) {
      case Expect::Ignored:
      case Expect::MetaValue:  // metadata is validated but not kept: nothing reads it
        return done();
      case Expect::Dtype:
        for (const DtypeEntry& d : kDtypes) {
          if (d.name == s) {
            cur().dtype = d.code;
            return done();
          }
        }
        return reject("tensor " + quote_name(cur().name) + " has unsupported dtype " +
                      quote_name(s));
      default: return wrong_type();
    }
  }

  bool start_object(std::size_t) {
    if (skipping()) return skip_open();
    switch (expect_) {
      case Expect::Ignored: begin_skip(); return true;
      case Expect::Root:
        in_ = In::Top;
        expect_ = Expect::Key;
        return true;
      case Expect::Metadata:
        in_ = In::Meta;
        meta_keys_.clear();
        expect_ = Expect::Key;
        return true;
      case Expect::Entry:
        in_ = In::Tensor;
        fields_ = 0;
        expect_ = Expect::Key;
        return true;
      default: return wrong_type();
    }
  }

  bool key(json::string_t& k) {
    if (skipping()) return true;
    switch (in_) {
      case In::Top:
        // Duplicate tensor names are found after parsing by sorting, which needs no set here.
        if (k == "__metadata__") {
          if (seen_metadata_) return reject("duplicate __metadata__");
          seen_metadata_ = true;
          expect_ = Expect::Metadata;
        } else {
          entries.emplace_back().name = std::move(k);
          expect_ = Expect::Entry;
        }
        return true;
      case In::Meta:
        if (!meta_keys_.insert(k).second) {
          return reject("__metadata__ has duplicate key " + quote_name(k));
        }
        meta_key_ = std::move(k);
        expect_ = Expect::MetaValue;
        return true;
      case In::Tensor: {
        unsigned bit = 0;
        if (k == "dtype") {
          bit = 1;
          expect_ = Expect::Dtype;
        } else if (k == "shape") {
          bit = 2;
          expect_ = Expect::Shape;
        } else if (k == "data_offsets") {
          bit = 4;
          expect_ = Expect::Offsets;
        } else {
          expect_ = Expect::Ignored;
        }
        if (fields_ & bit) {
          return reject("tensor " + quote_name(cur().name) + " has duplicate field " +
                        quote_name(k));
        }
        fields_ |= bit;
        return true;
      }
      default: return wrong_type();
    }
  }

  bool end_object() {
    if (skipping()) return skip_close() ? done() : true;
    switch (in_) {
      case In::Top: expect_ = Expect::End; return true;
      case In::Meta: in_ = In::Top; return done();
      case In::Tensor:
        for (auto [bit, field] : {std::pair{1u, "dtype"}, {2u, "shape"}, {4u, "data_offsets"}}) {
          if (!(fields_ & bit)) {
            return reject("tensor " + quote_name(cur().name) + " is missing '" + field + "'");
          }
        }
        in_ = In::Top;
        return done();
      default: return wrong_type();
    }
  }

  bool start_array(std::size_t) {
    if (skipping()) return skip_open();
    switch (expect_) {
      case Expect::Ignored: begin_skip(); return true;
      case Expect::Shape:
        in_ = In::Shape;
        expect_ = Expect::Dim;
        return true;
      case Expect::Offsets:
        in_ = In::Offsets;
        expect_ = Expect::Offset;
        return true;
      default: return wrong_type();
    }
  }

  bool end_array() {
    if (skipping()) return skip_close() ? done() : true;
    if (in_ == In::Shape) {
      in_ = In::Tensor;
      return done();
    }
    if (in_ == In::Offsets) {
      if (cur().noffsets != 2) return wrong_type();
      in_ = In::Tensor;
      return done();
    }
    return wrong_type();
  }

 private:
  friend class SaxHandler<HeaderSax, HeaderExpect>;
  using Expect = HeaderExpect;
  // Where the parser is.
  enum class In { None, Top, Meta, Tensor, Shape, Offsets };

  Entry& cur() { return entries.back(); }

  // The current event does not fit what expect_ asks for.
  bool wrong_type() {
    switch (expect_) {
      case Expect::Root: return reject("header is not a JSON object");
      case Expect::Metadata: return reject("__metadata__ is not an object");
      case Expect::MetaValue:
        return reject("__metadata__ value for key " + quote_name(meta_key_) + " is not a string");
      case Expect::Entry:
        return reject("entry for tensor " + quote_name(cur().name) + " is not an object");
      case Expect::Dtype:
        return reject("tensor " + quote_name(cur().name) + " dtype is not a string");
      case Expect::Shape:
      case Expect::Dim:
        return reject("tensor " + quote_name(cur().name) + " shape is not an array of integers");
      case Expect::Offsets:
      case Expect::Offset:
        return reject("tensor " + quote_name(cur().name) +
                      " data_offsets is not an array of 2 integers");
      default: return reject("header has an unexpected JSON structure");
    }
  }

  In in_ = In::None;
  unsigned fields_ = 0;
  bool seen_metadata_ = false;
  std::set<std::string> meta_keys_;
  std::string meta_key_;
};

// ---------------------------------------------------------------------------------------------
// safetensors files

std::string_view st_dtype_name(int32_t code) {
  for (const DtypeEntry& d : kDtypes) {
    if (d.code == code) return d.name;
  }
  return "?";
}

struct ParsedFile {
  std::vector<Entry> entries;  // validated, sorted by name
  uint64_t data_start = 0;     // file offset of the data region
};

// Reads and validates the header of an open safetensors file. Nothing of the data region is
// read: only its size matters here.
ParsedFile parse_safetensors(const OpenedFile& file, const std::string& display) {
  if (file.size < 8) {
    fail(display,
         "file is " + std::to_string(file.size) + " bytes, too short for the 8-byte header length");
  }
  unsigned char len_bytes[8];
  read_or_fail(file, display, reinterpret_cast<char*>(len_bytes), 8, 0, "the header length");
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | len_bytes[i];
  if (header_len > kMaxHeaderBytes) {
    fail(display, "header length " + std::to_string(header_len) + " exceeds the 100 MiB limit");
  }
  if (header_len > file.size - 8) {
    fail(display, "header length " + std::to_string(header_len) + " exceeds the file size (" +
                      std::to_string(file.size) + " bytes)");
  }
  ParsedFile parsed;
  {
    // Scoped so the header text is freed before the caller builds its metadata.
    std::string header(static_cast<size_t>(header_len), '\0');
    read_or_fail(file, display, header.data(), header_len, 8, "the header");
    HeaderSax sax;
    run_sax(header, sax, kFormat, display, "header");
    parsed.entries = std::move(sax.entries);
  }
  std::vector<Entry>& entries = parsed.entries;
  std::sort(entries.begin(), entries.end(),
            [](const Entry& a, const Entry& b) { return a.name < b.name; });
  for (size_t i = 1; i < entries.size(); ++i) {
    if (entries[i].name == entries[i - 1].name) {
      fail(display, "duplicate tensor name " + quote_name(entries[i].name));
    }
  }

  parsed.data_start = 8 + header_len;
  const uint64_t data_len = file.size - parsed.data_start;
  for (Entry& e : entries) {
    const auto who = [&] { return "tensor " + quote_name(e.name); };
    // Elements are counted with zero dimensions read as 1 as well, so that a zero-size tensor
    // cannot carry dimensions whose product overflows in later stride arithmetic.
    int64_t product = 1;
    bool empty = false;
    for (int64_t d : e.shape) {
      if (d == 0) empty = true;
      if (__builtin_mul_overflow(product, std::max<int64_t>(d, 1), &product)) {
        fail(display, who() + " shape " + dims_text(e.shape) + " has too many elements");
      }
    }
    const uint64_t count = empty ? 0 : static_cast<uint64_t>(product);
    if (__builtin_mul_overflow(count, static_cast<uint64_t>(dtype_size(e.dtype)), &e.nbytes)) {
      fail(display, who() + " shape " + dims_text(e.shape) + " has too many bytes");
    }
    if (e.begin > e.end) {
      fail(display, who() + " offsets " + range_text(e.begin, e.end) + " out of order");
    }
    if (e.end > data_len) {
      fail(display, who() + " offsets " + range_text(e.begin, e.end) +
                        " extend beyond the data region (" + std::to_string(data_len) + " bytes)");
    }
    if (e.end - e.begin != e.nbytes) {
      fail(display, who() + " byte length " + std::to_string(e.end - e.begin) + " does not match " +
                        std::string(st_dtype_name(e.dtype)) + " x " + dims_text(e.shape) + " = " +
                        std::to_string(e.nbytes) + " bytes");
    }
  }

  // The tensors must tile the data region exactly: no overlap (two tensors aliasing bytes),
  // no gap and no trailing bytes (smuggled data the format does not allow).
  std::vector<const Entry*> by_offset;
  by_offset.reserve(entries.size());
  for (const Entry& e : entries) by_offset.push_back(&e);
  std::sort(by_offset.begin(), by_offset.end(), [](const Entry* a, const Entry* b) {
    return a->begin != b->begin ? a->begin < b->begin : a->end < b->end;
  });
  uint64_t covered = 0;
  const Entry* prev = nullptr;
  for (const Entry* e : by_offset) {
    if (e->begin < covered) {
      fail(display, "tensors " + quote_name(prev->name) + " " + range_text(prev->begin, prev->end) +
                        " and " + quote_name(e->name) + " " + range_text(e->begin, e->end) +
                        " overlap");
    }
    if (e->begin > covered) {
      fail(display, "gap of bytes " + range_text(covered, e->begin) +
                        " in the data region before tensor " + quote_name(e->name));
    }
    covered = e->end;
    prev = e;
  }
  if (covered != data_len) {
    fail(display, std::to_string(data_len - covered) + " trailing bytes after the last tensor");
  }
  return parsed;
}

// ---------------------------------------------------------------------------------------------
// Reader

struct Location {
  size_t shard = 0;
  uint64_t offset = 0;  // absolute file offset of the first byte
};

class SafetensorsReader final : public TableReader<Location> {
 public:
  SafetensorsReader(std::vector<TensorMeta> tensors, std::vector<Location> locations,
                    std::vector<OwnedFd> fds, std::vector<std::string> shard_names,
                    std::string description)
      : TableReader(kFormat, std::move(tensors), std::move(locations), std::move(shard_names),
                    std::move(description)),
        fds_(std::move(fds)) {}

  // pread does not move the file offset, so concurrent calls share the descriptors safely.
  void read(const TensorMeta& meta, void* dst) const override {
    const Location& loc = locate_for_read(meta);
    if (meta.nbytes == 0) return;
    check_read(pread_exact(fds_[loc.shard].get(), static_cast<char*>(dst), meta.nbytes, loc.offset),
               kFormat, shard_display(loc), "tensor " + quote_name(meta.name),
               " (file truncated?)");
  }

  std::optional<FileExtent> extent(const TensorMeta& meta) const override {
    const Location* loc = locate(meta);
    if (!loc) return std::nullopt;
    return FileExtent{fds_[loc->shard].get(), loc->offset};
  }

 private:
  std::vector<OwnedFd> fds_;  // one per shard, open for the reader's lifetime
};

// The opened and validated shards (the single file counts as one), gathered into a reader.
struct Shards {
  std::vector<TensorMeta> tensors;
  std::vector<Location> locations;
  std::vector<OwnedFd> fds;
  std::vector<std::string> displays;

  // Validates one shard and takes its tensors. The entries' strings and shapes are moved, not
  // copied, so peak memory stays close to the final tables.
  void add(size_t shard, const fs::path& path, const std::string& display, OpenedFile file) {
    ParsedFile parsed = parse_safetensors(file, display);
    for (Entry& e : parsed.entries) {
      tensors.push_back(TensorMeta{std::move(e.name), e.dtype, std::move(e.shape), path, e.nbytes});
      locations.push_back(Location{shard, parsed.data_start + e.begin});
    }
    if (fds.size() <= shard) {
      fds.resize(shard + 1);
      displays.resize(shard + 1);
    }
    fds[shard] = std::move(file.fd);
    displays[shard] = display;
  }

  std::unique_ptr<CheckpointReader> reader(std::string description) {
    return std::make_unique<SafetensorsReader>(std::move(tensors), std::move(locations),
                                               std::move(fds), std::move(displays),
                                               std::move(description));
  }
};

std::unique_ptr<CheckpointReader> open_single(const fs::path& dir, const ModelFolder& folder,
                                              const CheckpointFormat& fmt) {
  Shards shards;
  shards.add(0, dir / fmt.single_name, fmt.single_name,
             folder.open(fmt.single_name, fmt.single_name, fmt.tag));
  return shards.reader(checkpoint_description(fmt, CheckpointLayout::Single, 1));
}

std::unique_ptr<CheckpointReader> open_sharded(const fs::path& dir, const ModelFolder& folder,
                                               const CheckpointFormat& fmt) {
  const ShardIndex index = read_shard_index(folder, fmt);
  Shards shards;
  open_shards(dir, folder, index, fmt,
              [&](size_t shard, const fs::path& path, const std::string& display, OpenedFile file) {
                shards.add(shard, path, display, std::move(file));
              });
  std::vector<std::vector<std::string_view>> names(shards.displays.size());
  for (size_t i = 0; i < shards.tensors.size(); ++i) {
    names[shards.locations[i].shard].push_back(shards.tensors[i].name);
  }
  check_shards_against_index(folder.path(), index, names, shards.displays, fmt);
  const size_t n = shards.displays.size();
  return shards.reader(checkpoint_description(fmt, CheckpointLayout::Sharded, n));
}

}  // namespace

std::unique_ptr<CheckpointReader> open_safetensors_checkpoint(const std::filesystem::path& dir,
                                                         const CheckpointFormat& fmt) {
  const CheckpointLayout layout = checkpoint_layout(dir, fmt);
  const ModelFolder folder(dir);  // every file below is opened through its rule
  if (layout == CheckpointLayout::Single) return open_single(dir, folder, fmt);
  return open_sharded(dir, folder, fmt);
}

std::unique_ptr<CheckpointReader> open_safetensors_checkpoint(const std::filesystem::path& dir) {
  return open_safetensors_checkpoint(dir, kSafetensorsFormat);
}

}  // namespace mobius
