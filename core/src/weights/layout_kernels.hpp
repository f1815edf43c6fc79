// layout_kernels.hpp - the kernels of plan_layout's layouts: the transpose of a matrix between
// floating dtypes, and MatMulNBits' block quantization of its rows.
//
// Both kernels convert every element on its own, the same way whichever code path runs (the
// AVX2 conversions round exactly as the scalar ones in mobius/half.h), so an initializer's bytes
// never depend on the CPU, the tiling or the thread count.
#pragma once

#include <cstddef>
#include <cstdint>

#include "mobius/plugin.h"

namespace mobius::weights {

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

Tile transposed_tile(uint64_t n, uint64_t k, size_t in_size, size_t out_size);

// Source rows per quantized band of `cols` columns: 4 Mi elements (16 MiB of float32).
uint64_t quantized_band(uint64_t cols);

// Whether the layouts may use the AVX2 kernels (the CPU has them and no test turned them off).
bool layout_simd();

// The transpose of a [rows, cols] matrix of `from` elements (rows `ss` bytes apart) as a
// [cols, rows] matrix of `to` elements (rows `ds` bytes apart).
void transpose_convert(const uint8_t* src, size_t ss, int32_t from, uint8_t* dst, size_t ds,
                       int32_t to, size_t rows, size_t cols);

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
  uint64_t row_bytes(int part) const;
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
  void row(const uint8_t* src, int32_t from, const Parts& out) const;

 private:
  static void range_scalar(const float* v, uint64_t n, float& lo, float& hi);
  // n is a multiple of 8 (blocks are powers of two from 16).
  __attribute__((target("avx2"))) static void range_avx2(const float* v, uint64_t n, float& lo,
                                                         float& hi);
  BlockParams params(float lo, float hi, float first) const;
  // Codes clamped before rounding: the same result as the reference's clamp after roundf, and
  // NaN (false in both comparisons) becomes 0.
  void quantize_scalar(const float* v, const BlockParams& p, uint8_t* out) const;
  __attribute__((target("avx2"))) void quantize_avx2(const float* v, const BlockParams& p,
                                                     uint8_t* out) const;

  int bits_;
  uint64_t block_;
  bool symmetric_;
  int part_;
  int32_t scale_dtype_;
  uint64_t k_, blocks_;
};

}  // namespace mobius::weights
