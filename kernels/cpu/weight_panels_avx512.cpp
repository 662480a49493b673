// The weight-panel product on AVX-512 VNNI (weight_panels.h). Per block of a
// panel: the 32 rows' scales (two f16 vectors), then per 16 rows the weight
// dwords, each vector the same 4 bytes of 16 rows; vpdpbusd against each batch
// column's 4 activation bytes, broadcast, gives the exact integer dot of every
// (row, column) in one lane; it is scaled and added in f32 once per block.
// The panel is read as one linear stream, so a batch of 1 (decode) runs at
// memory speed with a software prefetch ahead of it; larger batches pass
// every column over a chunk of blocks while it is in L1.
#if defined(__GNUC__) && !defined(__clang__)  // (clang has no such warning)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include <cstring>

#include "kernels/cpu/gemm_avx512_inline.h"
#include "kernels/cpu/gemm_common.h"
#include "kernels/cpu/matmul_impl.h"
#include "kernels/cpu/weight_panels_layout.h"

namespace pi {
namespace cpu_internal {
namespace {

// Everything here has internal linkage (see matmul_impl.h).

constexpr int kCols = 8;  // batch columns per micro-kernel call: 8 sums + 8 dots
// Blocks per chunk: 9 KiB (Q4_0) or 17 KiB (Q8_0) of panel, in L1 while
// both halves and every call pass over it.
constexpr int kChunkBlocks = 16;
// Software prefetch distance: the hardware prefetchers alone keep too few
// DRAM reads in flight for a decode step (matmul_avx512.cpp's Prefetcher).
constexpr int kLeadBytes = 16 * 1024;

// One block's integer dots for 16 rows (half h) x N columns: the weights'
// unsigned bytes against each column's 4 activation bytes, broadcast; the
// offset starts each sum at -offset * sum(qx), so the dot is exact.
template <DType T, int N>
PI_INLINE void BlockDots(const uint8_t* blk, int h, int b, const QuantColumn* xc,
                         __m512i (&is)[N]) {
  constexpr int kDwords = PanelDwords(T);
  constexpr int kOffset = T == DType::kQ4_0 ? 8 : 128;
  for (int j = 0; j < N; ++j) {
    is[j] = _mm512_set1_epi32(-kOffset * (xc[j].b16[2 * b] + xc[j].b16[2 * b + 1]));
  }
  for (int c = 0; c < kDwords; ++c) {
    const __m512i v = _mm512_load_si512(blk + 64 + (h * kDwords + c) * 64);
    if (T == DType::kQ4_0) {
      const __m512i m4 = _mm512_set1_epi8(0x0F);
      const __m512i lo = _mm512_and_si512(v, m4);
      const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
      for (int j = 0; j < N; ++j) {
        int32_t x_lo, x_hi;
        std::memcpy(&x_lo, xc[j].qs + b * 32 + 4 * c, 4);
        std::memcpy(&x_hi, xc[j].qs + b * 32 + 16 + 4 * c, 4);
        is[j] = _mm512_dpbusd_epi32(is[j], lo, _mm512_set1_epi32(x_lo));
        is[j] = _mm512_dpbusd_epi32(is[j], hi, _mm512_set1_epi32(x_hi));
      }
    } else {
      const __m512i u = _mm512_xor_si512(v, _mm512_set1_epi8(static_cast<char>(0x80)));
      for (int j = 0; j < N; ++j) {
        int32_t xv;
        std::memcpy(&xv, xc[j].qs + b * 32 + 4 * c, 4);
        is[j] = _mm512_dpbusd_epi32(is[j], u, _mm512_set1_epi32(xv));
      }
    }
  }
}

// acc[j] += dot * (d_w * d_x), the block's one f32 step per (row, column).
template <int N>
PI_INLINE void AddScaled(const uint8_t* blk, int h, int b, const QuantColumn* xc,
                         const __m512i (&is)[N], __m512 (&acc)[N]) {
  const __m512 a =
      _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(blk + 32 * h)));
  for (int j = 0; j < N; ++j) {
    const __m512 scale = _mm512_mul_ps(a, _mm512_set1_ps(xc[j].dx[b]));
    acc[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(is[j]), scale, acc[j]);
  }
}

PI_INLINE void PrefetchAhead(const uint8_t* blk, int bytes) {
  for (int l = 0; l < bytes; l += 64) {
    _mm_prefetch(reinterpret_cast<const char*>(blk + kLeadBytes + l), _MM_HINT_T0);
  }
}

// Columns [0, N) over blocks [0, nblk) of one panel. Few columns (decode):
// both halves of each block in turn, so the panel is read once, in order.
// More: one half at a time, so its N sums and N dots fit the registers; the
// chunk read for the first half is still in L1 for the second. Either way
// each (row, column) adds the same terms in the same order.
template <DType T, int N>
void PanelMicro(const uint8_t* blocks, int nblk, const QuantColumn* xc, float* y, int64_t ldy,
                bool first, bool prefetch) {
  constexpr int kBlockBytes = PanelBlockBytes(T);
  constexpr int kHalves = N <= 4 ? 2 : 1;  // halves per pass over the blocks
  for (int h0 = 0; h0 < 2; h0 += kHalves) {
    __m512 acc[kHalves][N];
    LoadHalves<kHalves, N>(y, ldy, h0, first, acc);
    for (int b = 0; b < nblk; ++b) {
      const uint8_t* blk = blocks + b * kBlockBytes;
      if (prefetch && h0 == 0) PrefetchAhead(blk, kBlockBytes);
      for (int g = 0; g < kHalves; ++g) {
        __m512i is[N];
        BlockDots<T, N>(blk, h0 + g, b, xc, is);
        AddScaled<N>(blk, h0 + g, b, xc, is, acc[g]);
      }
    }
    StoreHalves<kHalves, N>(y, ldy, h0, acc);
  }
}

// Long batches (prompts): a chunk's weights unpacked once into unsigned bytes
// in L1, [block][dword c][half][16 rows][4], then every column group passes
// over it with both halves per broadcast, 32 rows x kWideCols columns of
// sums in registers (GemmRows' micro-kernel shape). The same per-block
// arithmetic as PanelMicro, so the same bits.
constexpr int kWideCols = 6;
constexpr int64_t kWideMinBatch = 32;  // below it, unpacking costs more than it saves

struct UnpackedChunk {
  alignas(64) uint8_t u[kChunkBlocks * 8 * 2 * 64];
};

template <DType T>
void UnpackChunk(const uint8_t* blocks, int nblk, UnpackedChunk* out) {
  constexpr int kDwords = PanelDwords(T);
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  const __m512i bias = _mm512_set1_epi8(static_cast<char>(0x80));
  for (int b = 0; b < nblk; ++b) {
    const uint8_t* blk = blocks + b * PanelBlockBytes(T);
    PrefetchAhead(blk, PanelBlockBytes(T));
    uint8_t* dst = out->u + b * 8 * 2 * 64;
    for (int h = 0; h < 2; ++h) {
      for (int c = 0; c < kDwords; ++c) {
        const __m512i v = _mm512_load_si512(blk + 64 + (h * kDwords + c) * 64);
        if (T == DType::kQ4_0) {
          _mm512_store_si512(dst + (c * 2 + h) * 64, _mm512_and_si512(v, m4));
          _mm512_store_si512(dst + ((c + 4) * 2 + h) * 64,
                             _mm512_and_si512(_mm512_srli_epi16(v, 4), m4));
        } else {
          _mm512_store_si512(dst + (c * 2 + h) * 64, _mm512_xor_si512(v, bias));
        }
      }
    }
  }
}

template <DType T, int N>
void WideMicro(const uint8_t* blocks, const UnpackedChunk* w, int nblk, const QuantColumn* xc,
               float* y, int64_t ldy, bool first) {
  constexpr int kOffset = T == DType::kQ4_0 ? 8 : 128;
  __m512 acc[2][N];
  LoadAcc<N>(y, ldy, kPanelRows, first, acc);
  for (int b = 0; b < nblk; ++b) {
    const uint8_t* u = w->u + b * 8 * 2 * 64;
    __m512i is[2][N];
    for (int j = 0; j < N; ++j) {
      is[0][j] = _mm512_set1_epi32(-kOffset * (xc[j].b16[2 * b] + xc[j].b16[2 * b + 1]));
      is[1][j] = is[0][j];
    }
    for (int c = 0; c < 8; ++c) {
      const __m512i w0 = _mm512_load_si512(u + (c * 2) * 64);
      const __m512i w1 = _mm512_load_si512(u + (c * 2 + 1) * 64);
      for (int j = 0; j < N; ++j) {
        int32_t xv;
        std::memcpy(&xv, xc[j].qs + b * 32 + 4 * c, 4);
        const __m512i xb = _mm512_set1_epi32(xv);
        is[0][j] = _mm512_dpbusd_epi32(is[0][j], w0, xb);
        is[1][j] = _mm512_dpbusd_epi32(is[1][j], w1, xb);
      }
    }
    const uint8_t* blk = blocks + b * PanelBlockBytes(T);
    for (int h = 0; h < 2; ++h) {
      const __m512 a =
          _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(blk + 32 * h)));
      for (int j = 0; j < N; ++j) {
        const __m512 scale = _mm512_mul_ps(a, _mm512_set1_ps(xc[j].dx[b]));
        acc[h][j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(is[h][j]), scale, acc[h][j]);
      }
    }
  }
  StoreAcc<N>(y, ldy, kPanelRows, acc);
}

using PanelMicroFn = void (*)(const uint8_t*, int, const QuantColumn*, float*, int64_t, bool, bool);
template <DType T>
constexpr PanelMicroFn kPanelMicro[kCols] = {PanelMicro<T, 1>, PanelMicro<T, 2>, PanelMicro<T, 3>,
                                             PanelMicro<T, 4>, PanelMicro<T, 5>, PanelMicro<T, 6>,
                                             PanelMicro<T, 7>, PanelMicro<T, 8>};
using WideMicroFn = void (*)(const uint8_t*, const UnpackedChunk*, int, const QuantColumn*, float*,
                             int64_t, bool);
template <DType T>
constexpr WideMicroFn kWideMicro[kWideCols] = {WideMicro<T, 1>, WideMicro<T, 2>, WideMicro<T, 3>,
                                               WideMicro<T, 4>, WideMicro<T, 5>, WideMicro<T, 6>};

template <DType T>
void PanelRows(const uint8_t* panels, int64_t cols, const uint8_t* x, int64_t batch, float* y,
               int64_t ldy, int64_t r0, int64_t r1) {
  const QActLayout l = GetQActLayout(cols);
  const int64_t nb = cols / 32;
  const bool wide = batch >= kWideMinBatch;
  const int max_cols = wide ? kWideCols : kCols;
  UnpackedChunk unpacked;
  ForEachPanelCall(r0 / kPanelRows, r1 / kPanelRows, nb, kChunkBlocks, batch, max_cols,
                   PanelBlocking(),
                   [&](int64_t p, int64_t k0, int nblk, int64_t b, int n, bool lead) {
                     const uint8_t* blocks = panels + PanelOffset(T, nb, p, k0);
                     QuantColumn xc[kCols];
                     QuantColumnsAt(x, l.total, l, b, n, k0, xc);
                     float* yb = y + b * ldy + p * kPanelRows;
                     if (wide) {
                       if (lead) UnpackChunk<T>(blocks, nblk, &unpacked);
                       kWideMicro<T>[n - 1](blocks, &unpacked, nblk, xc, yb, ldy, k0 == 0);
                     } else {
                       kPanelMicro<T>[n - 1](blocks, nblk, xc, yb, ldy, k0 == 0, lead);
                     }
                   });
}

}  // namespace

void WeightPanelRowsAvx512(DType wtype, const uint8_t* panels, int64_t cols, const uint8_t* x,
                           int64_t batch, float* y, int64_t ldy, int64_t r0, int64_t r1) {
  if (wtype == DType::kQ4_0) {
    PanelRows<DType::kQ4_0>(panels, cols, x, batch, y, ldy, r0, r1);
  } else if (wtype == DType::kQ8_0) {
    PanelRows<DType::kQ8_0>(panels, cols, x, batch, y, ldy, r0, r1);
  }
}

}  // namespace cpu_internal
}  // namespace pi
