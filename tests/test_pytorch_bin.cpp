// test_pytorch_bin.cpp - tests of the pytorch_model.bin reader: valid archives and hostile inputs.
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <doctest/doctest.h>

#include "bin_util.hpp"
#include "checkpoint/checkpoint.hpp"
#include "mobius/plugin.h"
#include "checkpoint/pytorch_bin.hpp"
#include "test_util.hpp"

namespace fs = std::filesystem;
using mobius::test::Pickler;
using mobius::test::PklTensor;
using mobius::test::raw_bytes;
using mobius::test::TempDir;
using mobius::test::torch_zip;
using mobius::test::ZipItem;
using mobius::test::ZipLayout;

namespace {

constexpr const char* kBin = "pytorch_model.bin";

// The bytes of a string literal, embedded NULs included.
template <size_t N>
std::string B(const char (&s)[N]) {
  return std::string(s, N - 1);
}

void write_file(const fs::path& path, const std::string& bytes) {
  mobius::test::write_text(path, bytes);
  REQUIRE(fs::file_size(path) == bytes.size());
}

std::vector<uint8_t> read_tensor(const mobius::CheckpointReader& r, const std::string& name) {
  const mobius::TensorMeta* m = r.find(name);
  REQUIRE_MESSAGE(m != nullptr, name);
  std::vector<uint8_t> out(m->nbytes);
  r.read(*m, out.data());
  return out;
}

template <typename T>
std::vector<T> read_as(const mobius::CheckpointReader& r, const std::string& name) {
  const std::vector<uint8_t> bytes = read_tensor(r, name);
  std::vector<T> out(bytes.size() / sizeof(T));
  if (!out.empty()) std::memcpy(out.data(), bytes.data(), bytes.size());
  return out;
}

// The message of the mobius::Error that f throws, or "" (and a failed check) when it does not.
std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const mobius::Error& e) {
    return e.what();
  } catch (const std::exception& e) {
    FAIL("not a mobius::Error: " << e.what());
    return "";
  }
  FAIL("no error thrown");
  return "";
}

// Opens an archive both from a real folder and from memory; both must fail with the same
// message, which is returned.
std::string archive_error(const std::string& bytes) {
  TempDir dir;
  write_file(dir / kBin, bytes);
  const std::string from_file = error_of([&] { mobius::open_pytorch_checkpoint(dir.path()); });
  const std::string from_memory =
      error_of([&] { mobius::open_pytorch_archive_bytes(bytes, kBin); });
  CHECK(from_file == from_memory);
  return from_file;
}

// Asserts that the message names the file and contains every fragment of the reason.
void check_message(const std::string& msg, std::initializer_list<const char*> parts,
                   const std::string& file = kBin) {
  INFO("message: " << msg);
  CHECK(msg.rfind("[pytorch] " + file + ": ", 0) == 0);
  for (const char* p : parts) CHECK(msg.find(p) != std::string::npos);
}

// A pickle wrapped in an otherwise valid archive with one 4-element float storage "0".
std::string pickle_error(const std::string& pickle,
                         std::map<std::string, std::string> storages = {}) {
  if (storages.empty()) storages["0"] = std::string(16, '\0');
  return archive_error(torch_zip(pickle, storages));
}

void expect_pickle_rejected(const std::string& pickle, std::initializer_list<const char*> parts) {
  const std::string msg = pickle_error(pickle);
  check_message(msg, parts);
  CHECK(msg.find("data.pkl: ") != std::string::npos);
}

// One float tensor "w" of 4 elements; the base for archive-level corruptions.
std::string simple_archive(ZipLayout* layout = nullptr) {
  const std::string pkl =
      mobius::test::state_dict_pickle({{"w", "FloatStorage", "0", 4, 0, {4}, {1}}});
  return torch_zip(pkl, {{"0", raw_bytes(std::vector<float>{1, 2, 3, 4})}}, "archive", layout);
}

// The project's golden cases (tests/golden, see its README).
fs::path golden_dir() {
  return fs::path(mobius::test::env_or_empty("MOBIUS_SOURCE_ROOT")) / "tests" / "golden";
}

// Element index of a strided view, the reference for gathers.
template <typename T>
std::vector<T> reference_gather(const std::vector<T>& storage, int64_t offset,
                                const std::vector<int64_t>& size,
                                const std::vector<int64_t>& stride) {
  int64_t count = 1;
  for (int64_t d : size) count *= d;
  std::vector<T> out;
  std::vector<int64_t> idx(size.size(), 0);
  for (int64_t n = 0; n < count; ++n) {
    int64_t at = offset;
    for (size_t k = 0; k < size.size(); ++k) at += idx[k] * stride[k];
    out.push_back(storage[static_cast<size_t>(at)]);
    for (size_t k = size.size(); k-- > 0;) {
      if (++idx[k] < size[k]) break;
      idx[k] = 0;
    }
  }
  return out;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Valid archives

TEST_CASE("pytorch: protocol-2 state dict with f32/f16/bf16/i64 tensors reads back exactly") {
  const std::vector<float> f32 = {1.5f, -2.25f, 3.0e-8f, 65504.0f, -0.0f, 7.0f};
  const std::vector<uint16_t> f16 = {0x3C00, 0xC000, 0x7BFF, 0x0001};
  const std::vector<uint16_t> bf16 = {0x3F80, 0xBF80, 0x7F7F};
  const std::vector<int64_t> i64 = {0, -1, INT64_MAX, INT64_MIN, 42};
  const std::string pkl = mobius::test::state_dict_pickle({
      {"a.weight", "FloatStorage", "0", 6, 0, {2, 3}, {3, 1}},
      {"b.half", "HalfStorage", "1", 4, 0, {4}, {1}},
      {"c.bf16", "BFloat16Storage", "2", 3, 0, {3, 1}, {1, 1}},
      {"d.ids", "LongStorage", "3", 5, 0, {5}, {1}},
  });
  const std::string zip = torch_zip(
      pkl,
      {{"0", raw_bytes(f32)}, {"1", raw_bytes(f16)}, {"2", raw_bytes(bf16)}, {"3", raw_bytes(i64)}},
      "pytorch_model");
  TempDir dir;
  write_file(dir / kBin, zip);
  auto r = mobius::open_pytorch_checkpoint(dir.path());
  REQUIRE(r->tensors().size() == 4);
  CHECK(r->describe() == "pytorch (1 file)");
  CHECK(r->tensors()[0].name == "a.weight");
  CHECK(r->tensors()[3].name == "d.ids");
  const mobius::TensorMeta* a = r->find("a.weight");
  CHECK(a->dtype == MOBIUS_DTYPE_FLOAT);
  CHECK(a->shape == std::vector<int64_t>{2, 3});
  CHECK(a->nbytes == 24);
  CHECK(a->file == dir / kBin);
  CHECK(r->find("b.half")->dtype == MOBIUS_DTYPE_FLOAT16);
  CHECK(r->find("c.bf16")->dtype == MOBIUS_DTYPE_BFLOAT16);
  CHECK(r->find("c.bf16")->shape == std::vector<int64_t>{3, 1});
  CHECK(r->find("d.ids")->dtype == MOBIUS_DTYPE_INT64);
  CHECK(r->find("missing") == nullptr);
  CHECK(read_as<float>(*r, "a.weight") == f32);
  CHECK(read_as<uint16_t>(*r, "b.half") == f16);
  CHECK(read_as<uint16_t>(*r, "c.bf16") == bf16);
  CHECK(read_as<int64_t>(*r, "d.ids") == i64);
  // Contiguous tensors of a file can be streamed straight from it.
  const auto ext = r->extent(*r->find("d.ids"));
  REQUIRE(ext.has_value());
  std::vector<int64_t> direct(i64.size());
  REQUIRE(::pread(ext->fd, direct.data(), direct.size() * 8, static_cast<off_t>(ext->offset)) ==
          static_cast<ssize_t>(direct.size() * 8));
  CHECK(direct == i64);
  // The same bytes from memory.
  auto m = mobius::open_pytorch_archive_bytes(zip, kBin);
  CHECK(read_as<int64_t>(*m, "d.ids") == i64);
}

TEST_CASE("pytorch: all storage types map to dtypes") {
  const std::pair<const char*, int32_t> types[] = {
      {"DoubleStorage", MOBIUS_DTYPE_DOUBLE}, {"FloatStorage", MOBIUS_DTYPE_FLOAT},
      {"HalfStorage", MOBIUS_DTYPE_FLOAT16},  {"BFloat16Storage", MOBIUS_DTYPE_BFLOAT16},
      {"LongStorage", MOBIUS_DTYPE_INT64},    {"IntStorage", MOBIUS_DTYPE_INT32},
      {"ShortStorage", MOBIUS_DTYPE_INT16},   {"CharStorage", MOBIUS_DTYPE_INT8},
      {"ByteStorage", MOBIUS_DTYPE_UINT8},    {"BoolStorage", MOBIUS_DTYPE_BOOL}};
  std::vector<PklTensor> tensors;
  std::map<std::string, std::string> storages;
  int k = 0;
  for (const auto& [type, dtype] : types) {
    const std::string key = std::to_string(k++);
    tensors.push_back({std::string("t") + key, type, key, 2, 0, {2}, {1}});
    storages[key] = std::string(2 * mobius::dtype_size(dtype), '\x01');
  }
  auto r = mobius::open_pytorch_archive_bytes(
      torch_zip(mobius::test::state_dict_pickle(tensors), storages), kBin);
  k = 0;
  for (const auto& [type, dtype] : types) {
    const mobius::TensorMeta* m = r->find("t" + std::to_string(k++));
    REQUIRE(m);
    CHECK(m->dtype == dtype);
    CHECK(m->nbytes == 2 * mobius::dtype_size(dtype));
  }
}

TEST_CASE("pytorch: transposed and permuted tensors are read in row-major order") {
  // torch.arange(6).reshape(2, 3).t(): size (3, 2), stride (1, 3).
  const std::vector<uint16_t> storage = {0, 1, 2, 3, 4, 5};
  std::vector<float> s3(2 * 3 * 4);
  for (size_t i = 0; i < s3.size(); ++i) s3[i] = static_cast<float>(i);
  std::vector<int32_t> s4(40);
  for (size_t i = 0; i < s4.size(); ++i) s4[i] = static_cast<int32_t>(i * 10);
  const std::string pkl = mobius::test::state_dict_pickle({
      {"t", "HalfStorage", "0", 6, 0, {3, 2}, {1, 3}},
      // x.permute(2, 0, 1) of a contiguous (2, 3, 4) tensor.
      {"p", "FloatStorage", "1", 24, 0, {4, 2, 3}, {1, 12, 4}},
      // A column slice with an offset: x[1:, 2] of a (5, 8) int tensor viewed as (4, 1).
      {"c", "IntStorage", "2", 40, 10, {4, 1}, {8, 1}},
      // An expanded (stride 0) row.
      {"e", "IntStorage", "2", 40, 3, {3, 2}, {0, 1}},
  });
  auto r = mobius::open_pytorch_archive_bytes(
      torch_zip(pkl, {{"0", raw_bytes(storage)}, {"1", raw_bytes(s3)}, {"2", raw_bytes(s4)}}),
      kBin);
  CHECK(read_as<uint16_t>(*r, "t") == std::vector<uint16_t>{0, 3, 1, 4, 2, 5});
  CHECK_FALSE(r->extent(*r->find("t")).has_value());  // memory-backed and strided
  CHECK(read_as<float>(*r, "p") == reference_gather(s3, 0, {4, 2, 3}, {1, 12, 4}));
  CHECK(read_as<int32_t>(*r, "c") == std::vector<int32_t>{100, 180, 260, 340});
  CHECK(read_as<int32_t>(*r, "e") == std::vector<int32_t>{30, 40, 30, 40, 30, 40});
}

TEST_CASE("pytorch: random strided views match a reference gather") {
  std::mt19937 rng(1234);
  std::vector<PklTensor> specs;
  std::vector<std::vector<int64_t>> expect;
  std::vector<int64_t> storage(4096);
  for (size_t i = 0; i < storage.size(); ++i) storage[i] = static_cast<int64_t>(i * 7 + 1);
  for (int n = 0; n < 200; ++n) {
    const size_t rank = rng() % 5;
    std::vector<int64_t> size(rank), stride(rank);
    int64_t last = 0;
    for (size_t k = 0; k < rank; ++k) {
      size[k] = 1 + rng() % 5;
      stride[k] = rng() % 40;
      last += (size[k] - 1) * stride[k];
    }
    const int64_t offset = static_cast<int64_t>(rng() % (4096 - last));
    specs.push_back({"v" + std::to_string(n), "LongStorage", "0", 4096, offset, size, stride});
    expect.push_back(reference_gather(storage, offset, size, stride));
  }
  auto r = mobius::open_pytorch_archive_bytes(
      torch_zip(mobius::test::state_dict_pickle(specs), {{"0", raw_bytes(storage)}}), kBin);
  for (size_t n = 0; n < specs.size(); ++n) {
    INFO(specs[n].name);
    CHECK(read_as<int64_t>(*r, specs[n].name) == expect[n]);
  }
}

TEST_CASE("pytorch: sparse views over a large storage are gathered window by window") {
  // 16 MiB gather windows hold 2M doubles; these strides make both a dimension split into
  // several windows and one split index by index.
  const int64_t numel = 8'800'000;
  std::vector<double> storage(static_cast<size_t>(numel), 0.0);
  const std::vector<int64_t> size3 = {2, 2, 3}, stride3 = {4'400'000, 4'200'000, 1};
  const std::vector<int64_t> size2 = {5, 3}, stride2 = {1'500'000, 7};
  for (const auto& [size, stride, offset] :
       {std::tuple{size3, stride3, int64_t{5}}, std::tuple{size2, stride2, int64_t{11}}}) {
    std::vector<int64_t> idx(size.size(), 0);
    for (;;) {
      int64_t at = offset;
      for (size_t k = 0; k < size.size(); ++k) at += idx[k] * stride[k];
      storage[static_cast<size_t>(at)] = static_cast<double>(at);
      size_t k = size.size();
      while (k > 0 && ++idx[k - 1] == size[k - 1]) idx[--k] = 0;
      if (k == 0) break;
    }
  }
  const std::string pkl = mobius::test::state_dict_pickle({
      {"a", "DoubleStorage", "0", numel, 5, size3, stride3},
      {"b", "DoubleStorage", "0", numel, 11, size2, stride2},
  });
  auto r = mobius::open_pytorch_archive_bytes(torch_zip(pkl, {{"0", raw_bytes(storage)}}), kBin);
  CHECK(read_as<double>(*r, "a") == reference_gather(storage, 5, size3, stride3));
  CHECK(read_as<double>(*r, "b") == reference_gather(storage, 11, size2, stride2));
}

TEST_CASE("pytorch: a shared storage with two offsets") {
  const std::vector<float> s = {1, 2, 3, 4, 5, 6, 7, 8};
  const std::string pkl = mobius::test::state_dict_pickle({
      {"first", "FloatStorage", "0", 8, 0, {2, 2}, {2, 1}},
      {"second", "FloatStorage", "0", 8, 4, {4}, {1}},
  });
  auto r = mobius::open_pytorch_archive_bytes(torch_zip(pkl, {{"0", raw_bytes(s)}}), kBin);
  CHECK(read_as<float>(*r, "first") == std::vector<float>{1, 2, 3, 4});
  CHECK(read_as<float>(*r, "second") == std::vector<float>{5, 6, 7, 8});
}

TEST_CASE("pytorch: tied weights (one tensor under two names) and empty and scalar tensors") {
  Pickler p;
  p.proto(2).empty_dict().binput(0).mark();
  p.str("embed").tensor("FloatStorage", "0", 2, 0, {2}, {1}).binput(1);
  p.str("lm_head").binget(1);
  p.str("empty").tensor("FloatStorage", "1", 0, 0, {0, 4}, {4, 1});
  p.str("scalar").tensor("LongStorage", "2", 1, 0, {}, {});
  p.setitems().stop();
  auto r = mobius::open_pytorch_archive_bytes(
      torch_zip(p.bytes, {{"0", raw_bytes(std::vector<float>{9, 8})},
                          {"1", ""},
                          {"2", raw_bytes(std::vector<int64_t>{77})}}),
      kBin);
  CHECK(read_as<float>(*r, "lm_head") == std::vector<float>{9, 8});
  CHECK(read_as<float>(*r, "embed") == std::vector<float>{9, 8});
  CHECK(r->find("empty")->nbytes == 0);
  CHECK(r->find("empty")->shape == std::vector<int64_t>{0, 4});
  CHECK(read_tensor(*r, "empty").empty());
  CHECK(r->find("scalar")->shape.empty());
  CHECK(read_as<int64_t>(*r, "scalar") == std::vector<int64_t>{77});
}

TEST_CASE("pytorch: protocol 4 framing, short strings, MEMOIZE and STACK_GLOBAL") {
  Pickler body;
  body.short_str("collections").memoize().short_str("OrderedDict").memoize().stack_global();
  body.memoize().empty_tuple().reduce().memoize().mark();
  body.short_str("w").memoize();
  body.short_str("torch._utils").short_str("_rebuild_tensor_v2").stack_global().mark();
  body.mark().short_str("storage").short_str("torch").short_str("FloatStorage").stack_global();
  body.short_str("k0").short_str("cpu").integer(2).tuple().binpersid();
  body.integer(0).int_tuple({2}).int_tuple({1}).boolean(false);
  body.binget(2).empty_tuple().reduce().tuple().reduce().memoize();
  // BINUNICODE8 spelled out.
  body.op(0x8d);
  mobius::test::put_le(body.bytes, 1, 8);
  body.raw("v").binget(5).setitems().stop();
  Pickler p;
  p.proto(4).frame(body.bytes.size()).raw(body.bytes);
  auto r = mobius::open_pytorch_archive_bytes(
      torch_zip(p.bytes, {{"k0", raw_bytes(std::vector<float>{0.5f, 0.25f})}}), kBin);
  CHECK(read_as<float>(*r, "w") == std::vector<float>{0.5f, 0.25f});
  CHECK(read_as<float>(*r, "v") == std::vector<float>{0.5f, 0.25f});
}

TEST_CASE("pytorch: model.state_dict() with _metadata, parameters and a wrapping dict") {
  // torch.save(model.state_dict()): an OrderedDict whose _metadata attribute arrives via BUILD.
  Pickler p;
  p.proto(2).global("collections", "OrderedDict").binput(0).empty_tuple().reduce().binput(1);
  p.mark().str("w").tensor("FloatStorage", "0", 2, 0, {2}, {1}).setitems();
  p.empty_dict().str("_metadata").binget(0).empty_tuple().reduce();
  p.str("").empty_dict().str("version").integer(1).setitem().setitem();
  p.setitem().build().stop();
  auto r = mobius::open_pytorch_archive_bytes(
      torch_zip(p.bytes, {{"0", raw_bytes(std::vector<float>{1, 2})}}), kBin);
  CHECK(read_as<float>(*r, "w") == std::vector<float>{1, 2});

  // Parameters go through _rebuild_parameter; {"state_dict": {...}, "epoch": 3} is unwrapped.
  Pickler q;
  q.proto(2).empty_dict().mark().str("epoch").integer(3).str("state_dict").empty_dict().mark();
  q.str("p").global("torch._utils", "_rebuild_parameter");
  q.tensor("HalfStorage", "0", 1, 0, {1}, {1}).boolean(true);
  q.global("collections", "OrderedDict").empty_tuple().reduce().tuple_n(3).reduce();
  q.setitems().setitems().stop();
  auto r2 = mobius::open_pytorch_archive_bytes(
      torch_zip(q.bytes, {{"0", raw_bytes(std::vector<uint16_t>{0x3C00})}}), kBin);
  REQUIRE(r2->tensors().size() == 1);
  CHECK(read_as<uint16_t>(*r2, "p") == std::vector<uint16_t>{0x3C00});
}

TEST_CASE("pytorch: zip variants (no Zip64, Zip64 extras, sizes in local headers)") {
  const std::string pkl =
      mobius::test::state_dict_pickle({{"w", "IntStorage", "0", 3, 0, {3}, {1}}});
  const std::string data = raw_bytes(std::vector<int32_t>{5, 6, 7});
  for (int variant = 0; variant < 3; ++variant) {
    CAPTURE(variant);
    std::vector<ZipItem> items = {
        {"a/data.pkl", pkl}, {"a/data/0", data}, {"a/byteorder", "little"}};
    for (auto& it : items) {
      it.zip64_extra = variant == 1;
      it.local_sizes = variant == 2;
    }
    const std::string zip = mobius::test::build_zip(items, /*zip64=*/variant != 0);
    auto r = mobius::open_pytorch_archive_bytes(zip, kBin);
    CHECK(read_as<int32_t>(*r, "w") == std::vector<int32_t>{5, 6, 7});
  }
}

TEST_CASE("pytorch: concurrent reads") {
  std::vector<float> s(4096);
  for (size_t i = 0; i < s.size(); ++i) s[i] = static_cast<float>(i);
  const std::string pkl = mobius::test::state_dict_pickle({
      {"row", "FloatStorage", "0", 4096, 0, {64, 64}, {64, 1}},
      {"col", "FloatStorage", "0", 4096, 0, {64, 64}, {1, 64}},
  });
  TempDir dir;
  write_file(dir / kBin, torch_zip(pkl, {{"0", raw_bytes(s)}}));
  auto r = mobius::open_pytorch_checkpoint(dir.path());
  const std::vector<float> col = reference_gather(s, 0, {64, 64}, {1, 64});
  CHECK_FALSE(r->extent(*r->find("col")).has_value());  // strided: only read() gathers it
  CHECK(r->extent(*r->find("row")).has_value());
  std::vector<std::thread> threads;
  std::vector<int> ok(8, 0);
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      int good = 1;
      for (int i = 0; i < 50; ++i) {
        const mobius::TensorMeta* m = r->find(t % 2 ? "row" : "col");
        std::vector<float> out(m->nbytes / 4);
        r->read(*m, out.data());
        good &= (t % 2 ? out == s : out == col) ? 1 : 0;
      }
      ok[t] = good;
    });
  }
  for (auto& th : threads) th.join();
  for (int v : ok) CHECK(v == 1);
}

TEST_CASE("pytorch: a valid 2-shard pytorch_model.bin.index.json") {
  TempDir dir;
  const std::string s1 = "pytorch_model-00001-of-00002.bin";
  const std::string s2 = "pytorch_model-00002-of-00002.bin";
  write_file(
      dir / s1,
      torch_zip(
          mobius::test::state_dict_pickle({{"a", "FloatStorage", "0", 2, 0, {2}, {1}},
                                           {"b", "FloatStorage", "1", 1, 0, {1}, {1}}}),
          {{"0", raw_bytes(std::vector<float>{1, 2})}, {"1", raw_bytes(std::vector<float>{3})}}));
  write_file(
      dir / s2,
      torch_zip(mobius::test::state_dict_pickle({{"c", "LongStorage", "0", 2, 0, {1, 2}, {2, 1}}}),
                {{"0", raw_bytes(std::vector<int64_t>{4, 5})}}));
  write_file(dir / "pytorch_model.bin.index.json",
             R"({"metadata": {"total_size": 28}, "weight_map": {"a": ")" + s1 + R"(", "b": ")" +
                 s1 + R"(", "c": ")" + s2 + R"("}})");
  auto r = mobius::open_pytorch_checkpoint(dir.path());
  CHECK(r->describe() == "pytorch (2 shards)");
  REQUIRE(r->tensors().size() == 3);
  CHECK(r->find("c")->file == dir / s2);
  CHECK(read_as<float>(*r, "a") == std::vector<float>{1, 2});
  CHECK(read_as<float>(*r, "b") == std::vector<float>{3});
  CHECK(read_as<int64_t>(*r, "c") == std::vector<int64_t>{4, 5});
}

TEST_CASE("pytorch: the golden qwen2-bias pytorch_model.bin") {
  const fs::path dir = golden_dir() / "qwen2-bias";
  REQUIRE(fs::exists(dir / kBin));
  auto r = mobius::open_pytorch_checkpoint(dir);
  // Names, shapes and values as torch.load(weights_only=True) reports them.
  REQUIRE(r->tensors().size() == 27);
  const mobius::TensorMeta* embed = r->find("model.embed_tokens.weight");
  REQUIRE(embed);
  CHECK(embed->dtype == MOBIUS_DTYPE_FLOAT);
  CHECK(embed->shape == std::vector<int64_t>{152, 64});
  CHECK(r->find("model.layers.0.self_attn.k_proj.weight")->shape == std::vector<int64_t>{32, 64});
  CHECK(r->find("model.layers.1.mlp.down_proj.weight")->shape == std::vector<int64_t>{64, 128});
  CHECK(r->find("model.layers.1.self_attn.k_proj.bias")->shape == std::vector<int64_t>{32});
  CHECK(r->find("model.layers.0.self_attn.o_proj.bias") == nullptr);
  const auto bits = [&](const std::string& name) {
    const std::vector<float> v = read_as<float>(*r, name);
    uint32_t first, last;
    std::memcpy(&first, &v.front(), 4);
    std::memcpy(&last, &v.back(), 4);
    double sum = 0;
    for (float x : v) sum += x;
    return std::tuple{first, last, sum};
  };
  const auto [e0, e1, esum] = bits("model.embed_tokens.weight");
  CHECK(e0 == 3187987348u);
  CHECK(e1 == 1043038761u);
  CHECK(esum == doctest::Approx(10.294852145121695).epsilon(1e-9));
  const auto [k0, k1, ksum] = bits("model.layers.1.self_attn.k_proj.bias");
  CHECK(k0 == 3166381757u);
  CHECK(k1 == 3181690503u);
  CHECK(ksum == doctest::Approx(-0.9415412610396743).epsilon(1e-9));
  const auto [l0, l1, lsum] = bits("lm_head.weight");
  CHECK(l0 == 1042160327u);
  CHECK(l1 == 3188904091u);
  CHECK(lsum == doctest::Approx(-11.216560426425417).epsilon(1e-9));
}

// ---------------------------------------------------------------------------------------------
// Hostile and broken archives

TEST_CASE("pytorch: truncated, short and non-zip files are rejected") {
  const std::string zip = simple_archive();
  check_message(archive_error(zip.substr(0, zip.size() / 2)),
                {"not a zip archive (no end of central directory record)"});
  check_message(archive_error(zip.substr(0, 10)), {"10 bytes, too short to be a zip archive"});
  check_message(archive_error(""), {"file is 0 bytes, too short to be a zip archive"});
  check_message(archive_error(B("\x80\x02}q\x00.") + std::string(40, '\0')),
                {"legacy (torch < 1.6) torch.save format"});
  check_message(archive_error(std::string(100, 'x')),
                {"not a zip archive (no end of central directory record)"});
}

TEST_CASE("pytorch: bad end of central directory records") {
  ZipLayout lay;
  const std::string zip = simple_archive(&lay);
  {
    std::string z = zip;
    z[lay.end_offset + 1] = 'X';  // signature
    check_message(archive_error(z), {"no end of central directory record"});
  }
  {
    std::string z = zip;  // the 32-bit entry count contradicts the Zip64 record
    mobius::test::set_le(z, lay.end_offset + 10, 7, 2);
    check_message(archive_error(z), {"disagree on the entry count"});
  }
  {
    std::string z = zip;
    mobius::test::set_le(z, lay.end_offset + 4, 1, 2);  // disk number
    check_message(archive_error(z), {"disagree on the disk number"});
  }
  {
    std::string z = zip;  // the locator points past itself
    mobius::test::set_le(z, lay.end_offset - 12, lay.end_offset, 8);
    const std::string reason =
        "Zip64 end record offset " + std::to_string(lay.end_offset) + " is out of range";
    check_message(archive_error(z), {reason.c_str()});
  }
  {
    std::string z = zip;
    z[lay.end64_offset] = 'Q';
    check_message(archive_error(z), {"bad Zip64 end record signature"});
  }
}

TEST_CASE("pytorch: central directory beyond the file") {
  const std::string pkl =
      mobius::test::state_dict_pickle({{"w", "FloatStorage", "0", 1, 0, {1}, {1}}});
  ZipLayout lay;
  std::string z = mobius::test::build_zip({{"a/data.pkl", pkl}, {"a/data/0", std::string(4, '\0')}},
                                          /*zip64=*/false, &lay);
  std::string beyond = z;
  mobius::test::set_le(beyond, lay.end_offset + 16, 1000000, 4);
  check_message(archive_error(beyond), {"central directory [1000000,", "extends beyond"});
  std::string big = z;
  mobius::test::set_le(big, lay.end_offset + 12, 0x7FFFFFFF, 4);
  check_message(archive_error(big), {"central directory [", ") extends beyond its end at "});
  std::string many = z;
  mobius::test::set_le(many, lay.end_offset + 8, 5000, 2);
  mobius::test::set_le(many, lay.end_offset + 10, 5000, 2);
  check_message(archive_error(many), {"cannot hold 5000 entries"});
  std::string sat = z;
  mobius::test::set_le(sat, lay.end_offset + 16, 0xFFFFFFFF, 4);
  check_message(archive_error(sat), {"needs Zip64 but the archive has no Zip64 locator"});
  std::string split = z;
  mobius::test::set_le(split, lay.end_offset + 8, 1, 2);
  check_message(archive_error(split), {"multi-disk zip archives are not supported"});
}

TEST_CASE("pytorch: entry sizes and offsets beyond the file") {
  ZipLayout lay;
  const std::string zip = simple_archive(&lay);
  {
    std::string z = zip;  // the storage entry claims 1 MB
    mobius::test::set_le(z, lay.central[1] + 20, 1000000, 4);
    mobius::test::set_le(z, lay.central[1] + 24, 1000000, 4);
    check_message(archive_error(z), {"entry 'archive/data/0' data", "extends beyond the entries"});
  }
  {
    std::string z = zip;  // local header offset past the directory
    mobius::test::set_le(z, lay.central[1] + 42, 0x7FFFFFF0, 4);
    check_message(archive_error(z),
                  {"entry 'archive/data/0' local header at", "beyond the central"});
  }
  {
    std::string z = zip;  // stored, but sizes differ
    mobius::test::set_le(z, lay.central[1] + 20, 3, 4);
    check_message(archive_error(z), {"stored entry 'archive/data/0' has compressed size 3"});
  }
  {
    std::string z = zip;  // an entry's data running into the next local header
    mobius::test::set_le(z, lay.central[1] + 20, 40, 4);
    mobius::test::set_le(z, lay.central[1] + 24, 40, 4);
    check_message(archive_error(z), {"entries 'archive/data/0' and 'archive/version' overlap"});
  }
  {
    std::string z = zip;
    z[lay.local[1] + 1] = 'X';
    check_message(archive_error(z), {"entry 'archive/data/0' has a bad local header signature"});
  }
  {
    std::string z = zip;  // local header name differs from the directory's
    z[lay.local[1] + 30 + 8] = 'D';
    check_message(archive_error(z), {"local header has a different name"});
  }
  {
    std::string z = zip;
    z[lay.central[1] + 2] = 'Z';
    check_message(archive_error(z), {"central directory entry 1 is malformed"});
  }
}

TEST_CASE("pytorch: encrypted, compressed and misnamed entries") {
  ZipLayout lay;
  const std::string zip = simple_archive(&lay);
  {
    std::string z = zip;
    z[lay.central[1] + 8] |= 1;
    z[lay.local[1] + 6] |= 1;
    check_message(archive_error(z), {"entry 'archive/data/0' is encrypted"});
  }
  {
    std::string z = zip;  // data.pkl marked DEFLATE in both headers
    mobius::test::set_le(z, lay.central[0] + 10, 8, 2);
    mobius::test::set_le(z, lay.local[0] + 8, 8, 2);
    check_message(archive_error(z), {"data.pkl is compressed with DEFLATE"});
  }
  {
    std::string z = zip;
    mobius::test::set_le(z, lay.central[1] + 10, 8, 2);
    mobius::test::set_le(z, lay.local[1] + 8, 8, 2);
    check_message(archive_error(z), {"storage '0' entry is compressed with DEFLATE"});
  }
  {
    std::string z = zip;  // the methods disagree
    mobius::test::set_le(z, lay.central[1] + 10, 8, 2);
    check_message(archive_error(z), {"local header disagrees with the central directory"});
  }
  {
    std::string z = zip;
    mobius::test::set_le(z, lay.central[0] + 16, 0x12345678, 4);
    check_message(archive_error(z), {"data.pkl fails its CRC check"});
  }
  const std::string pkl =
      mobius::test::state_dict_pickle({{"w", "FloatStorage", "0", 1, 0, {1}, {1}}});
  check_message(archive_error(mobius::test::build_zip({{"a/data.pkl", pkl}, {"a/../evil", "x"}})),
                {"entry 'a/../evil' has a '..' component"});
  check_message(archive_error(mobius::test::build_zip({{"a/data.pkl", pkl}, {"/etc/passwd", "x"}})),
                {"entry '/etc/passwd' is an absolute path"});
  check_message(archive_error(mobius::test::build_zip({{"a/data.pkl", pkl}, {"a\\..\\x", "x"}})),
                {"entry 'a\\..\\x' has a '..' component"});
  check_message(
      archive_error(mobius::test::build_zip({{"a/data.pkl", pkl}, {"a/x", "1"}, {"a/x", "2"}})),
      {"entry 'a/x' appears twice"});
  check_message(archive_error(mobius::test::build_zip(
                    {{"a/data.pkl", pkl}, {"b/data.pkl", pkl}, {"a/data/0", "1234"}})),
                {"two pickles in the archive, 'a/data.pkl' and 'b/data.pkl'"});
}

TEST_CASE("pytorch: missing records and byte order") {
  check_message(archive_error(mobius::test::build_zip({{"a/data/0", "1234"}, {"a/version", "3"}})),
                {"no <name>/data.pkl in the archive"});
  const std::string pkl =
      mobius::test::state_dict_pickle({{"w", "FloatStorage", "0", 1, 0, {1}, {1}}});
  check_message(archive_error(mobius::test::build_zip(
                    {{"a/data.pkl", pkl}, {"a/data/0", "1234"}, {"a/byteorder", "big"}})),
                {"byteorder is 'big'; only little-endian archives are supported"});
  check_message(archive_error(mobius::test::build_zip({{"a/data.pkl", pkl}})),
                {"storage '0' has no archive entry 'a/data/0'"});
  check_message(archive_error(mobius::test::build_zip({{"a/data.pkl", pkl}, {"b/data/0", "1234"}})),
                {"storage '0' has no archive entry 'a/data/0'"});
  check_message(archive_error(mobius::test::build_zip({{"a/data.pkl", pkl}, {"a/data/0", "123"}})),
                {"storage '0' entry holds 3 bytes, but 1 float32 elements need 4"});
}

TEST_CASE("pytorch: the checkpoint file itself is not a regular file") {
  TempDir dir;
  fs::create_directory(dir / kBin);
  check_message(error_of([&] { mobius::open_pytorch_checkpoint(dir.path()); }),
                {"not a regular file"});
  TempDir fifo;
  REQUIRE(::mkfifo((fifo / kBin).c_str(), 0600) == 0);  // must not block the open
  check_message(error_of([&] { mobius::open_pytorch_checkpoint(fifo.path()); }),
                {"not a regular file"});
  TempDir empty;
  const std::string msg = error_of([&] { mobius::open_pytorch_checkpoint(empty.path()); });
  CHECK(msg == "[checkpoint] " + empty.path().string() +
                   ": no pytorch_model.bin or pytorch_model.bin.index.json");
}

// ---------------------------------------------------------------------------------------------
// Hostile pickles

TEST_CASE("pytorch: globals outside the allowlist are rejected before any call") {
  const std::pair<const char*, const char*> globals[] = {{"os", "system"},
                                                         {"posix", "system"},
                                                         {"nt", "system"},
                                                         {"builtins", "eval"},
                                                         {"builtins", "exec"},
                                                         {"builtins", "getattr"},
                                                         {"builtins", "__import__"},
                                                         {"subprocess", "Popen"},
                                                         {"subprocess", "check_output"},
                                                         {"torch", "load"},
                                                         {"torch", "tensor"},
                                                         {"functools", "partial"},
                                                         {"torch._utils", "_rebuild_qtensor"},
                                                         {"collections", "defaultdict"},
                                                         {"__builtin__", "eval"},
                                                         {"torch.nn.modules.linear", "Linear"}};
  for (const auto& [module, name] : globals) {
    const std::string qualified = std::string(module) + "." + name;
    CAPTURE(qualified);
    Pickler p;
    p.proto(2).global(module, name).str("echo pwned").tuple_n(1).reduce().stop();
    const std::string msg = pickle_error(p.bytes);
    check_message(msg, {"data.pkl: GLOBAL (0x63) at offset 2: global", "is not allowed"});
    CHECK(msg.find("'" + qualified + "'") != std::string::npos);
  }
}

TEST_CASE("pytorch: a getattr chain and STACK_GLOBAL are stopped at the first global") {
  Pickler chain;  // getattr(__import__('os'), 'system')('id')
  chain.proto(2).global("builtins", "getattr").global("builtins", "__import__").str("os");
  chain.tuple_n(1).reduce().str("system").tuple_n(2).reduce().str("id").tuple_n(1).reduce().stop();
  expect_pickle_rejected(chain.bytes, {"global 'builtins.getattr' is not allowed"});
  Pickler sg;
  sg.proto(4).short_str("os").short_str("system").stack_global().short_str("id").tuple_n(1);
  sg.reduce().stop();
  expect_pickle_rejected(sg.bytes, {"STACK_GLOBAL (0x93)", "global 'os.system' is not allowed"});
  Pickler bad;
  bad.proto(4).integer(1).short_str("system").stack_global().stop();
  expect_pickle_rejected(bad.bytes, {"module and name must be strings, got an int and a string"});
}

TEST_CASE("pytorch: opcodes outside the allowlist are named") {
  const std::pair<std::string, const char*> cases[] = {
      {B("\x80\x02(X\x02\x00\x00\x00"
         "idios\nsystem\n."),
       "INST (0x69)"},
      {B("\x80\x02(}o."), "OBJ (0x6f)"},
      {B("\x80\x02\x81."), "NEWOBJ (0x81)"},
      {B("\x80\x02\x82\x01."), "EXT1 (0x82)"},
      {B("\x80\x02\x83\x01\x00."), "EXT2 (0x83)"},
      {B("\x80\x02P0\n."), "PERSID (0x50)"},
      {B("\x80\x02\x92."), "NEWOBJ_EX (0x92)"},
      {B("\x80\x02S'x'\n."), "STRING (0x53)"},
      {B("\x80\x02I1\n."), "INT (0x49)"},
      {B("\x80\x02"
         "C\x01x."),
       "SHORT_BINBYTES (0x43)"},
      {B("\x80\x02N0."), "POP (0x30)"},
      {B("\x80\x02N2."), "DUP (0x32)"},
      {B("\x80\x02\x8f."), "EMPTY_SET (0x8f)"},
      {B("\x80\x05\x97."), "NEXT_BUFFER (0x97)"},
  };
  for (const auto& c : cases) {
    const char* op = c.second;
    CAPTURE(op);
    expect_pickle_rejected(c.first, {op, "opcode is not allowed"});
  }
  expect_pickle_rejected(B("\x80\x02\xff."), {"unknown opcode 0xff"});
  expect_pickle_rejected(B("\x80\x09}."), {"unsupported pickle protocol 9"});
}

TEST_CASE("pytorch: REDUCE only calls allowlisted globals") {
  Pickler nested;  // OrderedDict()() : the callable is the result of a REDUCE
  nested.proto(2).global("collections", "OrderedDict").empty_tuple().reduce().empty_tuple();
  nested.reduce().stop();
  expect_pickle_rejected(
      nested.bytes, {"REDUCE (0x52)", "the callable is an OrderedDict, not an allowed global"});
  Pickler number;
  number.proto(2).integer(5).empty_tuple().reduce().stop();
  expect_pickle_rejected(number.bytes, {"the callable is an int, not an allowed global"});
  Pickler text;
  text.proto(2).str("os.system").str("id").tuple_n(1).reduce().stop();
  expect_pickle_rejected(text.bytes, {"the callable is a string, not an allowed global"});
  Pickler storage;
  storage.proto(2).global("torch", "FloatStorage").empty_tuple().reduce().stop();
  expect_pickle_rejected(storage.bytes, {"calling 'torch.FloatStorage' is not allowed"});
  Pickler list_args;
  list_args.proto(2).global("collections", "OrderedDict").empty_list().reduce().stop();
  expect_pickle_rejected(list_args.bytes, {"arguments of 'collections.OrderedDict' are a list"});
  Pickler od_args;
  od_args.proto(2).global("collections", "OrderedDict").empty_list().tuple_n(1).reduce().stop();
  expect_pickle_rejected(od_args.bytes, {"must be called without arguments"});
  Pickler tensor_call;  // calling a tensor
  tensor_call.proto(2).tensor("FloatStorage", "0", 4, 0, {4}, {1}).empty_tuple().reduce().stop();
  expect_pickle_rejected(tensor_call.bytes, {"the callable is a tensor, not an allowed global"});
}

TEST_CASE("pytorch: BUILD only on an OrderedDict with no state or _metadata") {
  Pickler on_tensor;
  on_tensor.proto(2).empty_dict().str("w").tensor("FloatStorage", "0", 4, 0, {4}, {1});
  on_tensor.empty_dict().build().setitem().stop();
  expect_pickle_rejected(on_tensor.bytes, {"BUILD (0x62)", "BUILD on a tensor is not allowed"});
  Pickler on_dict;
  on_dict.proto(2).empty_dict().none().build().stop();
  expect_pickle_rejected(on_dict.bytes, {"BUILD on a dict is not allowed"});
  Pickler attr;
  attr.proto(2).global("collections", "OrderedDict").empty_tuple().reduce();
  attr.empty_dict().str("__class__").str("x").setitem().build().stop();
  expect_pickle_rejected(attr.bytes, {"OrderedDict attribute '__class__' is not allowed"});
  Pickler state;
  state.proto(2).global("collections", "OrderedDict").empty_tuple().reduce();
  state.empty_list().build().stop();
  expect_pickle_rejected(state.bytes, {"state of the OrderedDict is a list, not a dict"});
}

TEST_CASE("pytorch: deep nesting is bounded") {
  std::string marks = "\x80\x02" + std::string(100000, '(') + "}.";
  expect_pickle_rejected(marks, {"MARK (0x28)", "MARKs nested deeper than 100"});
  std::string lists = "\x80\x02" + std::string(100000, ']') + std::string(99999, 'a') + ".";
  expect_pickle_rejected(lists, {"APPEND (0x61)", "values nested deeper than 100"});
  std::string tuples = "\x80\x02)";
  for (int i = 0; i < 100000; ++i) tuples += "\x85";
  tuples += ".";
  expect_pickle_rejected(tuples, {"TUPLE1 (0x85)", "values nested deeper than 100"});
  std::string nested_dicts = "\x80\x02}";
  for (int i = 0; i < 200; ++i) nested_dicts += B("X\x01\x00\x00\x00k}");
  for (int i = 0; i < 200; ++i) nested_dicts += "s";
  expect_pickle_rejected(nested_dicts + ".", {"SETITEM (0x73)", "values nested deeper than 100"});
}

TEST_CASE("pytorch: memo abuse") {
  Pickler far;
  far.proto(2).none().binput(0xFFFFFFFFu).stop();
  expect_pickle_rejected(far.bytes,
                         {"LONG_BINPUT (0x72)", "memo index 4294967295 exceeds the limit"});
  Pickler missing;
  missing.proto(2).empty_dict().binput(0).binget(7).stop();
  expect_pickle_rejected(missing.bytes, {"BINGET (0x68)", "memo index 7 was never stored"});
  Pickler long_missing;
  long_missing.proto(2).binget(100000).stop();
  expect_pickle_rejected(long_missing.bytes, {"LONG_BINGET (0x6a)", "memo index 100000 was never"});
  Pickler empty_put;
  empty_put.proto(2).binput(0).stop();
  expect_pickle_rejected(empty_put.bytes, {"BINPUT (0x71)", "stack underflow: needs 1 values, 0 "
                                                            "available above the mark"});
  Pickler in_mark;  // BINPUT may only see values above the innermost MARK
  in_mark.proto(2).none().mark().binput(0).stop();
  expect_pickle_rejected(in_mark.bytes, {"BINPUT (0x71)", "stack underflow: needs 1 values, 0 "
                                                          "available above the mark"});
}

TEST_CASE("pytorch: lengths beyond the data and oversized values") {
  expect_pickle_rejected(B("\x80\x02X\xe8\x03\x00\x00"
                           "abc."),
                         {"BINUNICODE (0x58)", "string of 1000 bytes extends beyond the end"});
  expect_pickle_rejected(B("\x80\x02\x8d\xff\xff\xff\xff\xff\xff\xff\xff"
                           "ab"),
                         {"BINUNICODE8 (0x8d)", "exceeds the 16 MiB limit"});
  expect_pickle_rejected(B("\x80\x02\x8c\x05"
                           "ab"),
                         {"SHORT_BINUNICODE (0x8c)", "string of 5 bytes extends beyond the end of the pickle (2 bytes remain)"});
  std::string long1 = B("\x80\x02\x8a\xc8") + std::string(200, '\x7f') + ".";
  expect_pickle_rejected(long1, {"LONG1 (0x8a)", "integer of 200 bytes does not fit in 64 bits"});
  expect_pickle_rejected(B("\x80\x02\x8a\x08\x01"), {"LONG1 (0x8a)", "needs 8 bytes but only 1 remain"});
  expect_pickle_rejected(B("\x80\x02J\x01\x02"), {"BININT (0x4a)", "needs 4 bytes but only 2 remain"});
  expect_pickle_rejected(B("\x80\x02G\x01"), {"BINFLOAT (0x47)", "needs 8 bytes but only 1 remain"});
  expect_pickle_rejected(B("\x80\x02\x95\x00\x00\x00\x00\x01\x00\x00\x00}."),
                         {"FRAME (0x95)", "frame of 4294967296 bytes extends beyond the pickle"});
  expect_pickle_rejected(B("\x80\x02X\x02\x00\x00\x00\xc3\x28."), {"string is not valid UTF-8"});
  expect_pickle_rejected(
      "\x80\x02"
      "c" +
          std::string(300, 'a') + "\nb\n.",
      {"GLOBAL (0x63)", "module is not a line of at most 256 bytes"});
  expect_pickle_rejected(
      "\x80\x02"
      "cos",
      {"GLOBAL (0x63)", "module is not a line of at most 256 bytes"});
}

TEST_CASE("pytorch: stack discipline") {
  Pickler setitem;
  setitem.proto(2).empty_dict().str("a").setitem().stop();
  expect_pickle_rejected(
      setitem.bytes, {"SETITEM (0x73) at offset 9: stack underflow: needs 3 values, 2 available"});
  Pickler setitems;
  setitems.proto(2).mark().str("a").str("b").setitems().stop();
  expect_pickle_rejected(setitems.bytes, {"SETITEMS (0x75)", "stack underflow: needs 1 values, 0"});
  Pickler odd;
  odd.proto(2).empty_dict().mark().str("a").setitems().stop();
  expect_pickle_rejected(odd.bytes, {"SETITEMS (0x75)", "odd number of values (1)"});
  Pickler nomark;
  nomark.proto(2).empty_list().appends().stop();
  expect_pickle_rejected(nomark.bytes, {"APPENDS (0x65)", "no MARK to pop"});
  Pickler append_dict;
  append_dict.proto(2).empty_dict().none().append().stop();
  expect_pickle_rejected(append_dict.bytes, {"APPEND (0x61)", "cannot append to a dict"});
  Pickler setitem_list;
  setitem_list.proto(2).empty_list().none().none().setitem().stop();
  expect_pickle_rejected(setitem_list.bytes, {"cannot set items on a list"});
  Pickler tuple3;
  tuple3.proto(2).none().tuple_n(3).stop();
  expect_pickle_rejected(tuple3.bytes, {"TUPLE3 (0x87)", "stack underflow: needs 3 values, 1"});
  Pickler reduce;
  reduce.proto(2).empty_tuple().reduce().stop();
  expect_pickle_rejected(reduce.bytes, {"REDUCE (0x52)", "stack underflow: needs 2 values, 1"});
  expect_pickle_rejected(B("\x80\x02}"), {"the pickle ends without STOP"});
  expect_pickle_rejected(B(""), {"the pickle ends without STOP"});
  expect_pickle_rejected(B("\x80\x02."), {"STOP (0x2e)", "expected one value on the stack, found 0"});
  expect_pickle_rejected(B("\x80\x02}}."), {"expected one value on the stack, found 2"});
  expect_pickle_rejected(B("\x80\x02(}."), {"a MARK is still open"});
  expect_pickle_rejected(B("\x80\x02}.junk"), {"4 bytes follow STOP"});
}

TEST_CASE("pytorch: the result must be a dict of string to tensor") {
  Pickler list;
  list.proto(2).empty_list().stop();
  expect_pickle_rejected(list.bytes, {"the pickle holds a list, not a dict of tensors"});
  Pickler tensor;
  tensor.proto(2).tensor("FloatStorage", "0", 4, 0, {4}, {1}).stop();
  expect_pickle_rejected(tensor.bytes, {"the pickle holds a tensor, not a dict"});
  Pickler key;
  key.proto(2).empty_dict().integer(1).tensor("FloatStorage", "0", 4, 0, {4}, {1});
  key.setitem().stop();
  expect_pickle_rejected(key.bytes, {"key 0 of the state dict is an int, not a string"});
  Pickler value;
  value.proto(2).empty_dict().str("w").integer(3).setitem().stop();
  expect_pickle_rejected(value.bytes, {"value of 'w' is an int, not a tensor"});
  Pickler storage_value;
  storage_value.proto(2).empty_dict().str("w").storage("FloatStorage", "0", 4).setitem().stop();
  expect_pickle_rejected(storage_value.bytes, {"value of 'w' is a storage, not a tensor"});
  Pickler global_value;
  global_value.proto(2).empty_dict().str("w").global("collections", "OrderedDict").setitem();
  global_value.stop();
  expect_pickle_rejected(global_value.bytes,
                         {"value of 'w' is global 'collections.OrderedDict', not a tensor"});
  Pickler dup;
  dup.proto(2).empty_dict().mark().str("w").tensor("FloatStorage", "0", 4, 0, {4}, {1});
  dup.str("w").tensor("FloatStorage", "0", 4, 0, {4}, {1}).setitems().stop();
  expect_pickle_rejected(dup.bytes, {"tensor 'w' appears twice"});
  Pickler wrapped;  // state_dict present but not a dict: the outer dict is the state dict
  wrapped.proto(2).empty_dict().str("state_dict").integer(1).setitem().stop();
  expect_pickle_rejected(wrapped.bytes, {"value of 'state_dict' is an int, not a tensor"});
}

TEST_CASE("pytorch: persistent ids and storages") {
  const auto with_pid = [](const std::function<void(Pickler&)>& pid) {
    Pickler p;
    p.proto(2).empty_dict().str("w").global("torch._utils", "_rebuild_tensor_v2").mark();
    pid(p);
    p.binpersid().integer(0).int_tuple({4}).int_tuple({1}).boolean(false);
    p.global("collections", "OrderedDict").empty_tuple().reduce().tuple().reduce();
    return p.setitem().stop().bytes;
  };
  expect_pickle_rejected(with_pid([](Pickler& p) {
                           p.mark().str("storage").global("torch", "ComplexFloatStorage");
                           p.str("0").str("cpu").integer(4).tuple();
                         }),
                         {"storage type 'torch.ComplexFloatStorage' is not supported"});
  expect_pickle_rejected(with_pid([](Pickler& p) {
                           p.mark().str("storage").global("collections", "OrderedDict");
                           p.str("0").str("cpu").integer(4).tuple();
                         }),
                         {"BINPERSID (0x51)",
                          "storage type is global 'collections.OrderedDict', "
                          "not a torch storage type"});
  expect_pickle_rejected(with_pid([](Pickler& p) {
                           p.mark().str("module").global("torch", "FloatStorage");
                           p.str("0").str("cpu").integer(4).tuple();
                         }),
                         {"persistent id does not start with 'storage'"});
  expect_pickle_rejected(with_pid([](Pickler& p) { p.str("0"); }),
                         {"persistent id is a string, not a tuple"});
  expect_pickle_rejected(with_pid([](Pickler& p) {
                           p.mark().str("storage").global("torch", "FloatStorage").str("0");
                           p.tuple();
                         }),
                         {"persistent id has 3 fields, expected 5"});
  expect_pickle_rejected(with_pid([](Pickler& p) {
                           p.mark().str("storage").global("torch", "FloatStorage");
                           p.str("../data.pkl").str("cpu").integer(4).tuple();
                         }),
                         {"storage key '../data.pkl' is not a plain name"});
  expect_pickle_rejected(with_pid([](Pickler& p) {
                           p.mark().str("storage").global("torch", "FloatStorage");
                           p.str("0").str("cpu").integer(-4).tuple();
                         }),
                         {"numel is not a non-negative int"});
  expect_pickle_rejected(with_pid([](Pickler& p) {
                           p.mark().str("storage").global("torch", "DoubleStorage");
                           p.str("0").str("cpu").integer(INT64_MAX / 4).tuple();
                         }),
                         {"storage '0' of 2305843009213693951 elements is too large"});
  // One key, two declarations.
  Pickler twice;
  twice.proto(2).empty_dict().mark();
  twice.str("a").tensor("FloatStorage", "0", 4, 0, {4}, {1});
  twice.str("b").tensor("HalfStorage", "0", 8, 0, {8}, {1});
  twice.setitems().stop();
  expect_pickle_rejected(twice.bytes, {"storage '0' is declared as torch.HalfStorage of 8 "
                                       "elements, but earlier as float32 of 4"});
}

TEST_CASE("pytorch: _rebuild_tensor_v2 arguments") {
  const auto rebuild = [](const std::function<void(Pickler&)>& args) {
    Pickler p;
    p.proto(2).empty_dict().str("w").global("torch._utils", "_rebuild_tensor_v2").mark();
    args(p);
    return p.tuple().reduce().setitem().stop().bytes;
  };
  const auto hooks = [](Pickler& p) {
    p.global("collections", "OrderedDict").empty_tuple().reduce();
  };
  const auto standard = [&](int64_t offset, std::vector<int64_t> size,
                            std::vector<int64_t> stride) {
    return [=](Pickler& p) {
      p.storage("FloatStorage", "0", 4).integer(offset).int_tuple(size).int_tuple(stride);
      p.boolean(false);
      hooks(p);
    };
  };
  expect_pickle_rejected(rebuild(standard(0, {2, 3}, {3, 1})),
                         {"tensor 'w' (offset 0, size [2, 3], stride [3, 1]) reaches element 5 "
                          "of storage '0', which has 4 elements"});
  expect_pickle_rejected(rebuild(standard(4, {1}, {1})),
                         {"tensor 'w' (offset 4, size [1], stride [1]) reaches element 4 of "
                          "storage '0', which has 4 elements"});
  expect_pickle_rejected(rebuild(standard(5, {0}, {1})),
                         {"tensor 'w' storage_offset 5 is beyond storage '0' of 4 elements"});
  expect_pickle_rejected(rebuild(standard(0, {2, 2}, {-1, 1})),
                         {"stride [-1, 1] has a negative entry"});
  expect_pickle_rejected(rebuild(standard(0, {-2, 2}, {1, 1})),
                         {"size [-2, 2] has a negative dimension"});
  expect_pickle_rejected(rebuild(standard(-1, {1}, {1})), {"storage_offset -1 is negative"});
  expect_pickle_rejected(rebuild(standard(0, {int64_t{1} << 40, int64_t{1} << 40}, {1, 1})),
                         {"tensor 'w' size [1099511627776, 1099511627776] has too many elements"});
  expect_pickle_rejected(rebuild(standard(0, {3, 3}, {INT64_MAX, INT64_MAX})),
                         {"tensor 'w' size [3, 3] with stride [9223372036854775807, "
                          "9223372036854775807] overflows"});
  expect_pickle_rejected(rebuild(standard(0, {int64_t{1} << 62}, {1})),
                         {"tensor 'w' size [4611686018427387904] has too many bytes"});
  expect_pickle_rejected(rebuild(standard(0, {2, 2}, {1})),
                         {"'torch._utils._rebuild_tensor_v2' size [2, 2] and stride [1] differ in "
                          "length"});
  // An expanded view may repeat elements, but not into gigabytes.
  expect_pickle_rejected(rebuild(standard(0, {1 << 20, 1 << 20}, {0, 0})),
                         {"repeats elements to 4398046511104 bytes from a storage of 16"});
  expect_pickle_rejected(
      rebuild(standard(0, std::vector<int64_t>(65, 1), std::vector<int64_t>(65, 1))),
      {"65 dimensions, over the limit of 64"});
  expect_pickle_rejected(rebuild([&](Pickler& p) {
                           p.storage("FloatStorage", "0", 4).integer(0).int_tuple({4});
                           p.int_tuple({1}).boolean(false);
                           p.global("collections", "OrderedDict").empty_tuple().reduce();
                           p.str("h").global("collections", "OrderedDict").setitem();
                         }),
                         {"backward_hooks must be an empty dict, got an OrderedDict of 1 entries"});
  expect_pickle_rejected(rebuild([&](Pickler& p) {
                           p.storage("FloatStorage", "0", 4).integer(0).int_tuple({4});
                           p.int_tuple({1}).boolean(false).none();
                         }),
                         {"backward_hooks must be an empty dict, got None"});
  expect_pickle_rejected(rebuild([&](Pickler& p) {
                           standard(0, {4}, {1})(p);
                           p.empty_dict().str("conj").boolean(true).setitem();
                         }),
                         {"tensor metadata (a dict) is not supported"});
  expect_pickle_rejected(rebuild([&](Pickler& p) {
                           p.storage("FloatStorage", "0", 4).integer(0).int_tuple({4});
                           p.int_tuple({1}).integer(0);
                           hooks(p);
                         }),
                         {"requires_grad is an int, not a bool"});
  expect_pickle_rejected(rebuild([&](Pickler& p) {
                           p.str("0").integer(0).int_tuple({4}).int_tuple({1}).boolean(false);
                           hooks(p);
                         }),
                         {"argument 1 is a string, not a storage"});
  expect_pickle_rejected(
      rebuild([&](Pickler& p) { p.storage("FloatStorage", "0", 4).integer(0).int_tuple({4}); }),
      {"takes 6 or 7 arguments, got 3"});
  expect_pickle_rejected(rebuild([&](Pickler& p) {
                           p.storage("FloatStorage", "0", 4).integer(0).empty_list();
                           p.int_tuple({1}).boolean(false);
                           hooks(p);
                         }),
                         {"size is a list, not a tuple of ints"});
  Pickler param;
  param.proto(2).empty_dict().str("w").global("torch._utils", "_rebuild_parameter");
  param.tensor("FloatStorage", "0", 4, 0, {4}, {1}).boolean(false);
  param.empty_dict().str("x").none().setitem().tuple_n(3).reduce().setitem().stop();
  expect_pickle_rejected(param.bytes, {"backward_hooks must be an empty dict, got a dict of 1"});
}

TEST_CASE("pytorch: storage contents must match the declared sizes") {
  const std::string pkl =
      mobius::test::state_dict_pickle({{"w", "FloatStorage", "5", 4, 0, {4}, {1}}});
  check_message(pickle_error(pkl, {{"0", std::string(16, '\0')}}),
                {"storage '5' has no archive entry 'archive/data/5'"});
  check_message(pickle_error(pkl, {{"5", std::string(12, '\0')}}),
                {"storage '5' entry holds 12 bytes, but 4 float32 elements need 16"});
  check_message(pickle_error(pkl, {{"5", std::string(20, '\0')}}), {"storage '5' entry holds 20 bytes, but 4 float32 elements need 16"});
}

TEST_CASE("pytorch: limits on pickle size and memory") {
  std::string many = "\x80\x02}(";
  for (int i = 0; i < (1 << 20) + 2; ++i) many += "N";
  expect_pickle_rejected(many + "u.", {"the stack grows beyond 1048576 values"});
  // One 1 MiB name shared through the memo by 600 entries must not cost 600 MiB.
  Pickler shared;
  shared.proto(2).empty_dict().mark().str(std::string(1 << 20, 'n')).binput(0);
  shared.tensor("FloatStorage", "0", 4, 0, {4}, {1}).binput(1);
  for (int i = 1; i < 600; ++i) shared.binget(0).binget(1);
  shared.setitems().stop();
  expect_pickle_rejected(shared.bytes, {"tensor 'nnnnnnnn", "...' appears twice"});
  // A pickle over 64 MiB.
  const std::string big(65 << 20, 'N');
  check_message(archive_error(torch_zip(big, {})),
                {"data.pkl is 68157440 bytes, over the 64 MiB limit"});
}

// ---------------------------------------------------------------------------------------------
// Indexes

namespace {

// Writes a one-tensor shard holding `names` (each a 1-element float).
void write_shard(const fs::path& path, const std::vector<std::string>& names) {
  std::vector<PklTensor> t;
  std::map<std::string, std::string> s;
  for (size_t i = 0; i < names.size(); ++i) {
    t.push_back({names[i], "FloatStorage", std::to_string(i), 1, 0, {1}, {1}});
    s[std::to_string(i)] = raw_bytes(std::vector<float>{static_cast<float>(i)});
  }
  write_file(path, torch_zip(mobius::test::state_dict_pickle(t), s));
}

std::string index_error(const fs::path& dir, const std::string& index_json) {
  write_file(dir / "pytorch_model.bin.index.json", index_json);
  return error_of([&] { mobius::open_pytorch_checkpoint(dir); });
}

}  // namespace

TEST_CASE("pytorch: index shard names never leave the folder") {
  TempDir root;
  fs::create_directory(root / "model");
  const fs::path dir = root / "model";
  write_shard(root / "outside.bin", {"a"});
  const char* idx = "pytorch_model.bin.index.json";
  check_message(index_error(dir, R"({"weight_map": {"a": "../outside.bin"}})"),
                {"shard '../outside.bin' has a '..' component"}, idx);
  check_message(index_error(dir, R"({"weight_map": {"a": "sub/../../outside.bin"}})"),
                {"shard 'sub/../../outside.bin' has a '..' component"}, idx);
  check_message(
      index_error(dir, R"({"weight_map": {"a": ")" + (root / "outside.bin").string() + R"("}})"),
      {"shard '", "outside.bin' is an absolute path"}, idx);
  check_message(index_error(dir, R"({"weight_map": {"a": ""}})"), {"empty shard name"}, idx);
  fs::create_symlink(root / "outside.bin", dir / "link.bin");
  check_message(index_error(dir, R"({"weight_map": {"a": "link.bin"}})"),
                {"shard 'link.bin' resolves outside the checkpoint folder"}, idx);
  fs::create_directory_symlink(root.path(), dir / "up");
  check_message(index_error(dir, R"({"weight_map": {"a": "up/outside.bin"}})"),
                {"shard 'up/outside.bin' resolves outside the checkpoint folder"}, idx);
  check_message(index_error(dir, R"({"weight_map": {"a": "nope.bin"}})"),
                {"shard 'nope.bin' does not exist"}, idx);
  // A symlink that stays inside is fine.
  write_shard(dir / "real.bin", {"a"});
  fs::create_symlink("real.bin", dir / "alias.bin");
  write_file(dir / idx, R"({"weight_map": {"a": "alias.bin"}})");
  CHECK(mobius::open_pytorch_checkpoint(dir)->tensors().size() == 1);
}

TEST_CASE("pytorch: index and shards must agree") {
  TempDir dir;
  const char* idx = "pytorch_model.bin.index.json";
  write_shard(dir / "s1.bin", {"a", "b"});
  write_shard(dir / "s2.bin", {"b", "c"});
  check_message(
      index_error(dir.path(), R"({"weight_map": {"a": "s1.bin", "b": "s1.bin", "c": "s2.bin"}})"),
      {"tensor 'b' is in two shards, 's1.bin' and 's2.bin'"}, "s2.bin");
  write_shard(dir / "s2.bin", {"c"});
  check_message(
      index_error(
          dir.path(),
          R"({"weight_map": {"a": "s1.bin", "b": "s1.bin", "c": "s2.bin", "d": "s2.bin"}})"),
      {"tensor 'd' is mapped to shard 's2.bin', which does not contain it"}, idx);
  check_message(index_error(dir.path(), R"({"weight_map": {"a": "s1.bin", "c": "s2.bin"}})"),
                {"tensor 'b' is not listed in pytorch_model.bin.index.json"}, "s1.bin");
  check_message(
      index_error(dir.path(), R"({"weight_map": {"a": "s1.bin", "b": "s2.bin", "c": "s2.bin"}})"),
      {"tensor 'b' is listed in pytorch_model.bin.index.json under shard 's2.bin'"}, "s1.bin");
  check_message(index_error(dir.path(), R"({"weight_map": {"a": "s1.bin", "a": "s1.bin"}})"),
                {"tensor 'a' is listed twice in weight_map"}, idx);
  check_message(index_error(dir.path(), R"({"weight_map": {"a": 3}})"),
                {"weight_map entry for tensor 'a' is not a string"}, idx);
  check_message(index_error(dir.path(), R"({"weight_map": []})"), {"weight_map is not an object"},
                idx);
  check_message(index_error(dir.path(), R"({"metadata": {}})"), {"no weight_map"}, idx);
  check_message(index_error(dir.path(), R"({"weight_map": {}})"), {"weight_map lists no tensors"},
                idx);
  check_message(index_error(dir.path(), R"([1, 2])"), {"index is not a JSON object"}, idx);
  check_message(index_error(dir.path(), R"({"weight_map": {"a": "s1.bin")"), {"index is not valid JSON: parse error at line 1"}, idx);
  // A broken shard is reported under its own name.
  write_file(dir / "s2.bin", "garbage that is not a zip archive at all");
  check_message(
      index_error(dir.path(), R"({"weight_map": {"a": "s1.bin", "b": "s1.bin", "c": "s2.bin"}})"),
      {"not a zip archive (no end of central directory record)"}, "s2.bin");
}

TEST_CASE("pytorch: index metadata and duplicate keys follow the safetensors rules") {
  TempDir dir;
  const char* idx = "pytorch_model.bin.index.json";
  write_shard(dir / "s1.bin", {"a"});
  check_message(index_error(dir.path(), R"({"metadata": 3, "weight_map": {"a": "s1.bin"}})"),
                {"metadata is not an object"}, idx);
  check_message(
      index_error(dir.path(), R"({"metadata": {}, "metadata": {}, "weight_map": {"a": "s1.bin"}})"),
      {"duplicate key 'metadata'"}, idx);
  check_message(index_error(dir.path(), R"({"weight_map": {"a": "s1.bin"}, "weight_map": {}})"),
                {"duplicate key 'weight_map'"}, idx);
  check_message(index_error(dir.path(), R"({"weight_map": {"a": "."}})"),
                {"shard '.' resolves outside the checkpoint folder"}, idx);
}

TEST_CASE("pytorch: a shard of the numbered series that the index does not name") {
  // Both shards hold "a"; the index maps it to shard 1, so shard 2 would never be opened.
  TempDir dir;
  const std::string s1 = "pytorch_model-00001-of-00002.bin";
  const std::string s2 = "pytorch_model-00002-of-00002.bin";
  write_shard(dir / s1, {"a"});
  write_shard(dir / s2, {"a"});
  const std::string msg =
      index_error(dir.path(), R"({"weight_map": {"a": "pytorch_model-00001-of-00002.bin"}})");
  CHECK(msg ==
        "[pytorch] pytorch_model-00002-of-00002.bin: shard of the numbered series is not named by "
        "pytorch_model.bin.index.json");
  // With the index naming both shards and each holding its own tensor, all is well.
  write_shard(dir / s2, {"b"});
  write_file(dir / "pytorch_model.bin.index.json",
             R"({"weight_map": {"a": ")" + s1 + R"(", "b": ")" + s2 + R"("}})");
  CHECK(mobius::open_pytorch_checkpoint(dir.path())->describe() == "pytorch (2 shards)");
}
