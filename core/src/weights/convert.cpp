// convert.cpp - element conversions between numeric dtypes (convert.hpp).
#include "weights/convert.hpp"

#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <string>

#include "checkpoint/checkpoint.hpp"
#include "mobius/error.hpp"
#include "mobius/half.h"
#include "weights/weight_plan.hpp"

namespace mobius::weights {

bool is_float(int32_t dt) {
  return dt == MOBIUS_DTYPE_FLOAT || dt == MOBIUS_DTYPE_FLOAT16 || dt == MOBIUS_DTYPE_BFLOAT16 ||
         dt == MOBIUS_DTYPE_DOUBLE;
}

bool is_int(int32_t dt) {
  return dt == MOBIUS_DTYPE_INT8 || dt == MOBIUS_DTYPE_INT16 || dt == MOBIUS_DTYPE_INT32 ||
         dt == MOBIUS_DTYPE_INT64 || dt == MOBIUS_DTYPE_UINT8 || dt == MOBIUS_DTYPE_UINT16 ||
         dt == MOBIUS_DTYPE_UINT32 || dt == MOBIUS_DTYPE_UINT64 || dt == MOBIUS_DTYPE_BOOL;
}

// Which stored dtypes may feed which initializer dtypes: floats among floats, ints among ints.
bool castable(int32_t from, int32_t to) {
  return from == to || (is_float(from) && is_float(to)) || (is_int(from) && is_int(to));
}

namespace {

double load(int32_t dt, const uint8_t* p) {
  switch (dt) {
    case MOBIUS_DTYPE_FLOAT: { float v; std::memcpy(&v, p, 4); return v; }
    case MOBIUS_DTYPE_DOUBLE: { double v; std::memcpy(&v, p, 8); return v; }
    case MOBIUS_DTYPE_FLOAT16: { uint16_t v; std::memcpy(&v, p, 2); return mobius_f16_to_f32(v); }
    case MOBIUS_DTYPE_BFLOAT16: { uint16_t v; std::memcpy(&v, p, 2); return mobius_bf16_to_f32(v); }
    case MOBIUS_DTYPE_INT64: { int64_t v; std::memcpy(&v, p, 8); return static_cast<double>(v); }
    case MOBIUS_DTYPE_INT32: { int32_t v; std::memcpy(&v, p, 4); return v; }
    case MOBIUS_DTYPE_INT16: { int16_t v; std::memcpy(&v, p, 2); return v; }
    case MOBIUS_DTYPE_INT8: return static_cast<int8_t>(*p);
    case MOBIUS_DTYPE_UINT8:
    case MOBIUS_DTYPE_BOOL: return *p;
    case MOBIUS_DTYPE_UINT16: { uint16_t v; std::memcpy(&v, p, 2); return v; }
    case MOBIUS_DTYPE_UINT32: { uint32_t v; std::memcpy(&v, p, 4); return v; }
    case MOBIUS_DTYPE_UINT64: { uint64_t v; std::memcpy(&v, p, 8); return static_cast<double>(v); }
    default: throw Error(std::string("[weights] cannot convert from ") + dtype_name(dt));
  }
}

void store(int32_t dt, uint8_t* p, double v) {
  switch (dt) {
    case MOBIUS_DTYPE_FLOAT: { auto f = static_cast<float>(v); std::memcpy(p, &f, 4); return; }
    case MOBIUS_DTYPE_DOUBLE: std::memcpy(p, &v, 8); return;
    case MOBIUS_DTYPE_FLOAT16: { uint16_t h = mobius_f32_to_f16(static_cast<float>(v)); std::memcpy(p, &h, 2); return; }
    case MOBIUS_DTYPE_BFLOAT16: { uint16_t h = mobius_f32_to_bf16(static_cast<float>(v)); std::memcpy(p, &h, 2); return; }
    case MOBIUS_DTYPE_INT64: { auto i = static_cast<int64_t>(v); std::memcpy(p, &i, 8); return; }
    case MOBIUS_DTYPE_INT32: { auto i = static_cast<int32_t>(v); std::memcpy(p, &i, 4); return; }
    case MOBIUS_DTYPE_INT16: { auto i = static_cast<int16_t>(v); std::memcpy(p, &i, 2); return; }
    case MOBIUS_DTYPE_INT8: *p = static_cast<uint8_t>(static_cast<int8_t>(v)); return;
    case MOBIUS_DTYPE_UINT8:
    case MOBIUS_DTYPE_BOOL: *p = static_cast<uint8_t>(v); return;
    case MOBIUS_DTYPE_UINT16: { auto i = static_cast<uint16_t>(v); std::memcpy(p, &i, 2); return; }
    case MOBIUS_DTYPE_UINT32: { auto i = static_cast<uint32_t>(v); std::memcpy(p, &i, 4); return; }
    case MOBIUS_DTYPE_UINT64: { auto i = static_cast<uint64_t>(v); std::memcpy(p, &i, 8); return; }
    default: throw Error(std::string("[weights] cannot convert to ") + dtype_name(dt));
  }
}

// Floating-point casts go through float32 blocks; the half-precision conversions use the F16C
// instructions when the CPU has them (the f32 -> f16 build is otherwise bound by this loop).
__attribute__((target("avx,f16c"))) void f32_to_f16_f16c(const float* in, uint16_t* out, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 v = _mm256_loadu_ps(in + i);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
  }
  for (; i < n; ++i) out[i] = mobius_f32_to_f16(in[i]);
}

__attribute__((target("avx,f16c"))) void f16_to_f32_f16c(const uint16_t* in, float* out, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(out + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i))));
  for (; i < n; ++i) out[i] = mobius_f16_to_f32(in[i]);
}

__attribute__((target("avx2"))) void bf16_to_f32_avx2(const uint8_t* in, float* out, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + 2 * i));
    __m256i w = _mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16);
    _mm256_storeu_ps(out + i, _mm256_castsi256_ps(w));
  }
  for (; i < n; ++i) {
    uint32_t u = static_cast<uint32_t>(in[2 * i] | (in[2 * i + 1] << 8)) << 16;
    std::memcpy(&out[i], &u, 4);
  }
}

}  // namespace

bool has_avx2() {
  static const bool yes = __builtin_cpu_supports("avx2");
  return yes;
}

bool has_f16c() {
  static const bool yes = __builtin_cpu_supports("f16c") && __builtin_cpu_supports("avx");
  return yes;
}

void to_f32(int32_t from, const uint8_t* s, float* out, size_t n) {
  switch (from) {
    case MOBIUS_DTYPE_FLOAT: std::memcpy(out, s, n * 4); return;
    case MOBIUS_DTYPE_BFLOAT16:
      if (has_avx2()) {
        bf16_to_f32_avx2(s, out, n);
        return;
      }
      for (size_t i = 0; i < n; ++i) {
        uint32_t u = static_cast<uint32_t>(s[2 * i] | (s[2 * i + 1] << 8)) << 16;
        std::memcpy(&out[i], &u, 4);
      }
      return;
    case MOBIUS_DTYPE_FLOAT16: {
      uint16_t h[4096];  // blocks are at most 4096 elements (convert_elements)
      for (size_t i = 0; i < n; i += 4096) {
        size_t k = std::min<size_t>(4096, n - i);
        std::memcpy(h, s + 2 * i, k * 2);
        if (has_f16c()) f16_to_f32_f16c(h, out + i, k);
        else for (size_t j = 0; j < k; ++j) out[i + j] = mobius_f16_to_f32(h[j]);
      }
      return;
    }
    default:
      for (size_t i = 0; i < n; ++i) out[i] = static_cast<float>(load(from, s + dtype_size(from) * i));
  }
}

void from_f32(int32_t to, const float* in, uint8_t* d, size_t n) {
  switch (to) {
    case MOBIUS_DTYPE_FLOAT: std::memcpy(d, in, n * 4); return;
    case MOBIUS_DTYPE_FLOAT16: {
      uint16_t h[4096];
      for (size_t i = 0; i < n; i += 4096) {
        size_t k = std::min<size_t>(4096, n - i);
        if (has_f16c()) f32_to_f16_f16c(in + i, h, k);
        else for (size_t j = 0; j < k; ++j) h[j] = mobius_f32_to_f16(in[i + j]);
        std::memcpy(d + 2 * i, h, k * 2);
      }
      return;
    }
    case MOBIUS_DTYPE_BFLOAT16:
      for (size_t i = 0; i < n; ++i) {
        uint16_t h = mobius_f32_to_bf16(in[i]);
        std::memcpy(d + 2 * i, &h, 2);
      }
      return;
    default:
      for (size_t i = 0; i < n; ++i) store(to, d + dtype_size(to) * i, in[i]);
  }
}

}  // namespace mobius::weights

namespace mobius {

using weights::from_f32;
using weights::is_float;
using weights::load;
using weights::store;
using weights::to_f32;

void convert_elements(int32_t from, const void* src, int32_t to, void* dst, size_t n) {
  const auto* s = static_cast<const uint8_t*>(src);
  auto* d = static_cast<uint8_t*>(dst);
  size_t fs = from == MOBIUS_DTYPE_BOOL ? 1 : dtype_size(from);
  size_t ts = to == MOBIUS_DTYPE_BOOL ? 1 : dtype_size(to);
  if (from == to) {
    std::memcpy(dst, src, n * fs);
    return;
  }
  bool floats = is_float(from) && is_float(to) && from != MOBIUS_DTYPE_DOUBLE && to != MOBIUS_DTYPE_DOUBLE;
  if (!floats) {
    for (size_t i = 0; i < n; ++i) store(to, d + ts * i, load(from, s + fs * i));
    return;
  }
  constexpr size_t kBlock = 4096;
  float block[kBlock];
  for (size_t i = 0; i < n; i += kBlock) {
    size_t k = std::min(kBlock, n - i);
    to_f32(from, s + i * fs, block, k);
    from_f32(to, block, d + i * ts, k);
  }
}

}  // namespace mobius
