// pytorch_bin.cpp - torch.save zip checkpoints read through a restricted, non-executing unpickler.
//
// A pytorch_model.bin is a zip archive holding a pickle (data.pkl) and one raw entry per tensor
// storage. Unpickling is code execution in Python, so this reader never runs anything: the
// pickle is interpreted by a small stack machine that knows a fixed set of opcodes and a fixed
// set of globals (those torch.load(weights_only=True) needs for a state dict) and builds a tree
// of plain values. Anything else is rejected at the opcode or global that introduces it, before
// it could act. The zip container is parsed here with every offset and size checked against
// the file, and tensor bytes are later read with pread straight from the stored entries.
#include "pytorch_bin.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <limits>
#include <map>
#include <new>
#include <optional>
#include <system_error>
#include <unordered_map>
#include <utility>

#include <nlohmann/json.hpp>

#include "mobius/plugin.h"

namespace mobius {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

constexpr const char* kSingleName = "pytorch_model.bin";
constexpr const char* kIndexName = "pytorch_model.bin.index.json";

// Limits. Real state dicts are far below all of them; they exist so that a hostile file costs
// bounded time and memory.
constexpr uint64_t kMaxPickleBytes = uint64_t{64} << 20;
constexpr size_t kMaxMarkDepth = 100;    // MARKs open at once
constexpr uint8_t kMaxValueDepth = 100;  // containers inside containers
constexpr uint32_t kMaxMemo = 1u << 20;
constexpr uint64_t kMaxString = uint64_t{16} << 20;
constexpr size_t kMaxRank = 64;
constexpr size_t kMaxTensors = 1u << 20;
constexpr size_t kMaxStack = 1u << 20;
// Everything the unpickler allocates is charged against this budget: a 64 MiB pickle of
// one-byte EMPTY_LIST opcodes would otherwise cost gigabytes of objects.
constexpr uint64_t kMaxWorkingBytes = uint64_t{512} << 20;
constexpr size_t kMaxGlobalLine = 256;
constexpr uint64_t kMaxZipEntries = uint64_t{1} << 21;  // storages + a few records
constexpr uint64_t kMaxCentralDirectory = uint64_t{256} << 20;
constexpr uint64_t kMaxIndexBytes = uint64_t{100} << 20;
// A view larger than its storage (stride 0, overlapping strides) may not exceed this.
constexpr uint64_t kMaxRepeatedBytes = uint64_t{64} << 20;
// Bytes buffered at once when gathering a non-contiguous tensor. The fuzzer shrinks it so that
// its small inputs reach the windowed paths too.
#ifdef MOBIUS_GATHER_WINDOW_BYTES
constexpr uint64_t kGatherWindow = MOBIUS_GATHER_WINDOW_BYTES;
#else
constexpr uint64_t kGatherWindow = uint64_t{16} << 20;
#endif
// Names in messages are attacker-controlled: cap their length so a message stays readable.
constexpr size_t kMaxShown = 200;

// ---------------------------------------------------------------------------------------------
// Messages

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
  throw Error("[pytorch] " + file + ": " + reason);
}

std::string errno_text(int err) { return std::error_code(err, std::generic_category()).message(); }

std::string dims_text(const std::vector<int64_t>& dims) {
  std::string s = "[";
  for (size_t i = 0; i < dims.size(); ++i) {
    if (i) s += ", ";
    if (i == 8) {
      s += "...";
      break;
    }
    s += std::to_string(dims[i]);
  }
  return s + "]";
}

std::string range_text(uint64_t begin, uint64_t end) {
  return "[" + std::to_string(begin) + ", " + std::to_string(end) + ")";
}

std::string hex_byte(uint8_t b) {
  static const char kHex[] = "0123456789abcdef";
  return std::string("0x") + kHex[b >> 4] + kHex[b & 15];
}

uint16_t le16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }
uint32_t le32(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8) |
         (static_cast<uint32_t>(p[2]) << 16) | (static_cast<uint32_t>(p[3]) << 24);
}
uint64_t le64(const uint8_t* p) { return le32(p) | (static_cast<uint64_t>(le32(p + 4)) << 32); }

bool valid_utf8(const uint8_t* s, size_t n) {
  size_t i = 0;
  while (i < n) {
    const uint8_t c = s[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    size_t len;
    uint32_t cp;
    if ((c & 0xE0) == 0xC0) {
      len = 2;
      cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      len = 3;
      cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      len = 4;
      cp = c & 0x07;
    } else {
      return false;
    }
    if (n - i < len) return false;
    for (size_t k = 1; k < len; ++k) {
      if ((s[i + k] & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (s[i + k] & 0x3F);
    }
    static const uint32_t kMin[] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < kMin[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += len;
  }
  return true;
}

uint32_t crc32(const uint8_t* p, size_t n) {
  static const auto table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  uint32_t c = 0xFFFFFFFFu;
  for (size_t i = 0; i < n; ++i) c = table[(c ^ p[i]) & 0xFF] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

// ---------------------------------------------------------------------------------------------
// Byte sources: an open file, or bytes in memory (the fuzzers' and tests' entry point).

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

class Source {
 public:
  virtual ~Source() = default;
  virtual uint64_t size() const = 0;
  // Reads exactly n bytes at off. Returns 0, -1 when the data ends first, or an errno value.
  // Safe to call from several threads at once.
  virtual int read_at(char* dst, uint64_t n, uint64_t off) const = 0;
  // The open file behind the bytes, or -1 for memory.
  virtual int fd() const { return -1; }
};

class FileSource final : public Source {
 public:
  FileSource(Fd fd, uint64_t size) : fd_(std::move(fd)), size_(size) {}
  uint64_t size() const override { return size_; }
  int fd() const override { return fd_.get(); }
  int read_at(char* dst, uint64_t n, uint64_t off) const override {
    // Linux transfers at most ~2 GiB per call; smaller requests also keep other threads moving.
    constexpr uint64_t kChunk = uint64_t{1} << 30;
    while (n > 0) {
      const size_t want = static_cast<size_t>(std::min(n, kChunk));
      const ssize_t got = ::pread(fd_.get(), dst, want, static_cast<off_t>(off));
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

 private:
  Fd fd_;
  uint64_t size_;
};

class MemorySource final : public Source {
 public:
  explicit MemorySource(std::string bytes) : bytes_(std::move(bytes)) {}
  uint64_t size() const override { return bytes_.size(); }
  int read_at(char* dst, uint64_t n, uint64_t off) const override {
    if (off > bytes_.size() || n > bytes_.size() - off) return -1;
    if (n) std::memcpy(dst, bytes_.data() + off, static_cast<size_t>(n));
    return 0;
  }

 private:
  std::string bytes_;
};

void read_or_fail(const Source& src, const std::string& display, void* dst, uint64_t n,
                  uint64_t off, const std::string& what) {
  const int r = src.read_at(static_cast<char*>(dst), n, off);
  if (r == -1) fail(display, "unexpected end of file reading " + what);
  if (r != 0) fail(display, "read error on " + what + ": " + errno_text(r));
}

// Opens a regular file for reading. O_NONBLOCK keeps a FIFO planted under a checkpoint name
// from blocking the open forever; the S_ISREG check then rejects it (and devices, directories).
std::shared_ptr<FileSource> open_regular(const fs::path& path, const std::string& display,
                                         bool no_follow) {
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
  Fd fd(raw);
  struct stat st {};
  if (::fstat(raw, &st) != 0) {
    const int err = errno;
    fail(display, "cannot stat: " + errno_text(err));
  }
  if (!S_ISREG(st.st_mode)) fail(display, "not a regular file");
  const int fl = ::fcntl(raw, F_GETFL);
  if (fl >= 0) ::fcntl(raw, F_SETFL, fl & ~O_NONBLOCK);
  return std::make_shared<FileSource>(std::move(fd), static_cast<uint64_t>(st.st_size));
}

// ---------------------------------------------------------------------------------------------
// Zip container

struct ZipEntry {
  std::string name;
  uint16_t flags = 0;
  uint16_t method = 0;
  uint32_t crc = 0;
  uint64_t csize = 0;  // bytes stored
  uint64_t usize = 0;  // bytes after decompression
  uint64_t header_offset = 0;
  uint64_t data_offset = 0;  // first byte of the stored data
};

constexpr uint32_t kSigLocal = 0x04034b50;
constexpr uint32_t kSigCentral = 0x02014b50;
constexpr uint32_t kSigEnd = 0x06054b50;
constexpr uint32_t kSigEnd64 = 0x06064b50;
constexpr uint32_t kSigLocator64 = 0x07064b50;
constexpr size_t kLocalSize = 30;
constexpr size_t kCentralSize = 46;
constexpr size_t kEndSize = 22;
constexpr size_t kLocatorSize = 20;
constexpr size_t kEnd64Size = 56;

// Why an entry name is unacceptable, or "" when it is fine. Entries are only ever looked up by
// name, never written to disk, but a name that could escape a folder marks a crafted archive.
std::string bad_entry_name(const std::string& name) {
  if (name.empty()) return "an entry has an empty name";
  if (name.find('\0') != std::string::npos) return "entry " + quote_name(name) + " contains NUL";
  if (name[0] == '/' || name[0] == '\\' || (name.size() >= 2 && name[1] == ':')) {
    return "entry " + quote_name(name) + " is an absolute path";
  }
  size_t start = 0;
  while (start <= name.size()) {
    size_t stop = name.find_first_of("/\\", start);
    if (stop == std::string::npos) stop = name.size();
    if (name.compare(start, stop - start, "..") == 0) {
      return "entry " + quote_name(name) + " has a '..' component";
    }
    start = stop + 1;
  }
  return "";
}

// Reads and checks the central directory and every local header. The result is sorted by name.
std::vector<ZipEntry> parse_zip(const Source& src, const std::string& d) {
  const uint64_t size = src.size();
  if (size < kEndSize) {
    fail(d, "file is " + std::to_string(size) + " bytes, too short to be a zip archive");
  }
  // The end record sits in the last 22 bytes plus at most a 64 KiB comment.
  const uint64_t tail_len = std::min<uint64_t>(size, kEndSize + 0xFFFF);
  std::vector<uint8_t> tail(static_cast<size_t>(tail_len));
  read_or_fail(src, d, tail.data(), tail_len, size - tail_len, "the end of the archive");
  size_t at = std::string::npos;
  for (size_t i = tail_len - kEndSize + 1; i-- > 0;) {
    if (le32(&tail[i]) == kSigEnd && le16(&tail[i + 20]) == tail_len - i - kEndSize) {
      at = i;
      break;
    }
  }
  if (at == std::string::npos) {
    uint8_t head[2] = {0, 0};
    read_or_fail(src, d, head, 2, 0, "the start of the file");
    if (head[0] == 0x80 && head[1] <= 5) {
      fail(d,
           "not a zip archive: this is the legacy (torch < 1.6) torch.save format, which is "
           "not supported; re-save it with a recent torch or convert it to safetensors");
    }
    fail(d, "not a zip archive (no end of central directory record)");
  }
  const uint8_t* e = &tail[at];
  const uint64_t end_pos = size - tail_len + at;
  uint64_t disk = le16(e + 4), cd_disk = le16(e + 6);
  uint64_t entries_disk = le16(e + 8), entries = le16(e + 10);
  uint64_t cd_size = le32(e + 12), cd_off = le32(e + 16);
  uint64_t cd_limit = end_pos;  // the directory must end before the records that follow it

  // Zip64: a locator right before the end record points at the 64-bit end record. torch
  // writes one even for small archives.
  bool zip64 = false;
  if (end_pos >= kLocatorSize) {
    uint8_t loc[kLocatorSize];
    read_or_fail(src, d, loc, kLocatorSize, end_pos - kLocatorSize, "the Zip64 locator");
    if (le32(loc) == kSigLocator64) {
      zip64 = true;
      const uint64_t rec = le64(loc + 8);
      if (le32(loc + 4) != 0 || le32(loc + 16) > 1) {
        fail(d, "multi-disk zip archives are not supported");
      }
      if (rec > end_pos - kLocatorSize || end_pos - kLocatorSize - rec < kEnd64Size) {
        fail(d, "Zip64 end record offset " + std::to_string(rec) + " is out of range");
      }
      uint8_t r[kEnd64Size];
      read_or_fail(src, d, r, kEnd64Size, rec, "the Zip64 end record");
      if (le32(r) != kSigEnd64) fail(d, "bad Zip64 end record signature");
      const uint64_t rec_size = le64(r + 4);
      if (rec_size < kEnd64Size - 12 || rec_size > end_pos - kLocatorSize - rec - 12) {
        fail(d, "Zip64 end record size " + std::to_string(rec_size) + " is out of range");
      }
      // The 32-bit fields must either be saturated or agree: two readers must not be able to
      // see two different directories in one file.
      const auto pick = [&](uint64_t small, uint64_t big, uint64_t sat, const char* what) {
        if (small != sat && small != big) {
          fail(d, std::string("end record and Zip64 end record disagree on the ") + what);
        }
        return big;
      };
      disk = pick(disk, le32(r + 16), 0xFFFF, "disk number");
      cd_disk = pick(cd_disk, le32(r + 20), 0xFFFF, "directory disk");
      entries_disk = pick(entries_disk, le64(r + 24), 0xFFFF, "entry count");
      entries = pick(entries, le64(r + 32), 0xFFFF, "entry count");
      cd_size = pick(cd_size, le64(r + 40), 0xFFFFFFFF, "directory size");
      cd_off = pick(cd_off, le64(r + 48), 0xFFFFFFFF, "directory offset");
      cd_limit = rec;
    }
  }
  if (!zip64 && (entries == 0xFFFF || cd_size == 0xFFFFFFFF || cd_off == 0xFFFFFFFF)) {
    fail(d, "end record needs Zip64 but the archive has no Zip64 locator");
  }
  if (disk != 0 || cd_disk != 0 || entries_disk != entries) {
    fail(d, "multi-disk zip archives are not supported");
  }
  if (entries > kMaxZipEntries) {
    fail(d, std::to_string(entries) + " entries exceed the limit of " +
                std::to_string(kMaxZipEntries));
  }
  if (cd_off > cd_limit || cd_size > cd_limit - cd_off) {
    fail(d, "central directory " + range_text(cd_off, cd_off + std::min(cd_size, size)) +
                " extends beyond its end at " + std::to_string(cd_limit) + " (file is " +
                std::to_string(size) + " bytes)");
  }
  if (cd_size > kMaxCentralDirectory) {
    fail(d, "central directory of " + std::to_string(cd_size) + " bytes exceeds the 256 MiB limit");
  }
  if (entries * kCentralSize > cd_size) {
    fail(d, "central directory of " + std::to_string(cd_size) + " bytes cannot hold " +
                std::to_string(entries) + " entries");
  }
  std::vector<uint8_t> cd(static_cast<size_t>(cd_size));
  read_or_fail(src, d, cd.data(), cd_size, cd_off, "the central directory");

  std::vector<ZipEntry> out;
  out.reserve(static_cast<size_t>(entries));
  size_t p = 0;
  for (uint64_t i = 0; i < entries; ++i) {
    const std::string which = "central directory entry " + std::to_string(i);
    if (cd.size() - p < kCentralSize || le32(&cd[p]) != kSigCentral) {
      fail(d, which + " is malformed (bad signature or truncated)");
    }
    const uint8_t* c = &cd[p];
    ZipEntry z;
    z.flags = le16(c + 8);
    z.method = le16(c + 10);
    z.crc = le32(c + 16);
    z.csize = le32(c + 20);
    z.usize = le32(c + 24);
    const size_t name_len = le16(c + 28), extra_len = le16(c + 30), comment_len = le16(c + 32);
    uint64_t start_disk = le16(c + 34);
    z.header_offset = le32(c + 42);
    if (cd.size() - p - kCentralSize < name_len + extra_len + comment_len) {
      fail(d, which + " extends beyond the central directory");
    }
    z.name.assign(reinterpret_cast<const char*>(c + kCentralSize), name_len);
    const std::string bad = bad_entry_name(z.name);
    if (!bad.empty()) fail(d, bad);
    // Zip64 extended information: present fields replace the saturated 32-bit ones, in order.
    const uint8_t* x = c + kCentralSize + name_len;
    for (size_t q = 0; q + 4 <= extra_len;) {
      const uint16_t id = le16(x + q), len = le16(x + q + 2);
      if (len > extra_len - q - 4) {
        fail(d, "entry " + quote_name(z.name) + " has a bad extra field");
      }
      if (id == 0x0001) {
        const uint8_t* f = x + q + 4;
        size_t left = len;
        const auto take = [&](uint64_t& field, uint64_t sat, size_t bytes) {
          if (field != sat) return;
          if (left < bytes) fail(d, "entry " + quote_name(z.name) + " has a short Zip64 field");
          field = bytes == 8 ? le64(f) : le32(f);
          f += bytes;
          left -= bytes;
        };
        take(z.usize, 0xFFFFFFFF, 8);
        take(z.csize, 0xFFFFFFFF, 8);
        take(z.header_offset, 0xFFFFFFFF, 8);
        take(start_disk, 0xFFFF, 4);
      }
      q += 4 + len;
    }
    if (z.flags & 0x41) fail(d, "entry " + quote_name(z.name) + " is encrypted");
    if (start_disk != 0) fail(d, "entry " + quote_name(z.name) + " is on another disk");
    if (z.method == 0 && z.csize != z.usize) {
      fail(d, "stored entry " + quote_name(z.name) + " has compressed size " +
                  std::to_string(z.csize) + " != size " + std::to_string(z.usize));
    }
    out.push_back(std::move(z));
    p += kCentralSize + name_len + extra_len + comment_len;
  }
  if (p != cd.size()) {
    fail(d,
         "central directory has " + std::to_string(cd.size() - p) + " bytes after its last entry");
  }

  std::sort(out.begin(), out.end(),
            [](const ZipEntry& a, const ZipEntry& b) { return a.name < b.name; });
  for (size_t i = 1; i < out.size(); ++i) {
    if (out[i].name == out[i - 1].name) {
      fail(d, "entry " + quote_name(out[i].name) + " appears twice");
    }
  }

  // Local headers: each must agree with its directory entry, and the data must lie before the
  // central directory.
  for (ZipEntry& z : out) {
    const std::string who = "entry " + quote_name(z.name);
    if (z.header_offset > cd_off || cd_off - z.header_offset < kLocalSize) {
      fail(d, who + " local header at " + std::to_string(z.header_offset) +
                  " is beyond the central directory at " + std::to_string(cd_off));
    }
    uint8_t h[kLocalSize];
    read_or_fail(src, d, h, kLocalSize, z.header_offset, who + " local header");
    if (le32(h) != kSigLocal) fail(d, who + " has a bad local header signature");
    const uint16_t lflags = le16(h + 6), lmethod = le16(h + 8);
    const uint32_t lcrc = le32(h + 14), lcsize = le32(h + 18), lusize = le32(h + 22);
    const uint64_t lname = le16(h + 26), lextra = le16(h + 28);
    if (lmethod != z.method || (lflags & 0x41) != (z.flags & 0x41)) {
      fail(d, who + " local header disagrees with the central directory");
    }
    // With bit 3 the local sizes are zero and the real ones follow the data; the directory's
    // values are used either way, but given local values must not contradict them.
    if (!(lflags & 0x08) && ((lcsize != 0xFFFFFFFF && lcsize != z.csize) ||
                             (lusize != 0xFFFFFFFF && lusize != z.usize) || lcrc != z.crc)) {
      fail(d, who + " local header sizes or CRC disagree with the central directory");
    }
    const uint64_t after = z.header_offset + kLocalSize;
    if (lname + lextra > cd_off - after) {
      fail(d, who + " local header extends beyond the central directory");
    }
    if (lname != z.name.size()) fail(d, who + " local header has a different name");
    std::string local_name(static_cast<size_t>(lname), '\0');
    read_or_fail(src, d, local_name.data(), lname, after, who + " local header");
    if (local_name != z.name) fail(d, who + " local header has a different name");
    z.data_offset = after + lname + lextra;
    if (z.csize > cd_off - z.data_offset) {
      fail(d, who + " data " + range_text(z.data_offset, z.data_offset + std::min(z.csize, size)) +
                  " extends beyond the entries region (central directory at " +
                  std::to_string(cd_off) + ", file " + std::to_string(size) + " bytes)");
    }
  }
  std::vector<const ZipEntry*> by_offset;
  by_offset.reserve(out.size());
  for (const ZipEntry& z : out) by_offset.push_back(&z);
  std::sort(by_offset.begin(), by_offset.end(), [](const ZipEntry* a, const ZipEntry* b) {
    return a->header_offset < b->header_offset;
  });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    const ZipEntry& a = *by_offset[i - 1];
    const ZipEntry& b = *by_offset[i];
    if (b.header_offset < a.data_offset + a.csize) {
      fail(d, "entries " + quote_name(a.name) + " and " + quote_name(b.name) + " overlap");
    }
  }
  return out;
}

const ZipEntry* find_entry(const std::vector<ZipEntry>& entries, std::string_view name) {
  auto it = std::lower_bound(entries.begin(), entries.end(), name,
                             [](const ZipEntry& z, std::string_view n) { return z.name < n; });
  return it != entries.end() && it->name == name ? &*it : nullptr;
}

std::string method_text(uint16_t method) {
  if (method == 8) return "compressed with DEFLATE";
  return "compressed with method " + std::to_string(method);
}

// ---------------------------------------------------------------------------------------------
// Unpickler

struct StorageType {
  const char* name;
  int32_t dtype;
};

constexpr StorageType kStorageTypes[] = {
    {"DoubleStorage", MOBIUS_DTYPE_DOUBLE}, {"FloatStorage", MOBIUS_DTYPE_FLOAT},
    {"HalfStorage", MOBIUS_DTYPE_FLOAT16},  {"BFloat16Storage", MOBIUS_DTYPE_BFLOAT16},
    {"LongStorage", MOBIUS_DTYPE_INT64},    {"IntStorage", MOBIUS_DTYPE_INT32},
    {"ShortStorage", MOBIUS_DTYPE_INT16},   {"CharStorage", MOBIUS_DTYPE_INT8},
    {"ByteStorage", MOBIUS_DTYPE_UINT8},    {"BoolStorage", MOBIUS_DTYPE_BOOL},
};
constexpr int64_t kNumStorageTypes = sizeof(kStorageTypes) / sizeof(kStorageTypes[0]);

// The only globals a pickle may name. Storage types follow kGlobalStorage0, in table order.
enum GlobalId : int64_t {
  kGlobalOrderedDict = 0,
  kGlobalRebuildTensor = 1,
  kGlobalRebuildParameter = 2,
  kGlobalStorage0 = 16,
};

std::string global_text(int64_t id) {
  switch (id) {
    case kGlobalOrderedDict: return "collections.OrderedDict";
    case kGlobalRebuildTensor: return "torch._utils._rebuild_tensor_v2";
    case kGlobalRebuildParameter: return "torch._utils._rebuild_parameter";
    default: return std::string("torch.") + kStorageTypes[id - kGlobalStorage0].name;
  }
}

const char* opcode_name(uint8_t op) {
  switch (op) {
    case '(': return "MARK";
    case '.': return "STOP";
    case '0': return "POP";
    case '1': return "POP_MARK";
    case '2': return "DUP";
    case 'F': return "FLOAT";
    case 'I': return "INT";
    case 'J': return "BININT";
    case 'K': return "BININT1";
    case 'L': return "LONG";
    case 'M': return "BININT2";
    case 'N': return "NONE";
    case 'P': return "PERSID";
    case 'Q': return "BINPERSID";
    case 'R': return "REDUCE";
    case 'S': return "STRING";
    case 'T': return "BINSTRING";
    case 'U': return "SHORT_BINSTRING";
    case 'V': return "UNICODE";
    case 'X': return "BINUNICODE";
    case 'a': return "APPEND";
    case 'b': return "BUILD";
    case 'c': return "GLOBAL";
    case 'd': return "DICT";
    case '}': return "EMPTY_DICT";
    case 'e': return "APPENDS";
    case 'g': return "GET";
    case 'h': return "BINGET";
    case 'i': return "INST";
    case 'j': return "LONG_BINGET";
    case 'l': return "LIST";
    case ']': return "EMPTY_LIST";
    case 'o': return "OBJ";
    case 'p': return "PUT";
    case 'q': return "BINPUT";
    case 'r': return "LONG_BINPUT";
    case 's': return "SETITEM";
    case 't': return "TUPLE";
    case ')': return "EMPTY_TUPLE";
    case 'u': return "SETITEMS";
    case 'G': return "BINFLOAT";
    case 'B': return "BINBYTES";
    case 'C': return "SHORT_BINBYTES";
    case 0x80: return "PROTO";
    case 0x81: return "NEWOBJ";
    case 0x82: return "EXT1";
    case 0x83: return "EXT2";
    case 0x84: return "EXT4";
    case 0x85: return "TUPLE1";
    case 0x86: return "TUPLE2";
    case 0x87: return "TUPLE3";
    case 0x88: return "NEWTRUE";
    case 0x89: return "NEWFALSE";
    case 0x8a: return "LONG1";
    case 0x8b: return "LONG4";
    case 0x8c: return "SHORT_BINUNICODE";
    case 0x8d: return "BINUNICODE8";
    case 0x8e: return "BINBYTES8";
    case 0x8f: return "EMPTY_SET";
    case 0x90: return "ADDITEMS";
    case 0x91: return "FROZENSET";
    case 0x92: return "NEWOBJ_EX";
    case 0x93: return "STACK_GLOBAL";
    case 0x94: return "MEMOIZE";
    case 0x95: return "FRAME";
    case 0x96: return "BYTEARRAY8";
    case 0x97: return "NEXT_BUFFER";
    case 0x98: return "READONLY_BUFFER";
    default: return nullptr;
  }
}

// Values of the pickle's object graph. Scalars are held inline; strings, containers and
// tensors live in the unpickler's tables and are referred to by index, so shared references
// (the memo) and even cycles cost nothing and are never walked recursively.
enum class Kind : uint8_t {
  None,
  Bool,
  Int,
  Float,
  Str,
  Tuple,
  List,
  Dict,
  Global,
  Storage,
  Tensor
};

struct Ref {
  Kind kind = Kind::None;
  int64_t v = 0;  // bool/int value, float bits, table index or GlobalId
};

struct Seq {  // a tuple or a list
  std::vector<Ref> items;
  uint8_t depth = 1;
};

struct DictObj {
  std::vector<std::pair<Ref, Ref>> items;  // in insertion order; duplicates kept
  bool ordered = false;                    // an OrderedDict
  uint8_t depth = 1;
};

struct TensorObj {
  size_t storage = 0;
  uint64_t offset = 0;
  std::vector<int64_t> shape;
  std::vector<int64_t> stride;
};

class Unpickler {
 public:
  Unpickler(const uint8_t* data, size_t n, const std::string& display)
      : data_(data), n_(n), display_(display) {}

  TorchPickle run() {
    if (n_ > kMaxPickleBytes) {
      fail(display_, "data.pkl is " + std::to_string(n_) + " bytes, over the 64 MiB limit");
    }
    for (;;) {
      if (pos_ >= n_) bad_at(n_, "the pickle ends without STOP");
      op_pos_ = pos_;
      op_ = data_[pos_++];
      if (step()) break;
    }
    if (pos_ != n_) {
      bad_at(pos_, std::to_string(n_ - pos_) + " bytes follow STOP");
    }
    return finish(stack_.back());
  }

 private:
  // Executes one opcode; true after STOP.
  bool step() {
    switch (op_) {
      case 0x80: {  // PROTO
        const uint8_t v = take(1)[0];
        if (v > 5) bad("unsupported pickle protocol " + std::to_string(v));
        return false;
      }
      case 0x95: {  // FRAME: framing only groups opcodes; its length must still be honest
        const uint64_t len = le64(take(8));
        if (len > n_ - pos_) {
          bad("frame of " + std::to_string(len) + " bytes extends beyond the pickle");
        }
        return false;
      }
      case '.': {  // STOP
        if (!marks_.empty()) bad("a MARK is still open");
        if (stack_.size() != 1) {
          bad("expected one value on the stack, found " + std::to_string(stack_.size()));
        }
        return true;
      }
      case '(':
        if (marks_.size() >= kMaxMarkDepth) {
          bad("MARKs nested deeper than " + std::to_string(kMaxMarkDepth));
        }
        marks_.push_back(stack_.size());
        return false;
      case '}': push(new_dict(false)); return false;
      case ']': push(new_seq(Kind::List, {})); return false;
      case ')': push(new_seq(Kind::Tuple, {})); return false;
      case 'N': push(Ref{Kind::None, 0}); return false;
      case 0x88: push(Ref{Kind::Bool, 1}); return false;
      case 0x89: push(Ref{Kind::Bool, 0}); return false;
      case 'J': {
        const uint32_t u = le32(take(4));
        push(Ref{Kind::Int, static_cast<int32_t>(u)});
        return false;
      }
      case 'K': push(Ref{Kind::Int, take(1)[0]}); return false;
      case 'M': push(Ref{Kind::Int, le16(take(2))}); return false;
      case 0x8a: {  // LONG1: little-endian two's complement
        const uint8_t len = take(1)[0];
        if (len > 8) bad("integer of " + std::to_string(len) + " bytes does not fit in 64 bits");
        const uint8_t* b = take(len);
        uint64_t u = 0;
        for (size_t i = 0; i < len; ++i) u |= static_cast<uint64_t>(b[i]) << (8 * i);
        if (len > 0 && len < 8 && (b[len - 1] & 0x80)) u |= ~uint64_t{0} << (8 * len);
        push(Ref{Kind::Int, static_cast<int64_t>(u)});
        return false;
      }
      case 'G': {  // BINFLOAT: big-endian IEEE double
        const uint8_t* b = take(8);
        uint64_t u = 0;
        for (int i = 0; i < 8; ++i) u = (u << 8) | b[i];
        push(Ref{Kind::Float, static_cast<int64_t>(u)});
        return false;
      }
      case 0x8c: push(read_string(take(1)[0])); return false;
      case 'X': push(read_string(le32(take(4)))); return false;
      case 0x8d: push(read_string(le64(take(8)))); return false;
      case 'q': put(take(1)[0]); return false;
      case 'r': put(le32(take(4))); return false;
      case 0x94: put(memo_count_); return false;
      case 'h': push(get(take(1)[0])); return false;
      case 'j': push(get(le32(take(4)))); return false;
      case 't': push(new_seq(Kind::Tuple, pop_mark())); return false;
      case 0x85:
      case 0x86:
      case 0x87: {
        const size_t k = op_ - 0x84u;
        need(k);
        std::vector<Ref> items(stack_.end() - static_cast<ptrdiff_t>(k), stack_.end());
        stack_.resize(stack_.size() - k);
        push(new_seq(Kind::Tuple, std::move(items)));
        return false;
      }
      case 'a': {
        need(2);
        const Ref item = pop();
        append(stack_.back(), &item, 1);
        return false;
      }
      case 'e': {
        std::vector<Ref> items = pop_mark();
        need(1);
        append(stack_.back(), items.data(), items.size());
        return false;
      }
      case 's': {
        need(3);
        const Ref value = pop();
        const Ref key = pop();
        const std::pair<Ref, Ref> kv{key, value};
        set_items(stack_.back(), &kv, 1);
        return false;
      }
      case 'u': {
        std::vector<Ref> items = pop_mark();
        if (items.size() % 2) bad("odd number of values (" + std::to_string(items.size()) + ")");
        need(1);
        std::vector<std::pair<Ref, Ref>> kvs;
        kvs.reserve(items.size() / 2);
        for (size_t i = 0; i < items.size(); i += 2) kvs.emplace_back(items[i], items[i + 1]);
        set_items(stack_.back(), kvs.data(), kvs.size());
        return false;
      }
      case 'c': {
        const std::string module = read_line("module");
        const std::string name = read_line("name");
        push(resolve_global(module, name));
        return false;
      }
      case 0x93: {  // STACK_GLOBAL
        need(2);
        const Ref name = pop();
        const Ref module = pop();
        if (module.kind != Kind::Str || name.kind != Kind::Str) {
          bad("module and name must be strings, got " + kind_text(module) + " and " +
              kind_text(name));
        }
        push(resolve_global(strs_[module.v], strs_[name.v]));
        return false;
      }
      case 'R': {
        need(2);
        const Ref args = pop();
        const Ref callable = pop();
        push(reduce(callable, args));
        return false;
      }
      case 'b': {
        need(2);
        const Ref state = pop();
        build(stack_.back(), state);
        return false;
      }
      case 'Q': {
        need(1);
        push(persistent_load(pop()));
        return false;
      }
      default: {
        const char* name = opcode_name(op_);
        if (!name) bad("unknown opcode " + hex_byte(op_));
        bad("opcode is not allowed (only the opcodes of a plain state dict are accepted)");
      }
    }
  }

  // --- errors

  std::string op_text() const {
    const char* name = opcode_name(op_);
    return std::string(name ? name : "opcode") + " (" + hex_byte(op_) + ") at offset " +
           std::to_string(op_pos_);
  }
  [[noreturn]] void bad(const std::string& reason) const {
    fail(display_, "data.pkl: " + op_text() + ": " + reason);
  }
  [[noreturn]] void bad_at(size_t offset, const std::string& reason) const {
    fail(display_, "data.pkl: at offset " + std::to_string(offset) + ": " + reason);
  }
  [[noreturn]] void bad_result(const std::string& reason) const {
    fail(display_, "data.pkl: " + reason);
  }

  std::string kind_text(const Ref& r) const {
    switch (r.kind) {
      case Kind::None: return "None";
      case Kind::Bool: return "a bool";
      case Kind::Int: return "an int";
      case Kind::Float: return "a float";
      case Kind::Str: return "a string";
      case Kind::Tuple: return "a tuple";
      case Kind::List: return "a list";
      case Kind::Dict: return dicts_[r.v].ordered ? "an OrderedDict" : "a dict";
      case Kind::Global: return "global '" + global_text(r.v) + "'";
      case Kind::Storage: return "a storage";
      case Kind::Tensor: return "a tensor";
    }
    return "a value";
  }

  // --- reading the byte stream

  const uint8_t* take(uint64_t k) {
    if (k > n_ - pos_) {
      bad("needs " + std::to_string(k) + " bytes but only " + std::to_string(n_ - pos_) +
          " remain");
    }
    const uint8_t* p = data_ + pos_;
    pos_ += static_cast<size_t>(k);
    return p;
  }

  Ref read_string(uint64_t len) {
    if (len > kMaxString) {
      bad("string of " + std::to_string(len) + " bytes exceeds the 16 MiB limit");
    }
    if (len > n_ - pos_) {
      bad("string of " + std::to_string(len) + " bytes extends beyond the end of the pickle (" +
          std::to_string(n_ - pos_) + " bytes remain)");
    }
    const uint8_t* p = take(len);
    if (!valid_utf8(p, static_cast<size_t>(len))) bad("string is not valid UTF-8");
    charge(32 + len);
    strs_.emplace_back(reinterpret_cast<const char*>(p), static_cast<size_t>(len));
    return Ref{Kind::Str, static_cast<int64_t>(strs_.size() - 1)};
  }

  std::string read_line(const char* what) {
    const size_t limit = std::min(n_ - pos_, kMaxGlobalLine + 1);
    const void* nl = std::memchr(data_ + pos_, '\n', limit);
    if (!nl) bad(std::string(what) + " is not a line of at most 256 bytes");
    const size_t len = static_cast<const uint8_t*>(nl) - (data_ + pos_);
    std::string s(reinterpret_cast<const char*>(data_ + pos_), len);
    pos_ += len + 1;
    return s;
  }

  // --- the stack

  void charge(uint64_t bytes) {
    used_ += bytes;
    if (used_ > kMaxWorkingBytes) bad("unpickling needs more than 512 MiB of memory");
  }

  // Values above the innermost MARK.
  size_t available() const { return stack_.size() - (marks_.empty() ? 0 : marks_.back()); }
  void need(size_t k) const {
    if (available() < k) {
      bad("stack underflow: needs " + std::to_string(k) + " values, " +
          std::to_string(available()) + " available above the mark");
    }
  }
  void push(Ref r) {
    if (stack_.size() >= kMaxStack) {
      bad("the stack grows beyond " + std::to_string(kMaxStack) + " values");
    }
    stack_.push_back(r);
  }
  Ref pop() {
    need(1);
    const Ref r = stack_.back();
    stack_.pop_back();
    return r;
  }
  std::vector<Ref> pop_mark() {
    if (marks_.empty()) bad("no MARK to pop");
    const size_t mark = marks_.back();
    marks_.pop_back();
    std::vector<Ref> items(stack_.begin() + static_cast<ptrdiff_t>(mark), stack_.end());
    stack_.resize(mark);
    return items;
  }

  // --- the memo

  void put(uint64_t index) {
    if (index >= kMaxMemo) {
      bad("memo index " + std::to_string(index) + " exceeds the limit of " +
          std::to_string(kMaxMemo) + " entries");
    }
    need(1);
    if (index >= memo_.size()) {
      charge((index + 1 - memo_.size()) * sizeof(Ref));
      memo_.resize(static_cast<size_t>(index + 1), Ref{kUnset, 0});
    }
    if (memo_[index].kind == kUnset) ++memo_count_;
    memo_[index] = stack_.back();
  }
  Ref get(uint64_t index) const {
    if (index >= memo_.size() || memo_[index].kind == kUnset) {
      bad("memo index " + std::to_string(index) + " was never stored");
    }
    return memo_[index];
  }

  // --- values

  uint8_t depth(const Ref& r) const {
    switch (r.kind) {
      case Kind::Tuple:
      case Kind::List: return seqs_[r.v].depth;
      case Kind::Dict: return dicts_[r.v].depth;
      default: return 0;
    }
  }
  // Depth is tracked as containers are filled. A list mutated after it was put into another
  // container does not update its parents, but nothing here walks values recursively, so the
  // limit is a guard against absurd pickles rather than against stack exhaustion.
  uint8_t deeper(uint8_t current, const Ref& child) const {
    const unsigned d = depth(child) + 1u;
    if (d > kMaxValueDepth) bad("values nested deeper than " + std::to_string(kMaxValueDepth));
    return static_cast<uint8_t>(std::max<unsigned>(current, d));
  }

  Ref new_seq(Kind kind, std::vector<Ref> items) {
    charge(64 + items.size() * sizeof(Ref));
    Seq s;
    for (const Ref& r : items) s.depth = deeper(s.depth, r);
    s.items = std::move(items);
    seqs_.push_back(std::move(s));
    return Ref{kind, static_cast<int64_t>(seqs_.size() - 1)};
  }
  Ref new_dict(bool ordered) {
    charge(64);
    dicts_.push_back(DictObj{{}, ordered, 1});
    return Ref{Kind::Dict, static_cast<int64_t>(dicts_.size() - 1)};
  }

  void append(const Ref& target, const Ref* items, size_t k) {
    if (target.kind != Kind::List) bad("cannot append to " + kind_text(target));
    charge(k * sizeof(Ref));
    Seq& s = seqs_[target.v];
    for (size_t i = 0; i < k; ++i) {
      s.depth = deeper(s.depth, items[i]);
      s.items.push_back(items[i]);
    }
  }

  void set_items(const Ref& target, const std::pair<Ref, Ref>* kvs, size_t k) {
    if (target.kind != Kind::Dict) bad("cannot set items on " + kind_text(target));
    charge(k * 2 * sizeof(Ref));
    DictObj& dict = dicts_[target.v];
    for (size_t i = 0; i < k; ++i) {
      dict.depth = deeper(deeper(dict.depth, kvs[i].first), kvs[i].second);
      dict.items.push_back(kvs[i]);
    }
  }

  // find_class of the weights-only unpickler: an allowlist, checked when the global is named so
  // that nothing outside it is ever even looked up.
  Ref resolve_global(const std::string& module, const std::string& name) {
    if (module == "collections" && name == "OrderedDict") {
      return Ref{Kind::Global, kGlobalOrderedDict};
    }
    if (module == "torch._utils" && name == "_rebuild_tensor_v2") {
      return Ref{Kind::Global, kGlobalRebuildTensor};
    }
    if (module == "torch._utils" && name == "_rebuild_parameter") {
      return Ref{Kind::Global, kGlobalRebuildParameter};
    }
    if (module == "torch") {
      for (int64_t i = 0; i < kNumStorageTypes; ++i) {
        if (name == kStorageTypes[i].name) return Ref{Kind::Global, kGlobalStorage0 + i};
      }
      if (name.size() > 7 && name.compare(name.size() - 7, 7, "Storage") == 0) {
        bad("storage type " + quote_name(module + "." + name) + " is not supported");
      }
    }
    bad("global " + quote_name(module + "." + name) +
        " is not allowed (a weights-only checkpoint may only name collections.OrderedDict, "
        "torch._utils._rebuild_tensor_v2/_rebuild_parameter and torch storage types)");
  }

  const Seq& tuple_args(const Ref& args, const std::string& callee) const {
    if (args.kind != Kind::Tuple) {
      bad("arguments of " + callee + " are " + kind_text(args) + ", not a tuple");
    }
    return seqs_[args.v];
  }

  bool empty_dict(const Ref& r) const { return r.kind == Kind::Dict && dicts_[r.v].items.empty(); }

  // REDUCE: the only calls a state dict needs. The callable must be an allowlisted global,
  // never a value computed by the pickle (e.g. the result of another REDUCE).
  Ref reduce(const Ref& callable, const Ref& args) {
    if (callable.kind != Kind::Global) {
      bad("the callable is " + kind_text(callable) + ", not an allowed global");
    }
    const std::string callee = "'" + global_text(callable.v) + "'";
    switch (callable.v) {
      case kGlobalOrderedDict: {
        const Seq& a = tuple_args(args, callee);
        if (!a.items.empty()) bad(callee + " must be called without arguments");
        return new_dict(true);
      }
      case kGlobalRebuildTensor: return rebuild_tensor(tuple_args(args, callee).items, callee);
      case kGlobalRebuildParameter: {
        const std::vector<Ref> a = tuple_args(args, callee).items;
        if (a.size() != 3) bad(callee + " takes 3 arguments, got " + std::to_string(a.size()));
        if (a[0].kind != Kind::Tensor) {
          bad(callee + " argument 1 is " + kind_text(a[0]) + ", not a tensor");
        }
        if (a[1].kind != Kind::Bool) {
          bad(callee + " argument 2 (requires_grad) is " + kind_text(a[1]));
        }
        if (!empty_dict(a[2])) {
          bad(callee + " backward_hooks must be an empty dict, got " + hooks_text(a[2]));
        }
        return a[0];
      }
      default:
        bad("calling " + callee + " is not allowed (storage types only appear in persistent ids)");
    }
  }

  std::string hooks_text(const Ref& r) const {
    if (r.kind == Kind::Dict) {
      return kind_text(r) + " of " + std::to_string(dicts_[r.v].items.size()) + " entries";
    }
    return kind_text(r);
  }

  bool int_tuple(const Ref& r, std::vector<int64_t>& out) const {
    if (r.kind != Kind::Tuple) return false;
    const Seq& s = seqs_[r.v];
    out.clear();
    if (s.items.size() > kMaxRank) {
      bad("a size or stride has " + std::to_string(s.items.size()) +
          " dimensions, over the limit of " + std::to_string(kMaxRank));
    }
    for (const Ref& x : s.items) {
      if (x.kind != Kind::Int) return false;
      out.push_back(x.v);
    }
    return true;
  }

  // _rebuild_tensor_v2(storage, storage_offset, size, stride, requires_grad, backward_hooks,
  // [metadata]). Types are checked here; extents once the tensor's name is known.
  Ref rebuild_tensor(std::vector<Ref> a, const std::string& callee) {
    if (a.size() != 6 && a.size() != 7) {
      bad(callee + " takes 6 or 7 arguments, got " + std::to_string(a.size()));
    }
    if (a[0].kind != Kind::Storage) {
      bad(callee + " argument 1 is " + kind_text(a[0]) + ", not a storage");
    }
    if (a[1].kind != Kind::Int) {
      bad(callee + " storage_offset is " + kind_text(a[1]) + ", not an int");
    }
    if (a[1].v < 0) bad(callee + " storage_offset " + std::to_string(a[1].v) + " is negative");
    TensorObj t;
    t.storage = static_cast<size_t>(a[0].v);
    t.offset = static_cast<uint64_t>(a[1].v);
    if (!int_tuple(a[2], t.shape)) {
      bad(callee + " size is " + kind_text(a[2]) + ", not a tuple of ints");
    }
    if (!int_tuple(a[3], t.stride)) {
      bad(callee + " stride is " + kind_text(a[3]) + ", not a tuple of ints");
    }
    if (t.shape.size() > kMaxRank) {
      bad(callee + " size has " + std::to_string(t.shape.size()) +
          " dimensions, over the limit of " + std::to_string(kMaxRank));
    }
    if (t.shape.size() != t.stride.size()) {
      bad(callee + " size " + dims_text(t.shape) + " and stride " + dims_text(t.stride) +
          " differ in length");
    }
    for (size_t i = 0; i < t.shape.size(); ++i) {
      if (t.shape[i] < 0) bad(callee + " size " + dims_text(t.shape) + " has a negative dimension");
      if (t.stride[i] < 0) bad(callee + " stride " + dims_text(t.stride) + " has a negative entry");
    }
    if (a[4].kind != Kind::Bool) {
      bad(callee + " requires_grad is " + kind_text(a[4]) + ", not a bool");
    }
    if (!empty_dict(a[5])) {
      bad(callee + " backward_hooks must be an empty dict, got " + hooks_text(a[5]));
    }
    // Metadata carries conj/neg bits that would change the values; none is expected.
    if (a.size() == 7 && a[6].kind != Kind::None && !empty_dict(a[6])) {
      bad(callee + " tensor metadata (" + kind_text(a[6]) + ") is not supported");
    }
    if (tensors_.size() >= kMaxTensors) {
      bad("more than " + std::to_string(kMaxTensors) + " tensors");
    }
    charge(64 + 16 * t.shape.size());
    tensors_.push_back(std::move(t));
    return Ref{Kind::Tensor, static_cast<int64_t>(tensors_.size() - 1)};
  }

  // BUILD sets attributes. Only an OrderedDict may receive them, and only the ones a state
  // dict carries: none, or `_metadata` (module versions), which is ignored.
  void build(const Ref& target, const Ref& state) {
    if (target.kind != Kind::Dict || !dicts_[target.v].ordered) {
      bad("BUILD on " + kind_text(target) + " is not allowed");
    }
    if (state.kind == Kind::None) return;
    if (state.kind != Kind::Dict) {
      bad("state of the OrderedDict is " + kind_text(state) + ", not a dict");
    }
    for (const auto& [k, v] : dicts_[state.v].items) {
      if (k.kind != Kind::Str || strs_[k.v] != "_metadata") {
        bad("OrderedDict attribute " +
            (k.kind == Kind::Str ? quote_name(strs_[k.v]) : kind_text(k)) +
            " is not allowed (only _metadata)");
      }
    }
  }

  // BINPERSID: ('storage', <storage type>, key, location, numel).
  Ref persistent_load(const Ref& pid) {
    if (pid.kind != Kind::Tuple) bad("persistent id is " + kind_text(pid) + ", not a tuple");
    const std::vector<Ref>& a = seqs_[pid.v].items;
    if (a.size() != 5) bad("persistent id has " + std::to_string(a.size()) + " fields, expected 5");
    if (a[0].kind != Kind::Str || strs_[a[0].v] != "storage") {
      bad("persistent id does not start with 'storage'");
    }
    if (a[1].kind != Kind::Global || a[1].v < kGlobalStorage0) {
      bad("persistent id storage type is " + kind_text(a[1]) + ", not a torch storage type");
    }
    if (a[2].kind != Kind::Str) bad("persistent id key is " + kind_text(a[2]) + ", not a string");
    if (a[3].kind != Kind::Str) {
      bad("persistent id location is " + kind_text(a[3]) + ", not a string");
    }
    if (a[4].kind != Kind::Int || a[4].v < 0) bad("persistent id numel is not a non-negative int");
    const std::string& key = strs_[a[2].v];
    // Keys name archive entries: keep them to plain file names.
    if (key.empty() || key == "." || key == ".." || key.size() > 256 ||
        key.find_first_of(std::string("/\\\0", 3)) != std::string::npos) {
      bad("storage key " + quote_name(key) + " is not a plain name");
    }
    const int32_t dtype = kStorageTypes[a[1].v - kGlobalStorage0].dtype;
    const uint64_t numel = static_cast<uint64_t>(a[4].v);
    if (numel > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) / dtype_size(dtype)) {
      bad("storage " + quote_name(key) + " of " + std::to_string(numel) + " elements is too large");
    }
    auto [it, inserted] = storage_ids_.emplace(key, storages_.size());
    if (inserted) {
      if (storages_.size() >= kMaxTensors) {
        bad("more than " + std::to_string(kMaxTensors) + " storages");
      }
      charge(96 + key.size());
      storages_.push_back(TorchStorage{key, dtype, numel});
    } else {
      const TorchStorage& s = storages_[it->second];
      if (s.dtype != dtype || s.numel != numel) {
        bad("storage " + quote_name(key) + " is declared as " + global_text(a[1].v) + " of " +
            std::to_string(numel) + " elements, but earlier as " + dtype_name(s.dtype) + " of " +
            std::to_string(s.numel));
      }
    }
    return Ref{Kind::Storage, static_cast<int64_t>(it->second)};
  }

  // --- the result

  TorchPickle finish(Ref result) {
    if (result.kind != Kind::Dict) {
      bad_result("the pickle holds " + kind_text(result) + ", not a dict of tensors");
    }
    // {"state_dict": {...}, ...} as written by some training scripts.
    for (const auto& [k, v] : dicts_[result.v].items) {
      if (k.kind == Kind::Str && strs_[k.v] == "state_dict" && v.kind == Kind::Dict) {
        result = v;
        break;
      }
    }
    const DictObj& dict = dicts_[result.v];
    if (dict.items.size() > kMaxTensors) {
      bad_result("more than " + std::to_string(kMaxTensors) + " tensors");
    }
    // Names are checked for duplicates before anything is copied: one long name shared through
    // the memo by many entries must fail here, not multiply into the result.
    std::vector<std::pair<std::string_view, size_t>> named;  // name, tensor index
    named.reserve(dict.items.size());
    for (size_t i = 0; i < dict.items.size(); ++i) {
      const auto& [k, v] = dict.items[i];
      if (k.kind != Kind::Str) {
        bad_result("key " + std::to_string(i) + " of the state dict is " + kind_text(k) +
                   ", not a string");
      }
      const std::string& name = strs_[k.v];
      if (v.kind != Kind::Tensor) {
        bad_result("value of " + quote_name(name) + " is " + kind_text(v) + ", not a tensor");
      }
      named.emplace_back(name, static_cast<size_t>(v.v));
    }
    std::sort(named.begin(), named.end());
    for (size_t i = 1; i < named.size(); ++i) {
      if (named[i].first == named[i - 1].first) {
        bad_result("tensor " + quote_name(named[i].first) + " appears twice");
      }
    }
    TorchPickle out;
    out.tensors.reserve(named.size());
    for (const auto& [name, index] : named) {
      const TensorObj& t = tensors_[index];
      check_extent(name, t);
      // Distinct names are distinct strings, already paid for; one tensor's dims are copied
      // once per name, though.
      used_ += 64 + name.size() + 16 * t.shape.size();
      if (used_ > kMaxWorkingBytes) bad_result("the state dict needs more than 512 MiB of memory");
      out.tensors.push_back(TorchTensor{std::string(name), t.storage, t.offset, t.shape, t.stride});
    }
    out.storages = std::move(storages_);
    return out;
  }

  // The view (offset, size, stride) must stay inside its storage; all arithmetic is checked.
  void check_extent(std::string_view name, const TensorObj& t) const {
    const TorchStorage& s = storages_[t.storage];
    const std::string who = "tensor " + quote_name(name);
    int64_t product = 1;
    bool empty = false;
    for (int64_t d : t.shape) {
      if (d == 0) empty = true;
      if (__builtin_mul_overflow(product, std::max<int64_t>(d, 1), &product)) {
        bad_result(who + " size " + dims_text(t.shape) + " has too many elements");
      }
    }
    uint64_t nbytes;
    if (__builtin_mul_overflow(static_cast<uint64_t>(product), dtype_size(s.dtype), &nbytes)) {
      bad_result(who + " size " + dims_text(t.shape) + " has too many bytes");
    }
    if (empty) {
      if (t.offset > s.numel) {
        bad_result(who + " storage_offset " + std::to_string(t.offset) + " is beyond storage " +
                   quote_name(s.key) + " of " + std::to_string(s.numel) + " elements");
      }
      return;
    }
    uint64_t last = t.offset;
    for (size_t i = 0; i < t.shape.size(); ++i) {
      uint64_t span;
      if (__builtin_mul_overflow(static_cast<uint64_t>(t.shape[i] - 1),
                                 static_cast<uint64_t>(t.stride[i]), &span) ||
          __builtin_add_overflow(last, span, &last)) {
        bad_result(who + " size " + dims_text(t.shape) + " with stride " + dims_text(t.stride) +
                   " overflows");
      }
    }
    if (last >= s.numel) {
      bad_result(who + " (offset " + std::to_string(t.offset) + ", size " + dims_text(t.shape) +
                 ", stride " + dims_text(t.stride) + ") reaches element " + std::to_string(last) +
                 " of storage " + quote_name(s.key) + ", which has " + std::to_string(s.numel) +
                 " elements");
    }
    // Stride 0 (expand) or overlapping strides repeat elements: harmless for a small buffer,
    // but a few bytes of storage must not make the reader materialize terabytes.
    const uint64_t storage_bytes = s.numel * dtype_size(s.dtype);
    if (nbytes > storage_bytes && nbytes > kMaxRepeatedBytes) {
      bad_result(who + " size " + dims_text(t.shape) + " with stride " + dims_text(t.stride) +
                 " repeats elements to " + std::to_string(nbytes) + " bytes from a storage of " +
                 std::to_string(storage_bytes) + " (limit for such views: 64 MiB)");
    }
  }

  static constexpr Kind kUnset = static_cast<Kind>(255);

  const uint8_t* data_;
  size_t n_;
  const std::string& display_;
  size_t pos_ = 0;
  size_t op_pos_ = 0;
  uint8_t op_ = 0;
  uint64_t used_ = 0;

  std::vector<Ref> stack_;
  std::vector<size_t> marks_;  // stack sizes at each open MARK
  std::vector<Ref> memo_;
  uint64_t memo_count_ = 0;  // entries set, the index MEMOIZE uses

  std::vector<std::string> strs_;
  std::vector<Seq> seqs_;
  std::vector<DictObj> dicts_;
  std::vector<TensorObj> tensors_;
  std::vector<TorchStorage> storages_;
  std::unordered_map<std::string, size_t> storage_ids_;
};

// ---------------------------------------------------------------------------------------------
// Archives

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
  std::shared_ptr<Source> source;
  std::vector<TensorMeta> tensors;  // sorted by name
  std::vector<TensorLoc> locs;      // parallel to tensors
};

// Validates the archive layout and the pickle, and locates every tensor's bytes.
void load_archive(Shard& shard) {
  const std::string& d = shard.display;
  const Source& src = *shard.source;
  const std::vector<ZipEntry> entries = parse_zip(src, d);

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

  if (const ZipEntry* bo = find_entry(entries, top + "byteorder")) {
    if (bo->method != 0) fail(d, "byteorder record is " + method_text(bo->method));
    if (bo->usize > 16) fail(d, "byteorder record of " + std::to_string(bo->usize) + " bytes");
    std::string order(static_cast<size_t>(bo->usize), '\0');
    read_or_fail(src, d, order.data(), bo->usize, bo->data_offset, "the byteorder record");
    if (order != "little") {
      fail(d, "byteorder is " + quote_name(order) + "; only little-endian archives are supported");
    }
  }

  if (pkl->method != 0) {
    fail(d, "data.pkl is " + method_text(pkl->method) +
                "; only stored (uncompressed) entries are supported, as torch.save writes them");
  }
  if (pkl->usize > kMaxPickleBytes) {
    fail(d, "data.pkl is " + std::to_string(pkl->usize) + " bytes, over the 64 MiB limit");
  }
  TorchPickle pickle;
  {
    std::vector<uint8_t> bytes(static_cast<size_t>(pkl->usize));
    read_or_fail(src, d, bytes.data(), pkl->usize, pkl->data_offset, "data.pkl");
    if (crc32(bytes.data(), bytes.size()) != pkl->crc) fail(d, "data.pkl fails its CRC check");
    pickle = parse_torch_pickle(bytes.data(), bytes.size(), d);
  }

  std::vector<uint64_t> storage_offsets(pickle.storages.size());
  for (size_t i = 0; i < pickle.storages.size(); ++i) {
    const TorchStorage& s = pickle.storages[i];
    const std::string entry_name = top + "data/" + s.key;
    const std::string who = "storage " + quote_name(s.key);
    const ZipEntry* z = find_entry(entries, entry_name);
    if (!z) fail(d, who + " has no archive entry " + quote_name(entry_name));
    if (z->method != 0) {
      fail(d, who + " entry is " + method_text(z->method) +
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
    for (int64_t dim : t.shape) count *= static_cast<uint64_t>(dim);  // checked by the unpickler
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
  Gather(const Source& src, const TensorLoc& loc, char* dst, const std::string& display,
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
    const int r = src_.read_at(buf_.data(), span * elem, loc_.data_offset + first * elem);
    if (r == -1) fail(display_, "unexpected end of file reading " + who_ + " (file truncated?)");
    if (r != 0) fail(display_, "read error on " + who_ + ": " + errno_text(r));
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

  const Source& src_;
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

class PytorchReader final : public CheckpointReader {
 public:
  PytorchReader(std::vector<Shard> shards, std::string description)
      : description_(std::move(description)) {
    for (size_t s = 0; s < shards.size(); ++s) {
      for (size_t i = 0; i < shards[s].tensors.size(); ++i) {
        shards[s].locs[i].shard = s;
        tensors_.push_back(std::move(shards[s].tensors[i]));
        locs_.push_back(std::move(shards[s].locs[i]));
      }
      sources_.push_back(std::move(shards[s].source));
      names_.push_back(std::move(shards[s].display));
    }
    std::vector<size_t> order(tensors_.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::sort(order.begin(), order.end(),
              [&](size_t a, size_t b) { return tensors_[a].name < tensors_[b].name; });
    std::vector<TensorMeta> tensors;
    std::vector<TensorLoc> locs;
    tensors.reserve(order.size());
    locs.reserve(order.size());
    for (size_t i : order) {
      tensors.push_back(std::move(tensors_[i]));
      locs.push_back(std::move(locs_[i]));
    }
    tensors_ = std::move(tensors);
    locs_ = std::move(locs);
  }

  const std::vector<TensorMeta>& tensors() const override { return tensors_; }

  const TensorMeta* find(std::string_view name) const override {
    auto it = std::lower_bound(tensors_.begin(), tensors_.end(), name,
                               [](const TensorMeta& t, std::string_view n) { return t.name < n; });
    return it != tensors_.end() && it->name == name ? &*it : nullptr;
  }

  // Immutable after construction; sources read with pread, so concurrent calls are safe.
  void read(const TensorMeta& meta, void* dst) const override {
    const TensorMeta* mine = find(meta.name);
    if (!mine) throw Error("[pytorch] " + description_ + ": no tensor " + quote_name(meta.name));
    const TensorLoc& loc = locs_[static_cast<size_t>(mine - tensors_.data())];
    const std::string& display = names_[loc.shard];
    const std::string who = "tensor " + quote_name(meta.name);
    if (mine->nbytes != meta.nbytes) {
      fail(display, who + " is " + std::to_string(mine->nbytes) +
                        " bytes, but the request is for " + std::to_string(meta.nbytes));
    }
    if (meta.nbytes == 0) return;
    const Source& src = *sources_[loc.shard];
    if (is_contiguous(loc)) {
      const int r = src.read_at(static_cast<char*>(dst), meta.nbytes,
                                loc.data_offset + loc.offset * loc.elem);
      if (r == -1) fail(display, "unexpected end of file reading " + who + " (file truncated?)");
      if (r != 0) fail(display, "read error on " + who + ": " + errno_text(r));
      return;
    }
    Gather(src, loc, static_cast<char*>(dst), display, who).run();
  }

  // Contiguous tensors of a file-backed archive lie in one stretch of a stored entry.
  std::optional<FileExtent> extent(const TensorMeta& meta) const override {
    const TensorMeta* mine = find(meta.name);
    if (!mine || mine->nbytes != meta.nbytes) return std::nullopt;
    const TensorLoc& loc = locs_[static_cast<size_t>(mine - tensors_.data())];
    const int fd = sources_[loc.shard]->fd();
    if (fd < 0 || !is_contiguous(loc)) return std::nullopt;
    return FileExtent{fd, loc.data_offset + loc.offset * loc.elem};
  }

  std::string describe() const override { return description_; }

 private:
  std::vector<TensorMeta> tensors_;  // sorted by name
  std::vector<TensorLoc> locs_;      // parallel to tensors_
  std::vector<std::shared_ptr<Source>> sources_;
  std::vector<std::string> names_;
  std::string description_;
};

std::string shards_text(size_t n) {
  return "pytorch (" + std::to_string(n) + (n == 1 ? " shard)" : " shards)");
}

std::unique_ptr<CheckpointReader> open_single(const fs::path& dir) {
  std::vector<Shard> shards(1);
  Shard& shard = shards[0];
  shard.display = kSingleName;
  shard.path = dir / kSingleName;
  shard.source = open_regular(shard.path, kSingleName, /*no_follow=*/false);
  load_archive(shard);
  return std::make_unique<PytorchReader>(std::move(shards), "pytorch (1 file)");
}

// ---------------------------------------------------------------------------------------------
// Index

// Parses {"metadata": {...}, "weight_map": {tensor: shard}}; other top-level keys are ignored.
// SAX rather than a DOM so that duplicate tensor names are seen (a DOM keeps the last one).
class IndexSax {
 public:
  std::vector<std::pair<std::string, std::string>> weights;  // tensor name, shard name
  bool has_weight_map = false;
  std::string error;

  bool null() { return scalar(); }
  bool boolean(bool) { return scalar(); }
  bool number_integer(json::number_integer_t) { return scalar(); }
  bool number_unsigned(json::number_unsigned_t) { return scalar(); }
  bool number_float(json::number_float_t, const json::string_t&) { return scalar(); }
  bool binary(json::binary_t&) { return scalar(); }
  bool string(json::string_t& s) {
    if (skip_) return true;
    if (state_ == State::Value) return done();
    if (state_ == State::Shard) {
      weights.back().second = std::move(s);
      state_ = State::InMap;
      return true;
    }
    return reject("index has an unexpected JSON structure");
  }
  bool start_object(std::size_t) {
    if (skip_) return ++skip_, true;
    switch (state_) {
      case State::Root: state_ = State::Top; return true;
      case State::Value: skip_ = 1; return true;
      case State::Map: state_ = State::InMap; return true;
      default: return reject(state_ == State::Shard ? shard_error() : "index is not a JSON object");
    }
  }
  bool start_array(std::size_t) {
    if (skip_) return ++skip_, true;
    if (state_ == State::Value) {
      skip_ = 1;
      return true;
    }
    if (state_ == State::Map) return reject("weight_map is not an object");
    return reject(state_ == State::Shard ? shard_error() : "index is not a JSON object");
  }
  bool end_object() {
    if (skip_) return --skip_ == 0 ? done() : true;
    state_ = state_ == State::InMap ? State::Top : State::End;
    return true;
  }
  bool end_array() {
    if (skip_) return --skip_ == 0 ? done() : true;
    return reject("index has an unexpected JSON structure");
  }
  bool key(json::string_t& k) {
    if (skip_) return true;
    if (state_ == State::InMap) {
      weights.emplace_back(std::move(k), std::string());
      state_ = State::Shard;
      return true;
    }
    if (k == "weight_map") {
      if (has_weight_map) return reject("duplicate key 'weight_map'");
      has_weight_map = true;
      state_ = State::Map;
    } else {
      state_ = State::Value;
    }
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& ex) {
    std::string_view text = ex.what();
    const size_t close = text.find("] ");
    if (close != std::string_view::npos) text.remove_prefix(close + 2);
    return reject("index is not valid JSON: " + printable(text));
  }

 private:
  enum class State { Root, Top, Value, Map, InMap, Shard, End };
  bool done() {
    state_ = State::Top;
    return true;
  }
  bool scalar() {
    if (skip_) return true;
    if (state_ == State::Value) return done();
    if (state_ == State::Map) return reject("weight_map is not an object");
    if (state_ == State::Shard) return reject(shard_error());
    return reject("index is not a JSON object");
  }
  std::string shard_error() const {
    return "weight_map entry for tensor " + quote_name(weights.back().first) + " is not a string";
  }
  bool reject(std::string message) {
    if (error.empty()) error = std::move(message);
    return false;
  }
  State state_ = State::Root;
  int64_t skip_ = 0;
};

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
    auto index = open_regular(dir / kIndexName, kIndexName, /*no_follow=*/false);
    if (index->size() > kMaxIndexBytes) {
      fail(kIndexName,
           "file is " + std::to_string(index->size()) + " bytes, over the 100 MiB limit");
    }
    std::string text(static_cast<size_t>(index->size()), '\0');
    read_or_fail(*index, kIndexName, text.data(), index->size(), 0, "the index");
    IndexSax sax;
    bool ok = false;
    try {
      ok = json::sax_parse(text, &sax, json::input_format_t::json, /*strict=*/true,
                           /*ignore_comments=*/false);
    } catch (const std::bad_alloc&) {
      throw;
    } catch (const std::exception& e) {
      fail(kIndexName, "index is not valid JSON: " + printable(e.what()));
    }
    if (!ok) fail(kIndexName, sax.error.empty() ? "index is not valid JSON" : sax.error);
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
  std::map<std::string, size_t> shard_ids;  // name order: stable ids, deterministic messages
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
    shard.source = open_regular(canon, shard.display, /*no_follow=*/true);
    load_archive(shard);
    id = shards.size() - 1;
  }

  // Each tensor stored exactly once, in the shard the index names, and every indexed tensor
  // present.
  std::unordered_map<std::string_view, size_t> found;  // tensor name -> shard id
  for (size_t s = 0; s < shards.size(); ++s) {
    for (const TensorMeta& t : shards[s].tensors) {
      auto [it, inserted] = found.emplace(t.name, s);
      if (!inserted) {
        fail(shards[s].display, "tensor " + quote_name(t.name) + " is in two shards, '" +
                                    shards[it->second].display + "' and '" + shards[s].display +
                                    "'");
      }
      auto w = std::lower_bound(weights.begin(), weights.end(), t.name,
                                [](const std::pair<std::string, std::string>& p,
                                   const std::string& n) { return p.first < n; });
      if (w == weights.end() || w->first != t.name) {
        fail(shards[s].display, "tensor " + quote_name(t.name) + " is not listed in " + kIndexName);
      }
      if (shard_ids.at(w->second) != s) {
        fail(shards[s].display, "tensor " + quote_name(t.name) + " is listed in " + kIndexName +
                                    " under shard " + quote_name(w->second));
      }
    }
  }
  for (const auto& [tensor, shard] : weights) {
    if (!found.count(tensor)) {
      fail(kIndexName, "tensor " + quote_name(tensor) + " is mapped to shard " + quote_name(shard) +
                           ", which does not contain it");
    }
  }
  const size_t n = shards.size();
  return std::make_unique<PytorchReader>(std::move(shards), shards_text(n));
}

}  // namespace

TorchPickle parse_torch_pickle(const uint8_t* data, size_t n, const std::string& display) {
  return Unpickler(data, n, display).run();
}

std::unique_ptr<CheckpointReader> open_pytorch_archive_bytes(std::string bytes,
                                                             const std::string& display) {
  std::vector<Shard> shards(1);
  shards[0].display = display;
  shards[0].path = display;
  shards[0].source = std::make_shared<MemorySource>(std::move(bytes));
  load_archive(shards[0]);
  return std::make_unique<PytorchReader>(std::move(shards), "pytorch (1 file)");
}

std::unique_ptr<CheckpointReader> open_pytorch_checkpoint(const std::filesystem::path& dir) {
  std::error_code ec;
  // symlink_status, not exists(): a dangling link should be reported as such rather than
  // silently falling back to the index.
  if (fs::exists(fs::symlink_status(dir / kSingleName, ec))) return open_single(dir);
  if (fs::exists(fs::symlink_status(dir / kIndexName, ec))) return open_sharded(dir);
  throw Error("[checkpoint] " + dir.string() + ": no " + kSingleName + " or " + kIndexName);
}

}  // namespace mobius
