// test_safetensors.cpp - tests of the safetensors checkpoint reader, valid and hostile inputs.
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <doctest/doctest.h>

#include "checkpoint/checkpoint.hpp"
#include "mobius/plugin.h"

namespace fs = std::filesystem;

namespace {

// A fresh, uniquely named directory under the system temp dir, removed with its contents.
class TempDir {
 public:
  TempDir() {
    static std::atomic<unsigned> counter{0};
    std::random_device rd;
    for (;;) {
      path_ = fs::temp_directory_path() / ("mobius_st_test_" + std::to_string(::getpid()) + "_" +
                                           std::to_string(counter++) + "_" + std::to_string(rd()));
      if (fs::create_directory(path_)) break;
    }
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

std::string le64(uint64_t v) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>(v >> (8 * i));
  return s;
}

// The bytes of a safetensors file: length prefix, header text, data region.
std::string st_bytes(const std::string& header, const std::string& data) {
  return le64(header.size()) + header + data;
}

void write_file(const fs::path& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  REQUIRE(out.good());
}

template <typename T>
std::string raw(const std::vector<T>& values) {
  std::string s(values.size() * sizeof(T), '\0');
  if (!values.empty()) std::memcpy(s.data(), values.data(), s.size());
  return s;
}

// A tensor to lay out in a well-formed file; tensors are packed in the order given.
struct Spec {
  std::string name;
  std::string dtype;
  std::vector<int64_t> shape;
  std::string bytes;
};

std::string shape_json(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? "," : "") + std::to_string(shape[i]);
  return s + "]";
}

// A valid safetensors file holding specs (names must not need JSON escaping).
std::string st_file(const std::vector<Spec>& specs, const std::string& metadata = "") {
  std::string header = "{";
  if (!metadata.empty()) header += "\"__metadata__\":" + metadata;
  std::string data;
  for (const Spec& s : specs) {
    if (header.size() > 1) header += ",";
    const size_t begin = data.size();
    data += s.bytes;
    header += "\"" + s.name + "\":{\"dtype\":\"" + s.dtype + "\",\"shape\":" + shape_json(s.shape) +
              ",\"data_offsets\":[" + std::to_string(begin) + "," + std::to_string(data.size()) +
              "]}";
  }
  header += "}";
  // Pad like the reference writer does, so the data region starts 8-byte aligned.
  while (header.size() % 8) header += ' ';
  return st_bytes(header, data);
}

// One F32 tensor entry: {"dtype":"F32","shape":shape,"data_offsets":[b,e]}.
std::string f32_entry(const std::string& shape, uint64_t begin, uint64_t end) {
  return "{\"dtype\":\"F32\",\"shape\":" + shape + ",\"data_offsets\":[" + std::to_string(begin) +
         "," + std::to_string(end) + "]}";
}

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

// The message of the mobius::Error opening dir throws, or "" when it opens fine.
std::string open_error(const fs::path& dir) {
  try {
    auto reader = mobius::open_safetensors_checkpoint(dir);
    REQUIRE(reader != nullptr);
  } catch (const mobius::Error& e) {
    return e.what();
  }
  return "";
}

// Writes bytes as <dir>/model.safetensors and checks that opening fails with a message that
// names the file and contains phrase.
void check_single_rejected(const std::string& bytes, const std::string& phrase) {
  TempDir dir;
  write_file(dir.path() / "model.safetensors", bytes);
  const std::string msg = open_error(dir.path());
  INFO("message: ", msg);
  CHECK(msg.rfind("[safetensors] model.safetensors: ", 0) == 0);
  CHECK(contains(msg, phrase));
}

void check_header_rejected(const std::string& header, const std::string& data,
                           const std::string& phrase) {
  check_single_rejected(st_bytes(header, data), phrase);
}

// Checks that opening dir fails with a message starting with "[safetensors] <file>: " and
// containing phrase.
void check_dir_rejected(const fs::path& dir, const std::string& file, const std::string& phrase) {
  const std::string msg = open_error(dir);
  INFO("message: ", msg);
  CHECK(msg.rfind("[safetensors] " + file + ": ", 0) == 0);
  CHECK(contains(msg, phrase));
}

std::string index_json(const std::vector<std::pair<std::string, std::string>>& weight_map) {
  std::string s = "{\"metadata\":{\"total_size\":123},\"weight_map\":{";
  for (size_t i = 0; i < weight_map.size(); ++i) {
    s += (i ? "," : "") + ("\"" + weight_map[i].first + "\":\"" + weight_map[i].second + "\"");
  }
  return s + "}}";
}

std::string f32_bytes(std::vector<float> v) { return raw(v); }

// Two valid shards a.safetensors {x, y} and b.safetensors {z} in dir, without an index.
void write_two_shards(const fs::path& dir) {
  write_file(dir / "a.safetensors",
             st_file({{"x", "F32", {2}, f32_bytes({1, 2})}, {"y", "F32", {1}, f32_bytes({3})}}));
  write_file(dir / "b.safetensors", st_file({{"z", "F32", {3}, f32_bytes({4, 5, 6})}}));
}

std::vector<char> chars(const std::string& s) { return std::vector<char>(s.begin(), s.end()); }

std::vector<char> read_tensor(const mobius::CheckpointReader& reader, const std::string& name) {
  const mobius::TensorMeta* meta = reader.find(name);
  REQUIRE(meta != nullptr);
  std::vector<char> out(meta->nbytes);
  reader.read(*meta, out.data());
  return out;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Valid checkpoints

TEST_CASE("safetensors: dtype sizes and names") {
  CHECK(mobius::dtype_size(MOBIUS_DTYPE_FLOAT) == 4);
  CHECK(mobius::dtype_size(MOBIUS_DTYPE_BFLOAT16) == 2);
  CHECK(mobius::dtype_size(MOBIUS_DTYPE_BOOL) == 1);
  CHECK(mobius::dtype_size(MOBIUS_DTYPE_UINT64) == 8);
  CHECK(mobius::dtype_size(MOBIUS_DTYPE_UNDEFINED) == 0);
  CHECK(mobius::dtype_size(12345) == 0);
  CHECK(std::string(mobius::dtype_name(MOBIUS_DTYPE_FLOAT)) == "float32");
  CHECK(std::string(mobius::dtype_name(MOBIUS_DTYPE_BFLOAT16)) == "bfloat16");
  CHECK(std::string(mobius::dtype_name(MOBIUS_DTYPE_DOUBLE)) == "float64");
  CHECK(std::string(mobius::dtype_name(-1)) == "unknown");
}

TEST_CASE("safetensors: valid single file reads back exactly") {
  TempDir dir;
  const std::vector<float> w = {1.5f, -2.0f, 3.25f, 1e30f};
  const std::vector<uint16_t> h = {0x3C00, 0xC000, 0x7BFF};  // 1.0, -2.0, 65504 in float16
  const std::vector<int64_t> ids = {-1, int64_t{1} << 40};
  write_file(dir.path() / "model.safetensors", st_file({{"model.w", "F32", {2, 2}, raw(w)},
                                                        {"model.h", "F16", {3}, raw(h)},
                                                        {"empty", "F32", {0}, ""},
                                                        {"ids", "I64", {2}, raw(ids)}},
                                                       R"({"format":"pt"})"));
  auto reader = mobius::open_safetensors_checkpoint(dir.path());
  CHECK(reader->describe() == "safetensors (1 file)");

  const auto& all = reader->tensors();
  REQUIRE(all.size() == 4);
  CHECK(all[0].name == "empty");
  CHECK(all[1].name == "ids");
  CHECK(all[2].name == "model.h");
  CHECK(all[3].name == "model.w");

  const mobius::TensorMeta* mw = reader->find("model.w");
  REQUIRE(mw != nullptr);
  CHECK(mw->dtype == MOBIUS_DTYPE_FLOAT);
  CHECK(mw->shape == std::vector<int64_t>{2, 2});
  CHECK(mw->nbytes == 16);
  CHECK(mw->file == dir.path() / "model.safetensors");
  CHECK(reader->find("model.h")->dtype == MOBIUS_DTYPE_FLOAT16);
  CHECK(reader->find("ids")->dtype == MOBIUS_DTYPE_INT64);
  CHECK(reader->find("missing") == nullptr);
  CHECK(reader->find("") == nullptr);

  CHECK(read_tensor(*reader, "model.w") == chars(raw(w)));
  CHECK(read_tensor(*reader, "model.h") == chars(raw(h)));
  CHECK(read_tensor(*reader, "ids") == chars(raw(ids)));

  const mobius::TensorMeta* empty = reader->find("empty");
  REQUIRE(empty != nullptr);
  CHECK(empty->shape == std::vector<int64_t>{0});
  CHECK(empty->nbytes == 0);
  reader->read(*empty, nullptr);  // nothing to copy

  // A copy of the metadata works as well as a pointer into tensors().
  mobius::TensorMeta copy = *mw;
  std::vector<float> back(4);
  reader->read(copy, back.data());
  CHECK(back == w);
  // A request whose size disagrees would overrun the caller's buffer: refused.
  copy.nbytes = 8;
  CHECK_THROWS_WITH_AS(
      reader->read(copy, back.data()),
      "[safetensors] model.safetensors: tensor 'model.w' is 16 bytes, but the request is for 8",
      mobius::Error);
  CHECK_FALSE(reader->extent(copy).has_value());
  copy.name = "nope";
  CHECK_THROWS_WITH_AS(reader->read(copy, back.data()),
                       "[safetensors] safetensors (1 file): no tensor 'nope'", mobius::Error);
}

TEST_CASE("safetensors: all supported dtypes map to MOBIUS_DTYPE codes") {
  const std::vector<std::pair<std::string, int32_t>> dtypes = {
      {"F64", MOBIUS_DTYPE_DOUBLE},    {"F32", MOBIUS_DTYPE_FLOAT},  {"F16", MOBIUS_DTYPE_FLOAT16},
      {"BF16", MOBIUS_DTYPE_BFLOAT16}, {"I64", MOBIUS_DTYPE_INT64},  {"I32", MOBIUS_DTYPE_INT32},
      {"I16", MOBIUS_DTYPE_INT16},     {"I8", MOBIUS_DTYPE_INT8},    {"U64", MOBIUS_DTYPE_UINT64},
      {"U32", MOBIUS_DTYPE_UINT32},    {"U16", MOBIUS_DTYPE_UINT16}, {"U8", MOBIUS_DTYPE_UINT8},
      {"BOOL", MOBIUS_DTYPE_BOOL}};
  std::vector<Spec> specs;
  for (const auto& [name, code] : dtypes) {
    specs.push_back({"t_" + name, name, {3}, std::string(3 * mobius::dtype_size(code), 'x')});
  }
  TempDir dir;
  write_file(dir.path() / "model.safetensors", st_file(specs));
  auto reader = mobius::open_safetensors_checkpoint(dir.path());
  for (const auto& [name, code] : dtypes) {
    const mobius::TensorMeta* meta = reader->find("t_" + name);
    REQUIRE(meta != nullptr);
    CHECK(meta->dtype == code);
    CHECK(meta->nbytes == 3 * mobius::dtype_size(code));
  }
}

TEST_CASE("safetensors: unknown fields in an entry are ignored, empty checkpoint opens") {
  TempDir dir;
  write_file(dir.path() / "model.safetensors",
             st_bytes(R"({"a":{"x":[{"y":[1,{}]}],"dtype":"U8","shape":[2],"z":null,)"
                      R"("data_offsets":[0,2]}})",
                      "ab"));
  auto reader = mobius::open_safetensors_checkpoint(dir.path());
  REQUIRE(reader->tensors().size() == 1);
  CHECK(read_tensor(*reader, "a") == std::vector<char>{'a', 'b'});

  TempDir empty;
  write_file(empty.path() / "model.safetensors", st_bytes("{}", ""));
  CHECK(mobius::open_safetensors_checkpoint(empty.path())->tensors().empty());
}

TEST_CASE("safetensors: valid 2-shard index") {
  TempDir dir;
  write_two_shards(dir.path());
  write_file(dir.path() / "model.safetensors.index.json",
             index_json({{"x", "a.safetensors"}, {"y", "a.safetensors"}, {"z", "b.safetensors"}}));
  auto reader = mobius::open_safetensors_checkpoint(dir.path());
  CHECK(reader->describe() == "safetensors (2 shards)");
  const auto& all = reader->tensors();
  REQUIRE(all.size() == 3);
  CHECK(all[0].name == "x");
  CHECK(all[1].name == "y");
  CHECK(all[2].name == "z");
  CHECK(all[0].file == dir.path() / "a.safetensors");
  CHECK(all[2].file == dir.path() / "b.safetensors");
  const std::string x = f32_bytes({1, 2}), y = f32_bytes({3}), z = f32_bytes({4, 5, 6});
  CHECK(read_tensor(*reader, "x") == chars(x));
  CHECK(read_tensor(*reader, "y") == chars(y));
  CHECK(read_tensor(*reader, "z") == chars(z));
}

TEST_CASE("safetensors: model.safetensors wins over the index") {
  TempDir dir;
  write_file(dir.path() / "model.safetensors", st_file({{"only", "U8", {1}, "q"}}));
  write_file(dir.path() / "model.safetensors.index.json", "not even json");
  auto reader = mobius::open_safetensors_checkpoint(dir.path());
  CHECK(reader->describe() == "safetensors (1 file)");
  CHECK(reader->find("only") != nullptr);
}

TEST_CASE("safetensors: a shard symlink that stays inside the folder is accepted") {
  TempDir dir;
  fs::create_directory(dir.path() / "blobs");
  write_file(dir.path() / "blobs" / "1234", st_file({{"x", "U8", {2}, "hi"}}));
  fs::create_symlink(dir.path() / "blobs" / "1234", dir.path() / "model-1.safetensors");
  write_file(dir.path() / "model.safetensors.index.json",
             index_json({{"x", "model-1.safetensors"}}));
  auto reader = mobius::open_safetensors_checkpoint(dir.path());
  CHECK(reader->describe() == "safetensors (1 shard)");
  CHECK(read_tensor(*reader, "x") == std::vector<char>{'h', 'i'});
}

TEST_CASE("safetensors: concurrent reads from 4 threads return the right bytes") {
  TempDir dir;
  constexpr int kTensors = 16;
  constexpr size_t kFloats = 4096;
  std::vector<Spec> specs;
  std::vector<std::string> expected;
  for (int t = 0; t < kTensors; ++t) {
    std::vector<float> v(kFloats);
    for (size_t i = 0; i < kFloats; ++i) v[i] = static_cast<float>(t * 100000 + i);
    expected.push_back(raw(v));
    specs.push_back({"t" + std::to_string(100 + t), "F32", {64, 64}, expected.back()});
  }
  write_file(dir.path() / "model.safetensors", st_file(specs));
  auto reader = mobius::open_safetensors_checkpoint(dir.path());

  std::atomic<int> mismatches{0};
  std::atomic<int> errors{0};
  std::vector<std::thread> threads;
  for (int th = 0; th < 4; ++th) {
    threads.emplace_back([&, th] {
      std::vector<char> buf(kFloats * sizeof(float));
      for (int round = 0; round < 50; ++round) {
        for (int k = 0; k < kTensors; ++k) {
          const int t = (k * 7 + th * 5 + round) % kTensors;
          try {
            const mobius::TensorMeta* meta = reader->find("t" + std::to_string(100 + t));
            std::fill(buf.begin(), buf.end(), '\0');
            reader->read(*meta, buf.data());
            if (std::memcmp(buf.data(), expected[t].data(), buf.size()) != 0) ++mismatches;
          } catch (...) {
            ++errors;
          }
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  CHECK(mismatches == 0);
  CHECK(errors == 0);
}

TEST_CASE("safetensors: a file truncated after opening fails the read, not the process") {
  TempDir dir;
  const fs::path path = dir.path() / "model.safetensors";
  write_file(path, st_file({{"a", "U8", {4}, "abcd"}, {"b", "U8", {4}, "efgh"}}));
  auto reader = mobius::open_safetensors_checkpoint(dir.path());
  fs::resize_file(path, fs::file_size(path) - 2);
  std::vector<char> buf(4);
  CHECK(read_tensor(*reader, "a") == std::vector<char>{'a', 'b', 'c', 'd'});
  try {
    reader->read(*reader->find("b"), buf.data());
    FAIL("read of a truncated tensor succeeded");
  } catch (const mobius::Error& e) {
    const std::string msg = e.what();
    INFO("message: ", msg);
    CHECK(msg ==
          "[safetensors] model.safetensors: unexpected end of file reading tensor 'b' (file "
          "truncated?)");
  }
}

// ---------------------------------------------------------------------------------------------
// Broken and hostile single files

TEST_CASE("safetensors: empty file") {
  check_single_rejected("", "file is 0 bytes, too short for the 8-byte header length");
}

TEST_CASE("safetensors: 7-byte file") {
  check_single_rejected("1234567", "file is 7 bytes, too short for the 8-byte header length");
}

TEST_CASE("safetensors: header length 2^63") {
  check_single_rejected(le64(uint64_t{1} << 63) + "{}",
                        "header length 9223372036854775808 exceeds the 100 MiB limit");
}

TEST_CASE("safetensors: header length beyond the file") {
  check_single_rejected(le64(100) + "{}", "header length 100 exceeds the file size (10 bytes)");
}

TEST_CASE("safetensors: header not JSON") {
  check_header_rejected("{\"a\": nope}", "", "header is not valid JSON");
}

TEST_CASE("safetensors: header with invalid UTF-8") {
  check_header_rejected("{\"\xff\":{}}", "", "header is not valid JSON");
}

TEST_CASE("safetensors: header followed by garbage inside the header length") {
  check_header_rejected("{} {}", "", "header is not valid JSON");
}

TEST_CASE("safetensors: header a JSON array") {
  check_header_rejected("[1,2,3]", "", "header is not a JSON object");
}

TEST_CASE("safetensors: tensor entry not an object") {
  check_header_rejected(R"({"w":[1,2]})", "", "entry for tensor 'w' is not an object");
}

TEST_CASE("safetensors: missing dtype") {
  check_header_rejected(R"({"w":{"shape":[1],"data_offsets":[0,4]}})", "abcd",
                        "tensor 'w' is missing 'dtype'");
}

TEST_CASE("safetensors: missing data_offsets") {
  check_header_rejected(R"({"w":{"dtype":"F32","shape":[1]}})", "abcd",
                        "tensor 'w' is missing 'data_offsets'");
}

TEST_CASE("safetensors: dtype not a string") {
  check_header_rejected(R"({"w":{"dtype":1,"shape":[1],"data_offsets":[0,4]}})", "abcd",
                        "tensor 'w' dtype is not a string");
}

TEST_CASE("safetensors: unknown dtype") {
  check_header_rejected(R"({"w":{"dtype":"F8_E5M2","shape":[4],"data_offsets":[0,4]}})", "abcd",
                        "tensor 'w' has unsupported dtype 'F8_E5M2'");
}

TEST_CASE("safetensors: shape with a negative dimension") {
  check_header_rejected(R"({"w":{"dtype":"F32","shape":[-1,1],"data_offsets":[0,4]}})", "abcd",
                        "tensor 'w' has negative dimension -1");
}

TEST_CASE("safetensors: shape with a non-integer dimension") {
  check_header_rejected(R"({"w":{"dtype":"F32","shape":[1.0],"data_offsets":[0,4]}})", "abcd",
                        "tensor 'w' shape is not an array of integers");
}

TEST_CASE("safetensors: shape with an overflowing product") {
  check_header_rejected(
      R"({"w":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,4]}})", "abcd",
      "tensor 'w' shape [4294967296, 4294967296] has too many elements");
}

TEST_CASE("safetensors: shape whose byte count overflows") {
  check_header_rejected(
      R"({"w":{"dtype":"F64","shape":[4611686018427387904],"data_offsets":[0,8]}})",
      std::string(8, 'x'), "tensor 'w' shape [4611686018427387904] has too many bytes");
}

TEST_CASE("safetensors: zero-size tensor hiding overflowing dimensions") {
  check_header_rejected(
      R"({"w":{"dtype":"F32","shape":[0,4294967296,4294967296],"data_offsets":[0,0]}})", "",
      "tensor 'w' shape [0, 4294967296, 4294967296] has too many elements");
}

TEST_CASE("safetensors: dimension beyond int64") {
  check_header_rejected(
      R"({"w":{"dtype":"U8","shape":[18446744073709551615],"data_offsets":[0,1]}})", "a",
      "tensor 'w' has dimension 18446744073709551615 that is too large");
}

TEST_CASE("safetensors: absurd rank") {
  std::string shape = "[";
  for (int i = 0; i < 100; ++i) shape += i ? ",1" : "1";
  check_header_rejected("{\"w\":" + f32_entry(shape + "]", 0, 4) + "}", "abcd",
                        "tensor 'w' has more than 64 dimensions");
}

TEST_CASE("safetensors: data_offsets with the wrong length") {
  check_header_rejected(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4,8]}})", "abcd",
                        "tensor 'w' data_offsets is not an array of 2 integers");
  check_header_rejected(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[4]}})", "abcd",
                        "tensor 'w' data_offsets is not an array of 2 integers");
}

TEST_CASE("safetensors: negative data offset") {
  check_header_rejected(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[-4,0]}})", "abcd",
                        "tensor 'w' has negative data offset -4");
}

TEST_CASE("safetensors: offsets begin > end") {
  check_header_rejected("{\"lm_head.weight\":" + f32_entry("[2]", 10, 8) + "}",
                        std::string(10, 'x'),
                        "tensor 'lm_head.weight' offsets [10, 8) out of order");
}

TEST_CASE("safetensors: end beyond the data region") {
  check_header_rejected("{\"w\":" + f32_entry("[2]", 0, 8) + "}", "abcd",
                        "tensor 'w' offsets [0, 8) extend beyond the data region (4 bytes)");
}

TEST_CASE("safetensors: huge offsets") {
  check_header_rejected(R"({"w":{"dtype":"U8","shape":[1],)"
                        R"("data_offsets":[18446744073709551614,18446744073709551615]}})",
                        "a",
                        "tensor 'w' offsets [18446744073709551614, 18446744073709551615) extend "
                        "beyond the data region (1 bytes)");
}

TEST_CASE("safetensors: one byte of overlap, one byte of gap, one trailing byte") {
  // The boundaries themselves: a check that is off by one lets each of these through.
  check_header_rejected("{\"a\":" + f32_entry("[1]", 0, 4) + ",\"b\":" + f32_entry("[1]", 3, 7) + "}",
                        std::string(7, 'x'), "tensors 'a' [0, 4) and 'b' [3, 7) overlap");
  check_header_rejected("{\"a\":" + f32_entry("[1]", 0, 4) + ",\"b\":" + f32_entry("[1]", 5, 9) + "}",
                        std::string(9, 'x'), "gap of bytes [4, 5) in the data region before tensor 'b'");
  check_header_rejected("{\"a\":" + f32_entry("[1]", 0, 4) + "}", std::string(5, 'x'),
                        "1 trailing bytes after the last tensor");
  check_header_rejected("{\"w\":" + f32_entry("[2]", 0, 8) + "}", std::string(7, 'x'),
                        "tensor 'w' offsets [0, 8) extend beyond the data region (7 bytes)");
}

TEST_CASE("safetensors: overlapping tensors") {
  check_header_rejected(
      "{\"a\":" + f32_entry("[2]", 0, 8) + ",\"b\":" + f32_entry("[2]", 4, 12) + "}",
      std::string(12, 'x'), "tensors 'a' [0, 8) and 'b' [4, 12) overlap");
}

TEST_CASE("safetensors: two tensors aliasing the same bytes") {
  check_header_rejected(
      "{\"a\":" + f32_entry("[1]", 0, 4) + ",\"b\":" + f32_entry("[1]", 0, 4) + "}", "abcd",
      "tensors 'a' [0, 4) and 'b' [0, 4) overlap");
}

TEST_CASE("safetensors: gap between tensors") {
  check_header_rejected(
      "{\"a\":" + f32_entry("[1]", 0, 4) + ",\"b\":" + f32_entry("[1]", 8, 12) + "}",
      std::string(12, 'x'), "gap of bytes [4, 8) in the data region before tensor 'b'");
}

TEST_CASE("safetensors: gap before the first tensor") {
  check_header_rejected("{\"a\":" + f32_entry("[1]", 4, 8) + "}", std::string(8, 'x'),
                        "gap of bytes [0, 4) in the data region before tensor 'a'");
}

TEST_CASE("safetensors: trailing bytes") {
  check_header_rejected("{\"a\":" + f32_entry("[1]", 0, 4) + "}", std::string(7, 'x'),
                        "3 trailing bytes after the last tensor");
}

TEST_CASE("safetensors: data but no tensors") {
  check_header_rejected("{}", "x", "1 trailing bytes after the last tensor");
}

TEST_CASE("safetensors: byte length != dtype x shape") {
  check_header_rejected("{\"w\":" + f32_entry("[3]", 0, 8) + "}", std::string(8, 'x'),
                        "tensor 'w' byte length 8 does not match F32 x [3] = 12 bytes");
}

TEST_CASE("safetensors: duplicate tensor name in header") {
  check_header_rejected(
      "{\"w\":" + f32_entry("[1]", 0, 4) + ",\"w\":" + f32_entry("[1]", 4, 8) + "}",
      std::string(8, 'x'), "duplicate tensor name 'w'");
}

TEST_CASE("safetensors: duplicate field in an entry") {
  check_header_rejected(R"({"w":{"dtype":"F32","dtype":"U8","shape":[4],"data_offsets":[0,4]}})",
                        "abcd", "tensor 'w' has duplicate field 'dtype'");
}

TEST_CASE("safetensors: __metadata__ with a non-string value") {
  check_header_rejected(R"({"__metadata__":{"format":"pt","n":1}})", "",
                        "__metadata__ value for key 'n' is not a string");
}

TEST_CASE("safetensors: __metadata__ not an object") {
  check_header_rejected(R"({"__metadata__":"pt"})", "", "__metadata__ is not an object");
}

TEST_CASE("safetensors: __metadata__ twice") {
  check_header_rejected(R"({"__metadata__":{},"__metadata__":{}})", "", "duplicate __metadata__");
}

TEST_CASE("safetensors: deeply nested ignored field does not recurse") {
  // A skipped value nested 100000 deep must neither overflow the stack nor be accepted as valid.
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  check_header_rejected(
      "{\"w\":{\"x\":" + deep + ",\"dtype\":\"Q\",\"shape\":[],\"data_offsets\":[0,0]}}", "",
      "tensor 'w' has unsupported dtype 'Q'");
}

TEST_CASE("safetensors: hostile tensor names are escaped and clipped in messages") {
  TempDir dir;
  const std::string name = "evil\\u001b[31m" + std::string(1000, 'n');
  write_file(dir.path() / "model.safetensors",
             st_bytes("{\"" + name + "\":" + f32_entry("[1]", 0, 8) + "}", std::string(8, 'x')));
  const std::string msg = open_error(dir.path());
  INFO("message: ", msg);
  CHECK(msg.rfind("[safetensors] model.safetensors: tensor 'evil\\x1b[31mnnn", 0) == 0);
  CHECK(contains(msg, "nnn...' byte length 8 does not match F32 x [1] = 4 bytes"));
  CHECK(msg.find('\x1b') == std::string::npos);
  CHECK(msg.size() < 400);
}

TEST_CASE("safetensors: model.safetensors that is a FIFO is refused without blocking") {
  TempDir dir;
  REQUIRE(::mkfifo((dir.path() / "model.safetensors").c_str(), 0600) == 0);
  check_dir_rejected(dir.path(), "model.safetensors", "not a regular file");
}

TEST_CASE("safetensors: model.safetensors that leads to a device") {
  TempDir dir;
  fs::create_symlink("/dev/zero", dir.path() / "model.safetensors");
  check_dir_rejected(dir.path(), "model.safetensors", "not a regular file");
}

TEST_CASE("safetensors: a shard that is a FIFO is refused without blocking") {
  TempDir dir;
  REQUIRE(::mkfifo((dir.path() / "a.safetensors").c_str(), 0600) == 0);
  write_file(dir.path() / "model.safetensors.index.json", index_json({{"x", "a.safetensors"}}));
  check_dir_rejected(dir.path(), "a.safetensors", "not a regular file");
}

TEST_CASE("safetensors: model.safetensors that is a directory") {
  TempDir dir;
  fs::create_directory(dir.path() / "model.safetensors");
  check_dir_rejected(dir.path(), "model.safetensors", "not a regular file");
}

// ---------------------------------------------------------------------------------------------
// Broken and hostile sharded checkpoints

TEST_CASE("safetensors: no checkpoint at all") {
  TempDir dir;
  const std::string msg = open_error(dir.path());
  INFO("message: ", msg);
  CHECK(msg == "[checkpoint] " + dir.path().string() +
                   ": no model.safetensors or model.safetensors.index.json");
  CHECK(open_error(dir.path() / "does-not-exist") ==
        "[checkpoint] " + (dir.path() / "does-not-exist").string() +
            ": no model.safetensors or model.safetensors.index.json");
}

TEST_CASE("safetensors: index not JSON") {
  TempDir dir;
  write_two_shards(dir.path());
  write_file(dir.path() / "model.safetensors.index.json", "{\"weight_map\": {");
  check_dir_rejected(dir.path(), "model.safetensors.index.json", "index is not valid JSON");
}

TEST_CASE("safetensors: index not an object") {
  TempDir dir;
  write_file(dir.path() / "model.safetensors.index.json", "[]");
  check_dir_rejected(dir.path(), "model.safetensors.index.json", "index is not a JSON object");
}

TEST_CASE("safetensors: index weight_map missing") {
  TempDir dir;
  write_two_shards(dir.path());
  write_file(dir.path() / "model.safetensors.index.json", R"({"metadata":{"total_size":1}})");
  check_dir_rejected(dir.path(), "model.safetensors.index.json", "no weight_map");
}

TEST_CASE("safetensors: index weight_map value not a string") {
  TempDir dir;
  write_file(dir.path() / "model.safetensors.index.json", R"({"weight_map":{"x":1}})");
  check_dir_rejected(dir.path(), "model.safetensors.index.json",
                     "weight_map entry for tensor 'x' is not a string");
}

TEST_CASE("safetensors: index lists a tensor twice") {
  TempDir dir;
  write_two_shards(dir.path());
  write_file(dir.path() / "model.safetensors.index.json",
             R"({"weight_map":{"x":"a.safetensors","x":"b.safetensors"}})");
  check_dir_rejected(dir.path(), "model.safetensors.index.json",
                     "tensor 'x' is listed twice in weight_map");
}

TEST_CASE("safetensors: index shard with '..'") {
  TempDir dir;
  fs::create_directory(dir.path() / "sub");
  write_two_shards(dir.path());
  write_file(dir.path() / "sub" / "model.safetensors.index.json",
             index_json({{"x", "../a.safetensors"}}));
  check_dir_rejected(dir.path() / "sub", "model.safetensors.index.json",
                     "shard '../a.safetensors' has a '..' component");
  write_file(dir.path() / "sub" / "model.safetensors.index.json",
             index_json({{"x", "x/..\\\\..\\\\a.safetensors"}}));
  check_dir_rejected(dir.path() / "sub", "model.safetensors.index.json",
                     "shard 'x/..\\..\\a.safetensors' has a '..' component");
}

TEST_CASE("safetensors: absolute shard path") {
  TempDir dir;
  write_two_shards(dir.path());
  const std::string abs = (dir.path() / "a.safetensors").string();
  write_file(dir.path() / "model.safetensors.index.json", index_json({{"x", abs}, {"y", abs}}));
  check_dir_rejected(dir.path(), "model.safetensors.index.json",
                     "shard '" + abs + "' is an absolute path");
}

TEST_CASE("safetensors: empty shard name and NUL in a shard name") {
  TempDir dir;
  write_file(dir.path() / "model.safetensors.index.json", index_json({{"x", ""}}));
  check_dir_rejected(dir.path(), "model.safetensors.index.json", "empty shard name");
  write_file(dir.path() / "model.safetensors.index.json",
             index_json({{"x", "a.safetensors\\u0000.txt"}}));
  check_dir_rejected(dir.path(), "model.safetensors.index.json",
                     "shard 'a.safetensors\\x00.txt' contains NUL");
}

TEST_CASE("safetensors: symlink shard pointing outside the folder") {
  TempDir dir, elsewhere;
  write_file(elsewhere.path() / "secret.safetensors", st_file({{"x", "U8", {2}, "hi"}}));
  fs::create_symlink(elsewhere.path() / "secret.safetensors", dir.path() / "a.safetensors");
  write_file(dir.path() / "model.safetensors.index.json", index_json({{"x", "a.safetensors"}}));
  check_dir_rejected(dir.path(), "model.safetensors.index.json",
                     "shard 'a.safetensors' resolves outside the checkpoint folder");
}

TEST_CASE("safetensors: symlinked subfolder pointing outside the folder") {
  TempDir dir, elsewhere;
  write_file(elsewhere.path() / "a.safetensors", st_file({{"x", "U8", {2}, "hi"}}));
  fs::create_directory_symlink(elsewhere.path(), dir.path() / "sub");
  write_file(dir.path() / "model.safetensors.index.json", index_json({{"x", "sub/a.safetensors"}}));
  check_dir_rejected(dir.path(), "model.safetensors.index.json",
                     "shard 'sub/a.safetensors' resolves outside the checkpoint folder");
}

TEST_CASE("safetensors: shard missing") {
  TempDir dir;
  write_two_shards(dir.path());
  write_file(dir.path() / "model.safetensors.index.json",
             index_json({{"x", "a.safetensors"}, {"y", "a.safetensors"}, {"z", "c.safetensors"}}));
  check_dir_rejected(dir.path(), "model.safetensors.index.json",
                     "shard 'c.safetensors' does not exist");
}

TEST_CASE("safetensors: broken shard is reported under its own name") {
  TempDir dir;
  write_two_shards(dir.path());
  write_file(dir.path() / "b.safetensors", "short");
  write_file(dir.path() / "model.safetensors.index.json",
             index_json({{"x", "a.safetensors"}, {"y", "a.safetensors"}, {"z", "b.safetensors"}}));
  check_dir_rejected(dir.path(), "b.safetensors",
                     "file is 5 bytes, too short for the 8-byte header length");
}

TEST_CASE("safetensors: tensor in index but not in shard") {
  TempDir dir;
  write_two_shards(dir.path());
  write_file(dir.path() / "model.safetensors.index.json", index_json({{"x", "a.safetensors"},
                                                                      {"y", "a.safetensors"},
                                                                      {"z", "b.safetensors"},
                                                                      {"ghost", "b.safetensors"}}));
  check_dir_rejected(
      dir.path(), "model.safetensors.index.json",
      "tensor 'ghost' is mapped to shard 'b.safetensors', which does not contain it");
}

TEST_CASE("safetensors: tensor in shard but not in index") {
  TempDir dir;
  write_two_shards(dir.path());
  write_file(dir.path() / "model.safetensors.index.json",
             index_json({{"x", "a.safetensors"}, {"z", "b.safetensors"}}));
  check_dir_rejected(dir.path(), "a.safetensors",
                     "tensor 'y' is not listed in model.safetensors.index.json");
}

TEST_CASE("safetensors: tensor listed under the wrong shard") {
  TempDir dir;
  write_two_shards(dir.path());
  write_file(dir.path() / "model.safetensors.index.json",
             index_json({{"x", "a.safetensors"}, {"y", "b.safetensors"}, {"z", "b.safetensors"}}));
  check_dir_rejected(dir.path(), "a.safetensors",
                     "tensor 'y' is listed in model.safetensors.index.json under shard "
                     "'b.safetensors'");
}

TEST_CASE("safetensors: tensor in two shards") {
  TempDir dir;
  write_two_shards(dir.path());
  write_file(dir.path() / "b.safetensors", st_file({{"z", "F32", {3}, f32_bytes({4, 5, 6})},
                                                    {"x", "F32", {2}, f32_bytes({7, 8})}}));
  write_file(dir.path() / "model.safetensors.index.json",
             index_json({{"x", "a.safetensors"}, {"y", "a.safetensors"}, {"z", "b.safetensors"}}));
  check_dir_rejected(dir.path(), "b.safetensors",
                     "tensor 'x' is in two shards, 'a.safetensors' and 'b.safetensors'");
}

TEST_CASE("safetensors: empty weight_map") {
  TempDir dir;
  write_file(dir.path() / "model.safetensors.index.json", R"({"weight_map":{}})");
  check_dir_rejected(dir.path(), "model.safetensors.index.json", "weight_map lists no tensors");
}

TEST_CASE("safetensors: index keys twice and metadata of the wrong type") {
  TempDir dir;
  write_file(dir.path() / "model.safetensors.index.json",
             R"({"weight_map":{"x":"a.safetensors"},"weight_map":{}})");
  check_dir_rejected(dir.path(), "model.safetensors.index.json", "duplicate key 'weight_map'");
  write_file(dir.path() / "model.safetensors.index.json",
             R"({"metadata":{},"metadata":{},"weight_map":{"x":"a.safetensors"}})");
  check_dir_rejected(dir.path(), "model.safetensors.index.json", "duplicate key 'metadata'");
  write_file(dir.path() / "model.safetensors.index.json",
             R"({"metadata":3,"weight_map":{"x":"a.safetensors"}})");
  check_dir_rejected(dir.path(), "model.safetensors.index.json", "metadata is not an object");
}

TEST_CASE("safetensors: a shard name that is the folder itself") {
  TempDir dir;
  write_file(dir.path() / "model.safetensors.index.json", index_json({{"x", "."}}));
  check_dir_rejected(dir.path(), "model.safetensors.index.json",
                     "shard '.' resolves outside the checkpoint folder");
}

TEST_CASE("safetensors: a shard of the numbered series that the index does not name") {
  // Both shards hold the same tensor; the index maps it to shard 1, so shard 2 is never opened
  // and would be ignored without the check. Which copy is meant is anybody's guess.
  TempDir dir;
  const std::string x = st_file({{"x", "F32", {2}, f32_bytes({1, 2})}});
  write_file(dir.path() / "model-00001-of-00002.safetensors", x);
  write_file(dir.path() / "model-00002-of-00002.safetensors",
             st_file({{"x", "F32", {2}, f32_bytes({3, 4})}}));
  write_file(dir.path() / "model.safetensors.index.json",
             index_json({{"x", "model-00001-of-00002.safetensors"}}));
  const std::string msg = open_error(dir.path());
  CHECK(msg ==
        "[safetensors] model-00002-of-00002.safetensors: shard of the numbered series is not "
        "named by model.safetensors.index.json");
  // Named by the index, the same shard is an ordinary (if odd) part of the checkpoint.
  write_file(dir.path() / "model-00002-of-00002.safetensors",
             st_file({{"y", "F32", {1}, f32_bytes({5})}}));
  write_file(dir.path() / "model.safetensors.index.json",
             index_json({{"x", "model-00001-of-00002.safetensors"},
                         {"y", "model-00002-of-00002.safetensors"}}));
  CHECK(mobius::open_safetensors_checkpoint(dir.path())->describe() == "safetensors (2 shards)");
  // Files outside the series (other names, another total) are not the index's business.
  write_file(dir.path() / "model-00003-of-00003.safetensors", x);
  write_file(dir.path() / "other-00002-of-00002.safetensors", x);
  write_file(dir.path() / "model-00002-of-00002.safetensors.bak", x);
  CHECK(open_error(dir.path()).empty());
}
