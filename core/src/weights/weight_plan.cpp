// weight_plan.cpp - declaring sources, header-only preflight, and one-at-a-time materialization.
#include "weights/weight_plan.hpp"

#include <fcntl.h>
#include <sys/uio.h>
#include <unistd.h>

#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <new>
#include <optional>
#include <set>

#include "mobius/error.hpp"
#include "mobius/half.h"

namespace mobius {
namespace {

std::string shape_str(const std::vector<int64_t>& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + "]";
}

uint64_t numel(const std::vector<int64_t>& s) {
  uint64_t n = 1;
  for (int64_t d : s) n *= static_cast<uint64_t>(d);
  return n;
}

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

}  // namespace

namespace {

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

}  // namespace

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

// --- layouts (plan_layout): kernels ---------------------------------------------------------
//
// Both kernels convert every element on its own, the same way whichever code path runs (the
// AVX2 conversions round exactly as the scalar ones in mobius/half.h), so an initializer's bytes
// never depend on the CPU, the tiling or the thread count.

namespace {

std::atomic<size_t> g_tile_side{0};  // set_layout_tile_for_testing; 0: the sizes below
std::atomic<bool> g_layout_simd{true};

// A transposed tile: `rows` rows of the concatenated source matrix (the length of the segment of
// each output row it fills) by `cols` source columns (output rows), at most kTileBytes of
// output. A buffered write costs about as much as copying 10 KiB on top of its bytes, and a
// pread a tenth of that, so the tile favours long writes:
//  - the whole matrix when it fits: one read of each source band, one write;
//  - else whole output rows (all n source rows of `cols` columns): each tile is one write of
//    consecutive bytes, each source row read as one slice of `cols` columns, as long as those
//    slices stay long enough (kMinSlice) to cost little more than their bytes;
//  - else output rows in segments: source slices of kMinSlice bytes (whole rows when shorter),
//    the segments as long as the budget allows (32 KiB of float32 for 1024 columns).
struct Tile {
  uint64_t rows, cols;
};

constexpr uint64_t kTileBytes = 32u << 20, kMinSlice = 4u << 10;

uint64_t round_up8(uint64_t v) { return (v + 7) & ~uint64_t{7}; }

Tile transposed_tile(uint64_t n, uint64_t k, size_t in_size, size_t out_size) {
  if (const uint64_t side = g_tile_side.load(std::memory_order_relaxed))
    return {std::min(n, side), std::min(k, side)};
  const uint64_t elements = kTileBytes / out_size;
  if (n * k <= elements) return {n, k};
  const uint64_t whole_rows = (elements / n) & ~uint64_t{7};
  if (whole_rows * in_size >= kMinSlice) return {n, whole_rows};
  const uint64_t cols = std::min(k, round_up8(kMinSlice / in_size));
  return {std::min(n, std::max<uint64_t>(8, (elements / cols) & ~uint64_t{7})), cols};
}

// Source rows per quantized band of `cols` columns: 4 Mi elements (16 MiB of float32).
uint64_t quantized_band(uint64_t cols) {
  const uint64_t side = g_tile_side.load(std::memory_order_relaxed);
  const uint64_t elements = side ? side * side : uint64_t{4} << 20;
  return std::max<uint64_t>(1, elements / std::max<uint64_t>(cols, 1));
}

bool layout_simd() {
  return g_layout_simd.load(std::memory_order_relaxed) && has_avx2() && has_f16c();
}

void convert_one(int32_t from, const uint8_t* s, int32_t to, uint8_t* d) {
  float v;
  to_f32(from, s, &v, 1);
  from_f32(to, &v, d, 1);
}

// Eight elements of a row as float32 lanes, and back; bfloat16 rounds to nearest even with
// NaN kept quiet, as mobius_f32_to_bf16.
template <int32_t From>
__attribute__((target("avx2,f16c"))) inline __m256 load8(const uint8_t* p) {
  if constexpr (From == MOBIUS_DTYPE_FLOAT) {
    return _mm256_loadu_ps(reinterpret_cast<const float*>(p));
  } else if constexpr (From == MOBIUS_DTYPE_FLOAT16) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  } else {
    __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
  }
}

template <int32_t To>
__attribute__((target("avx2,f16c"))) inline void store8(uint8_t* p, __m256 v) {
  if constexpr (To == MOBIUS_DTYPE_FLOAT) {
    _mm256_storeu_ps(reinterpret_cast<float*>(p), v);
  } else if constexpr (To == MOBIUS_DTYPE_FLOAT16) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
  } else {
    const __m256i u = _mm256_castps_si256(v);
    const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    const __m256i biased = _mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7fff)), odd);
    const __m256i rounded = _mm256_srli_epi32(biased, 16);
    const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff)),
                                           _mm256_set1_epi32(0x7f800000));
    const __m256i quiet = _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x40));
    const __m256i h = _mm256_blendv_epi8(rounded, quiet, nan);
    const __m128i packed =
        _mm_packus_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), packed);
  }
}

// One 8x8 block: source row r (rows `ss` bytes apart) becomes destination column r.
template <int32_t From, int32_t To>
__attribute__((target("avx2,f16c"))) inline void transpose8x8(const uint8_t* s, size_t ss,
                                                             uint8_t* d, size_t ds) {
  const __m256 r0 = load8<From>(s), r1 = load8<From>(s + ss), r2 = load8<From>(s + 2 * ss),
               r3 = load8<From>(s + 3 * ss), r4 = load8<From>(s + 4 * ss),
               r5 = load8<From>(s + 5 * ss), r6 = load8<From>(s + 6 * ss),
               r7 = load8<From>(s + 7 * ss);
  const __m256 t0 = _mm256_unpacklo_ps(r0, r1), t1 = _mm256_unpackhi_ps(r0, r1),
               t2 = _mm256_unpacklo_ps(r2, r3), t3 = _mm256_unpackhi_ps(r2, r3),
               t4 = _mm256_unpacklo_ps(r4, r5), t5 = _mm256_unpackhi_ps(r4, r5),
               t6 = _mm256_unpacklo_ps(r6, r7), t7 = _mm256_unpackhi_ps(r6, r7);
  const __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xee),
               u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xee),
               u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xee),
               u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xee);
  store8<To>(d, _mm256_permute2f128_ps(u0, u4, 0x20));
  store8<To>(d + ds, _mm256_permute2f128_ps(u1, u5, 0x20));
  store8<To>(d + 2 * ds, _mm256_permute2f128_ps(u2, u6, 0x20));
  store8<To>(d + 3 * ds, _mm256_permute2f128_ps(u3, u7, 0x20));
  store8<To>(d + 4 * ds, _mm256_permute2f128_ps(u0, u4, 0x31));
  store8<To>(d + 5 * ds, _mm256_permute2f128_ps(u1, u5, 0x31));
  store8<To>(d + 6 * ds, _mm256_permute2f128_ps(u2, u6, 0x31));
  store8<To>(d + 7 * ds, _mm256_permute2f128_ps(u3, u7, 0x31));
}

// 8x8 register blocks visited in 64x64 cache blocks; the ragged edges element by element.
template <int32_t From, int32_t To>
__attribute__((target("avx2,f16c"))) void transpose_avx2(const uint8_t* src, size_t ss,
                                                         uint8_t* dst, size_t ds, size_t rows,
                                                         size_t cols) {
  constexpr size_t fs = From == MOBIUS_DTYPE_FLOAT ? 4 : 2, ts = To == MOBIUS_DTYPE_FLOAT ? 4 : 2;
  constexpr size_t kBlock = 64;
  const size_t rows8 = rows & ~size_t{7}, cols8 = cols & ~size_t{7};
  for (size_t i0 = 0; i0 < rows8; i0 += kBlock)
    for (size_t j0 = 0; j0 < cols8; j0 += kBlock) {
      const size_t i1 = std::min(i0 + kBlock, rows8), j1 = std::min(j0 + kBlock, cols8);
      for (size_t i = i0; i < i1; i += 8)
        for (size_t j = j0; j < j1; j += 8)
          transpose8x8<From, To>(src + i * ss + j * fs, ss, dst + j * ds + i * ts, ds);
    }
  for (size_t i = 0; i < rows; ++i)
    for (size_t j = i < rows8 ? cols8 : 0; j < cols; ++j)
      convert_one(From, src + i * ss + j * fs, To, dst + j * ds + i * ts);
}

using TransposeKernel = void (*)(const uint8_t*, size_t, uint8_t*, size_t, size_t, size_t);

template <int32_t From>
TransposeKernel avx2_kernel_to(int32_t to) {
  switch (to) {
    case MOBIUS_DTYPE_FLOAT: return &transpose_avx2<From, MOBIUS_DTYPE_FLOAT>;
    case MOBIUS_DTYPE_FLOAT16: return &transpose_avx2<From, MOBIUS_DTYPE_FLOAT16>;
    case MOBIUS_DTYPE_BFLOAT16: return &transpose_avx2<From, MOBIUS_DTYPE_BFLOAT16>;
    default: return nullptr;
  }
}

TransposeKernel avx2_kernel(int32_t from, int32_t to) {
  switch (from) {
    case MOBIUS_DTYPE_FLOAT: return avx2_kernel_to<MOBIUS_DTYPE_FLOAT>(to);
    case MOBIUS_DTYPE_FLOAT16: return avx2_kernel_to<MOBIUS_DTYPE_FLOAT16>(to);
    case MOBIUS_DTYPE_BFLOAT16: return avx2_kernel_to<MOBIUS_DTYPE_BFLOAT16>(to);
    default: return nullptr;
  }
}

// Any floating dtypes: 32x32 blocks converted a row at a time through float32.
void transpose_portable(const uint8_t* src, size_t ss, int32_t from, uint8_t* dst, size_t ds,
                        int32_t to, size_t rows, size_t cols) {
  constexpr size_t kBlock = 32;
  const size_t fs = dtype_size(from), ts = dtype_size(to);
  float block[kBlock][kBlock], column[kBlock];
  for (size_t i0 = 0; i0 < rows; i0 += kBlock)
    for (size_t j0 = 0; j0 < cols; j0 += kBlock) {
      const size_t bi = std::min(kBlock, rows - i0), bj = std::min(kBlock, cols - j0);
      for (size_t i = 0; i < bi; ++i) to_f32(from, src + (i0 + i) * ss + j0 * fs, block[i], bj);
      for (size_t j = 0; j < bj; ++j) {
        for (size_t i = 0; i < bi; ++i) column[i] = block[i][j];
        from_f32(to, column, dst + (j0 + j) * ds + i0 * ts, bi);
      }
    }
}

// The transpose of a [rows, cols] matrix of `from` elements (rows `ss` bytes apart) as a
// [cols, rows] matrix of `to` elements (rows `ds` bytes apart).
void transpose_convert(const uint8_t* src, size_t ss, int32_t from, uint8_t* dst, size_t ds,
                       int32_t to, size_t rows, size_t cols) {
  if (layout_simd())
    if (TransposeKernel k = avx2_kernel(from, to)) return k(src, ss, dst, ds, rows, cols);
  transpose_portable(src, ss, from, dst, ds, to, rows, cols);
}

// RTN block quantization as ONNX Runtime's MatMulNBits quantizer computes it
// (MlasQuantizeBlockwise, onnxruntime/core/mlas/lib/q4_dq.cpp, as quantize_matmul_4bits and
// quantize_matmul_8bits of matmul_nbits_quantizer.py call it on the [K, N] weight, zero-padded
// to whole blocks), with unsigned codes in [0, 2^bits - 1]:
//   symmetric:  m = the block's value of largest magnitude (its sign kept; the minimum on a
//               tie), scale = m / -2^(bits-1), zero point 2^(bits-1);
//   asymmetric: lo = min(block min, 0), hi = max(block max, 0), scale = (hi - lo) / (2^bits - 1),
//               zero point = roundf(-lo / scale) clamped to the code range (0 for a zero scale);
//   code = clamp(roundf(x * (1 / scale) + zero point), 0, 2^bits - 1), with 1 / 0 taken as 0.
// roundf rounds halfway cases away from zero (not to even), as the reference does. The data
// is quantized against the scale as stored (rounded to float16 when the scales are float16);
// the zero point comes from the float32 scale, as in the reference. Two choices the reference
// leaves to chance are fixed: an all-zero block's symmetric scale takes the sign of its first
// element (what the reference's scan gives), and its asymmetric scale is +0. A NaN element is
// ignored by the block's range and gets code 0.
struct BlockParams {
  float scale;   // float32, before rounding to the scale dtype
  float stored;  // as the SCALES part stores it
  uint8_t zero_point;
};

class BlockQuantizer {
 public:
  BlockQuantizer(const mobius_weight_layout& l, uint64_t k, int32_t scale_dtype)
      : bits_(l.bits), block_(static_cast<uint64_t>(l.block_size)), symmetric_(l.symmetric != 0),
        part_(l.part), scale_dtype_(scale_dtype), k_(k), blocks_((k + block_ - 1) / block_) {}

  // The bytes of one row of a part (MOBIUS_QUANT_PART_*); of this quantizer's own part.
  uint64_t row_bytes(int part) const {
    switch (part) {
      case MOBIUS_QUANT_PART_DATA: return blocks_ * block_ * static_cast<uint64_t>(bits_) / 8;
      case MOBIUS_QUANT_PART_SCALES: return blocks_ * dtype_size(scale_dtype_);
      default: return (blocks_ * static_cast<uint64_t>(bits_) + 7) / 8;
    }
  }
  uint64_t row_bytes() const { return row_bytes(part_); }

  // Where a row's parts go, row_bytes(part) bytes each; null for a part not wanted.
  struct Parts {
    uint8_t* data = nullptr;
    uint8_t* scales = nullptr;
    uint8_t* zero_points = nullptr;
    uint8_t*& operator[](int part) {
      return part == MOBIUS_QUANT_PART_DATA ? data
             : part == MOBIUS_QUANT_PART_SCALES ? scales
                                                : zero_points;
    }
  };

  // The quantizer's own part of one row (k elements of `from`) at `out`.
  void row(const uint8_t* src, int32_t from, uint8_t* out) const {
    Parts parts;
    parts[part_] = out;
    row(src, from, parts);
  }

  // Any parts of one row at once: each block's range and parameters are found once for all.
  void row(const uint8_t* src, int32_t from, const Parts& out) const {
    // The row in float32, zero-padded to whole blocks: the source itself when it is that already.
    thread_local std::vector<float> converted;
    const uint64_t padded = blocks_ * block_;
    const float* x = reinterpret_cast<const float*>(src);
    if (from != MOBIUS_DTYPE_FLOAT || k_ != padded) {
      if (converted.size() < padded) converted.resize(padded);
      to_f32(from, src, converted.data(), k_);
      std::fill(converted.begin() + static_cast<ptrdiff_t>(k_),
                converted.begin() + static_cast<ptrdiff_t>(padded), 0.0f);
      x = converted.data();
    }
    const bool simd = layout_simd();
    const uint64_t blob = block_ * static_cast<uint64_t>(bits_) / 8;
    const size_t scale_size = dtype_size(scale_dtype_);
    const uint8_t mid = static_cast<uint8_t>(1u << (bits_ - 1));
    if (out.zero_points) std::memset(out.zero_points, 0, row_bytes(MOBIUS_QUANT_PART_ZERO_POINTS));
    for (uint64_t b = 0; b < blocks_; ++b) {
      const float* v = x + b * block_;
      float lo, hi;
      if (simd) range_avx2(v, block_, lo, hi);
      else range_scalar(v, block_, lo, hi);
      const BlockParams p = params(lo, hi, v[0]);
      if (out.data) {
        if (simd) quantize_avx2(v, p, out.data + b * blob);
        else quantize_scalar(v, p, out.data + b * blob);
      }
      if (out.scales) from_f32(scale_dtype_, &p.scale, out.scales + b * scale_size, 1);
      if (out.zero_points) {
        if (bits_ == 8) out.zero_points[b] = p.zero_point;
        else out.zero_points[b / 2] |= static_cast<uint8_t>(p.zero_point << (4 * (b % 2)));
      }
    }
    // The reference fills the unused high nibble of an odd block count with the default
    // zero point 2^(bits-1).
    if (out.zero_points && bits_ == 4 && blocks_ % 2)
      out.zero_points[blocks_ / 2] |= static_cast<uint8_t>(mid << 4);
  }

 private:
  static void range_scalar(const float* v, uint64_t n, float& lo, float& hi) {
    lo = std::numeric_limits<float>::max();
    hi = -lo;
    for (uint64_t i = 0; i < n; ++i) {
      if (v[i] < lo) lo = v[i];
      if (v[i] > hi) hi = v[i];
    }
  }

  // n is a multiple of 8 (blocks are powers of two from 16).
  __attribute__((target("avx2"))) static void range_avx2(const float* v, uint64_t n, float& lo,
                                                         float& hi) {
    // minps/maxps return their second operand when the first is NaN: NaN is skipped.
    __m256 l = _mm256_set1_ps(std::numeric_limits<float>::max());
    __m256 h = _mm256_set1_ps(-std::numeric_limits<float>::max());
    for (uint64_t i = 0; i < n; i += 8) {
      const __m256 x = _mm256_loadu_ps(v + i);
      l = _mm256_min_ps(x, l);
      h = _mm256_max_ps(x, h);
    }
    __m128 l4 = _mm_min_ps(_mm256_castps256_ps128(l), _mm256_extractf128_ps(l, 1));
    __m128 h4 = _mm_max_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
    l4 = _mm_min_ps(l4, _mm_movehl_ps(l4, l4));
    h4 = _mm_max_ps(h4, _mm_movehl_ps(h4, h4));
    lo = _mm_cvtss_f32(_mm_min_ss(l4, _mm_shuffle_ps(l4, l4, 1)));
    hi = _mm_cvtss_f32(_mm_max_ss(h4, _mm_shuffle_ps(h4, h4, 1)));
  }

  BlockParams params(float lo, float hi, float first) const {
    const float top = static_cast<float>((1u << bits_) - 1);
    BlockParams p{};
    if (symmetric_) {
      float m = std::fabs(hi) > std::fabs(lo) ? hi : lo;
      if (m == 0.0f) m = first;  // all zeros: the sign of the first, as the reference's scan
      p.scale = -m / static_cast<float>(1u << (bits_ - 1));
      p.zero_point = static_cast<uint8_t>(1u << (bits_ - 1));
    } else {
      lo = std::min(lo, 0.0f);
      hi = std::max(hi, 0.0f);
      p.scale = hi > lo ? (hi - lo) / top : 0.0f;
      const float z = p.scale != 0.0f ? -lo / p.scale : 0.0f;
      // roundf of z clamped to [0, top] (NaN, from infinite weights, to 0): its integer part,
      // plus one from a half up.
      const float clamped = z > 0.0f ? std::min(z, top) : 0.0f;
      const auto whole = static_cast<uint8_t>(clamped);
      p.zero_point = static_cast<uint8_t>(whole + (clamped - whole >= 0.5f));
    }
    p.stored = p.scale;
    if (scale_dtype_ == MOBIUS_DTYPE_FLOAT16)
      p.stored = mobius_f16_to_f32(mobius_f32_to_f16(p.scale));
    return p;
  }

  // Codes clamped before rounding: the same result as the reference's clamp after roundf, and
  // NaN (false in both comparisons) becomes 0.
  void quantize_scalar(const float* v, const BlockParams& p, uint8_t* out) const {
    const float inv = p.stored != 0.0f ? 1.0f / p.stored : 0.0f;
    const float zp = p.zero_point, top = static_cast<float>((1u << bits_) - 1);
    for (uint64_t i = 0; i < block_; ++i) {
      float t = v[i] * inv + zp;
      t = t > 0.0f ? t : 0.0f;
      t = t < top ? t : top;
      const auto q = static_cast<uint8_t>(std::roundf(t));
      if (bits_ == 8) out[i] = q;
      else if (i % 2 == 0) out[i / 2] = q;
      else out[i / 2] |= static_cast<uint8_t>(q << 4);
    }
  }

  // Eight codes as 16-bit lanes; roundf of a non-negative t is trunc(t) + (t - trunc(t) >= 0.5).
  __attribute__((target("avx2"))) static __m128i codes8(const float* x, __m256 inv, __m256 zp,
                                                        __m256 top) {
    __m256 t = _mm256_add_ps(_mm256_mul_ps(_mm256_loadu_ps(x), inv), zp);
    t = _mm256_min_ps(_mm256_max_ps(t, _mm256_setzero_ps()), top);  // maxps(NaN, 0) is 0
    const __m256 whole = _mm256_round_ps(t, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
    const __m256 half_up = _mm256_cmp_ps(_mm256_sub_ps(t, whole), _mm256_set1_ps(0.5f), _CMP_GE_OQ);
    const __m256 up = _mm256_and_ps(half_up, _mm256_set1_ps(1.0f));
    const __m256i q = _mm256_cvttps_epi32(_mm256_add_ps(whole, up));
    return _mm_packus_epi32(_mm256_castsi256_si128(q), _mm256_extracti128_si256(q, 1));
  }

  __attribute__((target("avx2"))) void quantize_avx2(const float* v, const BlockParams& p,
                                                     uint8_t* out) const {
    const __m256 inv = _mm256_set1_ps(p.stored != 0.0f ? 1.0f / p.stored : 0.0f);
    const __m256 zp = _mm256_set1_ps(p.zero_point);
    const __m256 top = _mm256_set1_ps(static_cast<float>((1u << bits_) - 1));
    for (uint64_t i = 0; i < block_; i += 16) {  // blocks are multiples of 16
      const __m128i bytes =
          _mm_packus_epi16(codes8(v + i, inv, zp, top), codes8(v + i + 8, inv, zp, top));
      if (bits_ == 8) {
        _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), bytes);
      } else {
        // Each 16-bit lane holds codes 2j (low byte) and 2j+1: byte j = code 2j | code 2j+1 << 4.
        const __m128i pairs = _mm_and_si128(_mm_or_si128(bytes, _mm_srli_epi16(bytes, 4)),
                                            _mm_set1_epi16(0xff));
        _mm_storel_epi64(reinterpret_cast<__m128i*>(out + i / 2), _mm_packus_epi16(pairs, pairs));
      }
    }
  }

  int bits_;
  uint64_t block_;
  bool symmetric_;
  int part_;
  int32_t scale_dtype_;
  uint64_t k_, blocks_;
};

}  // namespace

void set_layout_tile_for_testing(size_t side) { g_tile_side = side; }
void set_layout_simd_for_testing(bool allowed) { g_layout_simd = allowed; }

std::string layout_problem(const mobius_weight_layout& l, int32_t dtype, size_t rank) {
  // A quantization's part may also be declared with its rows split over leading dimensions
  // (same_rows below): rank at least its own.
  auto expect = [&](bool dtype_ok, const char* dtypes, size_t want_rank,
                    const std::string& what) -> std::string {
    if (!dtype_ok) return what + " is " + dtypes + ", not " + dtype_name(dtype);
    const bool split = l.kind == MOBIUS_LAYOUT_BLOCK_QUANTIZED && rank >= 2;
    if (rank != want_rank && !split)
      return what + " has rank " + std::to_string(want_rank) + ", not " + std::to_string(rank);
    return "";
  };
  if (l.kind == MOBIUS_LAYOUT_TRANSPOSED)
    return expect(is_float(dtype), "floating point", 2, "a transposed weight");
  if (l.kind != MOBIUS_LAYOUT_BLOCK_QUANTIZED)
    return "unknown layout kind " + std::to_string(l.kind);
  if (l.bits != 4 && l.bits != 8)
    return "block quantization has 4 or 8 bits, not " + std::to_string(l.bits);
  if (l.block_size < 16 || l.block_size > 256 || (l.block_size & (l.block_size - 1)))
    return "the quantization block is a power of two from 16 to 256, not " +
           std::to_string(l.block_size);
  if (l.symmetric != 0 && l.symmetric != 1)
    return "symmetric is 0 or 1, not " + std::to_string(l.symmetric);
  switch (l.part) {
    case MOBIUS_QUANT_PART_DATA:
      return expect(dtype == MOBIUS_DTYPE_UINT8, "uint8", 3, "quantized data");
    case MOBIUS_QUANT_PART_SCALES:
      return expect(dtype == MOBIUS_DTYPE_FLOAT || dtype == MOBIUS_DTYPE_FLOAT16,
                    "float32 or float16", 2, "a quantization's scales");
    case MOBIUS_QUANT_PART_ZERO_POINTS:
      if (l.symmetric) return "a symmetric quantization has no zero points";
      return expect(dtype == MOBIUS_DTYPE_UINT8, "uint8", 2, "a quantization's zero points");
    default:
      return "unknown quantized part " + std::to_string(l.part);
  }
}

std::vector<int64_t> layout_shape(const mobius_weight_layout& l, int64_t n, int64_t k) {
  if (l.kind == MOBIUS_LAYOUT_TRANSPOSED) return {k, n};
  const int64_t blocks = (k + l.block_size - 1) / l.block_size;
  switch (l.part) {
    case MOBIUS_QUANT_PART_DATA: return {n, blocks, int64_t{l.block_size} * l.bits / 8};
    case MOBIUS_QUANT_PART_SCALES: return {n, blocks};
    default: return {n, (blocks * l.bits + 7) / 8};
  }
}

namespace {

// E.g. "scales of a 4-bit asymmetric quantization in blocks of 32".
std::string describe_part(const mobius_weight_layout& l) {
  static const char* const parts[] = {"data", "scales", "zero points"};
  return std::string(parts[l.part]) + " of a " + std::to_string(l.bits) + "-bit " +
         (l.symmetric ? "symmetric" : "asymmetric") + " quantization in blocks of " +
         std::to_string(l.block_size);
}

// A block quantization's part declared with another shape for the same bytes, as an operator
// that gathers whole rows reads it (GatherBlockQuantized: data [E, N/E, K*bits/8] for N rows of
// E stacked matrices): the same element count, the rows split over leading dimensions and the
// row cut into equal trailing parts, so that no declared row straddles two of the layout's.
bool same_rows(const mobius_weight_layout& l, const std::vector<int64_t>& expect,
               const std::vector<int64_t>& declared) {
  if (l.kind != MOBIUS_LAYOUT_BLOCK_QUANTIZED || declared.empty()) return false;
  int64_t count = 1, want = 1, row = 1;
  for (int64_t d : declared) {
    if (d <= 0) return false;
    count *= d;
  }
  for (int64_t d : expect) want *= d;
  for (size_t i = 1; i < expect.size(); ++i) row *= expect[i];
  return count == want && row % declared.back() == 0;
}

// What the parts of one quantization share: the tensors, bits, block and symmetry.
std::string quantization_key(const StreamingLayoutSource& src) {
  std::string key = std::to_string(src.layout.bits) + "/" + std::to_string(src.layout.block_size) +
                    "/" + std::to_string(src.layout.symmetric);
  for (const auto& t : src.tensors) key += '\0' + t;
  return key;
}

// The [n, k] matrix a layout source reads: its tensors, in order.
struct LayoutInput {
  std::vector<const TensorMeta*> tensors;
  uint64_t n = 0, k = 0;
};

// Checks a layout source's tensors (rank 2, floating point, equal column counts) and the
// initializer's shape against what the layout makes of them, adding one message per problem.
// `find` returns nullptr for an absent tensor (and reports it itself).
LayoutInput check_layout_input(const PlannedInitializer& init, const StreamingLayoutSource& src,
                               const std::function<const TensorMeta*(const std::string&)>& find,
                               std::vector<std::string>& problems) {
  LayoutInput in;
  bool complete = true;
  for (const auto& t : src.tensors) {
    const TensorMeta* m = find(t);
    if (!m) {
      complete = false;
    } else if (m->shape.size() != 2) {
      problems.push_back("tensor '" + t + "' has shape " + shape_str(m->shape) + "; '" + init.name +
                         "' is laid out from rank-2 tensors");
      complete = false;
    } else if (!is_float(m->dtype)) {
      problems.push_back("tensor '" + t + "' is " + dtype_name(m->dtype) + "; '" + init.name +
                         "' is laid out from floating-point tensors");
      complete = false;
    } else if (!in.tensors.empty() && m->shape[1] != in.tensors.front()->shape[1]) {
      problems.push_back("tensor '" + t + "' has shape " + shape_str(m->shape) + " and '" +
                         in.tensors.front()->name + "' " + shape_str(in.tensors.front()->shape) +
                         "; '" + init.name + "' concatenates tensors with equal column counts");
      complete = false;
    } else {
      in.tensors.push_back(m);
      in.n += static_cast<uint64_t>(m->shape[0]);
    }
  }
  if (!complete || in.tensors.empty()) return in;
  in.k = static_cast<uint64_t>(in.tensors.front()->shape[1]);
  const std::vector<int64_t> matrix{static_cast<int64_t>(in.n), static_cast<int64_t>(in.k)};
  const std::vector<int64_t> expect = layout_shape(src.layout, matrix[0], matrix[1]);
  if (expect != init.shape && !same_rows(src.layout, expect, init.shape)) {
    // As a direct source's message: the tensors' shape, then what the graph expects.
    std::string what = src.tensors.size() == 1 ? "tensor " : "tensors ";
    for (size_t t = 0; t < src.tensors.size(); ++t)
      what += (t ? ", '" : "'") + src.tensors[t] + "'";
    what += src.tensors.size() == 1 ? " has shape " : " concatenated have shape ";
    if (src.layout.kind == MOBIUS_LAYOUT_TRANSPOSED)
      problems.push_back(what + shape_str(matrix) + ", the graph expects " +
                         shape_str({init.shape[1], init.shape[0]}) + " for '" + init.name +
                         "' (stored transposed as " + shape_str(init.shape) + ")");
    else
      problems.push_back(what + shape_str(matrix) + "; as the " + describe_part(src.layout) +
                         " it is " + shape_str(expect) + ", the graph expects " +
                         shape_str(init.shape) + " for '" + init.name + "'");
  }
  return in;
}

// A layout source's input when its bytes are made; preflight has reported any problem before.
LayoutInput layout_input(const PlannedInitializer& init, const StreamingLayoutSource& src,
                         const CheckpointReader* cp) {
  if (!cp)
    throw Error("[weights] '" + init.name + "' reads '" + src.tensors.front() +
                "' but there is no checkpoint");
  std::vector<std::string> problems;
  auto find = [&](const std::string& t) {
    const TensorMeta* m = cp->find(t);
    if (!m) problems.push_back("checkpoint has no tensor '" + t + "'");
    return m;
  };
  LayoutInput in = check_layout_input(init, src, find, problems);
  if (!problems.empty()) throw Error("[weights] " + problems.front());
  return in;
}

}  // namespace

bool glob_match(const std::string& pattern, const std::string& text) {
  // Iterative '*' matching with backtracking to the last star: linear in practice.
  size_t p = 0, t = 0, star = std::string::npos, mark = 0;
  while (t < text.size()) {
    if (p < pattern.size() && pattern[p] == '*') {
      star = p++;
      mark = t;
    } else if (p < pattern.size() && pattern[p] == text[t]) {
      ++p;
      ++t;
    } else if (star != std::string::npos) {
      p = star + 1;
      t = ++mark;
    } else {
      return false;
    }
  }
  while (p < pattern.size() && pattern[p] == '*') ++p;
  return p == pattern.size();
}

uint64_t PlannedInitializer::nbytes() const { return numel(shape) * dtype_size(dtype); }

StreamingWeightPlan::~StreamingWeightPlan() {
  for (auto& i : inits_)
    if (auto* t = std::get_if<StreamingTransformedWeightSource>(&i.source))
      if (i.has_source && t->release) {
        try {
          t->release(t->user);
        } catch (...) {
          // A plugin's release callback must not throw; nothing can be done about it here.
        }
      }
}

void StreamingWeightPlan::declare(const std::string& name, int32_t dtype,
                                  std::vector<int64_t> shape) {
  if (declared(name)) throw Error("[plan] initializer '" + name + "' declared twice");
  inits_.push_back(PlannedInitializer{name, dtype, std::move(shape), false, {}});
}

bool StreamingWeightPlan::declared(const std::string& name) const {
  return std::any_of(inits_.begin(), inits_.end(),
                     [&](const PlannedInitializer& i) { return i.name == name; });
}

void StreamingWeightPlan::set_source(const std::string& name, WeightSourceVariant src) {
  for (auto& i : inits_) {
    if (i.name != name) continue;
    if (i.has_source) throw Error("[plan] initializer '" + name + "' already has a source");
    if (auto* l = std::get_if<StreamingLayoutSource>(&src)) {
      if (l->tensors.empty())
        throw Error("[plan] initializer '" + name + "' is laid out from no tensor");
      const std::string problem = layout_problem(l->layout, i.dtype, i.shape.size());
      if (!problem.empty()) throw Error("[plan] initializer '" + name + "': " + problem);
      // One quantization has one scale dtype: its data is quantized against it.
      if (l->layout.kind == MOBIUS_LAYOUT_BLOCK_QUANTIZED &&
          l->layout.part == MOBIUS_QUANT_PART_SCALES) {
        const auto [at, added] = scales_.emplace(quantization_key(*l), std::make_pair(name, i.dtype));
        if (!added && at->second.second != i.dtype)
          throw Error("[plan] initializer '" + name + "' (" + dtype_name(i.dtype) + ") and '" +
                      at->second.first + "' (" + dtype_name(at->second.second) +
                      ") are scales of the same quantization: its data is quantized against "
                      "scales of one dtype");
      }
    }
    i.source = std::move(src);
    i.has_source = true;
    return;
  }
  throw Error("[plan] no initializer '" + name + "' to plan (declare it in the graph first)");
}

int32_t StreamingWeightPlan::scale_dtype(const PlannedInitializer& part) const {
  const auto& src = std::get<StreamingLayoutSource>(part.source);
  if (src.layout.part == MOBIUS_QUANT_PART_SCALES) return part.dtype;
  auto it = scales_.find(quantization_key(src));
  return it == scales_.end() ? MOBIUS_DTYPE_FLOAT : it->second.second;
}

void StreamingWeightPlan::preflight(const CheckpointReader& ckpt, const std::string& arch) const {
  std::vector<std::string> errors;
  std::set<std::string> used;
  auto need = [&](const std::string& init, const std::string& t) -> const TensorMeta* {
    used.insert(t);
    const TensorMeta* m = ckpt.find(t);
    if (!m) errors.push_back("initializer '" + init + "': checkpoint has no tensor '" + t + "'");
    return m;
  };
  for (const auto& i : inits_) {
    if (!i.has_source) {
      errors.push_back("initializer '" + i.name + "' has no weight source");
      continue;
    }
    if (auto* s = std::get_if<StreamingWeightSource>(&i.source)) {
      const TensorMeta* m = need(i.name, s->tensor);
      if (!m) continue;
      if (m->shape != i.shape)
        errors.push_back("tensor '" + s->tensor + "' has shape " + shape_str(m->shape) +
                         ", the graph expects " + shape_str(i.shape) + " for '" + i.name + "'");
      if (!castable(m->dtype, i.dtype))
        errors.push_back("tensor '" + s->tensor + "' is " + dtype_name(m->dtype) +
                         ", cannot become " + dtype_name(i.dtype) + " for '" + i.name + "'");
    } else if (auto* b = std::get_if<StreamingExpertBankSource>(&i.source)) {
      std::vector<int64_t> expect(i.shape.begin() + (i.shape.empty() ? 0 : 1), i.shape.end());
      if (i.shape.empty() || i.shape[0] != static_cast<int64_t>(b->tensors.size()))
        errors.push_back("expert bank '" + i.name + "' of shape " + shape_str(i.shape) +
                         " stacks " + std::to_string(b->tensors.size()) + " tensors");
      for (const auto& t : b->tensors) {
        const TensorMeta* m = need(i.name, t);
        if (!m) continue;
        if (m->shape != expect)
          errors.push_back("tensor '" + t + "' has shape " + shape_str(m->shape) +
                           ", expert bank '" + i.name + "' expects " + shape_str(expect));
        if (!castable(m->dtype, i.dtype))
          errors.push_back("tensor '" + t + "' is " + dtype_name(m->dtype) + ", cannot become " +
                           dtype_name(i.dtype));
      }
    } else if (auto* x = std::get_if<StreamingTransformedWeightSource>(&i.source)) {
      if (!is_float(i.dtype))
        errors.push_back("transformed initializer '" + i.name + "' must be floating point");
      for (const auto& t : x->tensors) {
        const TensorMeta* m = need(i.name, t);
        if (m && !is_float(m->dtype))
          errors.push_back("tensor '" + t + "' is " + dtype_name(m->dtype) +
                           "; transforms read floating-point tensors");
      }
    } else if (auto* l = std::get_if<StreamingLayoutSource>(&i.source)) {
      check_layout_input(i, *l, [&](const std::string& t) { return need(i.name, t); }, errors);
    }
  }
  for (const auto& m : ckpt.tensors()) {
    if (used.count(m.name)) continue;
    bool ignored = std::any_of(ignore_.begin(), ignore_.end(),
                               [&](const std::string& g) { return glob_match(g, m.name); });
    if (!ignored)
      errors.push_back("checkpoint tensor '" + m.name + "' is not used by " + arch +
                       " and not in its ignore list");
  }
  if (errors.empty()) return;
  std::string msg = "[preflight] " + std::to_string(errors.size()) + " problem" +
                    (errors.size() == 1 ? "" : "s") + " with the checkpoint (" +
                    ckpt.describe() + ") for " + arch + ":";
  size_t shown = 0;
  for (const auto& e : errors) {
    if (++shown > 50) {
      msg += "\n  ... and " + std::to_string(errors.size() - 50) + " more";
      break;
    }
    msg += "\n  " + e;
  }
  throw Error(ErrorKind::Checkpoint, msg);
}

void StreamingWeightPlan::materialize(const PlannedInitializer& init, const CheckpointReader* cp,
                                      void* dst) const {
  auto meta = [&](const std::string& t) -> const TensorMeta& {
    if (!cp) throw Error("[weights] '" + init.name + "' reads '" + t + "' but there is no checkpoint");
    const TensorMeta* m = cp->find(t);
    if (!m) throw Error("[weights] checkpoint has no tensor '" + t + "'");
    return *m;
  };
  auto read_as = [&](const TensorMeta& m, int32_t dtype, void* out) {
    if (m.dtype == dtype) {
      cp->read(m, out);
      return;
    }
    std::vector<uint8_t> scratch(m.nbytes);
    cp->read(m, scratch.data());
    convert_elements(m.dtype, scratch.data(), dtype, out, numel(m.shape));
  };
  if (auto* s = std::get_if<StreamingWeightSource>(&init.source)) {
    read_as(meta(s->tensor), init.dtype, dst);
  } else if (auto* b = std::get_if<StreamingExpertBankSource>(&init.source)) {
    auto* out = static_cast<uint8_t*>(dst);
    uint64_t each = init.nbytes() / std::max<size_t>(1, b->tensors.size());
    for (size_t e = 0; e < b->tensors.size(); ++e) read_as(meta(b->tensors[e]), init.dtype, out + e * each);
  } else if (auto* x = std::get_if<StreamingTransformedWeightSource>(&init.source)) {
    std::vector<std::vector<float>> inputs;
    std::vector<std::vector<int64_t>> dims;
    std::vector<mobius_tensor_view> views;
    for (const auto& t : x->tensors) {
      const TensorMeta& m = meta(t);
      inputs.emplace_back(numel(m.shape));
      read_as(m, MOBIUS_DTYPE_FLOAT, inputs.back().data());
      dims.push_back(m.shape);
    }
    for (size_t k = 0; k < inputs.size(); ++k) {
      mobius_tensor_view v{};
      v.struct_size = sizeof(v);
      v.dtype = MOBIUS_DTYPE_FLOAT;
      v.rank = static_cast<int32_t>(dims[k].size());
      v.dims = dims[k].data();
      v.data = inputs[k].data();
      v.nbytes = inputs[k].size() * sizeof(float);
      views.push_back(v);
    }
    std::vector<const mobius_tensor_view*> ptrs;
    for (auto& v : views) ptrs.push_back(&v);
    std::vector<float> out(numel(init.shape));
    mobius_tensor_view ov{};
    ov.struct_size = sizeof(ov);
    ov.dtype = MOBIUS_DTYPE_FLOAT;
    ov.rank = static_cast<int32_t>(init.shape.size());
    ov.dims = init.shape.data();
    ov.data = out.data();
    ov.nbytes = out.size() * sizeof(float);
    char err[512] = {0};
    mobius_status st = MOBIUS_ERROR;
    try {
      st = x->fn(x->user, ptrs.data(), ptrs.size(), &ov, err, sizeof(err));
    } catch (...) {
      throw Error(ErrorKind::Internal, "[weights] transform of '" + init.name +
                                           "' let an exception cross the C ABI");
    }
    if (st != MOBIUS_OK)
      throw Error(ErrorKind::Plugin, "[weights] transform of '" + init.name + "' failed: " +
                                         (err[0] ? std::string(err) : "no reason given"));
    convert_elements(MOBIUS_DTYPE_FLOAT, out.data(), init.dtype, dst, out.size());
  } else if (auto* l = std::get_if<StreamingLayoutSource>(&init.source)) {
    // Whole tensors through the kernels write() runs tile by tile: the same bytes.
    const LayoutInput in = layout_input(init, *l, cp);
    auto* out = static_cast<uint8_t*>(dst);
    std::optional<BlockQuantizer> q;
    if (l->layout.kind == MOBIUS_LAYOUT_BLOCK_QUANTIZED)
      q.emplace(l->layout, in.k, scale_dtype(init));
    std::vector<uint8_t> whole;
    uint64_t row0 = 0;  // the tensor's first row in the concatenated matrix
    for (const TensorMeta* m : in.tensors) {
      whole.resize(m->nbytes);
      cp->read(*m, whole.data());
      const uint64_t rows = static_cast<uint64_t>(m->shape[0]);
      const uint64_t stride = in.k * dtype_size(m->dtype);
      if (q) {
        for (uint64_t r = 0; r < rows; ++r)
          q->row(whole.data() + r * stride, m->dtype, out + (row0 + r) * q->row_bytes());
      } else {
        const size_t ts = dtype_size(init.dtype);
        transpose_convert(whole.data(), stride, m->dtype, out + row0 * ts, in.n * ts, init.dtype,
                          rows, in.k);
      }
      row0 += rows;
    }
  } else {
    throw Error("[weights] initializer '" + init.name + "' has no source");
  }
}

}  // namespace mobius

namespace mobius {
namespace {

constexpr uint64_t kChunk = 16u << 20;        // cast/copy granularity: bounds memory per tensor
constexpr uint64_t kKernelChunk = 64u << 20;  // copy_file_range step between cancellation polls

// A thread's scratch memory, kept across tensors (fresh memory costs a page fault per 4 KiB on
// first touch) and never cleared: every byte used is written first.
class Scratch {
 public:
  Scratch() = default;
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  ~Scratch() { std::free(data_); }

  // At least n bytes; what it held is not kept when it grows.
  uint8_t* get(size_t n) {
    if (n > size_) {
      std::free(data_);
      data_ = static_cast<uint8_t*>(std::malloc(std::max<size_t>(n, 1)));
      size_ = data_ ? n : 0;
      if (!data_) throw std::bad_alloc();
    }
    return data_;
  }

 private:
  uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

[[noreturn]] void io_error(const std::string& what) {
  throw Error(ErrorKind::Io, "[save] " + what + ": " + std::strerror(errno));
}

// The most one write call takes. The page cache gives a write folios of about its size, and a
// large folio must come from a large free block; in a virtual machine whose free memory is handed
// back to the host (virtio-balloon free page reporting), those are the blocks handed back, and
// each of their pages then costs a fault in the host when first written: there, writing 1 GiB in
// 1 MiB calls took two to four times as long as in 256 KiB calls. The extra calls cost about
// 10 ms per GiB.
constexpr size_t kWriteCap = 256u << 10;

// The pieces one after another from `off`, in calls of at most kWriteCap bytes.
void pwritev_all(int fd, const iovec* iov, size_t count, uint64_t off) {
  constexpr size_t kPieces = 256;
  iovec call[kPieces];
  size_t i = 0, done = 0;  // the next byte: `done` bytes into piece i
  while (i < count) {
    size_t n = 0, bytes = 0;
    for (size_t j = i, from = done; j < count && n < kPieces && bytes < kWriteCap;
         ++j, from = 0) {
      const size_t len = std::min(iov[j].iov_len - from, kWriteCap - bytes);
      if (len == 0) continue;
      call[n++] = {static_cast<uint8_t*>(iov[j].iov_base) + from, len};
      bytes += len;
    }
    if (n == 0) break;  // only empty pieces left
    const ssize_t w = ::pwritev(fd, call, static_cast<int>(n), static_cast<off_t>(off));
    if (w < 0) {
      if (errno == EINTR) continue;
      io_error("writing model.onnx.data failed");
    }
    if (w == 0) throw Error(ErrorKind::Io, "[save] writing model.onnx.data failed: nothing written");
    off += static_cast<uint64_t>(w);
    for (auto left = static_cast<size_t>(w); left > 0;) {
      const size_t take = std::min(left, iov[i].iov_len - done);
      left -= take;
      done += take;
      if (done == iov[i].iov_len) {
        ++i;
        done = 0;
      }
    }
    while (i < count && iov[i].iov_len == 0) ++i;
  }
}

void pwrite_all(int fd, const void* data, uint64_t n, uint64_t off) {
  const iovec one{const_cast<void*>(data), static_cast<size_t>(n)};
  pwritev_all(fd, &one, 1, off);
}

void pread_all(int fd, void* data, uint64_t n, uint64_t off, const std::string& name) {
  auto* p = static_cast<uint8_t*>(data);
  while (n > 0) {
    ssize_t r = ::pread(fd, p, std::min<uint64_t>(n, 1u << 30), static_cast<off_t>(off));
    if (r < 0) {
      if (errno == EINTR) continue;
      io_error("reading tensor '" + name + "' failed");
    }
    if (r == 0)
      throw Error(ErrorKind::Io, "[save] unexpected end of file reading tensor '" + name + "'");
    p += r;
    off += static_cast<uint64_t>(r);
    n -= static_cast<uint64_t>(r);
  }
}

// The output file; each write (or run of writes making one tile) takes the writers' turn
// (WeightOutput::lock) for as long as it lasts.
class Output {
 public:
  explicit Output(const WeightOutput& o) : fd_(o.fd), lock_(o.lock) {}
  int fd() const { return fd_; }

  class Turn {
   public:
    explicit Turn(const Output& o) : m_(o.lock_) {
      if (m_) m_->lock();
    }
    ~Turn() {
      if (m_) m_->unlock();
    }
    Turn(const Turn&) = delete;
    Turn& operator=(const Turn&) = delete;

   private:
    std::mutex* m_;
  };

  void write(const void* data, uint64_t n, uint64_t off) const {
    Turn turn(*this);
    pwrite_all(fd_, data, n, off);
  }

 private:
  int fd_;
  std::mutex* lock_;
};

// Starts writeback of what was just written, so the disk works while the next chunk is copied
// and the final fsync has little left to do (instead of all of it, as after a plain cp).
void start_writeback(int fd, uint64_t off, uint64_t n) {
  ::sync_file_range(fd, static_cast<off64_t>(off), static_cast<off64_t>(n), SYNC_FILE_RANGE_WRITE);
}

void poll(const std::function<bool()>& cancelled) {
  if (cancelled && cancelled()) throw Error("[save] interrupted");
}

// File to file; in the kernel (copy_file_range) unless the filesystems refuse.
void copy_range(int in, uint64_t in_off, const Output& out, uint64_t out_off, uint64_t n,
                const std::string& name, const std::function<bool()>& cancelled,
                std::atomic<uint64_t>* progress) {
  static std::atomic<bool> kernel_copy{true};
  thread_local Scratch buf;
  while (n > 0) {
    poll(cancelled);
    uint64_t step = std::min(n, kernel_copy ? kKernelChunk : kChunk);
    if (kernel_copy) {
      loff_t a = static_cast<loff_t>(in_off), b = static_cast<loff_t>(out_off);
      ssize_t r;
      {
        Output::Turn turn(out);
        r = ::copy_file_range(in, &a, out.fd(), &b, step, 0);
      }
      if (r > 0) {
        start_writeback(out.fd(), out_off, static_cast<uint64_t>(r));
        in_off += static_cast<uint64_t>(r);
        out_off += static_cast<uint64_t>(r);
        n -= static_cast<uint64_t>(r);
        if (progress) *progress += static_cast<uint64_t>(r);
        continue;
      }
      if (r < 0 && errno == EINTR) continue;
      if (r == 0)
        throw Error(ErrorKind::Io, "[save] unexpected end of file reading tensor '" + name + "'");
      if (errno != EXDEV && errno != ENOSYS && errno != EINVAL && errno != EOPNOTSUPP &&
          errno != EBADF && errno != EPERM)
        io_error("copying tensor '" + name + "' failed");
      kernel_copy = false;  // fall back to read + write from here on
      continue;
    }
    uint8_t* b = buf.get(step);
    pread_all(in, b, step, in_off, name);
    out.write(b, step, out_off);
    start_writeback(out.fd(), out_off, step);
    in_off += step;
    out_off += step;
    n -= step;
    if (progress) *progress += step;
  }
}

uint64_t elements(const std::vector<int64_t>& s) {
  uint64_t n = 1;
  for (int64_t d : s) n *= static_cast<uint64_t>(d);
  return n;
}

// One checkpoint tensor into [out_off, ...) as `to`, in bounded chunks.
void stream_tensor(const TensorMeta& m, const CheckpointReader& cp, int32_t to, const Output& out,
                   uint64_t out_off, const std::function<bool()>& cancelled,
                   std::atomic<uint64_t>* progress) {
  const uint64_t n = elements(m.shape);
  const size_t fs = dtype_size(m.dtype), ts = dtype_size(to);
  auto ext = cp.extent(m);
  if (!ext && cp.reads_ranges(m)) {
    // Computed piece by piece (a dequantized FP8 or MXFP4 tensor): read a chunk at a time.
    const uint64_t per = std::max<uint64_t>(1, kChunk / std::max(fs, ts));
    thread_local Scratch src_buf, dst_buf;
    uint8_t* src = src_buf.get(std::min(n, per) * fs);
    uint8_t* dst = m.dtype == to ? src : dst_buf.get(std::min(n, per) * ts);
    for (uint64_t e = 0; e < n; e += per) {
      poll(cancelled);
      const uint64_t k = std::min(per, n - e);
      cp.read_range(m, e, k, src);
      if (m.dtype != to) convert_elements(m.dtype, src, to, dst, k);
      out.write(dst, k * ts, out_off + e * ts);
      start_writeback(out.fd(), out_off + e * ts, k * ts);
      if (progress) *progress += k * ts;
    }
    return;
  }
  if (!ext) {
    // Not contiguous in a file (e.g. a strided pickle tensor): the reader gathers it whole.
    std::vector<uint8_t> src(m.nbytes), dst;
    cp.read(m, src.data());
    if (m.dtype != to) {
      dst.resize(n * ts);
      convert_elements(m.dtype, src.data(), to, dst.data(), n);
      src.swap(dst);
    }
    out.write(src.data(), src.size(), out_off);
    if (progress) *progress += src.size();
    return;
  }
  if (m.dtype == to) {
    copy_range(ext->fd, ext->offset, out, out_off, m.nbytes, m.name, cancelled, progress);
    return;
  }
  const uint64_t per = std::max<uint64_t>(1, kChunk / std::max(fs, ts));
  // Per-thread scratch, reused across tensors: fresh buffers would cost a page fault per 4 KiB
  // of every chunk of every tensor.
  thread_local Scratch src_buf, dst_buf;
  uint8_t* src = src_buf.get(std::min(n, per) * fs);
  uint8_t* dst = dst_buf.get(std::min(n, per) * ts);
  for (uint64_t e = 0; e < n; e += per) {
    poll(cancelled);
    uint64_t k = std::min(per, n - e);
    pread_all(ext->fd, src, k * fs, ext->offset + e * fs, m.name);
    convert_elements(m.dtype, src, to, dst, k);
    out.write(dst, k * ts, out_off + e * ts);
    start_writeback(out.fd(), out_off + e * ts, k * ts);
    if (progress) *progress += k * ts;
  }
}

// A layout source's tensor as the writers read it: blocks of rows and columns read from its file,
// or computed by the reader range by range (a dequantized tensor), or, when the reader can do
// neither (a strided pickle tensor), gathered whole once.
class TensorRows {
 public:
  TensorRows(const TensorMeta& m, const CheckpointReader& cp, uint64_t cols)
      : m_(m), cp_(cp), ext_(cp.extent(m)), ranges_(!ext_ && cp.reads_ranges(m)),
        es_(dtype_size(m.dtype)), cols_(cols) {
    if (!ext_ && !ranges_) {
      whole_.resize(m.nbytes);
      cp.read(m, whole_.data());
    }
  }

  const TensorMeta& meta() const { return m_; }

  // Rows [r0, r0 + rows) x columns [c0, c0 + n) as a pointer to the first element; sets
  // `stride` to the bytes between rows. Read into `scratch` when from the file: whole rows in
  // one read, parts of rows one read each.
  const uint8_t* block(uint64_t r0, uint64_t rows, uint64_t c0, uint64_t n, Scratch& scratch,
                       uint64_t& stride) const {
    if (!ext_ && !ranges_) {
      stride = cols_ * es_;
      return whole_.data() + r0 * stride + c0 * es_;
    }
    stride = n * es_;
    uint8_t* dst = scratch.get(rows * stride);
    if (ranges_) {
      if (n == cols_) {
        cp_.read_range(m_, r0 * cols_, rows * cols_, dst);
      } else {
        for (uint64_t i = 0; i < rows; ++i)
          cp_.read_range(m_, (r0 + i) * cols_ + c0, n, dst + i * stride);
      }
    } else if (n == cols_) {
      pread_all(ext_->fd, dst, rows * stride, ext_->offset + r0 * stride, m_.name);
    } else {
      for (uint64_t i = 0; i < rows; ++i)
        pread_all(ext_->fd, dst + i * stride, stride,
                  ext_->offset + ((r0 + i) * cols_ + c0) * es_, m_.name);
    }
    return dst;
  }

  // Rows about to be read a block of columns at a time: the kernel reads them ahead in one go.
  void will_need(uint64_t r0, uint64_t rows) const {
    if (ext_)
      ::posix_fadvise(ext_->fd, static_cast<off_t>(ext_->offset + r0 * cols_ * es_),
                      static_cast<off_t>(rows * cols_ * es_), POSIX_FADV_WILLNEED);
  }

 private:
  const TensorMeta& m_;
  const CheckpointReader& cp_;
  std::optional<CheckpointReader::FileExtent> ext_;
  bool ranges_;
  size_t es_;
  uint64_t cols_;
  std::vector<uint8_t> whole_;
};

// The transposed layout, [k, n] of `to`, one tile at a time (transposed_tile): a tile of B rows
// of the concatenated source matrix by C columns becomes B consecutive elements of C output
// rows; when B is all n rows, those C output rows are consecutive in the file and go out in one
// write. The tile is read and transposed a few source rows (256 KiB) at a time, so the source
// stays in the cache, into rows padded by 64 bytes, so the rows of an 8x8 block do not compete
// for the same cache sets.
void write_transposed(int32_t to, const LayoutInput& in, const CheckpointReader& cp,
                      const Output& out, uint64_t out_off, const std::function<bool()>& cancelled,
                      std::atomic<uint64_t>* progress) {
  const size_t ts = dtype_size(to);
  std::vector<std::unique_ptr<TensorRows>> parts;
  std::vector<uint64_t> first;  // each tensor's first row in the concatenated matrix
  size_t in_size = 8;
  uint64_t row = 0;
  for (const TensorMeta* m : in.tensors) {
    parts.push_back(std::make_unique<TensorRows>(*m, cp, in.k));
    first.push_back(row);
    row += static_cast<uint64_t>(m->shape[0]);
    in_size = std::min(in_size, dtype_size(m->dtype));
  }
  const Tile t = transposed_tile(in.n, in.k, in_size, ts);
  const uint64_t ld = t.rows * ts + 64;
  thread_local Scratch src, tile_buf;
  thread_local std::vector<iovec> iov;
  uint8_t* const tile = tile_buf.get(ld * t.cols);
  for (uint64_t r0 = 0; r0 < in.n; r0 += t.rows) {
    const uint64_t b = std::min(t.rows, in.n - r0);
    // The part of tensor p in rows [r0, r0 + b): its rows [lo, hi).
    auto span = [&](size_t p, uint64_t& lo, uint64_t& hi) {
      const uint64_t count = static_cast<uint64_t>(parts[p]->meta().shape[0]);
      lo = std::max(r0, first[p]) - first[p];
      hi = std::min(r0 + b, first[p] + count);
      hi = hi > first[p] ? hi - first[p] : 0;
      return lo < hi;
    };
    if (t.cols < in.k)
      for (size_t p = 0; p < parts.size(); ++p) {
        uint64_t lo, hi;
        if (span(p, lo, hi)) parts[p]->will_need(lo, hi - lo);
      }
    for (uint64_t c0 = 0; c0 < in.k; c0 += t.cols) {
      poll(cancelled);
      const uint64_t c = std::min(t.cols, in.k - c0);
      for (size_t p = 0; p < parts.size(); ++p) {
        uint64_t lo, hi;
        if (!span(p, lo, hi)) continue;
        const TensorMeta& m = parts[p]->meta();
        const uint64_t step =
            std::max<uint64_t>(8, (256u << 10) / (c * dtype_size(m.dtype))) & ~uint64_t{7};
        for (uint64_t i = lo; i < hi; i += step) {
          const uint64_t n = std::min(step, hi - i);
          uint64_t stride = 0;
          const uint8_t* s = parts[p]->block(i, n, c0, c, src, stride);
          transpose_convert(s, stride, m.dtype, tile + (first[p] + i - r0) * ts, ld, to, n, c);
        }
      }
      if (b == in.n) {
        // Output rows [c0, c0 + c), whole: consecutive bytes of the file.
        iov.resize(c);
        for (uint64_t j = 0; j < c; ++j) iov[j] = {tile + j * ld, b * ts};
        const uint64_t at = out_off + c0 * in.n * ts;
        {
          Output::Turn turn(out);
          pwritev_all(out.fd(), iov.data(), iov.size(), at);
        }
        start_writeback(out.fd(), at, c * b * ts);
      } else {
        Output::Turn turn(out);
        for (uint64_t j = 0; j < c; ++j)
          pwrite_all(out.fd(), tile + j * ld, b * ts, out_off + ((c0 + j) * in.n + r0) * ts);
      }
      if (progress) *progress += b * c * ts;
    }
  }
  // Every output row is complete only now.
  if (t.rows < in.n) start_writeback(out.fd(), out_off, in.n * in.k * ts);
}

// Where write_quantized puts one part of a quantization.
struct QuantizedPart {
  int part;  // MOBIUS_QUANT_PART_*
  Output out;
  uint64_t offset;
};

// Parts of one block quantization, a band of whole rows at a time (quantized_band), all from
// one read of the band and one pass over its blocks: a band's output rows are contiguous in
// each part.
void write_quantized(const BlockQuantizer& q, const std::vector<QuantizedPart>& parts,
                     const LayoutInput& in, const CheckpointReader& cp,
                     const std::function<bool()>& cancelled, std::atomic<uint64_t>* progress) {
  thread_local Scratch src, dst[3];
  uint64_t row0 = 0;
  for (const TensorMeta* m : in.tensors) {
    const TensorRows rows(*m, cp, in.k);
    const uint64_t count = static_cast<uint64_t>(m->shape[0]);
    const uint64_t band = quantized_band(in.k);
    for (uint64_t r0 = 0; r0 < count; r0 += band) {
      poll(cancelled);
      const uint64_t b = std::min(band, count - r0);
      uint64_t stride = 0;
      const uint8_t* p = rows.block(r0, b, 0, in.k, src, stride);
      uint8_t* band[3];
      for (size_t j = 0; j < parts.size(); ++j)
        band[j] = dst[j].get(b * q.row_bytes(parts[j].part));
      for (uint64_t i = 0; i < b; ++i) {
        BlockQuantizer::Parts at;
        for (size_t j = 0; j < parts.size(); ++j)
          at[parts[j].part] = band[j] + i * q.row_bytes(parts[j].part);
        q.row(p + i * stride, m->dtype, at);
      }
      for (size_t j = 0; j < parts.size(); ++j) {
        const uint64_t row_bytes = q.row_bytes(parts[j].part);
        const uint64_t at = parts[j].offset + (row0 + r0) * row_bytes;
        parts[j].out.write(band[j], b * row_bytes, at);
        start_writeback(parts[j].out.fd(), at, b * row_bytes);
        if (progress) *progress += b * row_bytes;
      }
    }
    row0 += count;
  }
}

}  // namespace

void StreamingWeightPlan::write(const PlannedInitializer& init, const CheckpointReader* cp,
                                const WeightOutput& out_file, uint64_t offset,
                                const std::function<bool()>& cancelled,
                                std::atomic<uint64_t>* progress) const {
  const Output out(out_file);
  auto meta = [&](const std::string& t) -> const TensorMeta& {
    if (!cp) throw Error("[weights] '" + init.name + "' reads '" + t + "' but there is no checkpoint");
    const TensorMeta* m = cp->find(t);
    if (!m) throw Error("[weights] checkpoint has no tensor '" + t + "'");
    return *m;
  };
  if (auto* s = std::get_if<StreamingWeightSource>(&init.source)) {
    stream_tensor(meta(s->tensor), *cp, init.dtype, out, offset, cancelled, progress);
  } else if (auto* b = std::get_if<StreamingExpertBankSource>(&init.source)) {
    uint64_t each = init.nbytes() / std::max<size_t>(1, b->tensors.size());
    for (size_t e = 0; e < b->tensors.size(); ++e)
      stream_tensor(meta(b->tensors[e]), *cp, init.dtype, out, offset + e * each, cancelled, progress);
  } else if (auto* l = std::get_if<StreamingLayoutSource>(&init.source)) {
    const LayoutInput in = layout_input(init, *l, cp);
    if (init.nbytes() == 0) return;
    if (l->layout.kind == MOBIUS_LAYOUT_TRANSPOSED)
      write_transposed(init.dtype, in, *cp, out, offset, cancelled, progress);
    else
      write_quantized(BlockQuantizer(l->layout, in.k, scale_dtype(init)),
                      {{l->layout.part, out, offset}}, in, *cp, cancelled, progress);
  } else {
    poll(cancelled);
    std::vector<uint8_t> buf(init.nbytes());
    materialize(init, cp, buf.data());
    out.write(buf.data(), buf.size(), offset);
    if (progress) *progress += buf.size();
  }
}

std::vector<std::vector<size_t>> StreamingWeightPlan::write_groups() const {
  std::vector<std::vector<size_t>> groups;
  std::map<std::string, size_t> open;  // quantization -> its group still missing parts
  for (size_t i = 0; i < inits_.size(); ++i) {
    const auto* l = inits_[i].has_source ? std::get_if<StreamingLayoutSource>(&inits_[i].source)
                                         : nullptr;
    if (!l || l->layout.kind != MOBIUS_LAYOUT_BLOCK_QUANTIZED) {
      groups.push_back({i});
      continue;
    }
    const std::string key = quantization_key(*l);
    auto it = open.find(key);
    const bool joins =
        it != open.end() && std::none_of(groups[it->second].begin(), groups[it->second].end(),
                                         [&](size_t j) {
                                           return std::get<StreamingLayoutSource>(inits_[j].source)
                                                      .layout.part == l->layout.part;
                                         });
    if (joins) {
      groups[it->second].push_back(i);
    } else {
      open[key] = groups.size();
      groups.push_back({i});
    }
  }
  return groups;
}

void StreamingWeightPlan::write_group(const std::vector<size_t>& group, const CheckpointReader* cp,
                                     const std::vector<WeightOutput>& out,
                                     const std::vector<uint64_t>& offset,
                                     const std::function<bool()>& cancelled,
                                     std::atomic<uint64_t>* progress) const {
  if (group.size() == 1) {
    write(inits_[group[0]], cp, out[group[0]], offset[group[0]], cancelled, progress);
    return;
  }
  // The parts of one quantization (write_groups): the same tensors, bits, block and symmetry,
  // hence the same scale dtype (scale_dtype) and the same blocks. Each part's shape is checked
  // as write() checks it.
  const PlannedInitializer& first = inits_[group[0]];
  const auto& src = std::get<StreamingLayoutSource>(first.source);
  std::vector<QuantizedPart> parts;
  for (size_t i : group) {
    const auto& part = std::get<StreamingLayoutSource>(inits_[i].source);
    layout_input(inits_[i], part, cp);
    parts.push_back({part.layout.part, Output(out[i]), offset[i]});
  }
  const LayoutInput in = layout_input(first, src, cp);
  if (first.nbytes() == 0) return;
  write_quantized(BlockQuantizer(src.layout, in.k, scale_dtype(first)), parts, in, *cp, cancelled,
                  progress);
}

uint64_t StreamingWeightPlan::write_cost(const std::vector<size_t>& group,
                                         const CheckpointReader* cp) const {
  uint64_t cost = 0;
  std::set<std::string> read;  // the parts of a quantization read their tensors once
  for (size_t i : group) {
    const PlannedInitializer& init = inits_[i];
    cost += init.nbytes();
    std::vector<std::string> tensors;
    if (auto* s = std::get_if<StreamingWeightSource>(&init.source))
      tensors = {s->tensor};
    else if (auto* b = std::get_if<StreamingExpertBankSource>(&init.source))
      tensors = b->tensors;
    else if (auto* x = std::get_if<StreamingTransformedWeightSource>(&init.source))
      tensors = x->tensors;
    else if (auto* l = std::get_if<StreamingLayoutSource>(&init.source))
      tensors = l->tensors;
    for (const auto& t : tensors)
      if (const TensorMeta* m = cp ? cp->find(t) : nullptr; m && read.insert(t).second)
        cost += m->nbytes;
  }
  return cost;
}

}  // namespace mobius
