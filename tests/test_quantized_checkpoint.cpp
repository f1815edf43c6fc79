// test_quantized_checkpoint.cpp - FP8 block and MXFP4 checkpoints read dequantized: values against
// hand computations, range reads, every refusal, and the fp8 golden cases end to end.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "checkpoint/checkpoint.hpp"
#include "golden_util.hpp"
#include "mobius/plugin.h"
#include "test_util.hpp"

using namespace mobius;
using namespace mobius::test;

namespace {

const std::string kFp8Config =
    R"({"model_type": "llama", "quantization_config": {"quant_method": "fp8", "fmt": "e4m3",
        "activation_scheme": "dynamic", "weight_block_size": [2, 3]}})";

std::string fp8_config(const std::string& block, const std::string& extra = "") {
  return R"({"model_type": "llama", "quantization_config": {"quant_method": "fp8", "fmt": "e4m3",
            "activation_scheme": "dynamic", "weight_block_size": )" +
         block + extra + "}}";
}

const std::string kMxfp4Config =
    R"({"model_type": "gpt_oss", "quantization_config": {"quant_method": "mxfp4",
        "modules_to_not_convert": ["model.layers.*.self_attn", "lm_head"]}})";

StTensor bytes_tensor(const std::string& name, const std::string& dtype,
                      std::vector<int64_t> shape, std::vector<uint8_t> bytes) {
  return StTensor{name, dtype, std::move(shape), std::move(bytes)};
}

StTensor bf16_tensor(const std::string& name, std::vector<int64_t> shape,
                     const std::vector<uint16_t>& bits) {
  StTensor t{name, "BF16", std::move(shape), {}};
  t.bytes.resize(bits.size() * 2);
  std::memcpy(t.bytes.data(), bits.data(), t.bytes.size());
  return t;
}

// A checkpoint folder of one model.safetensors and a config.json.
struct Ckpt {
  TempDir dir;
  std::string config;
  Ckpt(const std::vector<StTensor>& tensors, std::string cfg) : config(std::move(cfg)) {
    write_safetensors(dir / "model.safetensors", tensors);
    write_text(dir / "config.json", config);
  }
  std::unique_ptr<CheckpointReader> open() const { return open_checkpoint(dir.path(), &config); }
};

std::vector<float> read_all(const CheckpointReader& r, const std::string& name) {
  const TensorMeta* m = r.find(name);
  REQUIRE(m != nullptr);
  REQUIRE(m->dtype == MOBIUS_DTYPE_FLOAT);
  std::vector<float> v(m->nbytes / 4);
  r.read(*m, v.data());
  return v;
}

std::vector<float> read_part(const CheckpointReader& r, const TensorMeta& m, uint64_t first,
                             uint64_t count) {
  std::vector<float> v(count);
  r.read_range(m, first, count, v.data());
  return v;
}

// e4m3fn by its definition: sign, 4 exponent bits (bias 7), 3 mantissa bits; S.1111.111 is NaN.
double e4m3_ref(uint8_t b) {
  const int s = b >> 7, e = (b >> 3) & 15, m = b & 7;
  if (e == 15 && m == 7) return std::nan("");
  const double v = e == 0 ? (m / 8.0) * std::pow(2.0, -6) : (1 + m / 8.0) * std::pow(2.0, e - 7);
  return s ? -v : v;
}

float bf16_value(uint16_t bits) {
  const uint32_t u = static_cast<uint32_t>(bits) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

bool same(float a, float b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  return a == b && std::signbit(a) == std::signbit(b);
}

void check_same(const std::vector<float>& got, const std::vector<float>& want) {
  REQUIRE(got.size() == want.size());
  size_t bad = 0;
  for (size_t i = 0; i < got.size(); ++i)
    if (!same(got[i], want[i]) && bad++ < 5)
      FAIL_CHECK("element " << i << ": got " << got[i] << ", expected " << want[i]);
  CHECK(bad == 0);
}

// Opening must fail with `reason` in the message.
void expect_refused(const std::vector<StTensor>& tensors, const std::string& config,
                    const std::string& reason) {
  Ckpt c(tensors, config);
  std::string msg;
  try {
    c.open();
  } catch (const Error& e) {
    msg = e.what();
  }
  INFO("message: " << msg);
  CHECK(msg.find(reason) != std::string::npos);
}

// A deterministic byte pattern covering every code.
std::vector<uint8_t> pattern(size_t n, uint32_t seed) {
  std::vector<uint8_t> v(n);
  uint32_t x = seed;
  for (auto& b : v) {
    x = x * 1664525u + 1013904223u;
    b = static_cast<uint8_t>(x >> 24);
  }
  return v;
}

// fp8 reference: q [rows, cols], F32 scales [ceil(rows/bo), ceil(cols/bi)].
std::vector<float> fp8_ref(const std::vector<uint8_t>& q, const std::vector<float>& s, int64_t rows,
                           int64_t cols, int64_t bo, int64_t bi) {
  const int64_t sc = (cols + bi - 1) / bi;
  std::vector<float> w(static_cast<size_t>(rows * cols));
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j)
      w[static_cast<size_t>(i * cols + j)] =
          static_cast<float>(e4m3_ref(q[static_cast<size_t>(i * cols + j)])) *
          s[static_cast<size_t>((i / bo) * sc + j / bi)];
  return w;
}

const double kE2m1[16] = {0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0,
                          -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0};

// mxfp4 reference, transformers' convert_moe_packed_tensors: [E, R, G, 16] + [E, R, G] ->
// [E, R, G*32] (low nibble first, times float32 2^(s-127)) -> transpose to [E, G*32, R].
std::vector<float> mxfp4_ref(const std::vector<uint8_t>& blocks, const std::vector<uint8_t>& scales,
                             int64_t E, int64_t R, int64_t G) {
  const int64_t K = G * 32;
  std::vector<float> out(static_cast<size_t>(E * K * R));
  for (int64_t e = 0; e < E; ++e)
    for (int64_t r = 0; r < R; ++r)
      for (int64_t g = 0; g < G; ++g) {
        const uint8_t s = scales[static_cast<size_t>((e * R + r) * G + g)];
        const float pow2 = s == 255 ? std::numeric_limits<float>::infinity()
                                    : static_cast<float>(std::pow(2.0, s - 127));
        for (int64_t b = 0; b < 16; ++b) {
          const uint8_t byte = blocks[static_cast<size_t>(((e * R + r) * G + g) * 16 + b)];
          for (int half = 0; half < 2; ++half) {
            const int code = half ? byte >> 4 : byte & 15;
            const int64_t k = g * 32 + b * 2 + half;
            out[static_cast<size_t>((e * K + k) * R + r)] = static_cast<float>(kE2m1[code]) * pow2;
          }
        }
      }
  return out;
}

}  // namespace

TEST_CASE("fp8: e4m3 codes, by hand") {
  // One row of the codes that matter, block 1x16 and scale 1: the values are the codes'.
  const std::vector<uint8_t> codes = {0x00, 0x80, 0x38, 0xB8, 0x3C, 0x40, 0x01,
                                      0x07, 0x08, 0x7E, 0xFE, 0x7F, 0xFF, 0x30};
  const std::vector<float> want = {0.0f, -0.0f, 1.0f, -1.0f, 1.5f, 2.0f, 0.001953125f,
                                   0.013671875f, 0.015625f, 448.0f, -448.0f, NAN, NAN, 0.5f};
  Ckpt c({bytes_tensor("w.weight", "F8_E4M3", {1, 14}, codes),
          f32_tensor("w.weight_scale_inv", {1, 1}, {1.0f})},
         fp8_config("[1, 16]"));
  auto r = c.open();
  check_same(read_all(*r, "w.weight"), want);
}

TEST_CASE("fp8: ragged edge blocks, F32 scales, against a hand computation") {
  // 5x7 in 2x3 blocks: scale grid 3x3, the last block row one row high, the last column one wide.
  const std::vector<uint8_t> q = pattern(35, 7);
  const std::vector<float> s = {0.5f, 2.0f, 0.25f, 3.0f, -1.0f, 0.125f, 7.0f, 1.5f, 1e-3f};
  Ckpt c({bytes_tensor("model.layers.0.mlp.up_proj.weight", "F8_E4M3", {5, 7}, q),
          f32_tensor("model.layers.0.mlp.up_proj.weight_scale_inv", {3, 3}, s),
          f32_tensor("model.norm.weight", {2}, {1.0f, 2.0f})},
         kFp8Config);
  auto r = c.open();
  // The scales are gone, the weight is float32 of the same shape, the rest is as stored.
  REQUIRE(r->tensors().size() == 2);
  CHECK(r->tensors()[0].name == "model.layers.0.mlp.up_proj.weight");
  CHECK(r->tensors()[1].name == "model.norm.weight");
  const TensorMeta& w = r->tensors()[0];
  CHECK(w.dtype == MOBIUS_DTYPE_FLOAT);
  CHECK(w.shape == std::vector<int64_t>{5, 7});
  CHECK(w.nbytes == 35 * 4);
  CHECK_FALSE(r->extent(w).has_value());
  CHECK(r->extent(r->tensors()[1]).has_value());
  CHECK(r->reads_ranges(w));  // computed piece by piece
  CHECK(r->reads_ranges(r->tensors()[1]));
  CHECK(r->find("model.layers.0.mlp.up_proj.weight_scale_inv") == nullptr);
  CHECK(r->describe() == "safetensors (1 file), fp8 e4m3 blocks 2x3 dequantized");

  check_same(read_all(*r, "model.layers.0.mlp.up_proj.weight"), fp8_ref(q, s, 5, 7, 2, 3));
  // Spot checks written out: element [4, 6] is in block [2, 2] (scale 1e-3); [1, 3] in [0, 1].
  const std::vector<float> all = read_all(*r, "model.layers.0.mlp.up_proj.weight");
  CHECK(same(all[4 * 7 + 6], static_cast<float>(e4m3_ref(q[34])) * 1e-3f));
  CHECK(same(all[1 * 7 + 3], static_cast<float>(e4m3_ref(q[10])) * 2.0f));
  const std::vector<float> norm = read_all(*r, "model.norm.weight");
  CHECK(norm == std::vector<float>{1.0f, 2.0f});
}

TEST_CASE("fp8: BF16 scales") {
  const std::vector<uint8_t> q = {0x38, 0x40, 0x3C, 0xB8, 0x01, 0x7E, 0x30, 0x44};
  // 1.5, 3.0, 0.25 and 1.203125 (0x3F9A), as Qwen3-*-FP8 store them.
  const std::vector<uint16_t> sb = {0x3FC0, 0x4040, 0x3E80, 0x3F9A};
  Ckpt c({bytes_tensor("a.weight", "F8_E4M3", {2, 4}, q), bf16_tensor("a.weight_scale_inv", {2, 2}, sb)},
         fp8_config("[1, 2]"));
  auto r = c.open();
  const std::vector<float> want = {1.0f * 1.5f,    2.0f * 1.5f,       1.5f * 3.0f,  -1.0f * 3.0f,
                                   0.001953125f * 0.25f, 448.0f * 0.25f, 0.5f * 1.203125f,
                                   3.0f * 1.203125f};
  check_same(read_all(*r, "a.weight"), want);
  CHECK(bf16_value(0x3F9A) == 1.203125f);
}

TEST_CASE("fp8: F16 scales, as transformers accepts them") {
  const std::vector<uint8_t> q = {0x38, 0x40, 0x3C, 0xB8, 0x01, 0x7E, 0x30, 0x44};
  // 1.5, 3.0, 0.25 and 0.0999755859375 (0x2E66, not a bfloat16 value), little-endian.
  const std::vector<uint8_t> sh = {0x00, 0x3E, 0x00, 0x42, 0x00, 0x34, 0x66, 0x2E};
  Ckpt c({bytes_tensor("a.weight", "F8_E4M3", {2, 4}, q),
          bytes_tensor("a.weight_scale_inv", "F16", {2, 2}, sh)},
         fp8_config("[1, 2]"));
  auto r = c.open();
  const float tenth = 0.0999755859375f;
  const std::vector<float> want = {1.0f * 1.5f,    2.0f * 1.5f,       1.5f * 3.0f,  -1.0f * 3.0f,
                                   0.001953125f * 0.25f, 448.0f * 0.25f, 0.5f * tenth,
                                   3.0f * tenth};
  check_same(read_all(*r, "a.weight"), want);
  // The same weights read a piece at a time.
  const auto* m = r->find("a.weight");
  REQUIRE(m);
  std::vector<float> tail(3);
  r->read_range(*m, 5, 3, tail.data());
  check_same(tail, {want[5], want[6], want[7]});
}

TEST_CASE("fp8: extreme and non-finite scales, NaN codes and subnormals propagate") {
  const float inf = std::numeric_limits<float>::infinity();
  // Four 1x4 blocks of one row each: scales 1e-30, 1e30, inf and NaN.
  const std::vector<uint8_t> q = {0x38, 0x01, 0x7E, 0x00,   // 1e-30
                                  0x38, 0x7E, 0xFE, 0x7F,   // 1e30
                                  0x38, 0x00, 0x80, 0xFF,   // inf
                                  0x38, 0x00, 0x01, 0x7E};  // NaN
  const std::vector<float> s = {1e-30f, 1e30f, inf, NAN};
  Ckpt c({bytes_tensor("x.weight", "F8_E4M3", {4, 4}, q), f32_tensor("x.weight_scale_inv", {4, 1}, s)},
         fp8_config("[1, 4]"));
  auto r = c.open();
  const std::vector<float> got = read_all(*r, "x.weight");
  const std::vector<float> want = {1e-30f, 0.001953125f * 1e-30f, 448.0f * 1e-30f, 0.0f,
                                   1e30f, 448.0f * 1e30f, -448.0f * 1e30f, NAN,
                                   inf, NAN, NAN, NAN,  // 0 * inf is NaN, as in float32 torch
                                   NAN, NAN, NAN, NAN};
  check_same(got, want);
  CHECK(std::isinf(got[5]) == false);  // 4.48e32 is finite in float32
  CHECK(got[1] > 0.0f);                // 1.95e-33: small, still normal
  // A scale that takes a subnormal code below float32's normal range.
  Ckpt d({bytes_tensor("y.weight", "F8_E4M3", {1, 2}, {0x01, 0x08}),
          f32_tensor("y.weight_scale_inv", {1, 1}, {1e-36f})},
         fp8_config("[1, 2]"));
  const std::vector<float> tiny = read_all(*d.open(), "y.weight");
  CHECK(same(tiny[0], 0.001953125f * 1e-36f));
  CHECK(std::fpclassify(tiny[0]) == FP_SUBNORMAL);
  CHECK(same(tiny[1], 0.015625f * 1e-36f));
}

TEST_CASE("fp8: read_range at any offset equals the whole read") {
  struct Shape {
    int64_t rows, cols, bo, bi;
  };
  // Small ragged shapes, and rows longer than the reader's chunk so pieces of rows are read.
  for (const Shape& sh : {Shape{37, 300, 16, 128}, Shape{5, 7, 2, 3}, Shape{3, 1, 2, 1},
                          Shape{3, 400001, 1, 128}, Shape{2, 1100000, 2, 100000}}) {
    CAPTURE(sh.rows);
    CAPTURE(sh.cols);
    const std::vector<uint8_t> q = pattern(static_cast<size_t>(sh.rows * sh.cols), 11);
    const int64_t sr = (sh.rows + sh.bo - 1) / sh.bo, sc = (sh.cols + sh.bi - 1) / sh.bi;
    std::vector<float> s(static_cast<size_t>(sr * sc));
    for (size_t i = 0; i < s.size(); ++i) s[i] = 0.25f + 0.5f * static_cast<float>(i % 7);
    Ckpt c({bytes_tensor("m.weight", "F8_E4M3", {sh.rows, sh.cols}, q),
            f32_tensor("m.weight_scale_inv", {sr, sc}, s)},
           fp8_config("[" + std::to_string(sh.bo) + ", " + std::to_string(sh.bi) + "]"));
    auto r = c.open();
    const std::vector<float> whole = read_all(*r, "m.weight");
    check_same(whole, fp8_ref(q, s, sh.rows, sh.cols, sh.bo, sh.bi));
    const TensorMeta& m = *r->find("m.weight");
    const uint64_t n = whole.size();
    for (uint64_t first : {uint64_t{0}, uint64_t{1}, uint64_t{6}, n / 3, n / 2 + 5, n - 1}) {
      for (uint64_t count : {uint64_t{1}, uint64_t{2}, uint64_t{7}, uint64_t{301}, n / 2, n}) {
        if (first >= n) continue;
        count = std::min(count, n - first);
        const std::vector<float> part = read_part(*r, m, first, count);
        check_same(part, std::vector<float>(whole.begin() + static_cast<std::ptrdiff_t>(first),
                                            whole.begin() + static_cast<std::ptrdiff_t>(first + count)));
      }
    }
    // Beyond the end: refused, nothing read.
    std::vector<float> one(1);
    CHECK_THROWS_WITH_AS(r->read_range(m, n, 1, one.data()), doctest::Contains("requested of"), Error);
    CHECK_THROWS_AS(r->read_range(m, 1, n, one.data()), Error);
  }
}

TEST_CASE("fp8: the default read_range of a stored tensor") {
  Ckpt c({f32_tensor("a", {2, 3}, {1, 2, 3, 4, 5, 6})}, "{}");
  auto r = c.open();
  const TensorMeta& m = *r->find("a");
  CHECK(read_part(*r, m, 2, 3) == std::vector<float>{3, 4, 5});
  std::vector<float> v(1);
  CHECK_THROWS_AS(r->read_range(m, 6, 1, v.data()), Error);
  CHECK(r->describe() == "safetensors (1 file)");  // no quantization_config: the plain reader
}

TEST_CASE("fp8: a config.json that does not parse leaves the checkpoint as stored") {
  // Reporting it is the config reader's business (an in-process build may not read it at all).
  Ckpt c({bytes_tensor("q.weight", "F8_E4M3", {1, 1}, {0x38}), f32_tensor("q.weight_scale_inv", {1, 1}, {2.0f})},
         R"({"quantization_config": {"quant_method": "fp8")");
  auto r = c.open();
  CHECK(r->find("q.weight")->dtype == kDtypeFloat8E4M3FN);
  CHECK(r->find("q.weight_scale_inv") != nullptr);
  CHECK(r->describe() == "safetensors (1 file)");
}

TEST_CASE("fp8: modules listed as not converted stay as stored") {
  Ckpt c({bf16_tensor("lm_head.weight", {1, 2}, {0x3F80, 0x4000}),
          bytes_tensor("q.weight", "F8_E4M3", {1, 1}, {0x38}), f32_tensor("q.weight_scale_inv", {1, 1}, {2.0f})},
         fp8_config("[128, 128]", R"(, "modules_to_not_convert": ["lm_head"])"));
  auto r = c.open();
  CHECK(r->find("lm_head.weight")->dtype == MOBIUS_DTYPE_BFLOAT16);
  CHECK(read_all(*r, "q.weight") == std::vector<float>{2.0f});
  CHECK(r->describe() == "safetensors (1 file), fp8 e4m3 blocks 128x128 dequantized");
}

TEST_CASE("fp8: default block size and zero-size weights") {
  // No weight_block_size: transformers' default, 128x128.
  Ckpt c({bytes_tensor("a.weight", "F8_E4M3", {130, 2}, pattern(260, 3)),
          f32_tensor("a.weight_scale_inv", {2, 1}, {1.0f, 4.0f}),
          bytes_tensor("z.weight", "F8_E4M3", {0, 5}, {}), f32_tensor("z.weight_scale_inv", {0, 1}, {})},
         R"({"quantization_config": {"quant_method": "fp8"}})");
  auto r = c.open();
  const std::vector<float> a = read_all(*r, "a.weight");
  CHECK(same(a[129 * 2 + 1], static_cast<float>(e4m3_ref(pattern(260, 3)[259])) * 4.0f));
  const TensorMeta& z = *r->find("z.weight");
  CHECK(z.nbytes == 0);
  r->read(z, nullptr);
  r->read_range(z, 0, 0, nullptr);
}

TEST_CASE("fp8: refusals name the key, the file and the tensor") {
  const auto w = [](std::vector<int64_t> shape) {
    uint64_t n = 1;
    for (int64_t d : shape) n *= static_cast<uint64_t>(d);
    return bytes_tensor("l.weight", "F8_E4M3", shape, std::vector<uint8_t>(n, 0x38));
  };
  const auto s = [](std::vector<int64_t> shape) {
    uint64_t n = 1;
    for (int64_t d : shape) n *= static_cast<uint64_t>(d);
    return f32_tensor("l.weight_scale_inv", shape, std::vector<float>(n, 1.0f));
  };
  SUBCASE("quant_method") {
    expect_refused({w({2, 2}), s({1, 1})},
                   R"({"quantization_config": {"quant_method": "gptq"}})",
                   "[config] quantization_config.quant_method 'gptq' is not supported");
    expect_refused({w({2, 2}), s({1, 1})}, R"({"quantization_config": {"bits": 4}})",
                   "quantization_config has no quant_method");
    expect_refused({w({2, 2}), s({1, 1})}, R"({"quantization_config": [1]})",
                   "quantization_config [1] is not an object");
  }
  SUBCASE("fmt") {
    expect_refused({w({2, 2}), s({1, 1})}, fp8_config("[2, 2]", R"(, "fmt": "e5m2")"),
                   "quantization_config.fmt 'e5m2' is not supported");
  }
  SUBCASE("weight_block_size") {
    for (const char* bad : {"[128]", "[0, 128]", "[128, -1]", "[128.0, 128]", "\"128\"", "null",
                            "[128, 128, 1]", "[true, 1]", "[1, 99999999999999999999]"}) {
      CAPTURE(bad);
      expect_refused({w({2, 2}), s({1, 1})}, fp8_config(bad),
                     "is not two positive integers");
    }
  }
  SUBCASE("modules_to_not_convert") {
    expect_refused({w({2, 2}), s({1, 1})}, fp8_config("[2, 2]", R"(, "modules_to_not_convert": "lm_head")"),
                   "quantization_config.modules_to_not_convert is not a list");
  }
  SUBCASE("a weight without its scale") {
    expect_refused({w({2, 2})}, fp8_config("[2, 2]"),
                   "[checkpoint] model.safetensors: tensor 'l.weight' is F8_E4M3 but the checkpoint has no "
                   "'l.weight_scale_inv'");
  }
  SUBCASE("a weight without its scale in a module not to convert") {
    expect_refused({w({2, 2})}, fp8_config("[2, 2]", R"(, "modules_to_not_convert": ["l"])"),
                   "its module 'l' is in quantization_config.modules_to_not_convert");
    // Patterns are transformers' regular expressions, matched from the start.
    expect_refused({w({2, 2})}, fp8_config("[2, 2]", R"(, "modules_to_not_convert": ["l.*"])"),
                   "modules_to_not_convert ('l.*')");
  }
  SUBCASE("scale shape") {
    expect_refused({w({5, 7}), s({2, 3})}, fp8_config("[2, 3]"),
                   "tensor 'l.weight_scale_inv' has shape [2, 3]; for 'l.weight' [5, 7] in blocks of "
                   "2x3 (quantization_config.weight_block_size) it must be [3, 3]");
    expect_refused({w({4, 4}), s({4})}, fp8_config("[1, 4]"), "it must be [4, 1]");
  }
  SUBCASE("scale dtype") {
    StTensor i32{"l.weight_scale_inv", "I32", {1, 1}, {0x01, 0x00, 0x00, 0x00}};
    expect_refused({w({2, 2}), i32}, fp8_config("[2, 2]"),
                   "tensor 'l.weight_scale_inv' is int32; FP8 block scales are F32, BF16 or F16");
  }
  SUBCASE("rank") {
    expect_refused({w({2, 2, 2}), s({1, 1})}, fp8_config("[2, 2]"),
                   "tensor 'l.weight' is F8_E4M3 of shape [2, 2, 2]; FP8 block weights are matrices");
    expect_refused({w({4}), s({1, 1})}, fp8_config("[2, 2]"), "FP8 block weights are matrices");
  }
  SUBCASE("a stray scale") {
    expect_refused({s({1, 1})}, fp8_config("[2, 2]"),
                   "tensor 'l.weight_scale_inv' is an FP8 block scale, but the checkpoint has no "
                   "tensor 'l.weight'");
    expect_refused({f32_tensor("l.weight", {1, 1}, {1.0f}), s({1, 1})}, fp8_config("[2, 2]"),
                   "tensor 'l.weight_scale_inv' scales 'l.weight', which is float32, not F8_E4M3");
  }
  SUBCASE("F8 without an fp8 quantization_config") {
    expect_refused({w({2, 2}), s({1, 1})}, R"({"model_type": "llama"})",
                   "tensor 'l.weight' is F8_E4M3, but config.json has no quantization_config");
    expect_refused({w({2, 2}), s({1, 1})}, R"({"quantization_config": {"quant_method": "mxfp4"}})",
                   "quantization_config.quant_method is 'mxfp4'");
  }
}

TEST_CASE("fp8: the shard of the tensor is named") {
  TempDir d;
  write_safetensors(d / "model-00001-of-00002.safetensors",
                    {f32_tensor("a", {1}, {1.0f})});
  write_safetensors(d / "model-00002-of-00002.safetensors",
                    {bytes_tensor("l.weight", "F8_E4M3", {2, 2}, {1, 2, 3, 4})});
  write_text(d / "model.safetensors.index.json",
             R"({"weight_map": {"a": "model-00001-of-00002.safetensors",
                                "l.weight": "model-00002-of-00002.safetensors"}})");
  const std::string cfg = fp8_config("[2, 2]");
  CHECK_THROWS_WITH_AS(open_checkpoint(d.path(), &cfg),
                       doctest::Contains("[checkpoint] model-00002-of-00002.safetensors: tensor 'l.weight'"),
                       Error);
}

TEST_CASE("mxfp4: dequantized and transposed, against a hand computation") {
  // Two experts, three rows, two groups of 32 values.
  const int64_t E = 2, R = 3, G = 2;
  std::vector<uint8_t> blocks = pattern(static_cast<size_t>(E * R * G * 16), 5);
  // Scales covering 2^0, 2^1, 2^-127 (subnormal), 2^127, 255 (+inf: zero codes give NaN), 2^-27.
  std::vector<uint8_t> scales = {127, 128, 0, 254, 255, 100, 127, 127, 129, 126, 1, 200};
  blocks[0] = 0x2B;  // expert 0, row 0, group 0: values 0 and 1 are -1.5 (0xB) and 1.0 (0x2)
  Ckpt c({bytes_tensor("model.layers.0.mlp.experts.gate_up_proj_blocks", "U8", {E, R, G, 16}, blocks),
          bytes_tensor("model.layers.0.mlp.experts.gate_up_proj_scales", "U8", {E, R, G}, scales),
          f32_tensor("model.layers.0.mlp.experts.gate_up_proj_bias", {E, R}, {1, 2, 3, 4, 5, 6})},
         kMxfp4Config);
  auto r = c.open();
  REQUIRE(r->tensors().size() == 2);
  const TensorMeta& m = *r->find("model.layers.0.mlp.experts.gate_up_proj");
  CHECK(m.dtype == MOBIUS_DTYPE_FLOAT);
  CHECK(m.shape == std::vector<int64_t>{E, G * 32, R});
  CHECK_FALSE(r->extent(m).has_value());
  CHECK(r->reads_ranges(m));
  CHECK(r->find("model.layers.0.mlp.experts.gate_up_proj_blocks") == nullptr);
  CHECK(r->find("model.layers.0.mlp.experts.gate_up_proj_scales") == nullptr);
  CHECK(r->describe() == "safetensors (1 file), mxfp4 experts dequantized");

  const std::vector<float> got = read_all(*r, m.name);
  check_same(got, mxfp4_ref(blocks, scales, E, R, G));
  // Written out: [e=0, k=0, r=0] = -1.5 * 2^0, [0, 1, 0] = 1.0 (low nibble first).
  CHECK(got[0] == -1.5f);
  CHECK(got[1 * R + 0] == 1.0f);
  // Row 1 of expert 0 scales group 1 by 2^127 (254): 6.0 * 2^127 overflows to inf, as in torch.
  // Row 2 group 0 has 255: every nonzero value is +-inf, every zero NaN.
  for (int64_t k = 0; k < 32; ++k) {
    const float v = got[static_cast<size_t>(k * R + 2)];
    CHECK((std::isinf(v) || std::isnan(v)));
  }
  // Row 1 group 0 has 0: the values are v * 2^-127, subnormal floats, kept exactly.
  for (int64_t k = 0; k < 32; ++k) {
    const float v = got[static_cast<size_t>(k * R + 1)];
    CHECK((v == 0.0f || std::fpclassify(v) == FP_SUBNORMAL || std::fabs(v) >= 0x1p-126f));
  }

  // Every range equals the whole read, across rows and experts.
  const uint64_t n = got.size();
  for (uint64_t first : {uint64_t{0}, uint64_t{1}, uint64_t{2}, uint64_t{95}, uint64_t{96}, n / 2 + 1, n - 1})
    for (uint64_t count : {uint64_t{1}, uint64_t{3}, uint64_t{4}, uint64_t{97}, n}) {
      if (first >= n) continue;
      count = std::min(count, n - first);
      check_same(read_part(*r, m, first, count),
                 std::vector<float>(got.begin() + static_cast<std::ptrdiff_t>(first),
                                    got.begin() + static_cast<std::ptrdiff_t>(first + count)));
    }
}

TEST_CASE("mxfp4: gpt-oss shapes, gate_up [E, H, 2I] and down [E, I, H]") {
  const int64_t E = 2, H = 64, I = 32;
  const auto blocks = pattern(static_cast<size_t>(E * 2 * I * (H / 32) * 16), 9);
  const auto scales = std::vector<uint8_t>(static_cast<size_t>(E * 2 * I * (H / 32)), 127);
  const auto dblocks = pattern(static_cast<size_t>(E * H * (I / 32) * 16), 10);
  const auto dscales = std::vector<uint8_t>(static_cast<size_t>(E * H * (I / 32)), 126);
  Ckpt c({bytes_tensor("e.gate_up_proj_blocks", "U8", {E, 2 * I, H / 32, 16}, blocks),
          bytes_tensor("e.gate_up_proj_scales", "U8", {E, 2 * I, H / 32}, scales),
          bytes_tensor("e.down_proj_blocks", "U8", {E, H, I / 32, 16}, dblocks),
          bytes_tensor("e.down_proj_scales", "U8", {E, H, I / 32}, dscales)},
         kMxfp4Config);
  auto r = c.open();
  CHECK(r->find("e.gate_up_proj")->shape == std::vector<int64_t>{E, H, 2 * I});
  CHECK(r->find("e.down_proj")->shape == std::vector<int64_t>{E, I, H});
  check_same(read_all(*r, "e.gate_up_proj"), mxfp4_ref(blocks, scales, E, 2 * I, H / 32));
  check_same(read_all(*r, "e.down_proj"), mxfp4_ref(dblocks, dscales, E, H, I / 32));
}

TEST_CASE("mxfp4: refusals") {
  const auto b = [](std::vector<int64_t> shape, const char* dtype = "U8") {
    uint64_t n = 1;
    for (int64_t d : shape) n *= static_cast<uint64_t>(d);
    return bytes_tensor("x_blocks", dtype, shape, std::vector<uint8_t>(n, 0x11));
  };
  const auto s = [](std::vector<int64_t> shape, const char* dtype = "U8") {
    uint64_t n = 1;
    for (int64_t d : shape) n *= static_cast<uint64_t>(d);
    return bytes_tensor("x_scales", dtype, shape, std::vector<uint8_t>(n, 127));
  };
  expect_refused({b({1, 2, 1, 16})}, kMxfp4Config,
                 "tensor 'x_blocks' holds MXFP4 blocks, but the checkpoint has no 'x_scales'");
  expect_refused({s({1, 2, 1})}, kMxfp4Config,
                 "tensor 'x_scales' is an MXFP4 scale, but the checkpoint has no 'x_blocks'");
  expect_refused({b({1, 2, 1, 8}), s({1, 2, 1})}, kMxfp4Config,
                 "MXFP4 blocks 'x_blocks' have shape [1, 2, 1, 8]; they must be [experts, rows, groups, 16]");
  expect_refused({b({2, 16}), s({2})}, kMxfp4Config, "they must be [experts, rows, groups, 16]");
  expect_refused({b({1, 2, 1, 16}), s({1, 2, 2})}, kMxfp4Config,
                 "MXFP4 scales 'x_scales' have shape [1, 2, 2]; for blocks 'x_blocks' [1, 2, 1, 16] they "
                 "must be [1, 2, 1]");
  expect_refused({b({1, 2, 1, 16}), s({1, 2})}, kMxfp4Config, "they must be [1, 2, 1]");
  expect_refused({b({1, 2, 1, 16}), s({1, 2, 1}, "I8")}, kMxfp4Config, "both must be U8");
  expect_refused({b({1, 2, 1, 16}), s({1, 2, 1}), f32_tensor("x", {1}, {1.0f})}, kMxfp4Config,
                 "tensor 'x' is stored both as it is and as MXFP4");
}

TEST_CASE("hostile sizes: empty experts with huge dimensions, no overflow, no crash") {
  // Zero experts: no bytes, but the other dimensions would overflow once multiplied by 32.
  const int64_t big = int64_t{1} << 58;
  Ckpt c({bytes_tensor("x_blocks", "U8", {0, 1, big, 16}, {}), bytes_tensor("x_scales", "U8", {0, 1, big}, {})},
         kMxfp4Config);
  std::string msg;
  try {
    c.open();
  } catch (const Error& e) {
    msg = e.what();
  }
  CHECK(msg.find("are too large") != std::string::npos);
  // Within range: an empty virtual tensor, read as nothing.
  Ckpt d({bytes_tensor("x_blocks", "U8", {0, 1 << 20, 1 << 20, 16}, {}),
          bytes_tensor("x_scales", "U8", {0, 1 << 20, 1 << 20}, {})},
         kMxfp4Config);
  auto r = d.open();
  const TensorMeta& m = *r->find("x");
  CHECK(m.nbytes == 0);
  r->read(m, nullptr);
  // An fp8 weight of no rows and very many columns.
  Ckpt f({bytes_tensor("w.weight", "F8_E4M3", {0, int64_t{1} << 62}, {}),
          f32_tensor("w.weight_scale_inv", {0, int64_t{1} << 62}, {})},
         fp8_config("[1, 1]"));
  auto rf = f.open();
  CHECK(rf->find("w.weight")->nbytes == 0);
}

TEST_CASE("the fp8 golden checkpoints read as float32") {
  for (const std::string name : {"qwen3-fp8", "deepseek-v3-fp8"}) {
    CAPTURE(name);
    const fs::path dir = golden(name);
    const std::string cfg = read_text(dir / "config.json");
    auto raw = open_safetensors_checkpoint(dir);
    auto r = open_checkpoint(dir, &cfg);
    size_t scales = 0;
    for (const TensorMeta& t : raw->tensors()) scales += t.name.find("_scale_inv") != std::string::npos;
    CHECK(scales > 0);
    CHECK(r->tensors().size() + scales == raw->tensors().size());
    for (const TensorMeta& t : r->tensors()) {
      CHECK(t.dtype != kDtypeFloat8E4M3FN);
      CHECK(t.name.find("_scale_inv") == std::string::npos);
    }
    // One weight by hand from the raw bytes.
    const std::string wname = "model.layers.1.self_attn.o_proj.weight";
    const TensorMeta& q = *raw->find(wname);
    const TensorMeta& s = *raw->find(wname + "_scale_inv");
    std::vector<uint8_t> qb(q.nbytes), sb(s.nbytes);
    raw->read(q, qb.data());
    raw->read(s, sb.data());
    const int64_t cols = q.shape[1], scols = s.shape[1];
    const int64_t bo = (q.shape[0] + s.shape[0] - 1) / s.shape[0], bi = (cols + scols - 1) / scols;
    const std::vector<float> w = read_all(*r, wname);
    size_t bad = 0;
    for (int64_t i = 0; i < q.shape[0]; ++i)
      for (int64_t j = 0; j < cols; ++j) {
        const size_t si = static_cast<size_t>((i / bo) * scols + j / bi);
        const float scale = s.dtype == MOBIUS_DTYPE_FLOAT
                                ? reinterpret_cast<const float*>(sb.data())[si]
                                : bf16_value(reinterpret_cast<const uint16_t*>(sb.data())[si]);
        const float want = static_cast<float>(e4m3_ref(qb[static_cast<size_t>(i * cols + j)])) * scale;
        bad += !same(w[static_cast<size_t>(i * cols + j)], want);
      }
    CHECK(bad == 0);
    CHECK(r->describe().find("fp8 e4m3 blocks") != std::string::npos);
  }
}

TEST_CASE("end to end: the fp8 golden cases build and match transformers") {
  for (const std::string name : {"qwen3-fp8", "deepseek-v3-fp8"}) {
    CAPTURE(name);
    TempDir t;
    RunResult b = build_cli(golden(name), t / "out", "--runtime onnxruntime");
    INFO(b.output);
    REQUIRE(b.status == 0);
    RunResult p = parity(t / "out", name);
    INFO(p.output);
    CHECK(p.status == 0);
  }
}
