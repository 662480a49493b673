// Always-inline AVX2 helpers shared by the kernel files compiled with the
// AVX2 flags or above (matmul_avx2.cpp, matmul_blocks_avx2.cpp, ops_avx2.cpp,
// prepare_avx2.cpp and the AVX-512 files matmul_avx512.cpp,
// matmul_blocks_avx512.cpp). Include it only there, and keep everything here
// static: each file gets its own copy, so the linker can never hand AVX2 code
// to a file compiled without those flags (matmul_impl.h says why that
// matters).
#pragma once

#include <immintrin.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "kernels/cpu/matmul_impl.h"

namespace pi {
namespace cpu_internal {

// The sum of v's 8 floats.
static inline __attribute__((always_inline)) float HorizontalSum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// The largest of v's 8 floats.
static inline __attribute__((always_inline)) float HorizontalMax(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_movehdup_ps(m));
  return _mm_cvtss_f32(m);
}

// Prefetches bytes [off, off + len) of every row of an axpy group (into L2:
// the group ahead is tens of KiB away).
static inline __attribute__((always_inline)) void PrefetchGroup(const AxpyGroup& g, size_t off,
                                                                size_t len) {
  for (int k = 0; k < g.n; ++k) {
    const uintptr_t begin = reinterpret_cast<uintptr_t>(g.w[k]) + off;
    for (uintptr_t p = begin & ~uintptr_t{63}; p < begin + len; p += 64) {
      _mm_prefetch(reinterpret_cast<const char*>(p), _MM_HINT_T1);
    }
  }
}

// The 8 six-bit scales and mins of a Q4_K/Q5_K super-block (ggml's packing,
// kquant.cpp's ScaleMinK4), four bytes at a time: bytes 0-3 hold scales 0-3
// and the top bits of 4-7, bytes 4-7 mins 0-3 and the top bits of mins 4-7,
// bytes 8-11 the low nibbles of scales 4-7 and (high nibbles) mins 4-7; as
// floats (exact).
static inline __attribute__((always_inline)) void ScalesMinsK4Floats(const uint8_t* q, __m256* sc,
                                                                     __m256* mn) {
  uint32_t w[3];
  std::memcpy(w, q, 12);
  const uint32_t six = 0x3F3F3F3F, nib = 0x0F0F0F0F, two = 0x03030303;
  const uint32_t sc03 = w[0] & six, mn03 = w[1] & six;
  const uint32_t sc47 = (w[2] & nib) | (((w[0] >> 6) & two) << 4);
  const uint32_t mn47 = ((w[2] >> 4) & nib) | (((w[1] >> 6) & two) << 4);
  const __m128i v = _mm_setr_epi32(static_cast<int>(sc03), static_cast<int>(sc47),
                                   static_cast<int>(mn03), static_cast<int>(mn47));
  *sc = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(v));
  *mn = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(v, 8)));
}

}  // namespace cpu_internal
}  // namespace pi
