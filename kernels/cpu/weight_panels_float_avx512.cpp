// The weight-panel product on AVX-512 for float weights (weight_panels.h;
// F32, F16, BF16). A panel is [k][32 rows] in the weight's type: per k, two
// vectors of 16 rows (converted to f32 in registers), every batch column's
// x[k] broadcast, 32 rows x N columns of running sums in registers — the
// micro-kernel of gemm_avx512.cpp, which packs that layout per call, read
// here from memory repacked at load. Each sum runs over k in order, as
// GemmRows' does, so the two give the same bits. Long batches too convert
// in registers, per column group: converting a chunk to f32 in L1 once for
// all columns measured slower on every batch from 16 to 256 (-5 to -25 %).
#if defined(__GNUC__) && !defined(__clang__)  // (clang has no such warning)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include "kernels/cpu/gemm_avx512_inline.h"
#include "kernels/cpu/gemm_common.h"
#include "kernels/cpu/matmul_impl.h"
#include "kernels/cpu/weight_panels_layout.h"

namespace pi {
namespace cpu_internal {
namespace {

// Everything here has internal linkage (see matmul_impl.h).

constexpr int kCols = 12;     // batch columns per call: 24 sums in registers
constexpr int kChunkK = 128;  // k per chunk: 8 KiB of F16 panel, in L1 for every column group
constexpr int kLeadBytes = 16 * 1024;  // software prefetch distance (decode)
// Long batches (ForEachPanelCall): 3 calls of columns, 8 panels x 2048 k of
// weights (1 MiB of F16) per block. Unblocked, every panel streamed the whole
// batch's activations (22 MiB for a 7B down projection at 512 tokens) from L3
// or memory.
constexpr PanelBlocking kBlocking = {3, 2048, 8};

template <DType T>
PI_INLINE __m512 Load16(const uint8_t* p) {
  if (T == DType::kF32) return _mm512_load_ps(reinterpret_cast<const float*>(p));
  const __m256i h = _mm256_load_si256(reinterpret_cast<const __m256i*>(p));
  if (T == DType::kF16) return _mm512_cvtph_ps(h);
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));  // bf16
}

// Columns [0, N) over k in [0, kc) of one panel chunk `w` ([k][32] of T).
template <DType T, int N>
void FloatPanelMicro(const uint8_t* w, int kc, const float* const* xs, float* y, int64_t ldy,
                     bool first, bool prefetch) {
  constexpr int kE = PanelElemBytes(T);
  __m512 acc[2][N];
  LoadAcc<N>(y, ldy, kPanelRows, first, acc);
  for (int k = 0; k < kc; ++k) {
    const uint8_t* wk = w + k * 32 * kE;
    if (prefetch) {
      for (int l = 0; l < 32 * kE; l += 64) {
        _mm_prefetch(reinterpret_cast<const char*>(wk + kLeadBytes + l), _MM_HINT_T0);
      }
    }
    const __m512 w0 = Load16<T>(wk);
    const __m512 w1 = Load16<T>(wk + 16 * kE);
    for (int j = 0; j < N; ++j) {
      const __m512 xv = _mm512_set1_ps(xs[j][k]);
      acc[0][j] = _mm512_fmadd_ps(w0, xv, acc[0][j]);
      acc[1][j] = _mm512_fmadd_ps(w1, xv, acc[1][j]);
    }
  }
  StoreAcc<N>(y, ldy, kPanelRows, acc);
}

template <DType T>
using FloatMicroFn = void (*)(const uint8_t*, int, const float* const*, float*, int64_t, bool,
                              bool);
template <DType T>
constexpr FloatMicroFn<T> kFloatMicro[kCols] = {
    FloatPanelMicro<T, 1>, FloatPanelMicro<T, 2>,  FloatPanelMicro<T, 3>,  FloatPanelMicro<T, 4>,
    FloatPanelMicro<T, 5>, FloatPanelMicro<T, 6>,  FloatPanelMicro<T, 7>,  FloatPanelMicro<T, 8>,
    FloatPanelMicro<T, 9>, FloatPanelMicro<T, 10>, FloatPanelMicro<T, 11>, FloatPanelMicro<T, 12>};

template <DType T>
void FloatPanelRows(const uint8_t* panels, int64_t cols, const uint8_t* x, int64_t x_stride,
                    int64_t batch, float* y, int64_t ldy, int64_t r0, int64_t r1) {
  ForEachPanelCall(r0 / kPanelRows, r1 / kPanelRows, cols, kChunkK, batch, kCols, kBlocking,
                   [&](int64_t p, int64_t k0, int kc, int64_t b, int n, bool lead) {
                     const float* xs[kCols];
                     for (int j = 0; j < n; ++j) {
                       xs[j] = reinterpret_cast<const float*>(x + (b + j) * x_stride) + k0;
                     }
                     kFloatMicro<T>[n - 1](panels + FloatPanelOffset(T, cols, p, k0), kc, xs,
                                           y + b * ldy + p * kPanelRows, ldy, k0 == 0, lead);
                   });
}

}  // namespace

void FloatPanelRowsAvx512(DType wtype, const uint8_t* panels, int64_t cols, const uint8_t* x,
                          int64_t x_stride, int64_t batch, float* y, int64_t ldy, int64_t r0,
                          int64_t r1) {
  switch (wtype) {
    case DType::kF32:
      return FloatPanelRows<DType::kF32>(panels, cols, x, x_stride, batch, y, ldy, r0, r1);
    case DType::kF16:
      return FloatPanelRows<DType::kF16>(panels, cols, x, x_stride, batch, y, ldy, r0, r1);
    case DType::kBF16:
      return FloatPanelRows<DType::kBF16>(panels, cols, x, x_stride, batch, y, ldy, r0, r1);
    default:
      return;
  }
}

}  // namespace cpu_internal
}  // namespace pi
