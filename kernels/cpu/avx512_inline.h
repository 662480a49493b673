// Always-inline AVX-512 helpers shared by the kernel files compiled with the
// AVX-512 flags (matmul_avx512.cpp, gemm_avx512.cpp). Include it only there,
// and keep everything here static: each file gets its own copy, so the
// linker can never hand AVX-512 code to a file compiled without those flags
// (matmul_impl.h says why that matters).
#pragma once

#include <immintrin.h>

#include <cstdint>

#include "kernels/dtype.h"

namespace pi {
namespace cpu_internal {

// Masked load of the first n < 16 weights at c of a float row (F32, F16 or
// BF16) as f32; masked-off lanes are 0 and are not read (no access past the
// end of the row).
template <DType T>
static inline __attribute__((always_inline)) __m512 LoadWMasked(const uint8_t* row, int64_t c,
                                                                __mmask16 m) {
  if (T == DType::kF32) return _mm512_maskz_loadu_ps(m, reinterpret_cast<const float*>(row) + c);
  const __m256i h = _mm256_maskz_loadu_epi16(m, row + 2 * c);
  if (T == DType::kF16) return _mm512_cvtph_ps(h);
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));  // bf16
}

// Two Q4_0 blocks as 64 unsigned nibble bytes laid out like their 64
// activation bytes: [lo(b0), hi(b0), lo(b1), hi(b1)] (16 bytes each).
// shifts = _mm512_set_epi64(4, 4, 0, 0, 4, 4, 0, 0), m4 = 0x0F bytes.
static inline __attribute__((always_inline)) __m512i Q4Pair(const uint8_t* b0, const uint8_t* b1,
                                                            __m512i shifts, __m512i m4) {
  __m512i v = _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b0 + 2)));
  v = _mm512_mask_broadcast_i32x4(v, 0xFF00,
                                  _mm_loadu_si128(reinterpret_cast<const __m128i*>(b1 + 2)));
  return _mm512_and_si512(_mm512_srlv_epi64(v, shifts), m4);
}

// Two Q8_0 blocks as 64 bytes, offset by +128 (bias = 0x80 bytes) to make
// them unsigned.
static inline __attribute__((always_inline)) __m512i Q8Pair(const uint8_t* b0, const uint8_t* b1,
                                                            __m512i bias) {
  __m512i v = _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b0 + 2)));
  v = _mm512_inserti64x4(v, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b1 + 2)), 1);
  return _mm512_xor_si512(v, bias);
}

}  // namespace cpu_internal
}  // namespace pi
