#include "kernels/cpu/fp16.h"

#include <cstring>

namespace pi {

namespace {

uint32_t FloatBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
}

float BitsFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

// Shifts `m` right by `s` (1..31) rounding to nearest, ties to even.
uint32_t ShiftRoundEven(uint32_t m, int s) {
  const uint32_t r = m >> s;
  const uint32_t rem = m & ((1u << s) - 1);
  const uint32_t half = 1u << (s - 1);
  return r + ((rem > half || (rem == half && (r & 1))) ? 1 : 0);
}

}  // namespace

float F16ToF32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  const uint32_t exp = (h >> 10) & 0x1F;
  uint32_t man = h & 0x3FF;
  if (exp == 0x1F) {
    // Inf keeps a zero mantissa; a NaN keeps its payload and becomes quiet,
    // as F16C's vcvtph2ps does, so scalar and SIMD paths agree bit for bit.
    return BitsFloat(sign | 0x7F800000 | (man << 13) | (man ? 0x400000 : 0));
  }
  if (exp == 0) {
    if (man == 0) return BitsFloat(sign);
    // Subnormal half: every one is a normal float. Normalize the mantissa.
    int e = 127 - 15 + 1;
    while ((man & 0x400) == 0) {
      man <<= 1;
      --e;
    }
    return BitsFloat(sign | (static_cast<uint32_t>(e) << 23) | ((man & 0x3FF) << 13));
  }
  return BitsFloat(sign | ((exp + 127 - 15) << 23) | (man << 13));
}

uint16_t F32ToF16(float f) {
  const uint32_t x = FloatBits(f);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000);
  const uint32_t ax = x & 0x7FFFFFFF;
  if (ax > 0x7F800000) {
    // NaN: quiet, top mantissa bits kept (vcvtps2ph's behaviour).
    return static_cast<uint16_t>(sign | 0x7E00 | ((ax >> 13) & 0x3FF));
  }
  // 0x477FF000 is halfway between 65504 (the largest half) and 65536; the tie
  // goes to the even neighbour, which is infinity.
  if (ax >= 0x477FF000) return static_cast<uint16_t>(sign | 0x7C00);
  if (ax <= 0x33000000) return sign;  // <= 2^-25: rounds to (signed) zero
  if (ax < 0x38800000) {
    // Result is subnormal: value / 2^-24, rounded. The float is normal here.
    const uint32_t m = (ax & 0x7FFFFF) | 0x800000;
    const int e = static_cast<int>(ax >> 23);  // 102..112
    return static_cast<uint16_t>(sign | ShiftRoundEven(m, 126 - e));
  }
  // Normal: rebias the exponent, round the mantissa to 10 bits. A carry out of
  // the mantissa correctly bumps the exponent.
  const uint32_t e = (ax >> 23) - 127 + 15;
  const uint32_t r = ShiftRoundEven((e << 23) | (ax & 0x7FFFFF), 13);
  return static_cast<uint16_t>(sign | r);
}

float Bf16ToF32(uint16_t b) {
  return BitsFloat(static_cast<uint32_t>(b) << 16);
}

uint16_t F32ToBf16(float f) {
  const uint32_t u = FloatBits(f);
  if ((u & 0x7FFFFFFF) > 0x7F800000) {
    return static_cast<uint16_t>((u >> 16) | 0x40);  // NaN: force quiet (ggml's rule)
  }
  return static_cast<uint16_t>((u + 0x7FFF + ((u >> 16) & 1)) >> 16);
}

}  // namespace pi
