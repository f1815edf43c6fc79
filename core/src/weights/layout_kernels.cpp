// layout_kernels.cpp - the transpose and block-quantization kernels (layout_kernels.hpp), and
// which layouts a plugin may plan (layout_problem, layout_shape).
#include "weights/layout_kernels.hpp"

#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "checkpoint/checkpoint.hpp"
#include "mobius/half.h"
#include "weights/convert.hpp"
#include "weights/weight_plan.hpp"

namespace mobius::weights {
namespace {

std::atomic<size_t> g_tile_side{0};  // set_layout_tile_for_testing; 0: the sizes below
std::atomic<bool> g_layout_simd{true};

constexpr uint64_t kTileBytes = 32u << 20, kMinSlice = 4u << 10;

uint64_t round_up8(uint64_t v) { return (v + 7) & ~uint64_t{7}; }

}  // namespace

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

uint64_t quantized_band(uint64_t cols) {
  const uint64_t side = g_tile_side.load(std::memory_order_relaxed);
  const uint64_t elements = side ? side * side : uint64_t{4} << 20;
  return std::max<uint64_t>(1, elements / std::max<uint64_t>(cols, 1));
}

bool layout_simd() {
  return g_layout_simd.load(std::memory_order_relaxed) && has_avx2() && has_f16c();
}

namespace {

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

// Eight codes as 16-bit lanes; roundf of a non-negative t is trunc(t) + (t - trunc(t) >= 0.5).
__attribute__((target("avx2"))) __m128i codes8(const float* x, __m256 inv, __m256 zp,
                                               __m256 top) {
  __m256 t = _mm256_add_ps(_mm256_mul_ps(_mm256_loadu_ps(x), inv), zp);
  t = _mm256_min_ps(_mm256_max_ps(t, _mm256_setzero_ps()), top);  // maxps(NaN, 0) is 0
  const __m256 whole = _mm256_round_ps(t, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
  const __m256 half_up = _mm256_cmp_ps(_mm256_sub_ps(t, whole), _mm256_set1_ps(0.5f), _CMP_GE_OQ);
  const __m256 up = _mm256_and_ps(half_up, _mm256_set1_ps(1.0f));
  const __m256i q = _mm256_cvttps_epi32(_mm256_add_ps(whole, up));
  return _mm_packus_epi32(_mm256_castsi256_si128(q), _mm256_extracti128_si256(q, 1));
}

}  // namespace

void transpose_convert(const uint8_t* src, size_t ss, int32_t from, uint8_t* dst, size_t ds,
                       int32_t to, size_t rows, size_t cols) {
  if (layout_simd())
    if (TransposeKernel k = avx2_kernel(from, to)) return k(src, ss, dst, ds, rows, cols);
  transpose_portable(src, ss, from, dst, ds, to, rows, cols);
}

uint64_t BlockQuantizer::row_bytes(int part) const {
  switch (part) {
    case MOBIUS_QUANT_PART_DATA: return blocks_ * block_ * static_cast<uint64_t>(bits_) / 8;
    case MOBIUS_QUANT_PART_SCALES: return blocks_ * dtype_size(scale_dtype_);
    default: return (blocks_ * static_cast<uint64_t>(bits_) + 7) / 8;
  }
}

void BlockQuantizer::row(const uint8_t* src, int32_t from, const Parts& out) const {
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

void BlockQuantizer::range_scalar(const float* v, uint64_t n, float& lo, float& hi) {
  lo = std::numeric_limits<float>::max();
  hi = -lo;
  for (uint64_t i = 0; i < n; ++i) {
    if (v[i] < lo) lo = v[i];
    if (v[i] > hi) hi = v[i];
  }
}


__attribute__((target("avx2"))) void BlockQuantizer::range_avx2(const float* v, uint64_t n,
                                                                float& lo, float& hi) {
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

BlockParams BlockQuantizer::params(float lo, float hi, float first) const {
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

void BlockQuantizer::quantize_scalar(const float* v, const BlockParams& p, uint8_t* out) const {
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

__attribute__((target("avx2"))) void BlockQuantizer::quantize_avx2(const float* v,
                                                                    const BlockParams& p,
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

}  // namespace mobius::weights

namespace mobius {

using weights::is_float;

void set_layout_tile_for_testing(size_t side) { weights::g_tile_side = side; }
void set_layout_simd_for_testing(bool allowed) { weights::g_layout_simd = allowed; }

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
  if (l.kind == MOBIUS_LAYOUT_TRANSPOSED && l.interleave > 1)
    return "a transposed weight's rows are not interleaved";
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
  if (l.interleave < 0) return "interleave is 0 or a group size, not " + std::to_string(l.interleave);
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

}  // namespace mobius
