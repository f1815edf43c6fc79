// zip_reader.cpp - the zip container of torch.save archives, every offset and size checked.
#include "checkpoint/zip_reader.hpp"

#include <algorithm>
#include <array>
#include <cstring>

namespace mobius {
namespace {

constexpr uint64_t kMaxZipEntries = uint64_t{1} << 21;  // storages + a few records
constexpr uint64_t kMaxCentralDirectory = uint64_t{256} << 20;

[[noreturn]] void fail(const std::string& file, const std::string& reason) {
  kPytorchFormat.fail(file, reason);
}

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
  if (has_parent_component(name)) return "entry " + quote_name(name) + " has a '..' component";
  return "";
}

}  // namespace

int MemorySource::read_at(char* dst, uint64_t n, uint64_t off) const {
  if (off > bytes_.size() || n > bytes_.size() - off) return -1;
  if (n) std::memcpy(dst, bytes_.data() + off, static_cast<size_t>(n));
  return 0;
}

void read_or_fail(const ByteSource& src, const std::string& display, void* dst, uint64_t n,
                  uint64_t off, const std::string& what) {
  check_read(src.read_at(static_cast<char*>(dst), n, off), kPytorchFormat, display, what);
}

uint32_t zip_crc32(const uint8_t* p, size_t n) {
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

std::vector<ZipEntry> read_zip_directory(const ByteSource& src, const std::string& d) {
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

const ZipEntry* find_zip_entry(const std::vector<ZipEntry>& entries, std::string_view name) {
  auto it = std::lower_bound(entries.begin(), entries.end(), name,
                             [](const ZipEntry& z, std::string_view n) { return z.name < n; });
  return it != entries.end() && it->name == name ? &*it : nullptr;
}

std::string zip_method_text(uint16_t method) {
  if (method == 8) return "compressed with DEFLATE";
  return "compressed with method " + std::to_string(method);
}

}  // namespace mobius
