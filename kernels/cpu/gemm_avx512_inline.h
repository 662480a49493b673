// Always-inline helpers of the AVX-512 matrix-matrix kernels
// (gemm_avx512.cpp: float weights; gemm_quant_avx512.cpp: block formats):
// the panel shape, the 16 x 16 transpose that packs a panel, the
// accumulator tiles' loads and stores, the column split and the prefetch of
// the next panel. Include it only in files compiled with the AVX-512 flags;
// everything is static for the reason avx512_inline.h gives.
#pragma once

#include <immintrin.h>

#include <cstdint>

#include "kernels/cpu/matmul_impl.h"

#define PI_INLINE inline __attribute__((always_inline))

namespace pi {
namespace cpu_internal {

constexpr int kPanelRows = 32;  // rows per packed panel: two 16-lane vectors

static PI_INLINE int64_t Min64(int64_t a, int64_t b) {
  return a < b ? a : b;
}

// The width of the micro-kernel call at column b of a batch of `batch`
// taken `max_cols` at a time: the calls are balanced (64 columns by 12 are
// 11, 11, 11, 11, 10, 10, not 5 x 12 + 4) so that none runs with too few
// accumulators to cover the FMA latency.
static PI_INLINE int ColumnTile(int64_t b, int64_t batch, int max_cols) {
  const int64_t calls = (batch + max_cols - 1) / max_cols;
  const int64_t base = batch / calls, extra = batch % calls;
  // The first `extra` calls take base + 1 columns.
  return static_cast<int>(b < extra * (base + 1) ? base + 1 : base);
}

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

// Prefetches (into L2) bytes [off, off + len) of rows [row, row + n_rows):
// the next panel, while this one is computed. A panel's rows are short
// pieces of rows far apart, which the hardware prefetchers do not follow.
static PI_INLINE void PrefetchPanel(const MatMulArgs& a, int64_t row, int64_t n_rows, size_t off,
                                    size_t len) {
  for (int64_t i = 0; i < n_rows; ++i) {
    const uintptr_t begin = reinterpret_cast<uintptr_t>(a.w + (row + i) * a.row_bytes + off);
    for (uintptr_t p = begin & ~uintptr_t{63}; p < begin + len; p += 64) {
      _mm_prefetch(reinterpret_cast<const char*>(p), _MM_HINT_T1);
    }
  }
}

// The panel after (row, k-block kb) of kb_count: its rows and byte range.
static PI_INLINE void PrefetchNextPanel(const MatMulArgs& a, int64_t row, int64_t kb,
                                        int64_t kb_bytes) {
  const int64_t next_kb = kb + kb_bytes < static_cast<int64_t>(a.row_bytes) ? kb + kb_bytes : 0;
  const int64_t next_row = next_kb == 0 ? row + kPanelRows : row;
  if (next_row >= a.r1) return;
  PrefetchPanel(a, next_row, Min64(kPanelRows, a.r1 - next_row), static_cast<size_t>(next_kb),
                static_cast<size_t>(Min64(kb_bytes, static_cast<int64_t>(a.row_bytes) - next_kb)));
}

}  // namespace cpu_internal
}  // namespace pi
