// convert.hpp - element conversions between numeric dtypes for the weight plan's writers: through
// float32 for the floating types (F16C and AVX2 where the CPU has them), exactly for the rest.
// convert_elements, the entry point for other parts, is declared in weight_plan.hpp.
#pragma once

#include <cstddef>
#include <cstdint>

namespace mobius::weights {

bool is_float(int32_t dtype);
// Which stored dtypes may feed which initializer dtypes: floats among floats, ints among ints.
bool castable(int32_t from, int32_t to);

// n elements of a floating dtype to float32 and back (bfloat16 rounds to nearest even).
void to_f32(int32_t from, const uint8_t* src, float* out, size_t n);
void from_f32(int32_t to, const float* in, uint8_t* dst, size_t n);

bool has_avx2();
bool has_f16c();

}  // namespace mobius::weights
