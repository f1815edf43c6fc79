// synthetic.hpp - what the checkpoint generators (make_checkpoint, make_unet) share: a tensor's
// name and shape, and deterministic values seeded per tensor, so every tensor's bytes differ and
// no writer can look fast by de-duplicating.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace bench {

struct Tensor {
  std::string name;
  std::vector<int64_t> shape;
  const char* code = nullptr;  // the safetensors dtype, when not the checkpoint's
  uint64_t numel() const {
    uint64_t n = 1;
    for (int64_t d : shape) n *= static_cast<uint64_t>(d);
    return n;
  }
};

inline uint64_t splitmix(uint64_t& s) {
  uint64_t z = (s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// Element i of buf as float32, or as bfloat16 (truncated).
inline void put(std::vector<uint8_t>& buf, uint64_t i, float f, bool bf16) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if (bf16) {
    auto h = static_cast<uint16_t>(u >> 16);
    std::memcpy(&buf[i * 2], &h, 2);
  } else {
    std::memcpy(&buf[i * 4], &u, 4);
  }
}

// Values in [-0.05, 0.05): finite, so casts never meet NaN or Inf.
inline void fill(std::vector<uint8_t>& buf, uint64_t n, bool bf16, uint64_t seed) {
  buf.resize(n * (bf16 ? 2 : 4));
  uint64_t s = seed * 0x2545f4914f6cdd1dull + 1;
  for (uint64_t i = 0; i < n; i += 2) {
    uint64_t r = splitmix(s);
    for (uint64_t k = 0; k < 2 && i + k < n; ++k) {
      float f = (static_cast<float>(static_cast<uint32_t>(r >> (32 * k)) >> 8) / 16777216.0f - 0.5f) * 0.1f;
      put(buf, i + k, f, bf16);
    }
  }
}

}  // namespace bench
