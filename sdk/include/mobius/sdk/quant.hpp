// mobius/sdk/quant.hpp - weight-only block quantization as MatMulNBits consumes it: the
// parameters, and the shapes of the three initializers (parts) the host lays a weight out in
// (host->plan_layout with MOBIUS_LAYOUT_BLOCK_QUANTIZED, see mobius/plugin.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "mobius/plugin.h"
#include "mobius/sdk/error.hpp"

namespace mobius {

struct BlockQuant {
  int bits = 4;            // 4 or 8
  int block = 32;          // elements per block along K: a power of two from 16 to 256
  bool symmetric = false;  // true: zero point 2^(bits-1) implied, no ZERO_POINTS part
};

// The shape of part `part` (MOBIUS_QUANT_PART_*) of an [n, k] weight (n outputs, k inputs):
// DATA [n, blocks, block * bits / 8], SCALES [n, blocks] and ZERO_POINTS
// [n, ceil(blocks * bits / 8)], with blocks = ceil(k / block).
inline std::vector<int64_t> quant_part_shape(const BlockQuant& q, int part, int64_t n, int64_t k) {
  if (q.block <= 0)
    throw sdk::Error(MOBIUS_ERROR_KIND_PLUGIN,
                     "[sdk] quantization block " + std::to_string(q.block) + " is not positive");
  const int64_t blocks = (k + q.block - 1) / q.block;
  switch (part) {
    case MOBIUS_QUANT_PART_DATA: return {n, blocks, int64_t{q.block} * q.bits / 8};
    case MOBIUS_QUANT_PART_SCALES: return {n, blocks};
    case MOBIUS_QUANT_PART_ZERO_POINTS: return {n, (blocks * q.bits + 7) / 8};
    default:
      throw sdk::Error(MOBIUS_ERROR_KIND_PLUGIN,
                       "[sdk] unknown quantized part " + std::to_string(part));
  }
}

}  // namespace mobius
