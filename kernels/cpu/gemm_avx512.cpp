// Matrix-matrix products for prompt batches on AVX-512 (F, BW, VL, DQ,
// VNNI; compiled with those -m flags only here). matmul.h's GemmRows says
// what they compute; this is how.
//
// A batch of B activations against R weight rows is compute-bound, so the
// work is arranged for arithmetic, not for streaming: the weight rows are
// packed a panel at a time — kPanelRows rows x a k-block — into a scratch
// buffer that lives in L1, transposed so that one vector holds 16 rows at
// the same position k, and every batch column then passes over the packed
// panel. A micro-kernel keeps 2 x N accumulators (32 rows x N columns) in
// registers and, per k, loads the two row vectors once and broadcasts
// each column's activation: one FMA (or VNNI dot of 4 bytes) per vector
// op, no horizontal sums at all. Each output is one lane's running sum
// over k in order, so a column's result depends only on that column and
// row — not on the batch size, the column's position or the row range.
//
//   float weights (F32, F16, BF16): the panel is f32 [k][32 rows], k-blocks
//     of kFloatKc; columns read the f32 activation.
//   Q8_0, Q4_0: the panel is unsigned bytes [block][dword c][32 rows][4]
//     (Q4_0 nibbles as they are, Q8_0 bytes + 128) with one f32 scale per
//     (block, row); columns read the prepared Q8_0 activation, 4 bytes
//     broadcast per vpdpbusd. The unsigned offset is taken out per (block,
//     column) from the activation's block sum (the int accumulator starts at
//     -offset * sum), so each block's integer dot is exact, then scaled by
//     d_w * d_x in f32 and added in block order.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include <cstring>

#include "kernels/cpu/avx512_inline.h"
#include "kernels/cpu/matmul_impl.h"

#define PI_INLINE inline __attribute__((always_inline))

namespace pi {
namespace cpu_internal {
namespace {

// Everything here has internal linkage (see matmul_impl.h).

constexpr int kPanelRows = 32;  // rows per packed panel: two 16-lane vectors
constexpr int kFloatCols = 12;  // batch columns per float micro-kernel call
constexpr int kQuantCols = 6;   // batch columns per quantized micro-kernel call
constexpr int kFloatKc = 128;   // k per float panel: 32 x 128 f32 = 16 KiB
constexpr int kQuantKb = 16;    // blocks per quantized panel: 32 x 512 B = 16 KiB
constexpr int kQK = 32;
constexpr int kQ4Bytes = 18;
constexpr int kQ8Bytes = 34;

PI_INLINE int64_t Min64(int64_t a, int64_t b) {
  return a < b ? a : b;
}

PI_INLINE __mmask16 LaneMask(int64_t n) {
  return n >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << n) - 1);
}

// 16 x 16 transpose of 32-bit lanes: in r[i] element c -> out r[c] element i.
PI_INLINE void Transpose16(__m512 (&r)[16]) {
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
PI_INLINE void LoadAcc(const float* y, int64_t ldy, int n_rows, bool first, __m512 (&acc)[2][N]) {
  const __mmask16 m0 = LaneMask(n_rows), m1 = LaneMask(n_rows > 16 ? n_rows - 16 : 0);
  for (int j = 0; j < N; ++j) {
    acc[0][j] = first ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(m0, y + j * ldy);
    acc[1][j] = first ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(m1, y + j * ldy + 16);
  }
}

template <int N>
PI_INLINE void StoreAcc(float* y, int64_t ldy, int n_rows, const __m512 (&acc)[2][N]) {
  const __mmask16 m0 = LaneMask(n_rows), m1 = LaneMask(n_rows > 16 ? n_rows - 16 : 0);
  for (int j = 0; j < N; ++j) {
    _mm512_mask_storeu_ps(y + j * ldy, m0, acc[0][j]);
    _mm512_mask_storeu_ps(y + j * ldy + 16, m1, acc[1][j]);
  }
}

// Prefetches (into L2) bytes [off, off + len) of rows [row, row + n_rows):
// the next panel, while this one is computed. A panel's rows are short
// pieces of rows far apart, which the hardware prefetchers do not follow.
PI_INLINE void PrefetchPanel(const MatMulArgs& a, int64_t row, int64_t n_rows, size_t off,
                             size_t len) {
  for (int64_t i = 0; i < n_rows; ++i) {
    const uintptr_t begin = reinterpret_cast<uintptr_t>(a.w + (row + i) * a.row_bytes + off);
    for (uintptr_t p = begin & ~uintptr_t{63}; p < begin + len; p += 64) {
      _mm_prefetch(reinterpret_cast<const char*>(p), _MM_HINT_T1);
    }
  }
}

// The panel after (row, k-block kb) of kb_count: its rows and byte range.
PI_INLINE void PrefetchNextPanel(const MatMulArgs& a, int64_t row, int64_t kb, int64_t kb_bytes) {
  const int64_t next_kb = kb + kb_bytes < static_cast<int64_t>(a.row_bytes) ? kb + kb_bytes : 0;
  const int64_t next_row = next_kb == 0 ? row + kPanelRows : row;
  if (next_row >= a.r1) return;
  PrefetchPanel(a, next_row, Min64(kPanelRows, a.r1 - next_row), static_cast<size_t>(next_kb),
                static_cast<size_t>(Min64(kb_bytes, static_cast<int64_t>(a.row_bytes) - next_kb)));
}

// ---- float weights ----------------------------------------------------------

// pack[k * 32 + i] = W[row + i, k0 + k] as f32 for k < kc (rounded up to
// 16; rows past n_rows and columns past kc are 0).
template <DType T>
void PackFloat(const MatMulArgs& a, int64_t row, int n_rows, int64_t k0, int kc, float* pack) {
  for (int kk = 0; kk < kc; kk += 16) {
    const __mmask16 m = LaneMask(kc - kk);
    for (int h = 0; h < 2; ++h) {
      __m512 r[16];
      for (int i = 0; i < 16; ++i) {
        const int ri = 16 * h + i;
        r[i] = ri < n_rows ? LoadWMasked<T>(a.w + (row + ri) * a.row_bytes, k0 + kk, m)
                           : _mm512_setzero_ps();
      }
      Transpose16(r);
      for (int c = 0; c < 16; ++c) _mm512_store_ps(pack + (kk + c) * 32 + 16 * h, r[c]);
    }
  }
}

// Columns [b, b + N): y[j * ldy + i] (+)= sum_k pack[k][i] * x_j[k].
template <int N>
void FloatMicro(const float* pack, int kc, const float* const* xs, float* y, int64_t ldy,
                int n_rows, bool first) {
  __m512 acc[2][N];
  LoadAcc<N>(y, ldy, n_rows, first, acc);
  for (int k = 0; k < kc; ++k) {
    const __m512 w0 = _mm512_load_ps(pack + 32 * k);
    const __m512 w1 = _mm512_load_ps(pack + 32 * k + 16);
    for (int j = 0; j < N; ++j) {
      const __m512 xv = _mm512_set1_ps(xs[j][k]);
      acc[0][j] = _mm512_fmadd_ps(w0, xv, acc[0][j]);
      acc[1][j] = _mm512_fmadd_ps(w1, xv, acc[1][j]);
    }
  }
  StoreAcc<N>(y, ldy, n_rows, acc);
}

using FloatMicroFn = void (*)(const float*, int, const float* const*, float*, int64_t, int, bool);
constexpr FloatMicroFn kFloatMicro[kFloatCols] = {
    FloatMicro<1>, FloatMicro<2>, FloatMicro<3>, FloatMicro<4>,  FloatMicro<5>,  FloatMicro<6>,
    FloatMicro<7>, FloatMicro<8>, FloatMicro<9>, FloatMicro<10>, FloatMicro<11>, FloatMicro<12>};

template <DType T>
void GemmFloat(const MatMulArgs& a) {
  alignas(64) float pack[kFloatKc * kPanelRows];
  for (int64_t row = a.r0; row < a.r1; row += kPanelRows) {
    const int n_rows = static_cast<int>(Min64(kPanelRows, a.r1 - row));
    for (int64_t k0 = 0; k0 < a.cols; k0 += kFloatKc) {
      const int kc = static_cast<int>(Min64(kFloatKc, a.cols - k0));
      PackFloat<T>(a, row, n_rows, k0, kc, pack);
      constexpr int64_t kEsize = T == DType::kF32 ? 4 : 2;
      PrefetchNextPanel(a, row, k0 * kEsize, kFloatKc * kEsize);
      for (int64_t b = 0; b < a.batch; b += kFloatCols) {
        const int n = static_cast<int>(Min64(kFloatCols, a.batch - b));
        const float* xs[kFloatCols];
        for (int j = 0; j < n; ++j) {
          xs[j] = reinterpret_cast<const float*>(a.x + (b + j) * a.x_stride) + k0;
        }
        kFloatMicro[n - 1](pack, kc, xs, a.y + b * a.ldy + row, a.ldy, n_rows, k0 == 0);
      }
    }
  }
}

// ---- Q8_0 and Q4_0 ------------------------------------------------------------

// Two blocks of a row as 64 unsigned bytes in weight order (Q4_0: the
// nibbles; Q8_0: the bytes + 128).
template <bool kQ4>
PI_INLINE __m512i UnsignedPair(const uint8_t* b0, const uint8_t* b1) {
  if (kQ4) return Q4Pair(b0, b1, _mm512_set_epi64(4, 4, 0, 0, 4, 4, 0, 0), _mm512_set1_epi8(0x0F));
  return Q8Pair(b0, b1, _mm512_set1_epi8(static_cast<char>(0x80)));
}

PI_INLINE float F16Scale(const uint8_t* block) {
  uint16_t h;
  std::memcpy(&h, block, sizeof(h));
  return _cvtsh_ss(h);
}

// A quantized panel: blocks [blk0, blk0 + nblk) of rows [row, row + 32).
//   q[(blk * 8 + c) * 32 + i]: the 4 bytes c of block blk of row i (dwords);
//   d[blk * 32 + i]: the block's scale. Rows past n_rows are 0 (d = 0).
struct QuantPanel {
  alignas(64) int32_t q[kQuantKb * 8 * kPanelRows];
  alignas(64) float d[kQuantKb * kPanelRows];
};

template <bool kQ4>
void PackQuant(const MatMulArgs& a, int64_t row, int n_rows, int64_t blk0, int nblk,
               QuantPanel* p) {
  constexpr int kBytes = kQ4 ? kQ4Bytes : kQ8Bytes;
  for (int b = 0; b < nblk; b += 2) {
    const bool two = b + 1 < nblk;
    for (int h = 0; h < 2; ++h) {
      __m512 r[16];
      for (int i = 0; i < 16; ++i) {
        const int ri = 16 * h + i;
        if (ri >= n_rows) {
          r[i] = _mm512_setzero_ps();
          p->d[b * 32 + ri] = 0.0f;
          if (two) p->d[(b + 1) * 32 + ri] = 0.0f;
          continue;
        }
        const uint8_t* b0 = a.w + (row + ri) * a.row_bytes + (blk0 + b) * kBytes;
        // A lone last block pairs with itself; its copy is not stored.
        const uint8_t* b1 = two ? b0 + kBytes : b0;
        r[i] = _mm512_castsi512_ps(UnsignedPair<kQ4>(b0, b1));
        p->d[b * 32 + ri] = F16Scale(b0);
        if (two) p->d[(b + 1) * 32 + ri] = F16Scale(b1);
      }
      Transpose16(r);  // r[c]: dword c of the pair for 16 rows
      for (int c = 0; c < (two ? 16 : 8); ++c) {
        _mm512_store_ps(reinterpret_cast<float*>(p->q + ((b + c / 8) * 8 + c % 8) * 32 + 16 * h),
                        r[c]);
      }
    }
  }
}

// A batch column's prepared activation, blocks from the panel's first.
struct QuantCol {
  const int8_t* qs;    // int8 values
  const float* dx;     // block scales
  const int16_t* b16;  // sums of 16 values, two per block
};

// Columns [b, b + N) over a packed panel: per block, the exact integer dot
// of each (row, column) in one lane, then scaled and added in f32.
template <bool kQ4, int N>
void QuantMicro(const QuantPanel* p, int nblk, const QuantCol* xc, float* y, int64_t ldy,
                int n_rows, bool first) {
  constexpr int kOffset = kQ4 ? 8 : 128;
  __m512 acc[2][N];
  LoadAcc<N>(y, ldy, n_rows, first, acc);
  for (int b = 0; b < nblk; ++b) {
    __m512i is[2][N];
    for (int j = 0; j < N; ++j) {
      const int sum = xc[j].b16[2 * b] + xc[j].b16[2 * b + 1];
      is[0][j] = _mm512_set1_epi32(-kOffset * sum);
      is[1][j] = is[0][j];
    }
    const int32_t* q = p->q + b * 8 * 32;
    for (int c = 0; c < 8; ++c) {
      const __m512i w0 = _mm512_load_si512(q + c * 32);
      const __m512i w1 = _mm512_load_si512(q + c * 32 + 16);
      for (int j = 0; j < N; ++j) {
        int32_t xv;
        std::memcpy(&xv, xc[j].qs + b * kQK + 4 * c, sizeof(xv));
        const __m512i xb = _mm512_set1_epi32(xv);
        is[0][j] = _mm512_dpbusd_epi32(is[0][j], w0, xb);
        is[1][j] = _mm512_dpbusd_epi32(is[1][j], w1, xb);
      }
    }
    const __m512 d0 = _mm512_load_ps(p->d + b * 32);
    const __m512 d1 = _mm512_load_ps(p->d + b * 32 + 16);
    for (int j = 0; j < N; ++j) {
      const __m512 dx = _mm512_set1_ps(xc[j].dx[b]);
      acc[0][j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(is[0][j]), _mm512_mul_ps(d0, dx), acc[0][j]);
      acc[1][j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(is[1][j]), _mm512_mul_ps(d1, dx), acc[1][j]);
    }
  }
  StoreAcc<N>(y, ldy, n_rows, acc);
}

using QuantMicroFn = void (*)(const QuantPanel*, int, const QuantCol*, float*, int64_t, int, bool);
template <bool kQ4>
constexpr QuantMicroFn kQuantMicro[kQuantCols] = {QuantMicro<kQ4, 1>, QuantMicro<kQ4, 2>,
                                                  QuantMicro<kQ4, 3>, QuantMicro<kQ4, 4>,
                                                  QuantMicro<kQ4, 5>, QuantMicro<kQ4, 6>};

template <bool kQ4>
void GemmQuant(const MatMulArgs& a) {
  const QActLayout& l = a.layout;
  QuantPanel panel;
  for (int64_t row = a.r0; row < a.r1; row += kPanelRows) {
    const int n_rows = static_cast<int>(Min64(kPanelRows, a.r1 - row));
    for (int64_t blk0 = 0; blk0 < l.nb; blk0 += kQuantKb) {
      const int nblk = static_cast<int>(Min64(kQuantKb, l.nb - blk0));
      PackQuant<kQ4>(a, row, n_rows, blk0, nblk, &panel);
      constexpr int64_t kBytes = kQ4 ? kQ4Bytes : kQ8Bytes;
      PrefetchNextPanel(a, row, blk0 * kBytes, kQuantKb * kBytes);
      for (int64_t b = 0; b < a.batch; b += kQuantCols) {
        const int n = static_cast<int>(Min64(kQuantCols, a.batch - b));
        QuantCol xc[kQuantCols];
        for (int j = 0; j < n; ++j) {
          const uint8_t* xb = a.x + (b + j) * a.x_stride;
          xc[j].qs = reinterpret_cast<const int8_t*>(xb + l.qs_off) + blk0 * kQK;
          xc[j].dx = reinterpret_cast<const float*>(xb + l.dx_off) + blk0;
          xc[j].b16 = reinterpret_cast<const int16_t*>(xb + l.b16_off) + 2 * blk0;
        }
        kQuantMicro<kQ4>[n - 1](&panel, nblk, xc, a.y + b * a.ldy + row, a.ldy, n_rows, blk0 == 0);
      }
    }
  }
}

}  // namespace

bool HasGemmAvx512(DType wtype) {
  return wtype == DType::kF32 || wtype == DType::kF16 || wtype == DType::kBF16 ||
         wtype == DType::kQ8_0 || wtype == DType::kQ4_0;
}

void GemmRowsAvx512(const MatMulArgs& a) {
  switch (a.wtype) {
    case DType::kF32:
      return GemmFloat<DType::kF32>(a);
    case DType::kF16:
      return GemmFloat<DType::kF16>(a);
    case DType::kBF16:
      return GemmFloat<DType::kBF16>(a);
    case DType::kQ8_0:
      return GemmQuant<false>(a);
    case DType::kQ4_0:
      return GemmQuant<true>(a);
    default:
      return;
  }
}

}  // namespace cpu_internal
}  // namespace pi
