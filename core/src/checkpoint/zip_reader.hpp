// zip_reader.hpp - the zip container of a torch.save checkpoint, read with every offset and size
// checked against the file (Zip64 included). Only the directory is parsed here; entries are read
// in place by offset, so nothing is decompressed or written anywhere.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "checkpoint/checkpoint_files.hpp"

namespace mobius {

// Bytes to read an archive from: an open file, or bytes in memory (the fuzzers' and tests'
// entry point).
class ByteSource {
 public:
  virtual ~ByteSource() = default;
  virtual uint64_t size() const = 0;
  // Reads exactly n bytes at off. Returns 0, -1 when the data ends first, or an errno value.
  // Safe to call from several threads at once.
  virtual int read_at(char* dst, uint64_t n, uint64_t off) const = 0;
  // The open file behind the bytes, or -1 for memory.
  virtual int fd() const { return -1; }
};

class FileSource final : public ByteSource {
 public:
  explicit FileSource(OpenedFile file) : file_(std::move(file)) {}
  uint64_t size() const override { return file_.size; }
  int fd() const override { return file_.fd.get(); }
  int read_at(char* dst, uint64_t n, uint64_t off) const override {
    return pread_exact(file_.fd.get(), dst, n, off);
  }

 private:
  OpenedFile file_;
};

class MemorySource final : public ByteSource {
 public:
  explicit MemorySource(std::string bytes) : bytes_(std::move(bytes)) {}
  uint64_t size() const override { return bytes_.size(); }
  int read_at(char* dst, uint64_t n, uint64_t off) const override;

 private:
  std::string bytes_;
};

// Reads exactly n bytes at off or throws "[pytorch] <display>: ..." about reading `what`.
void read_or_fail(const ByteSource& src, const std::string& display, void* dst, uint64_t n,
                  uint64_t off, const std::string& what);

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

// Reads and checks the central directory and every local header: offsets and sizes inside the
// file, entries that do not overlap, names that could not escape a folder, no encryption, no
// second disk. The result is sorted by name, names unique. Throws "[pytorch] <display>: ...".
std::vector<ZipEntry> read_zip_directory(const ByteSource& src, const std::string& display);

// The entry called name, or nullptr.
const ZipEntry* find_zip_entry(const std::vector<ZipEntry>& entries, std::string_view name);

// "compressed with DEFLATE", "compressed with method N": why an entry cannot be read in place.
std::string zip_method_text(uint16_t method);

// The CRC-32 a zip entry carries.
uint32_t zip_crc32(const uint8_t* p, size_t n);

}  // namespace mobius
