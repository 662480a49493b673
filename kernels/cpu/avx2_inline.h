// Always-inline AVX2 helpers shared by the kernel files compiled with the
// AVX2 flags (matmul_avx2.cpp, matmul_blocks_avx2.cpp). Include it only
// there, and keep everything here static: each file gets its own copy, so the
// linker can never hand AVX2 code to a file compiled without those flags
// (matmul_impl.h says why that matters).
#pragma once

#include <immintrin.h>

namespace pi {
namespace cpu_internal {

// The sum of v's 8 floats.
static inline __attribute__((always_inline)) float HorizontalSum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

}  // namespace cpu_internal
}  // namespace pi
