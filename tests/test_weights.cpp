// test_weights.cpp - the weight plan's pieces: dtype conversions (vector paths against the scalar
// definitions), glob matching for ignore lists.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "mobius/plugin.h"
#include "mobius/sdk/half.hpp"
#include "weights/weight_plan.hpp"

using namespace mobius;

namespace {
std::vector<float> samples(size_t n) {
  std::mt19937 rng(7);
  std::vector<float> v(n);
  std::uniform_real_distribution<float> u(-4.f, 4.f);
  for (size_t i = 0; i < n; ++i) v[i] = u(rng) * std::pow(2.0f, static_cast<float>(static_cast<int>(i % 40) - 20));
  v[0] = 0.f;
  v[1] = -0.f;
  v[2] = 65504.f;
  v[3] = 1e-7f;  // f16 subnormal
  v[4] = 70000.f;  // f16 overflow
  v[5] = std::numeric_limits<float>::infinity();
  return v;
}
}  // namespace

TEST_CASE("weights: conversions match the scalar definitions (odd lengths, subnormals, overflow)") {
  const size_t n = 10007;  // not a multiple of any vector width or block
  std::vector<float> f = samples(n);
  std::vector<uint16_t> h(n), b(n);
  convert_elements(MOBIUS_DTYPE_FLOAT, f.data(), MOBIUS_DTYPE_FLOAT16, h.data(), n);
  convert_elements(MOBIUS_DTYPE_FLOAT, f.data(), MOBIUS_DTYPE_BFLOAT16, b.data(), n);
  for (size_t i = 0; i < n; ++i) {
    CAPTURE(i);
    CHECK(h[i] == float_to_f16(f[i]));
    CHECK(b[i] == float_to_bf16(f[i]));
  }
  std::vector<float> back(n);
  convert_elements(MOBIUS_DTYPE_FLOAT16, h.data(), MOBIUS_DTYPE_FLOAT, back.data(), n);
  for (size_t i = 0; i < n; ++i) {
    float expect = f16_to_float(h[i]);
    CHECK(std::memcmp(&back[i], &expect, 4) == 0);
  }
  convert_elements(MOBIUS_DTYPE_BFLOAT16, b.data(), MOBIUS_DTYPE_FLOAT, back.data(), n);
  for (size_t i = 0; i < n; ++i) CHECK(back[i] == bf16_to_float(b[i]));
  std::vector<uint16_t> bh(n);
  convert_elements(MOBIUS_DTYPE_BFLOAT16, b.data(), MOBIUS_DTYPE_FLOAT16, bh.data(), n);
  for (size_t i = 0; i < n; ++i) CHECK(bh[i] == float_to_f16(bf16_to_float(b[i])));
  // Round to nearest even at the f16 halfway point.
  float half_way = 1.0f + 1.0f / 2048.0f;
  CHECK(float_to_f16(half_way) == 0x3c00);
  CHECK(f16_to_float(float_to_f16(65519.f)) == 65504.f);
  CHECK(std::isinf(f16_to_float(float_to_f16(65520.f))));
}

TEST_CASE("weights: integer conversions widen and narrow exactly") {
  std::vector<int32_t> i32 = {0, -1, 7, 2147483647};
  std::vector<int64_t> i64(i32.size());
  convert_elements(MOBIUS_DTYPE_INT32, i32.data(), MOBIUS_DTYPE_INT64, i64.data(), i32.size());
  CHECK(i64 == std::vector<int64_t>{0, -1, 7, 2147483647});
}

TEST_CASE("weights: glob matching for ignore lists") {
  CHECK(glob_match("*.rotary_emb.inv_freq", "model.layers.0.self_attn.rotary_emb.inv_freq"));
  CHECK(glob_match("lm_head.weight", "lm_head.weight"));
  CHECK_FALSE(glob_match("lm_head.weight", "lm_head.weight2"));
  CHECK(glob_match("model.layers.*.mlp.*", "model.layers.3.mlp.gate_proj.weight"));
  CHECK_FALSE(glob_match("model.layers.*.mlp.*", "model.norm.weight"));
  CHECK(glob_match("*", ""));
  CHECK(glob_match("a*b*c", "axxbyyc"));
  CHECK_FALSE(glob_match("a*b*c", "axxbyy"));
  // Pathological pattern stays fast (no exponential backtracking).
  std::string text(5000, 'a');
  CHECK_FALSE(glob_match("*a*a*a*a*a*a*a*a*b", text));
}
