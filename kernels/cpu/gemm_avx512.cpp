// Matrix-matrix products for prompt batches on AVX-512 (F, BW, VL, DQ,
// VNNI; compiled with those -m flags only here), float weights (F32, F16,
// BF16), and the dispatch to the block formats' kernels
// (gemm_quant_avx512.cpp). matmul.h's GemmRows says what they compute; this
// is how.
//
// A batch of B activations against R weight rows is compute-bound, so the
// work is arranged for arithmetic, not for streaming: the weight rows are
// packed a panel at a time — kPanelRows rows x a k-block — into a scratch
// buffer that lives in L1, transposed so that one vector holds 16 rows at
// the same position k, and every batch column then passes over the packed
// panel. A micro-kernel keeps 2 x N accumulators (32 rows x N columns) in
// registers and, per k, loads the two row vectors once and broadcasts
// each column's activation: one FMA per vector op, no horizontal sums at
// all. Each output is one lane's running sum over k in order, so a column's
// result depends only on that column and row — not on the batch size, the
// column's position or the row range.
//
// The panel is f32 [k][32 rows], k-blocks of kFloatKc (F16 and BF16
// converted while packing); columns read the f32 activation.
#if defined(__GNUC__) && !defined(__clang__)  // (clang has no such warning)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include "kernels/cpu/avx512_inline.h"
#include "kernels/cpu/gemm_avx512_inline.h"
#include "kernels/cpu/matmul_impl.h"

namespace pi {
namespace cpu_internal {
namespace {

// Everything here has internal linkage (see matmul_impl.h).

constexpr int kFloatCols = 12;  // batch columns per float micro-kernel call
constexpr int kFloatKc = 128;   // k per float panel: 32 x 128 f32 = 16 KiB

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
      PrefetchNextPanel(a, row, kPanelRows, k0 * kEsize, kFloatKc * kEsize);
      for (int64_t b = 0, n = 0; b < a.batch; b += n) {
        n = ColumnTile(b, a.batch, kFloatCols);
        const float* xs[kFloatCols];
        for (int j = 0; j < n; ++j) {
          xs[j] = reinterpret_cast<const float*>(a.x + (b + j) * a.x_stride) + k0;
        }
        kFloatMicro[n - 1](pack, kc, xs, a.y + b * a.ldy + row, a.ldy, n_rows, k0 == 0);
      }
    }
  }
}

}  // namespace

bool HasGemmAvx512(DType wtype) {
  return wtype == DType::kF32 || wtype == DType::kF16 || wtype == DType::kBF16 ||
         HasGemmQuantAvx512(wtype);
}

void GemmRowsAvx512(const MatMulArgs& a) {
  switch (a.wtype) {
    case DType::kF32:
      return GemmFloat<DType::kF32>(a);
    case DType::kF16:
      return GemmFloat<DType::kF16>(a);
    case DType::kBF16:
      return GemmFloat<DType::kBF16>(a);
    default:
      return GemmQuantAvx512(a);
  }
}

}  // namespace cpu_internal
}  // namespace pi
