// The AVX2 level's unsigned-by-signed byte dot, for the files compiled with
// -mavxvnni besides the AVX2 flags (gemm_avx2.cpp, weight_panels_avx2.cpp):
// static, for the reason avx2_inline.h gives.
#pragma once

#include <immintrin.h>

namespace pi {
namespace cpu_internal {

// acc + the sums of 4 products u * x per 32-bit lane: vpdpbusd under
// AVX-VNNI; else vpmaddubsw + vpmaddwd, exact while each pair of products
// fits int16 (u < 64 with int8 x).
template <bool kVnni>
static inline __attribute__((always_inline)) __m256i DotU8S8(__m256i acc, __m256i u, __m256i x) {
  if (kVnni) return _mm256_dpbusd_avx_epi32(acc, u, x);
  const __m256i pairs = _mm256_maddubs_epi16(u, x);
  return _mm256_add_epi32(acc, _mm256_madd_epi16(pairs, _mm256_set1_epi16(1)));
}

}  // namespace cpu_internal
}  // namespace pi
