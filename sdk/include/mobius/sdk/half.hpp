// mobius/sdk/half.hpp - float <-> float16/bfloat16 bit conversions (round to nearest even), the
// C++ names of the conversions in mobius/half.h that the host uses too.
#pragma once

#include <cstdint>

#include "mobius/half.h"

namespace mobius {

inline uint16_t float_to_bf16(float f) { return mobius_f32_to_bf16(f); }
inline float bf16_to_float(uint16_t h) { return mobius_bf16_to_f32(h); }
inline uint16_t float_to_f16(float f) { return mobius_f32_to_f16(f); }
inline float f16_to_float(uint16_t h) { return mobius_f16_to_f32(h); }

}  // namespace mobius
