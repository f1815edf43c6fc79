// test_weight_layout.cpp - plan_layout's layouts: transposed copies and the parts of MatMulNBits
// block quantization, streamed from the checkpoint tile by tile (write) and made in memory
// (materialize), against plain reference implementations: a transpose, and ONNX Runtime's
// quantizer written out element by element. Then the layouts in ONNX Runtime itself.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "checkpoint/checkpoint.hpp"
#include "mobius/build.hpp"
#include "mobius/sdk/context.hpp"
#include "mobius/sdk/half.hpp"
#include "mobius/sdk/quant.hpp"
#include "test_util.hpp"
#include "weights/weight_plan.hpp"

using namespace mobius::test;
using mobius::CheckpointReader;
using mobius::PlannedInitializer;
using mobius::StreamingLayoutSource;
using mobius::StreamingWeightPlan;
using mobius::TensorMeta;

namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

// A checkpoint tensor: its values as float32 (exactly what its dtype stores).
struct Source {
  std::string name;
  std::string dtype;  // F32, F16 or BF16
  int64_t rows, cols;
  std::vector<float> values;
};

float stored_as(const std::string& dtype, float v) {
  if (dtype == "F16") return mobius::f16_to_float(mobius::float_to_f16(v));
  if (dtype == "BF16") return mobius::bf16_to_float(mobius::float_to_bf16(v));
  return v;
}

// Weights as a checkpoint has them: small values around 0 (rounded to the dtype), with `specials`
// (NaN, infinities, halfway cases...) at the front.
Source source(const std::string& name, const std::string& dtype, int64_t rows, int64_t cols,
              unsigned seed, const std::vector<float>& specials = {}) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 0.05f);
  Source s{name, dtype, rows, cols, std::vector<float>(static_cast<size_t>(rows * cols))};
  for (size_t i = 0; i < s.values.size(); ++i)
    s.values[i] = stored_as(dtype, i < specials.size() ? specials[i] : normal(rng));
  return s;
}

StTensor st_tensor(const Source& s) {
  StTensor t{s.name, s.dtype, {s.rows, s.cols}, {}};
  for (float v : s.values) {
    uint8_t b[4];
    size_t n = 4;
    if (s.dtype == "F32") {
      std::memcpy(b, &v, 4);
    } else {
      uint16_t h = s.dtype == "F16" ? mobius::float_to_f16(v) : mobius::float_to_bf16(v);
      std::memcpy(b, &h, 2);
      n = 2;
    }
    t.bytes.insert(t.bytes.end(), b, b + n);
  }
  return t;
}

// A checkpoint folder holding `sources`, opened.
struct Checkpoint {
  TempDir dir;
  std::unique_ptr<CheckpointReader> reader;
  explicit Checkpoint(const std::vector<Source>& sources) {
    std::vector<StTensor> ts;
    for (const auto& s : sources) ts.push_back(st_tensor(s));
    write_text(dir / "config.json", "{}");
    write_safetensors(dir / "model.safetensors", ts);
    reader = mobius::open_safetensors_checkpoint(dir.path());
  }
};

// The same checkpoint through a reader that cannot point into its file (as for a pickle tensor
// that is not contiguous there): the writers gather each tensor whole.
class NoExtentReader : public CheckpointReader {
 public:
  explicit NoExtentReader(const CheckpointReader& r) : r_(r) {}
  const std::vector<TensorMeta>& tensors() const override { return r_.tensors(); }
  const TensorMeta* find(std::string_view name) const override { return r_.find(name); }
  void read(const TensorMeta& m, void* dst) const override { r_.read(m, dst); }
  std::string describe() const override { return "no extents"; }

 private:
  const CheckpointReader& r_;
};

// The same checkpoint as a reader whose tensors are computed piece by piece (as dequantized FP8
// or MXFP4 tensors are): no extents, and read() of a whole tensor is an error, so the writers
// must take it range by range and never hold a whole tensor.
class RangeReader : public CheckpointReader {
 public:
  explicit RangeReader(const CheckpointReader& r) : r_(r) {}
  const std::vector<TensorMeta>& tensors() const override { return r_.tensors(); }
  const TensorMeta* find(std::string_view name) const override { return r_.find(name); }
  void read(const TensorMeta& m, void*) const override {
    FAIL("read() of the whole tensor " << m.name << " from a reader that reads ranges");
  }
  void read_range(const TensorMeta& m, uint64_t first, uint64_t count, void* dst) const override {
    ranges_ += 1;
    r_.read_range(m, first, count, dst);
  }
  bool reads_ranges(const TensorMeta&) const override { return true; }
  std::string describe() const override { return "ranges"; }
  mutable std::atomic<int> ranges_{0};

 private:
  const CheckpointReader& r_;
};

// The concatenated matrix [sum rows, cols] of `sources`, row-major.
std::vector<float> matrix(const std::vector<Source>& sources) {
  std::vector<float> w;
  for (const auto& s : sources) w.insert(w.end(), s.values.begin(), s.values.end());
  return w;
}

std::vector<std::string> names(const std::vector<Source>& sources) {
  std::vector<std::string> n;
  for (const auto& s : sources) n.push_back(s.name);
  return n;
}

mobius_weight_layout transposed() {
  mobius_weight_layout l{};
  l.struct_size = sizeof(l);
  l.kind = MOBIUS_LAYOUT_TRANSPOSED;
  return l;
}

mobius_weight_layout quantized(int bits, int block, bool symmetric, int part) {
  mobius_weight_layout l{};
  l.struct_size = sizeof(l);
  l.kind = MOBIUS_LAYOUT_BLOCK_QUANTIZED;
  l.bits = bits;
  l.block_size = block;
  l.symmetric = symmetric ? 1 : 0;
  l.part = part;
  return l;
}

// The layout's bytes as write() streams them into a file, after 4160 other bytes; checks that
// nothing else of the file is written and that progress counts every byte.
std::vector<uint8_t> written(const StreamingWeightPlan& plan, const PlannedInitializer& init,
                             const CheckpointReader& reader) {
  constexpr uint64_t kOffset = 4096 + 64;
  TempDir t;
  const fs::path p = t / "model.onnx.data";
  const int fd = ::open(p.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0600);
  REQUIRE(fd >= 0);
  std::atomic<uint64_t> progress{0};
  plan.write(init, &reader, fd, kOffset, [] { return false; }, &progress);
  CHECK(progress == init.nbytes());
  CHECK(fs::file_size(p) == kOffset + init.nbytes());
  std::vector<uint8_t> out(init.nbytes());
  CHECK(::pread(fd, out.data(), out.size(), kOffset) == static_cast<ssize_t>(out.size()));
  ::close(fd);
  return out;
}

std::vector<uint8_t> materialized(const StreamingWeightPlan& plan, const PlannedInitializer& init,
                                  const CheckpointReader& reader) {
  std::vector<uint8_t> out(init.nbytes());
  plan.materialize(init, &reader, out.data());
  return out;
}

const PlannedInitializer& planned(const StreamingWeightPlan& plan, const std::string& name) {
  for (const auto& i : plan.initializers())
    if (i.name == name) return i;
  FAIL("no initializer " << name);
  return plan.initializers().front();
}

// Restores the layouts' defaults when a test is done with them.
struct LayoutSettings {
  LayoutSettings(size_t tile, bool simd) {
    mobius::set_layout_tile_for_testing(tile);
    mobius::set_layout_simd_for_testing(simd);
  }
  ~LayoutSettings() {
    mobius::set_layout_tile_for_testing(0);
    mobius::set_layout_simd_for_testing(true);
  }
};

// Every way the host makes a layout's bytes gives `expect`: streamed with the default tiles and
// with tiny ones (many tiles and bands, rows read a few columns at a time), through the AVX2
// kernels and the portable ones, from the file and from tensors gathered whole, and in memory.
void check_all_ways(const StreamingWeightPlan& plan, const PlannedInitializer& init,
                    const CheckpointReader& reader, const std::vector<uint8_t>& expect) {
  const NoExtentReader gathered(reader);
  const RangeReader ranges(reader);
  for (size_t tile : {size_t{0}, size_t{8}, size_t{16}})
    for (bool simd : {true, false}) {
      CAPTURE(tile);
      CAPTURE(simd);
      LayoutSettings settings(tile, simd);
      CHECK(written(plan, init, reader) == expect);
      CHECK(written(plan, init, gathered) == expect);
      CHECK(written(plan, init, ranges) == expect);
      CHECK(materialized(plan, init, reader) == expect);
    }
}

// The initializers of a group as write_group() streams them into one file, each after 64 bytes
// of the one before; checks that progress counts every byte.
std::vector<std::vector<uint8_t>> written_group(const StreamingWeightPlan& plan,
                                                const std::vector<size_t>& group,
                                                const CheckpointReader& reader) {
  TempDir t;
  const fs::path p = t / "model.onnx.data";
  const int fd = ::open(p.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0600);
  REQUIRE(fd >= 0);
  const auto& inits = plan.initializers();
  std::vector<mobius::WeightOutput> out(inits.size(), mobius::WeightOutput{fd, nullptr});
  std::vector<uint64_t> offset(inits.size(), 0);
  uint64_t at = 64, total = 0;
  for (size_t i : group) {
    offset[i] = at;
    at += inits[i].nbytes() + 64;
    total += inits[i].nbytes();
  }
  std::atomic<uint64_t> progress{0};
  plan.write_group(group, &reader, out, offset, [] { return false; }, &progress);
  CHECK(progress == total);
  std::vector<std::vector<uint8_t>> parts;
  for (size_t i : group) {
    parts.emplace_back(inits[i].nbytes());
    CHECK(::pread(fd, parts.back().data(), parts.back().size(), static_cast<off_t>(offset[i])) ==
          static_cast<ssize_t>(parts.back().size()));
  }
  ::close(fd);
  return parts;
}

// The quantization whose parts are the initializers named `part0`, `part1`... is one group of
// write_groups(), and writing it gives each part's `expect` with every tile size and kernel.
void check_group_ways(const StreamingWeightPlan& plan, const CheckpointReader& reader,
                      const std::vector<const std::vector<uint8_t>*>& expect) {
  std::vector<size_t> group;
  for (const auto& g : plan.write_groups())
    if (plan.initializers()[g.front()].name == "part0") group = g;
  REQUIRE(group.size() == expect.size());
  std::vector<std::vector<uint8_t>> want;
  for (size_t i : group) {
    const std::string& name = plan.initializers()[i].name;
    want.push_back(*expect[static_cast<size_t>(std::stoi(name.substr(4)))]);
  }
  const NoExtentReader gathered(reader);
  const RangeReader ranges(reader);
  for (size_t tile : {size_t{0}, size_t{8}})
    for (bool simd : {true, false}) {
      CAPTURE(tile);
      CAPTURE(simd);
      LayoutSettings settings(tile, simd);
      CHECK(written_group(plan, group, reader) == want);
      CHECK(written_group(plan, group, gathered) == want);
      CHECK(written_group(plan, group, ranges) == want);
    }
}

std::vector<uint8_t> encode(int32_t dtype, float v) {
  std::vector<uint8_t> b(mobius::dtype_size(dtype));
  if (dtype == MOBIUS_DTYPE_FLOAT) {
    std::memcpy(b.data(), &v, 4);
  } else if (dtype == MOBIUS_DTYPE_DOUBLE) {
    double d = v;
    std::memcpy(b.data(), &d, 8);
  } else {
    uint16_t h = dtype == MOBIUS_DTYPE_FLOAT16 ? mobius::float_to_f16(v) : mobius::float_to_bf16(v);
    std::memcpy(b.data(), &h, 2);
  }
  return b;
}

// W^T of the [n, k] matrix `w`, in `dtype`.
std::vector<uint8_t> transpose_reference(const std::vector<float>& w, int64_t n, int64_t k,
                                         int32_t dtype) {
  std::vector<uint8_t> out;
  for (int64_t j = 0; j < k; ++j)
    for (int64_t i = 0; i < n; ++i) {
      auto b = encode(dtype, w[static_cast<size_t>(i * k + j)]);
      out.insert(out.end(), b.begin(), b.end());
    }
  return out;
}

// ONNX Runtime's MatMulNBits quantizer as matmul_nbits_quantizer.py runs it, element by element:
// the weight zero-padded to whole blocks, then MlasQuantizeBlockwise (q4_dq.cpp: BitsTraits,
// range2scale, range2scalezp, quantizeAndTranspose) with the scales in `scale_dtype`.
struct OrtQuantized {
  std::vector<uint8_t> data, scales, zero_points;
};

OrtQuantized ort_quantize(const std::vector<float>& w, int64_t n, int64_t k, int bits, int block,
                          bool symmetric, int32_t scale_dtype) {
  const int64_t blocks = (k + block - 1) / block;
  const int pack = 8 / bits;
  const float max_code = static_cast<float>((1 << bits) - 1);
  const float half_range = static_cast<float>(1 << (bits - 1));
  OrtQuantized q;
  q.data.assign(static_cast<size_t>(n * blocks * block * bits / 8), 0);
  q.zero_points.assign(static_cast<size_t>(n * ((blocks + pack - 1) / pack)), 0);
  for (int64_t r = 0; r < n; ++r) {
    std::vector<uint8_t> zps(static_cast<size_t>(blocks + pack),
                             static_cast<uint8_t>(1 << (bits - 1)));
    for (int64_t b = 0; b < blocks; ++b) {
      std::vector<float> v(static_cast<size_t>(block), 0.0f);  // np.pad(..., "constant")
      for (int64_t i = 0; i < block && b * block + i < k; ++i)
        v[static_cast<size_t>(i)] = w[static_cast<size_t>(r * k + b * block + i)];
      float min = std::numeric_limits<float>::max(), max = -min;
      for (float x : v) {
        if (x < min) min = x;
        if (x > max) max = x;
      }
      float scale_f;
      uint8_t& zp = zps[static_cast<size_t>(b)];
      if (symmetric) {
        max = std::fabs(max) > std::fabs(min) ? max : min;
        scale_f = -max / half_range;
      } else {
        min = std::min(min, 0.0f);
        max = std::max(max, 0.0f);
        scale_f = (max - min) / max_code;
        float zero_point_fp = min;
        if (scale_f != 0.0f) zero_point_fp = 0.0f - min / scale_f;
        if (zero_point_fp < 0.0f)
          zp = 0;
        else if (zero_point_fp > max_code)
          zp = static_cast<uint8_t>(max_code);
        else
          zp = static_cast<uint8_t>(std::roundf(zero_point_fp));
      }
      auto sb = encode(scale_dtype, scale_f);  // ScaleT(scale_f)
      q.scales.insert(q.scales.end(), sb.begin(), sb.end());
      const float scale = scale_dtype == MOBIUS_DTYPE_FLOAT16
                              ? mobius::f16_to_float(mobius::float_to_f16(scale_f))
                              : scale_f;
      const float reciprocal_scale = scale ? 1.0f / scale : 0.0f;
      for (int64_t i = 0; i < block; ++i) {
        const auto vi = static_cast<uint8_t>(std::clamp(
            std::roundf(v[static_cast<size_t>(i)] * reciprocal_scale + zp), 0.0f, max_code));
        const size_t at = static_cast<size_t>((r * blocks + b) * block + i);
        q.data[at / pack] |= static_cast<uint8_t>(vi << (bits * (at % pack)));
      }
    }
    for (int64_t b = 0; b < blocks; b += pack) {
      uint8_t byte = 0;
      for (int j = 0; j < pack; ++j)
        byte |= static_cast<uint8_t>(zps[static_cast<size_t>(b + j)] << (bits * j));
      q.zero_points[static_cast<size_t>(r * ((blocks + pack - 1) / pack) + b / pack)] = byte;
    }
  }
  return q;
}

}  // namespace

TEST_CASE("layout: transposed, from float32, float16 and bfloat16 tensors into each float dtype") {
  // q, k and v projections of different heights, concatenated: [37, 29] -> [29, 37]. Neither
  // side is a multiple of 8, so every tile has ragged edges.
  const std::vector<float> specials = {0.0f,     -0.0f,    kNaN,  kInf, -kInf, 1e-40f,
                                       65504.0f, 70000.0f, 1.0f + 1.0f / 2048.0f,
                                       3.0f + 1.0f / 256.0f};
  for (const char* dtype : {"F32", "F16", "BF16"}) {
    CAPTURE(dtype);
    const std::vector<Source> qkv = {source("q", dtype, 5, 29, 1, specials),
                                     source("k", dtype, 13, 29, 2), source("v", dtype, 19, 29, 3)};
    Checkpoint ckpt(qkv);
    for (int32_t to :
         {MOBIUS_DTYPE_FLOAT, MOBIUS_DTYPE_FLOAT16, MOBIUS_DTYPE_BFLOAT16, MOBIUS_DTYPE_DOUBLE}) {
      CAPTURE(to);
      StreamingWeightPlan plan;
      plan.declare("w", to, {29, 37});
      plan.set_source("w", StreamingLayoutSource{names(qkv), transposed()});
      plan.preflight(*ckpt.reader, "test");
      check_all_ways(plan, planned(plan, "w"), *ckpt.reader,
                     transpose_reference(matrix(qkv), 37, 29, to));
    }
  }
}

// W^T of the [n, k] matrix `w` as float32 bytes (transpose_reference, fast enough for large w).
std::vector<uint8_t> transpose_f32(const std::vector<float>& w, int64_t n, int64_t k) {
  std::vector<float> t(w.size());
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < k; ++j) t[static_cast<size_t>(j * n + i)] = w[static_cast<size_t>(i * k + j)];
  const auto* b = reinterpret_cast<const uint8_t*>(t.data());
  return std::vector<uint8_t>(b, b + t.size() * 4);
}

TEST_CASE("layout: a transposed weight larger than one tile streams with the default tiles") {
  // Output larger than a tile (32 MiB). 3000 x 3000: tiles of whole output rows (2792 and 208),
  // each source row read as a slice of those columns and each tile written in one go. 40000 x
  // 300: too many source rows for whole output rows, so bands of 27960 and 12040 whole source
  // rows, each output row written in two segments.
  for (auto [n, k] : {std::pair<int64_t, int64_t>{3000, 3000}, {40000, 300}}) {
    CAPTURE(n);
    const std::vector<Source> w = {source("w", "BF16", n, k, 4)};
    Checkpoint ckpt(w);
    StreamingWeightPlan plan;
    plan.declare("w_t", MOBIUS_DTYPE_FLOAT, {k, n});
    plan.set_source("w_t", StreamingLayoutSource{{"w"}, transposed()});
    const auto expect = transpose_f32(matrix(w), n, k);
    CHECK(written(plan, planned(plan, "w_t"), *ckpt.reader) == expect);
    CHECK(written(plan, planned(plan, "w_t"), NoExtentReader(*ckpt.reader)) == expect);
    const RangeReader ranges(*ckpt.reader);
    CHECK(written(plan, planned(plan, "w_t"), ranges) == expect);
    CHECK(ranges.ranges_ > 1);  // in pieces
  }
}

TEST_CASE("layout: a tensor copied or cast as it is, from a reader that reads ranges") {
  // 18 MiB of bfloat16, more than one 16 MiB chunk of the writer: read in pieces, never whole.
  const std::vector<Source> w = {source("w", "BF16", 3072, 3072, 5)};
  Checkpoint ckpt(w);
  for (int32_t to : {MOBIUS_DTYPE_BFLOAT16, MOBIUS_DTYPE_FLOAT}) {
    CAPTURE(to);
    StreamingWeightPlan plan;
    plan.declare("w", to, {3072, 3072});
    plan.set_source("w", mobius::StreamingWeightSource{"w"});
    const RangeReader ranges(*ckpt.reader);
    CHECK(written(plan, planned(plan, "w"), ranges) == written(plan, planned(plan, "w"), *ckpt.reader));
    CHECK(ranges.ranges_ > 1);
  }
}

TEST_CASE("layout: transposed in tiles of whole output rows, across the concatenated tensors") {
  // 5 + 7 rows of 50 columns: with tiles of 16 rows and columns every tile holds all 12 rows
  // (whole output rows, one write each) and 16 columns (the last 2), read from both tensors.
  const std::vector<Source> qk = {source("q", "F16", 5, 50, 8), source("k", "F32", 7, 50, 9)};
  Checkpoint ckpt(qk);
  StreamingWeightPlan plan;
  plan.declare("w", MOBIUS_DTYPE_BFLOAT16, {50, 12});
  plan.set_source("w", StreamingLayoutSource{names(qk), transposed()});
  plan.preflight(*ckpt.reader, "test");
  const auto expect = transpose_reference(matrix(qk), 12, 50, MOBIUS_DTYPE_BFLOAT16);
  for (bool simd : {true, false}) {
    CAPTURE(simd);
    LayoutSettings settings(16, simd);
    CHECK(written(plan, planned(plan, "w"), *ckpt.reader) == expect);
    CHECK(written(plan, planned(plan, "w"), NoExtentReader(*ckpt.reader)) == expect);
  }
}

TEST_CASE("layout: a block quantization by hand") {
  // One row of 18 values in blocks of 16: the second block is 2 values and 14 zeros of padding.
  // Asymmetric 4 bits, block 0: range [0, 15] -> scale 1, zero point 0; 2.5 and 0.5 round half
  // away from zero (to 3 and 1, where rounding to even would give 2 and 0). Block 1: [-3, 0]
  // -> scale 0.2, zero point 15 (-3 -> 0, 0 -> 15).
  const std::vector<float> row = {0, 15, 2.5f, 0.5f, 1,  2,  3,  4,  5,
                                  6, 7,  8,    9,    10, 11, 12, -3, -1.5f};
  const std::vector<Source> w = {{"w", "F32", 1, 18, row}};
  Checkpoint ckpt(w);
  StreamingWeightPlan plan;
  plan.declare("q", MOBIUS_DTYPE_UINT8, {1, 2, 8});
  plan.declare("s", MOBIUS_DTYPE_FLOAT, {1, 2});
  plan.declare("z", MOBIUS_DTYPE_UINT8, {1, 1});
  plan.set_source("q",
                  StreamingLayoutSource{{"w"}, quantized(4, 16, false, MOBIUS_QUANT_PART_DATA)});
  plan.set_source("s",
                  StreamingLayoutSource{{"w"}, quantized(4, 16, false, MOBIUS_QUANT_PART_SCALES)});
  plan.set_source(
      "z", StreamingLayoutSource{{"w"}, quantized(4, 16, false, MOBIUS_QUANT_PART_ZERO_POINTS)});
  plan.preflight(*ckpt.reader, "test");
  // Codes 0 15 3 1 1 2 3 4 5 6 7 8 9 10 11 12 | 0 8 (-1.5 / 0.2 + 15 = 7.5 -> 8) then 15 x 14.
  const std::vector<uint8_t> data = {0xf0, 0x13, 0x21, 0x43, 0x65, 0x87, 0xa9, 0xcb,
                                     0x80, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
  check_all_ways(plan, planned(plan, "q"), *ckpt.reader, data);
  const float scales[2] = {1.0f, 3.0f / 15.0f};
  check_all_ways(plan, planned(plan, "s"), *ckpt.reader,
                 std::vector<uint8_t>(reinterpret_cast<const uint8_t*>(scales),
                                      reinterpret_cast<const uint8_t*>(scales) + 8));
  check_all_ways(plan, planned(plan, "z"), *ckpt.reader, {0xf0});

  // Symmetric 8 bits, block 16: block 0's largest magnitude is 15 -> scale -15/128, codes
  // round(x * -128/15 + 128); block 1's is -3 -> scale 3/128. No zero points.
  StreamingWeightPlan sym;
  sym.declare("q", MOBIUS_DTYPE_UINT8, {1, 2, 16});
  sym.declare("s", MOBIUS_DTYPE_FLOAT16, {1, 2});
  sym.set_source("q", StreamingLayoutSource{{"w"}, quantized(8, 16, true, MOBIUS_QUANT_PART_DATA)});
  sym.set_source("s",
                 StreamingLayoutSource{{"w"}, quantized(8, 16, true, MOBIUS_QUANT_PART_SCALES)});
  const float s0 = mobius::f16_to_float(mobius::float_to_f16(-15.0f / 128.0f));
  const float s1 = mobius::f16_to_float(mobius::float_to_f16(3.0f / 128.0f));
  std::vector<uint8_t> codes;
  for (size_t i = 0; i < 32; ++i) {
    const float x = i < row.size() ? row[i] : 0.0f;
    codes.push_back(static_cast<uint8_t>(std::roundf(x * (1.0f / (i < 16 ? s0 : s1)) + 128.0f)));
  }
  CHECK(codes[0] == 128);
  CHECK(codes[1] == 0);
  CHECK(codes[16] == 0);
  check_all_ways(sym, planned(sym, "q"), *ckpt.reader, codes);
  std::vector<uint8_t> s16;
  for (float s : {-15.0f / 128.0f, 3.0f / 128.0f})
    for (uint8_t b : encode(MOBIUS_DTYPE_FLOAT16, s)) s16.push_back(b);
  check_all_ways(sym, planned(sym, "s"), *ckpt.reader, s16);
}

TEST_CASE("layout: block quantization equals ONNX Runtime's quantizer byte for byte") {
  // Rows that test the rules: an all-zero block (its symmetric scale is -0 as the reference's),
  // one huge value among small ones, one sign only, a +-m tie (the minimum wins), and codes
  // halfway between two (4-bit asymmetric blocks of 16 with scale 1: k + 0.5 rounds up).
  std::vector<float> specials(128 * 6, 0.0f);
  for (int i = 0; i < 128; ++i) {
    specials[128 + i] = (i % 7 - 3) * 0.01f;
    specials[256 + i] = -0.5f - 0.01f * i;
    specials[384 + i] = 0.25f + 0.01f * i;
    specials[512 + i] = i % 2 ? 2.0f : -2.0f;
    specials[640 + i] = i % 16 == 0 ? 0.0f : i % 16 == 1 ? 15.0f : (i % 16) - 0.5f;  // scale 1
  }
  specials[128 + 40] = 1e4f;
  for (const char* dtype : {"F32", "F16", "BF16"}) {
    // K = 128 in rows of the specials; then K = 100 (not a multiple of any block).
    for (int64_t k : {int64_t{128}, int64_t{100}}) {
      const std::vector<Source> gate_up = {
          source("gate", dtype, 6, k, 5, k == 128 ? specials : std::vector<float>{}),
          source("up", dtype, 11, k, 6)};
      Checkpoint ckpt(gate_up);
      const std::vector<float> w = matrix(gate_up);
      for (int bits : {4, 8})
        for (bool symmetric : {false, true})
          for (int block : {16, 32, 128})
            for (int32_t scale_dtype : {MOBIUS_DTYPE_FLOAT, MOBIUS_DTYPE_FLOAT16}) {
              CAPTURE(dtype);
              CAPTURE(k);
              CAPTURE(bits);
              CAPTURE(symmetric);
              CAPTURE(block);
              CAPTURE(scale_dtype);
              const mobius::BlockQuant q{bits, block, symmetric};
              const OrtQuantized ref = ort_quantize(w, 17, k, bits, block, symmetric, scale_dtype);
              StreamingWeightPlan plan;
              const int32_t dtypes[] = {MOBIUS_DTYPE_UINT8, scale_dtype, MOBIUS_DTYPE_UINT8};
              const std::vector<uint8_t>* expect[] = {&ref.data, &ref.scales, &ref.zero_points};
              const int parts = symmetric ? 2 : 3;
              for (int part = 0; part < parts; ++part) {
                const std::string name = "part" + std::to_string(part);
                plan.declare(name, dtypes[part], mobius::quant_part_shape(q, part, 17, k));
                plan.set_source(name, StreamingLayoutSource{
                                          names(gate_up), quantized(bits, block, symmetric, part)});
              }
              plan.preflight(*ckpt.reader, "test");
              for (int part = 0; part < parts; ++part) {
                CAPTURE(part);
                check_all_ways(plan, planned(plan, "part" + std::to_string(part)), *ckpt.reader,
                               *expect[part]);
              }
              // All parts in one pass over the tensors.
              check_group_ways(plan, *ckpt.reader,
                               std::vector<const std::vector<uint8_t>*>(expect, expect + parts));
            }
    }
  }
}

TEST_CASE("layout: the parts of one quantization are written together, whatever their order") {
  const std::vector<Source> w = {source("a", "F32", 9, 64, 10), source("b", "BF16", 4, 64, 11)};
  Checkpoint ckpt(w);
  StreamingWeightPlan plan;
  const mobius::BlockQuant q{4, 32, false};
  auto add = [&](const std::string& name, const std::vector<std::string>& tensors, int part,
                 int32_t dtype) {
    const int64_t n = tensors.size() == 2 ? 13 : 9;
    plan.declare(name, dtype, mobius::quant_part_shape(q, part, n, 64));
    plan.set_source(name, StreamingLayoutSource{tensors, quantized(4, 32, false, part)});
  };
  // Scales first, a transposed weight between the parts, another quantization interleaved, and a
  // second copy of a part (its own group: a group holds each part once).
  add("s_ab", {"a", "b"}, MOBIUS_QUANT_PART_SCALES, MOBIUS_DTYPE_FLOAT16);
  add("q_a", {"a"}, MOBIUS_QUANT_PART_DATA, MOBIUS_DTYPE_UINT8);
  plan.declare("t", MOBIUS_DTYPE_FLOAT, {64, 9});
  plan.set_source("t", StreamingLayoutSource{{"a"}, transposed()});
  add("q_ab", {"a", "b"}, MOBIUS_QUANT_PART_DATA, MOBIUS_DTYPE_UINT8);
  add("z_ab", {"a", "b"}, MOBIUS_QUANT_PART_ZERO_POINTS, MOBIUS_DTYPE_UINT8);
  add("q_ab2", {"a", "b"}, MOBIUS_QUANT_PART_DATA, MOBIUS_DTYPE_UINT8);
  plan.preflight(*ckpt.reader, "test");
  const std::vector<std::vector<size_t>> groups = plan.write_groups();
  CHECK(groups == std::vector<std::vector<size_t>>{{0, 3, 4}, {1}, {2}, {5}});
  for (const auto& g : groups) {
    CAPTURE(plan.initializers()[g.front()].name);
    std::vector<std::vector<uint8_t>> expect;
    for (size_t i : g) expect.push_back(materialized(plan, plan.initializers()[i], *ckpt.reader));
    for (bool simd : {true, false}) {
      LayoutSettings settings(8, simd);
      CHECK(written_group(plan, g, *ckpt.reader) == expect);
    }
    CHECK(written_group(plan, g, *ckpt.reader) == expect);
  }
}

TEST_CASE("layout: the parts dequantize to the weights within half a step") {
  // The data is quantized against the scales as stored (float16 here): (code - zero point) *
  // scale is within scale / 2 of every weight the code range reaches; a clamped code is the end
  // of the range, within one step.
  std::vector<float> specials(64);
  for (int i = 0; i < 64; ++i) specials[i] = i % 2 ? 0.3f + 0.001f * i : -0.3f;
  const std::vector<Source> src = {source("w", "F32", 40, 96, 7, specials)};
  Checkpoint ckpt(src);
  const std::vector<float> w = matrix(src);
  for (int bits : {4, 8})
    for (bool symmetric : {false, true})
      for (int32_t scale_dtype : {MOBIUS_DTYPE_FLOAT, MOBIUS_DTYPE_FLOAT16}) {
        CAPTURE(bits);
        CAPTURE(symmetric);
        CAPTURE(scale_dtype);
        const int block = 32, blocks = 3;
        StreamingWeightPlan plan;
        plan.declare("q", MOBIUS_DTYPE_UINT8, {40, blocks, block * bits / 8});
        plan.declare("s", scale_dtype, {40, blocks});
        plan.set_source("q", StreamingLayoutSource{
                                 {"w"}, quantized(bits, block, symmetric, MOBIUS_QUANT_PART_DATA)});
        plan.set_source("s",
                        StreamingLayoutSource{
                            {"w"}, quantized(bits, block, symmetric, MOBIUS_QUANT_PART_SCALES)});
        std::vector<uint8_t> zp_bytes;
        if (!symmetric) {
          plan.declare("z", MOBIUS_DTYPE_UINT8, {40, (blocks * bits + 7) / 8});
          plan.set_source("z",
                          StreamingLayoutSource{
                              {"w"}, quantized(bits, block, false, MOBIUS_QUANT_PART_ZERO_POINTS)});
          zp_bytes = written(plan, planned(plan, "z"), *ckpt.reader);
        }
        const auto data = written(plan, planned(plan, "q"), *ckpt.reader);
        const auto scale_bytes = written(plan, planned(plan, "s"), *ckpt.reader);
        const int pack = 8 / bits, top = (1 << bits) - 1;
        for (int r = 0; r < 40; ++r)
          for (int b = 0; b < blocks; ++b) {
            const size_t sb = static_cast<size_t>(r * blocks + b);
            float scale;
            if (scale_dtype == MOBIUS_DTYPE_FLOAT) {
              std::memcpy(&scale, scale_bytes.data() + 4 * sb, 4);
            } else {
              uint16_t h;
              std::memcpy(&h, scale_bytes.data() + 2 * sb, 2);
              scale = mobius::f16_to_float(h);
            }
            int zp = 1 << (bits - 1);
            if (!symmetric) {
              const size_t zrow = static_cast<size_t>(r * ((blocks + pack - 1) / pack));
              zp = (zp_bytes[zrow + b / pack] >> (bits * (b % pack))) & top;
            }
            for (int i = 0; i < block; ++i) {
              const size_t at = sb * block + i;
              const int code = (data[at / pack] >> (bits * (at % pack))) & top;
              const float x = w[static_cast<size_t>(r * 96 + b * block + i)];
              // (c) the code is the weight quantized against the stored scale and zero point.
              const float t = x * (scale ? 1.0f / scale : 0.0f) + static_cast<float>(zp);
              CHECK(code ==
                    static_cast<int>(std::clamp(std::roundf(t), 0.0f, static_cast<float>(top))));
              // (b) dequantized within half a step, or a clamped end within one step.
              const float error = std::fabs((code - zp) * scale - x);
              const float slack = 1e-6f * std::fabs(x) + 1e-9f;
              if (t > -0.5f && t < top + 0.5f)
                CHECK(error <= std::fabs(scale) / 2 + slack);
              else
                CHECK(error <= std::fabs(scale) * 1.02f + slack);
            }
          }
      }
}

TEST_CASE("layout: NaN and infinities quantize the same way on every code path") {
  std::vector<float> specials(96);
  for (int i = 0; i < 96; ++i)
    specials[i] = i % 5 == 0 ? kNaN : i % 7 == 0 ? kInf : i % 11 == 0 ? -kInf : 0.1f * i;
  for (int i = 32; i < 48; ++i) specials[i] = kNaN;  // a block of NaN only
  const std::vector<Source> src = {source("w", "F32", 4, 96, 8, specials)};
  Checkpoint ckpt(src);
  for (int part :
       {MOBIUS_QUANT_PART_DATA, MOBIUS_QUANT_PART_SCALES, MOBIUS_QUANT_PART_ZERO_POINTS}) {
    StreamingWeightPlan plan;
    const mobius::BlockQuant q{4, 16, false};
    plan.declare("p", part == MOBIUS_QUANT_PART_SCALES ? MOBIUS_DTYPE_FLOAT : MOBIUS_DTYPE_UINT8,
                 mobius::quant_part_shape(q, part, 4, 96));
    plan.set_source("p", StreamingLayoutSource{{"w"}, quantized(4, 16, false, part)});
    std::vector<uint8_t> portable;
    {
      LayoutSettings settings(0, false);
      portable = materialized(plan, planned(plan, "p"), *ckpt.reader);
    }
    check_all_ways(plan, planned(plan, "p"), *ckpt.reader, portable);
  }
}

TEST_CASE("layout: the SDK's part shapes are the host's") {
  for (int bits : {4, 8})
    for (int block : {16, 32, 64, 128, 256})
      for (int64_t k : {int64_t{1}, int64_t{100}, int64_t{4096}, int64_t{14336}})
        for (int part :
             {MOBIUS_QUANT_PART_DATA, MOBIUS_QUANT_PART_SCALES, MOBIUS_QUANT_PART_ZERO_POINTS})
          CHECK(mobius::quant_part_shape({bits, block, false}, part, 3, k) ==
                mobius::layout_shape(quantized(bits, block, false, part), 3, k));
  CHECK(mobius::quant_part_shape({4, 32, false}, MOBIUS_QUANT_PART_ZERO_POINTS, 8, 100) ==
        std::vector<int64_t>{8, 2});  // 4 blocks, two zero points a byte
  CHECK(mobius::quant_part_shape({4, 32, false}, MOBIUS_QUANT_PART_ZERO_POINTS, 8, 70) ==
        std::vector<int64_t>{8, 2});  // 3 blocks
  CHECK(mobius::quant_part_shape({8, 32, false}, MOBIUS_QUANT_PART_DATA, 8, 70) ==
        std::vector<int64_t>{8, 3, 32});
  CHECK(mobius::layout_shape(transposed(), 8, 70) == std::vector<int64_t>{70, 8});
  CHECK_THROWS_WITH_AS(mobius::quant_part_shape({4, 32, false}, 3, 8, 70),
                       "[sdk] unknown quantized part 3", mobius::sdk::Error);
}

TEST_CASE("layout: a layout the initializer cannot have is refused when planned") {
  StreamingWeightPlan plan;
  plan.declare("f", MOBIUS_DTYPE_FLOAT, {4, 4});
  plan.declare("u", MOBIUS_DTYPE_UINT8, {4, 1, 16});
  plan.declare("z", MOBIUS_DTYPE_UINT8, {4, 1});
  plan.declare("i", MOBIUS_DTYPE_INT64, {4, 4});
  plan.declare("r3", MOBIUS_DTYPE_FLOAT, {4, 4, 1});
  auto refused = [&](const std::string& init, std::vector<std::string> tensors,
                     const mobius_weight_layout& l) {
    try {
      plan.set_source(init, StreamingLayoutSource{std::move(tensors), l});
    } catch (const mobius::Error& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  const std::vector<std::string> w{"w"};
  CHECK(refused("i", w, transposed()) ==
        "[plan] initializer 'i': a transposed weight is floating point, not int64");
  CHECK(refused("r3", w, transposed()) ==
        "[plan] initializer 'r3': a transposed weight has rank 2, not 3");
  mobius_weight_layout bad = transposed();
  bad.kind = 7;
  CHECK(refused("f", w, bad) == "[plan] initializer 'f': unknown layout kind 7");
  CHECK(refused("u", w, quantized(3, 32, false, MOBIUS_QUANT_PART_DATA)) ==
        "[plan] initializer 'u': block quantization has 4 or 8 bits, not 3");
  for (int block : {8, 24, 512})
    CHECK(refused("u", w, quantized(4, block, false, MOBIUS_QUANT_PART_DATA)) ==
          "[plan] initializer 'u': the quantization block is a power of two from 16 to 256, not " +
              std::to_string(block));
  mobius_weight_layout two = quantized(4, 32, false, MOBIUS_QUANT_PART_DATA);
  two.symmetric = 2;
  CHECK(refused("u", w, two) == "[plan] initializer 'u': symmetric is 0 or 1, not 2");
  CHECK(refused("u", w, quantized(4, 32, false, 3)) ==
        "[plan] initializer 'u': unknown quantized part 3");
  CHECK(refused("f", w, quantized(4, 32, false, MOBIUS_QUANT_PART_DATA)) ==
        "[plan] initializer 'f': quantized data is uint8, not float32");
  // Rank 2 and more may be the same rows split differently (checked against the tensors in
  // preflight); rank 1 never is.
  plan.declare("u1", MOBIUS_DTYPE_UINT8, {64});
  CHECK(refused("u1", w, quantized(4, 32, false, MOBIUS_QUANT_PART_DATA)) ==
        "[plan] initializer 'u1': quantized data has rank 3, not 1");
  CHECK(refused("u", w, quantized(4, 32, false, MOBIUS_QUANT_PART_SCALES)) ==
        "[plan] initializer 'u': a quantization's scales is float32 or float16, not uint8");
  CHECK(refused("z", w, quantized(4, 32, true, MOBIUS_QUANT_PART_ZERO_POINTS)) ==
        "[plan] initializer 'z': a symmetric quantization has no zero points");
  CHECK(refused("f", {}, transposed()) == "[plan] initializer 'f' is laid out from no tensor");
  CHECK(refused("absent", w, transposed()) ==
        "[plan] no initializer 'absent' to plan (declare it in the graph first)");
  CHECK(plan.initializers()[0].has_source == false);  // nothing above was planned

  // The scales of one quantization have one dtype: its data is quantized against them.
  plan.declare("s32", MOBIUS_DTYPE_FLOAT, {4, 1});
  plan.declare("s16", MOBIUS_DTYPE_FLOAT16, {4, 1});
  CHECK(refused("s32", w, quantized(4, 32, false, MOBIUS_QUANT_PART_SCALES)) == "accepted");
  CHECK(
      refused("s16", w, quantized(4, 32, false, MOBIUS_QUANT_PART_SCALES)) ==
      "[plan] initializer 's16' (float16) and 's32' (float32) are scales of the same quantization: "
      "its data is quantized against scales of one dtype");
  CHECK(refused("s16", w, quantized(4, 64, false, MOBIUS_QUANT_PART_SCALES)) == "accepted");
  CHECK(refused("f", w, transposed()) == "accepted");
  CHECK(refused("f", w, transposed()) == "[plan] initializer 'f' already has a source");
}

TEST_CASE("layout: preflight names the tensor, the initializer and the shapes") {
  const std::vector<Source> sources = {source("a", "F32", 4, 6, 9), source("b", "F16", 2, 6, 10),
                                       source("c", "BF16", 3, 5, 11)};
  TempDir dir;
  std::vector<StTensor> ts;
  for (const auto& s : sources) ts.push_back(st_tensor(s));
  ts.push_back({"ids", "I64", {2, 3}, std::vector<uint8_t>(48, 0)});
  ts.push_back({"cube", "F32", {2, 2, 2}, std::vector<uint8_t>(32, 0)});
  write_safetensors(dir / "model.safetensors", ts);
  auto reader = mobius::open_safetensors_checkpoint(dir.path());

  StreamingWeightPlan plan;
  auto add = [&](const std::string& name, int32_t dtype, std::vector<int64_t> shape,
                 std::vector<std::string> tensors, const mobius_weight_layout& l) {
    plan.declare(name, dtype, std::move(shape));
    plan.set_source(name, StreamingLayoutSource{std::move(tensors), l});
  };
  add("ok", MOBIUS_DTYPE_FLOAT, {6, 6}, {"a", "b"}, transposed());
  add("wrong_shape", MOBIUS_DTYPE_FLOAT, {4, 6}, {"a"}, transposed());
  add("wrong_rows", MOBIUS_DTYPE_FLOAT, {6, 5}, {"a", "b"}, transposed());
  add("wrong_blocks", MOBIUS_DTYPE_FLOAT, {4, 2}, {"a"},
      quantized(4, 16, false, MOBIUS_QUANT_PART_SCALES));
  add("k_mismatch", MOBIUS_DTYPE_FLOAT, {6, 7}, {"a", "c"}, transposed());
  add("integers", MOBIUS_DTYPE_FLOAT, {3, 2}, {"ids"}, transposed());
  add("rank3", MOBIUS_DTYPE_FLOAT, {2, 2}, {"cube"}, transposed());
  add("missing", MOBIUS_DTYPE_FLOAT, {6, 4}, {"a", "nope"}, transposed());
  try {
    plan.preflight(*reader, "test");
    FAIL("preflight passed");
  } catch (const mobius::Error& e) {
    const std::string m = e.what();
    INFO(m);
    CHECK(e.kind() == mobius::ErrorKind::Checkpoint);
    CHECK(m.rfind("[preflight] 7 problems with the checkpoint (", 0) == 0);
    CHECK(m.find("'ok'") == std::string::npos);
    CHECK(m.find(
              "\n  tensor 'a' has shape [4, 6], the graph expects [6, 4] for 'wrong_shape' (stored "
              "transposed as [4, 6])") != std::string::npos);
    CHECK(
        m.find("\n  tensors 'a', 'b' concatenated have shape [6, 6], the graph expects [5, 6] for "
               "'wrong_rows' (stored transposed as [6, 5])") != std::string::npos);
    CHECK(
        m.find(
            "\n  tensor 'a' has shape [4, 6]; as the scales of a 4-bit asymmetric quantization in "
            "blocks of 16 it is [4, 1], the graph expects [4, 2] for 'wrong_blocks'") !=
        std::string::npos);
    CHECK(
        m.find("\n  tensor 'c' has shape [3, 5] and 'a' [4, 6]; 'k_mismatch' concatenates tensors "
               "with equal column counts") != std::string::npos);
    CHECK(m.find("\n  tensor 'ids' is int64; 'integers' is laid out from floating-point tensors") !=
          std::string::npos);
    CHECK(
        m.find("\n  tensor 'cube' has shape [2, 2, 2]; 'rank3' is laid out from rank-2 tensors") !=
        std::string::npos);
    CHECK(m.find("\n  initializer 'missing': checkpoint has no tensor 'nope'") !=
          std::string::npos);
  }
  // write() checks again, for a plan saved without preflight.
  TempDir t;
  const int fd = ::open((t / "data").c_str(), O_RDWR | O_CREAT, 0600);
  REQUIRE(fd >= 0);
  CHECK_THROWS_WITH(plan.write(planned(plan, "k_mismatch"), reader.get(), fd, 0, nullptr, nullptr),
                    doctest::Contains("[weights] tensor 'c' has shape [3, 5] and 'a' [4, 6]"));
  std::vector<uint8_t> out(planned(plan, "missing").nbytes());
  CHECK_THROWS_WITH(plan.materialize(planned(plan, "missing"), reader.get(), out.data()),
                    "[weights] checkpoint has no tensor 'nope'");
  CHECK_THROWS_WITH(plan.write(
                        planned(plan, "ok"), reader.get(), fd, 0, [] { return true; }, nullptr),
                    "[save] interrupted");
  ::close(fd);
}

TEST_CASE("layout: ONNX Runtime's MatMul and MatMulNBits read the layouts") {
  // y = x W^T through MatMul on W transposed, and through MatMulNBits on each quantization of W:
  // ONNX Runtime computes x times the dequantized weights (accuracy_level 0: in float32).
  const int64_t n = 37, k = 100;
  const std::vector<Source> qkv = {source("q", "BF16", 5, k, 12), source("k", "F32", 13, k, 13),
                                   source("v", "F16", 19, k, 14)};
  Checkpoint ckpt(qkv);
  const std::vector<float> w = matrix(qkv);
  struct Quant {
    mobius::BlockQuant q;
    std::string name;
  };
  const std::vector<Quant> quants = {{{4, 32, false}, "q4"},
                                     {{4, 16, true}, "q4s"},
                                     {{8, 64, false}, "q8"},
                                     {{8, 32, true}, "q8s"}};
  mobius::BuildOptions opts;
  mobius::ModelPackage pkg = mobius::build_with(
      "layout_test",
      [&](mobius_context* handle) {
        mobius::BuildContext ctx(mobius::host_api(), handle);
        mobius::Graph& g = ctx.graph();
        using mobius::DType;
        using mobius::TensorType;
        mobius::Value x = g.input("x", TensorType(DType::Float, {2, k}));
        mobius::Value wt = g.initializer("w_t", TensorType(DType::Float, {k, n}));
        ctx.plan_layout("w_t", names(qkv), transposed());
        g.output(g.node("MatMul", {x, wt}, {TensorType(DType::Float, {2, n})})[0], "y");
        for (const Quant& qu : quants) {
          std::vector<mobius::Value> inputs{x};
          for (int part = 0; part < (qu.q.symmetric ? 2 : 3); ++part) {
            const std::string name = qu.name + "_" + std::to_string(part);
            std::vector<mobius::Dim> dims;
            for (int64_t d : mobius::quant_part_shape(qu.q, part, n, k)) dims.emplace_back(d);
            inputs.push_back(g.initializer(
                name,
                TensorType(part == MOBIUS_QUANT_PART_SCALES ? DType::Float : DType::UInt8, dims)));
            ctx.plan_layout(name, names(qkv),
                            quantized(qu.q.bits, qu.q.block, qu.q.symmetric, part));
          }
          g.output(g.node("MatMulNBits", inputs, {TensorType(DType::Float, {2, n})},
                          {mobius::Attr("K", k), mobius::Attr("N", n),
                           mobius::Attr("bits", qu.q.bits), mobius::Attr("block_size", qu.q.block)},
                          "com.microsoft")[0],
                   "y_" + qu.name);
        }
      },
      opts, ckpt.dir.path());
  TempDir t;
  pkg.save(t / "out", {});
  std::vector<float> x(2 * k);
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.37f * static_cast<float>(i));
  write_text(t / "in.json",
             nlohmann::json({{"x", {{"type", "float32"}, {"dims", {2, k}}, {"data", x}}}}).dump());
  RunResult o =
      run("node " + quote(env_or_empty("MOBIUS_SOURCE_ROOT") + "/tests/ort_run.mjs") + " " +
              quote((t / "out" / "model.onnx").string()) + " " + quote((t / "in.json").string()),
          false);
  INFO(o.output);
  REQUIRE(o.status == 0);
  const nlohmann::json out = nlohmann::json::parse(o.output);
  auto check_output = [&](const std::string& name, const std::vector<float>& weights) {
    CAPTURE(name);
    const auto y = out[name]["data"].get<std::vector<float>>();
    REQUIRE(y.size() == static_cast<size_t>(2 * n));
    for (int64_t b = 0; b < 2; ++b)
      for (int64_t j = 0; j < n; ++j) {
        double e = 0, mag = 0;
        for (int64_t i = 0; i < k; ++i) {
          e += static_cast<double>(x[b * k + i]) * weights[j * k + i];
          mag += std::fabs(static_cast<double>(x[b * k + i]) * weights[j * k + i]);
        }
        CHECK(std::fabs(y[b * n + j] - e) <= 1e-5 * mag + 1e-6);
      }
  };
  check_output("y", w);
  for (const Quant& qu : quants) {
    // The weights ONNX Runtime's quantizer would have given MatMulNBits, dequantized.
    const OrtQuantized r =
        ort_quantize(w, n, k, qu.q.bits, qu.q.block, qu.q.symmetric, MOBIUS_DTYPE_FLOAT);
    const int64_t blocks = (k + qu.q.block - 1) / qu.q.block;
    const int pack = 8 / qu.q.bits, top = (1 << qu.q.bits) - 1;
    std::vector<float> deq(w.size());
    for (int64_t j = 0; j < n; ++j)
      for (int64_t i = 0; i < k; ++i) {
        const int64_t b = i / qu.q.block;
        const size_t at = static_cast<size_t>((j * blocks + b) * qu.q.block + i % qu.q.block);
        const int code = (r.data[at / pack] >> (qu.q.bits * (at % pack))) & top;
        const size_t zrow = static_cast<size_t>(j * ((blocks + pack - 1) / pack));
        const int zp = (r.zero_points[zrow + b / pack] >> (qu.q.bits * (b % pack))) & top;
        float scale;
        std::memcpy(&scale, r.scales.data() + 4 * (j * blocks + b), 4);
        deq[static_cast<size_t>(j * k + i)] =
            (code - (qu.q.symmetric ? 1 << (qu.q.bits - 1) : zp)) * scale;
      }
    check_output("y_" + qu.name, deq);
  }
}
