// Scalar IEEE binary16 and bfloat16 conversions (bit-exact, round to nearest
// even), usable everywhere; SIMD paths use F16C/AVX-512 instructions instead.
#pragma once

#include <cstdint>

namespace pi {

float F16ToF32(uint16_t h);
uint16_t F32ToF16(float f);
float Bf16ToF32(uint16_t b);
uint16_t F32ToBf16(float f);  // round to nearest even; NaN stays NaN

}  // namespace pi
