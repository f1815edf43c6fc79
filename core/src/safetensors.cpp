// safetensors.cpp - validating reader for safetensors checkpoints (one file or indexed shards).
//
// Checkpoints come from strangers, so every header field is checked before it is trusted: the
// reader must never crash, hang, over-allocate or read outside the checkpoint folder. Headers
// are parsed with nlohmann's SAX interface straight into small structs: no DOM is built (a
// 100 MiB header of tiny JSON values would otherwise blow up in memory), duplicate keys are
// seen (a DOM silently keeps the last one) and parsing stops at the first bad field.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <limits>
#include <map>
#include <new>
#include <set>
#include <system_error>
#include <unordered_map>
#include <utility>

#include <nlohmann/json.hpp>

#include "checkpoint.hpp"
#include "mobius/plugin.h"

namespace mobius {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

constexpr const char* kSingleName = "model.safetensors";
constexpr const char* kIndexName = "model.safetensors.index.json";
// Same order of magnitude as the reference implementation's limit; real headers are < 1 MiB.
constexpr uint64_t kMaxHeaderBytes = uint64_t{100} << 20;
constexpr uint64_t kMaxIndexBytes = uint64_t{100} << 20;
// No real tensor comes close; the cap stops a header of "[0,0,0,...]" from costing 4x its size.
constexpr size_t kMaxRank = 64;
// Names in messages are attacker-controlled: cap their length so a message stays readable.
constexpr size_t kMaxShown = 200;

// Printable rendering of an untrusted string: control bytes escaped, long strings cut on a
// UTF-8 character boundary.
std::string printable(std::string_view s) {
  bool cut = false;
  if (s.size() > kMaxShown) {
    size_t n = kMaxShown;
    while (n > 0 && (static_cast<unsigned char>(s[n]) & 0xC0) == 0x80) --n;
    s = s.substr(0, n);
    cut = true;
  }
  std::string out;
  out.reserve(s.size() + 8);
  for (char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7F) {
      static const char kHex[] = "0123456789abcdef";
      out += "\\x";
      out += kHex[u >> 4];
      out += kHex[u & 15];
    } else {
      out += c;
    }
  }
  if (cut) out += "...";
  return out;
}

std::string quote_name(std::string_view s) { return "'" + printable(s) + "'"; }

[[noreturn]] void fail(const std::string& file, const std::string& reason) {
  throw Error("[safetensors] " + file + ": " + reason);
}

std::string errno_text(int err) { return std::error_code(err, std::generic_category()).message(); }

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    if (i == 8) {
      s += "...";
      break;
    }
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

std::string range_text(uint64_t begin, uint64_t end) {
  return "[" + std::to_string(begin) + ", " + std::to_string(end) + ")";
}

// ---------------------------------------------------------------------------------------------
// Files

class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(Fd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  Fd& operator=(Fd&& other) noexcept {
    if (this != &other) {
      reset();
      fd_ = std::exchange(other.fd_, -1);
    }
    return *this;
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() { reset(); }
  int get() const { return fd_; }

 private:
  void reset() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  int fd_ = -1;
};

struct OpenedFile {
  Fd fd;
  uint64_t size = 0;
};

// Opens a regular file for reading. O_NONBLOCK keeps a FIFO planted under a checkpoint name
// from blocking the open forever; the S_ISREG check then rejects it (and devices, directories).
OpenedFile open_regular(const fs::path& path, const std::string& display, bool no_follow) {
  int flags = O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK;
  if (no_follow) flags |= O_NOFOLLOW;
  int raw;
  do {
    raw = ::open(path.c_str(), flags);
  } while (raw < 0 && errno == EINTR);
  if (raw < 0) {
    const int err = errno;
    fail(display, "cannot open: " + errno_text(err));
  }
  OpenedFile file{Fd(raw), 0};
  struct stat st {};
  if (::fstat(raw, &st) != 0) {
    const int err = errno;
    fail(display, "cannot stat: " + errno_text(err));
  }
  if (!S_ISREG(st.st_mode)) fail(display, "not a regular file");
  // Regular-file reads ignore O_NONBLOCK; clear it anyway so the descriptor is ordinary.
  const int fl = ::fcntl(raw, F_GETFL);
  if (fl >= 0) ::fcntl(raw, F_SETFL, fl & ~O_NONBLOCK);
  file.size = static_cast<uint64_t>(st.st_size);
  return file;
}

// Reads exactly n bytes at offset off. Returns 0 on success, -1 when the file ends first
// (it shrank since it was validated), or an errno value.
int pread_exact(int fd, char* dst, uint64_t n, uint64_t off) {
  // Linux transfers at most ~2 GiB per call; smaller requests also keep other threads moving.
  constexpr uint64_t kChunk = uint64_t{1} << 30;
  while (n > 0) {
    const size_t want = static_cast<size_t>(std::min(n, kChunk));
    const ssize_t got = ::pread(fd, dst, want, static_cast<off_t>(off));
    if (got < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    if (got == 0) return -1;
    dst += got;
    n -= static_cast<uint64_t>(got);
    off += static_cast<uint64_t>(got);
  }
  return 0;
}

void read_or_fail(const OpenedFile& file, const std::string& display, char* dst, uint64_t n,
                  uint64_t off, const std::string& what) {
  const int r = pread_exact(file.fd.get(), dst, n, off);
  if (r == -1) fail(display, "unexpected end of file reading " + what);
  if (r != 0) fail(display, "read error on " + what + ": " + errno_text(r));
}

// ---------------------------------------------------------------------------------------------
// JSON parsing (SAX)

// Shared parts of the two handlers: skipping values the reader ignores, and parse errors.
class SaxBase {
 public:
  explicit SaxBase(const char* what) : what_(what) {}
  std::string error;  // the first problem found; parsing stops there

  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& ex) {
    if (error.empty()) {
      // what() reads "[json.exception.parse_error.101] parse error at ..."; the id adds nothing
      // for a user, and the text can quote a long stretch of the input, so it is clipped.
      std::string_view text = ex.what();
      const size_t close = text.find("] ");
      if (close != std::string_view::npos) text.remove_prefix(close + 2);
      error = std::string(what_) + " is not valid JSON: " + printable(text);
    }
    return false;
  }

 protected:
  // While skip_depth_ > 0 every event belongs to a value being ignored.
  bool skipping() const { return skip_depth_ > 0; }
  void begin_skip() { skip_depth_ = 1; }
  bool skip_open() {
    ++skip_depth_;
    return true;
  }
  // Returns true when the ignored value just ended.
  bool skip_close() { return --skip_depth_ == 0; }
  bool reject(std::string message) {
    if (error.empty()) error = std::move(message);
    return false;
  }

 private:
  const char* what_;
  int64_t skip_depth_ = 0;
};

struct DtypeEntry {
  std::string_view name;
  int32_t code;
};

constexpr DtypeEntry kDtypes[] = {
    {"F64", MOBIUS_DTYPE_DOUBLE},    {"F32", MOBIUS_DTYPE_FLOAT},  {"F16", MOBIUS_DTYPE_FLOAT16},
    {"BF16", MOBIUS_DTYPE_BFLOAT16}, {"I64", MOBIUS_DTYPE_INT64},  {"I32", MOBIUS_DTYPE_INT32},
    {"I16", MOBIUS_DTYPE_INT16},     {"I8", MOBIUS_DTYPE_INT8},    {"U64", MOBIUS_DTYPE_UINT64},
    {"U32", MOBIUS_DTYPE_UINT32},    {"U16", MOBIUS_DTYPE_UINT16}, {"U8", MOBIUS_DTYPE_UINT8},
    {"BOOL", MOBIUS_DTYPE_BOOL},
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

// Parses {"name": {"dtype": s, "shape": [n...], "data_offsets": [b, e]}, "__metadata__": {s: s}}.
// Unknown fields inside a tensor entry are skipped, as the reference implementation does.
class HeaderSax : public SaxBase {
 public:
  HeaderSax() : SaxBase("header") {}
  std::vector<Entry> entries;

  bool null() { return scalar(); }
  bool boolean(bool) { return scalar(); }
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
  bool number_float(json::number_float_t, const json::string_t&) { return scalar(); }
  bool binary(json::binary_t&) { return scalar(); }

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
  // Where the parser is, and what the next value must be.
  enum class In { None, Top, Meta, Tensor, Shape, Offsets };
  enum class Expect {
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

  Entry& cur() { return entries.back(); }

  // A value inside an object is complete: the next event is a key or the object's end.
  bool done() {
    expect_ = Expect::Key;
    return true;
  }

  bool scalar() {
    if (skipping()) return true;
    if (expect_ == Expect::Ignored) return done();
    return wrong_type();
  }

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
  Expect expect_ = Expect::Root;
  unsigned fields_ = 0;
  bool seen_metadata_ = false;
  std::set<std::string> meta_keys_;
  std::string meta_key_;
};

// Parses {"metadata": {...}, "weight_map": {tensor: shard}}; other top-level keys are ignored.
class IndexSax : public SaxBase {
 public:
  IndexSax() : SaxBase("index") {}
  std::vector<std::pair<std::string, std::string>> weights;  // tensor name, shard name
  bool has_weight_map = false;

  bool null() { return scalar(); }
  bool boolean(bool) { return scalar(); }
  bool number_integer(json::number_integer_t) { return scalar(); }
  bool number_unsigned(json::number_unsigned_t) { return scalar(); }
  bool number_float(json::number_float_t, const json::string_t&) { return scalar(); }
  bool binary(json::binary_t&) { return scalar(); }

  bool string(json::string_t& s) {
    if (skipping()) return true;
    if (expect_ == Expect::Ignored) return done();
    if (expect_ == Expect::Shard) {
      weights.back().second = std::move(s);
      return done();
    }
    return wrong_type();
  }

  bool start_object(std::size_t) {
    if (skipping()) return skip_open();
    switch (expect_) {
      case Expect::Ignored:
      case Expect::Metadata:  // its contents (e.g. total_size) are not needed
        begin_skip();
        return true;
      case Expect::Root: in_ = In::Top; return done();
      case Expect::WeightMap: in_ = In::WeightMap; return done();
      default: return wrong_type();
    }
  }

  bool key(json::string_t& k) {
    if (skipping()) return true;
    if (in_ == In::Top) {
      if (k == "weight_map") {
        if (has_weight_map) return reject("duplicate key 'weight_map'");
        has_weight_map = true;
        expect_ = Expect::WeightMap;
      } else if (k == "metadata") {
        if (seen_metadata_) return reject("duplicate key 'metadata'");
        seen_metadata_ = true;
        expect_ = Expect::Metadata;
      } else {
        expect_ = Expect::Ignored;
      }
      return true;
    }
    weights.emplace_back(std::move(k), std::string());
    expect_ = Expect::Shard;
    return true;
  }

  bool end_object() {
    if (skipping()) return skip_close() ? done() : true;
    if (in_ == In::WeightMap) {
      in_ = In::Top;
      return done();
    }
    expect_ = Expect::End;
    return true;
  }

  bool start_array(std::size_t) {
    if (skipping()) return skip_open();
    if (expect_ == Expect::Ignored) {
      begin_skip();
      return true;
    }
    return wrong_type();
  }

  bool end_array() {
    if (skipping()) return skip_close() ? done() : true;
    return wrong_type();
  }

 private:
  enum class In { None, Top, WeightMap };
  enum class Expect { Root, Key, Metadata, WeightMap, Shard, Ignored, End };

  bool done() {
    expect_ = Expect::Key;
    return true;
  }
  bool scalar() {
    if (skipping()) return true;
    if (expect_ == Expect::Ignored) return done();
    return wrong_type();
  }
  bool wrong_type() {
    switch (expect_) {
      case Expect::Root: return reject("index is not a JSON object");
      case Expect::Metadata: return reject("metadata is not an object");
      case Expect::WeightMap: return reject("weight_map is not an object");
      case Expect::Shard:
        return reject("weight_map entry for tensor " + quote_name(weights.back().first) +
                      " is not a string");
      default: return reject("index has an unexpected JSON structure");
    }
  }

  In in_ = In::None;
  Expect expect_ = Expect::Root;
  bool seen_metadata_ = false;
};

template <typename Sax>
void run_sax(const std::string& text, Sax& sax, const std::string& display, const char* what) {
  bool ok = false;
  try {
    ok = json::sax_parse(text, &sax, json::input_format_t::json, /*strict=*/true,
                         /*ignore_comments=*/false);
  } catch (const std::bad_alloc&) {
    throw;
  } catch (const std::exception& e) {
    fail(display, std::string(what) + " is not valid JSON: " + printable(e.what()));
  }
  if (!ok) fail(display, sax.error.empty() ? std::string(what) + " is not valid JSON" : sax.error);
}

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
    run_sax(header, sax, display, "header");
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
        fail(display, who() + " shape " + shape_text(e.shape) + " has too many elements");
      }
    }
    const uint64_t count = empty ? 0 : static_cast<uint64_t>(product);
    if (__builtin_mul_overflow(count, static_cast<uint64_t>(dtype_size(e.dtype)), &e.nbytes)) {
      fail(display, who() + " shape " + shape_text(e.shape) + " has too many bytes");
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
                        std::string(st_dtype_name(e.dtype)) + " x " + shape_text(e.shape) + " = " +
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

// One opened and validated shard (the single file counts as one).
struct Shard {
  std::string display;  // printable name, for messages
  fs::path path;        // reported in TensorMeta::file
  Fd fd;
  ParsedFile parsed;
};

class SafetensorsReader final : public CheckpointReader {
 public:
  SafetensorsReader(std::vector<Shard> shards, std::string description)
      : description_(std::move(description)) {
    // Merge all shards' tensors in name order. The entries' strings and shapes are moved, not
    // copied, so peak memory stays close to the final tables.
    std::vector<std::pair<size_t, size_t>> order;  // (shard, entry)
    for (size_t s = 0; s < shards.size(); ++s) {
      for (size_t i = 0; i < shards[s].parsed.entries.size(); ++i) order.emplace_back(s, i);
    }
    const auto entry = [&](const std::pair<size_t, size_t>& r) -> Entry& {
      return shards[r.first].parsed.entries[r.second];
    };
    std::sort(order.begin(), order.end(),
              [&](const auto& a, const auto& b) { return entry(a).name < entry(b).name; });
    tensors_.reserve(order.size());
    locations_.reserve(order.size());
    for (const auto& r : order) {
      Entry& e = entry(r);
      const Shard& shard = shards[r.first];
      tensors_.push_back(
          TensorMeta{std::move(e.name), e.dtype, std::move(e.shape), shard.path, e.nbytes});
      locations_.push_back(Location{r.first, shard.parsed.data_start + e.begin});
    }
    for (Shard& shard : shards) {
      fds_.push_back(std::move(shard.fd));
      shard_names_.push_back(std::move(shard.display));
    }
  }

  const std::vector<TensorMeta>& tensors() const override { return tensors_; }

  const TensorMeta* find(std::string_view name) const override {
    auto it = std::lower_bound(tensors_.begin(), tensors_.end(), name,
                               [](const TensorMeta& t, std::string_view n) { return t.name < n; });
    return it != tensors_.end() && it->name == name ? &*it : nullptr;
  }

  // The reader is immutable after construction and pread does not move the file offset, so
  // concurrent calls share the descriptors safely.
  void read(const TensorMeta& meta, void* dst) const override {
    // meta may be a copy; the caller's nbytes sized dst, so it must match what will be written.
    const TensorMeta* mine = find(meta.name);
    if (!mine) {
      throw Error("[safetensors] " + description_ + ": no tensor " + quote_name(meta.name));
    }
    const Location& loc = locations_[static_cast<size_t>(mine - tensors_.data())];
    const std::string& display = shard_names_[loc.shard];
    const std::string who = "tensor " + quote_name(meta.name);
    if (mine->nbytes != meta.nbytes) {
      fail(display, who + " is " + std::to_string(mine->nbytes) +
                        " bytes, but the request is for " + std::to_string(meta.nbytes));
    }
    if (meta.nbytes == 0) return;
    const int r =
        pread_exact(fds_[loc.shard].get(), static_cast<char*>(dst), meta.nbytes, loc.offset);
    if (r == -1) fail(display, "unexpected end of file reading " + who + " (file truncated?)");
    if (r != 0) fail(display, "read error on " + who + ": " + errno_text(r));
  }

  std::optional<FileExtent> extent(const TensorMeta& meta) const override {
    const TensorMeta* mine = find(meta.name);
    if (!mine || mine->nbytes != meta.nbytes) return std::nullopt;
    const Location& loc = locations_[static_cast<size_t>(mine - tensors_.data())];
    return FileExtent{fds_[loc.shard].get(), loc.offset};
  }

  std::string describe() const override { return description_; }

 private:
  std::vector<TensorMeta> tensors_;  // sorted by name
  std::vector<Location> locations_;  // parallel to tensors_
  std::vector<Fd> fds_;              // one per shard, open for the reader's lifetime
  std::vector<std::string> shard_names_;
  std::string description_;
};

std::unique_ptr<CheckpointReader> open_single(const fs::path& dir) {
  std::vector<Shard> shards(1);
  Shard& shard = shards[0];
  shard.display = kSingleName;
  shard.path = dir / kSingleName;
  OpenedFile file = open_regular(shard.path, kSingleName, /*no_follow=*/false);
  shard.parsed = parse_safetensors(file, kSingleName);
  shard.fd = std::move(file.fd);
  return std::make_unique<SafetensorsReader>(std::move(shards), "safetensors (1 file)");
}

// Why a shard name from the index is unacceptable, or "" when it is fine. Names are checked
// lexically first so that no path outside the folder is ever touched.
std::string bad_shard_name(const std::string& name) {
  if (name.empty()) return "empty shard name";
  if (name.find('\0') != std::string::npos) return "shard " + quote_name(name) + " contains NUL";
  if (name[0] == '/' || name[0] == '\\' || fs::path(name).is_absolute() ||
      fs::path(name).has_root_name()) {
    return "shard " + quote_name(name) + " is an absolute path";
  }
  size_t start = 0;
  while (start <= name.size()) {
    // Backslashes count as separators too, for checkpoints meant to be portable to Windows.
    size_t stop = name.find_first_of("/\\", start);
    if (stop == std::string::npos) stop = name.size();
    if (name.compare(start, stop - start, "..") == 0) {
      return "shard " + quote_name(name) + " has a '..' component";
    }
    start = stop + 1;
  }
  return "";
}

bool is_inside(const fs::path& root, const fs::path& p) {
  auto [r, q] = std::mismatch(root.begin(), root.end(), p.begin(), p.end());
  return r == root.end() && q != p.end();
}

std::unique_ptr<CheckpointReader> open_sharded(const fs::path& dir) {
  std::vector<std::pair<std::string, std::string>> weights;
  {
    OpenedFile index = open_regular(dir / kIndexName, kIndexName, /*no_follow=*/false);
    if (index.size > kMaxIndexBytes) {
      fail(kIndexName, "file is " + std::to_string(index.size) + " bytes, over the 100 MiB limit");
    }
    std::string text(static_cast<size_t>(index.size), '\0');
    read_or_fail(index, kIndexName, text.data(), index.size, 0, "the index");
    IndexSax sax;
    run_sax(text, sax, kIndexName, "index");
    if (!sax.has_weight_map) fail(kIndexName, "no weight_map");
    weights = std::move(sax.weights);
  }
  if (weights.empty()) fail(kIndexName, "weight_map lists no tensors");
  std::sort(weights.begin(), weights.end());
  for (size_t i = 1; i < weights.size(); ++i) {
    if (weights[i].first == weights[i - 1].first) {
      fail(kIndexName, "tensor " + quote_name(weights[i].first) + " is listed twice in weight_map");
    }
  }

  // Shards in name order: ids are stable and messages deterministic.
  std::map<std::string, size_t> shard_ids;
  for (const auto& w : weights) shard_ids.emplace(w.second, 0);
  for (const auto& [name, id] : shard_ids) {
    const std::string reason = bad_shard_name(name);
    if (!reason.empty()) fail(kIndexName, reason);
  }

  std::error_code ec;
  const fs::path canon_dir = fs::canonical(dir, ec);
  if (ec) throw Error("[checkpoint] " + dir.string() + ": cannot resolve: " + ec.message());

  std::vector<Shard> shards;
  shards.reserve(shard_ids.size());
  for (auto& [name, id] : shard_ids) {
    Shard& shard = shards.emplace_back();
    shard.display = printable(name);
    shard.path = dir / name;
    // Symlinks are followed only if they stay inside the folder: the canonical path is checked,
    // then that exact path is opened without following a final symlink, so a link swapped in
    // between the two steps fails to open instead of escaping.
    const fs::path canon = fs::canonical(shard.path, ec);
    if (ec) {
      if (ec == std::errc::no_such_file_or_directory) {
        fail(kIndexName, "shard " + quote_name(name) + " does not exist");
      }
      fail(kIndexName, "shard " + quote_name(name) + " cannot be resolved: " + ec.message());
    }
    if (!is_inside(canon_dir, canon)) {
      fail(kIndexName, "shard " + quote_name(name) + " resolves outside the checkpoint folder");
    }
    OpenedFile file = open_regular(canon, shard.display, /*no_follow=*/true);
    shard.parsed = parse_safetensors(file, shard.display);
    shard.fd = std::move(file.fd);
    id = shards.size() - 1;
  }

  // Cross-check shards against the index: each tensor stored exactly once, in the shard the
  // index names, and every indexed tensor present.
  {
    std::unordered_map<std::string_view, size_t> found;  // tensor name -> shard id
    for (size_t s = 0; s < shards.size(); ++s) {
      for (const Entry& e : shards[s].parsed.entries) {
        auto [it, inserted] = found.emplace(e.name, s);
        if (!inserted) {
          fail(shards[s].display, "tensor " + quote_name(e.name) + " is in two shards, '" +
                                      shards[it->second].display + "' and '" + shards[s].display +
                                      "'");
        }
      }
    }
    const auto lookup = [&](std::string_view tensor) -> const std::string* {
      auto it = std::lower_bound(weights.begin(), weights.end(), tensor,
                                 [](const std::pair<std::string, std::string>& w,
                                    std::string_view n) { return w.first < n; });
      return it != weights.end() && it->first == tensor ? &it->second : nullptr;
    };
    for (size_t s = 0; s < shards.size(); ++s) {
      for (const Entry& e : shards[s].parsed.entries) {
        const std::string* mapped = lookup(e.name);
        if (!mapped) {
          fail(shards[s].display,
               "tensor " + quote_name(e.name) + " is not listed in " + kIndexName);
        }
        if (shard_ids.at(*mapped) != s) {
          fail(shards[s].display, "tensor " + quote_name(e.name) + " is listed in " + kIndexName +
                                      " under shard " + quote_name(*mapped));
        }
      }
    }
    for (const auto& [tensor, shard] : weights) {
      if (!found.count(tensor)) {
        fail(kIndexName, "tensor " + quote_name(tensor) + " is mapped to shard " +
                             quote_name(shard) + ", which does not contain it");
      }
    }
  }

  const size_t n = shards.size();
  return std::make_unique<SafetensorsReader>(
      std::move(shards), "safetensors (" + std::to_string(n) + (n == 1 ? " shard)" : " shards)"));
}

}  // namespace

std::unique_ptr<CheckpointReader> open_safetensors_checkpoint(const std::filesystem::path& dir) {
  std::error_code ec;
  // symlink_status, not exists(): a dangling model.safetensors link should be reported as such
  // rather than silently falling back to the index.
  if (fs::exists(fs::symlink_status(dir / kSingleName, ec))) return open_single(dir);
  if (fs::exists(fs::symlink_status(dir / kIndexName, ec))) return open_sharded(dir);
  throw Error("[checkpoint] " + dir.string() + ": no " + kSingleName + " or " + kIndexName);
}

}  // namespace mobius
