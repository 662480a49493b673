// Always-inline helpers of the AVX-512 matrix-matrix kernels
// (gemm_avx512.cpp: float weights; gemm_quant_avx512.cpp: block formats):
// the panel shape, the 16 x 16 transpose that packs a panel, the
// accumulator tiles' loads and stores (gemm_common.h has the ISA-neutral
// rest). Include it only in files compiled with the AVX-512 flags;
// everything is static for the reason avx512_inline.h gives.
#pragma once

#include <immintrin.h>

#include <cstdint>

#include "kernels/cpu/gemm_common.h"
#include "kernels/cpu/matmul_impl.h"

#define PI_INLINE inline __attribute__((always_inline))

namespace pi {
namespace cpu_internal {

constexpr int kPanelRows = 32;  // rows per packed panel: two 16-lane vectors

static PI_INLINE __mmask16 LaneMask(int64_t n) {
  return n >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << n) - 1);
}

// 16 x 16 transpose of 32-bit lanes: in r[i] element c -> out r[c] element i.
static PI_INLINE void Transpose16(__m512 (&r)[16]) {
  __m512 t[16];
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  // r[4g + q], 128-bit lane L: rows 4g..4g+3 at column 4L + q.
  for (int g = 0; g < 4; ++g) {
    r[4 * g + 0] = _mm512_shuffle_ps(t[4 * g], t[4 * g + 2], _MM_SHUFFLE(1, 0, 1, 0));
    r[4 * g + 1] = _mm512_shuffle_ps(t[4 * g], t[4 * g + 2], _MM_SHUFFLE(3, 2, 3, 2));
    r[4 * g + 2] = _mm512_shuffle_ps(t[4 * g + 1], t[4 * g + 3], _MM_SHUFFLE(1, 0, 1, 0));
    r[4 * g + 3] = _mm512_shuffle_ps(t[4 * g + 1], t[4 * g + 3], _MM_SHUFFLE(3, 2, 3, 2));
  }
  // A 4 x 4 transpose of 128-bit lanes for each q.
  for (int q = 0; q < 4; ++q) {
    const __m512 p = _mm512_shuffle_f32x4(r[q], r[4 + q], 0x44);
    const __m512 s = _mm512_shuffle_f32x4(r[q], r[4 + q], 0xEE);
    const __m512 u = _mm512_shuffle_f32x4(r[8 + q], r[12 + q], 0x44);
    const __m512 v = _mm512_shuffle_f32x4(r[8 + q], r[12 + q], 0xEE);
    t[q] = _mm512_shuffle_f32x4(p, u, 0x88);       // column q
    t[4 + q] = _mm512_shuffle_f32x4(p, u, 0xDD);   // column 4 + q
    t[8 + q] = _mm512_shuffle_f32x4(s, v, 0x88);   // column 8 + q
    t[12 + q] = _mm512_shuffle_f32x4(s, v, 0xDD);  // column 12 + q
  }
  for (int i = 0; i < 16; ++i) r[i] = t[i];
}

// Output columns [b, b + N) of rows [row, row + 32) (n_rows valid): the
// accumulators start from y (a later k-block) or from zero (the first).
template <int N>
static PI_INLINE void LoadAcc(const float* y, int64_t ldy, int n_rows, bool first,
                              __m512 (&acc)[2][N]) {
  const __mmask16 m0 = LaneMask(n_rows), m1 = LaneMask(n_rows > 16 ? n_rows - 16 : 0);
  for (int j = 0; j < N; ++j) {
    acc[0][j] = first ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(m0, y + j * ldy);
    acc[1][j] = first ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(m1, y + j * ldy + 16);
  }
}

template <int N>
static PI_INLINE void StoreAcc(float* y, int64_t ldy, int n_rows, const __m512 (&acc)[2][N]) {
  const __mmask16 m0 = LaneMask(n_rows), m1 = LaneMask(n_rows > 16 ? n_rows - 16 : 0);
  for (int j = 0; j < N; ++j) {
    _mm512_mask_storeu_ps(y + j * ldy, m0, acc[0][j]);
    _mm512_mask_storeu_ps(y + j * ldy + 16, m1, acc[1][j]);
  }
}

// The sums of row halves [h0, h0 + G) (16 rows each) of columns [0, N) of
// a 32-row panel: from y, or zero for its first chunk; and back.
template <int G, int N>
static PI_INLINE void LoadHalves(const float* y, int64_t ldy, int h0, bool first,
                                 __m512 (&acc)[G][N]) {
  for (int g = 0; g < G; ++g) {
    for (int j = 0; j < N; ++j) {
      acc[g][j] = first ? _mm512_setzero_ps() : _mm512_loadu_ps(y + j * ldy + 16 * (h0 + g));
    }
  }
}

template <int G, int N>
static PI_INLINE void StoreHalves(float* y, int64_t ldy, int h0, const __m512 (&acc)[G][N]) {
  for (int g = 0; g < G; ++g) {
    for (int j = 0; j < N; ++j) _mm512_storeu_ps(y + j * ldy + 16 * (h0 + g), acc[g][j]);
  }
}

}  // namespace cpu_internal
}  // namespace pi
