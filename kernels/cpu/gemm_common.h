// What the matrix-matrix kernels of every level share (gemm_avx512.cpp,
// gemm_quant_avx512.cpp, gemm_avx2.cpp), none of it ISA-specific: the block
// formats as they see them — per 32 weights, per 16 for Q6_K, w = a * u + c
// with u an unsigned byte; where c is a whole multiple of a the kernels fold
// it into the integer dot's start (Offset), Q4_K and Q5_K carry it as an f32
// min — the balanced column split, the order of a weight-panel product's
// calls, and the prefetch of the next panel.
// Scalar code and SSE prefetches only, all static: each kernel file gets its
// own copy (matmul_impl.h says why that matters for files with their own -m
// flags).
#pragma once

#include <xmmintrin.h>

#include <cstdint>

#include "kernels/cpu/kquant.h"
#include "kernels/cpu/matmul_impl.h"
#include "kernels/dtype.h"

namespace pi {
namespace cpu_internal {

static constexpr int kGemmQK = 32;  // weights per block (an activation block)

static constexpr bool IsKFormat(DType t) {
  return t == DType::kQ4_K || t == DType::kQ5_K || t == DType::kQ6_K;
}
// The integer offset folded into each dot: u - Offset is the signed weight.
static constexpr int Offset(DType t) {
  return t == DType::kQ4_0 ? 8 : t == DType::kQ8_0 ? 128 : t == DType::kQ6_K ? 32 : 0;
}
static constexpr bool PerHalf(DType t) {  // scales per 16 weights
  return t == DType::kQ6_K;
}
static constexpr bool HasMins(DType t) {
  return t == DType::kQ4_K || t == DType::kQ5_K;
}
// Bytes of `n` blocks of 32 (n a multiple of 8 for the K formats).
static constexpr int64_t BlockBytes(DType t, int64_t n) {
  return t == DType::kQ4_0   ? n * 18
         : t == DType::kQ8_0 ? n * 34
         : t == DType::kQ4_K ? n / 8 * int64_t{sizeof(BlockQ4_K)}
         : t == DType::kQ5_K ? n / 8 * int64_t{sizeof(BlockQ5_K)}
                             : n / 8 * int64_t{sizeof(BlockQ6_K)};
}

static inline int64_t Min64(int64_t a, int64_t b) {
  return a < b ? a : b;
}

// One column of a prepared activation batch (the Q8_0 layout, QActLayout)
// from some block on: what the integer-dot micro-kernels read per column.
struct QuantColumn {
  const int8_t* qs;    // int8 values
  const float* dx;     // block scales
  const int16_t* b16;  // sums of 16 values, two per block
};

// Columns [b, b + n) of the prepared batch at x (columns x_stride bytes
// apart), each from block blk0 on.
static inline void QuantColumnsAt(const uint8_t* x, size_t x_stride, const QActLayout& l, int64_t b,
                                  int n, int64_t blk0, QuantColumn* out) {
  for (int j = 0; j < n; ++j) {
    const uint8_t* xb = x + static_cast<size_t>(b + j) * x_stride;
    out[j].qs = reinterpret_cast<const int8_t*>(xb + l.qs_off) + blk0 * kGemmQK;
    out[j].dx = reinterpret_cast<const float*>(xb + l.dx_off) + blk0;
    out[j].b16 = reinterpret_cast<const int16_t*>(xb + l.b16_off) + 2 * blk0;
  }
}

// The width of the micro-kernel call at column b of a batch of `batch`
// taken `max_cols` at a time: the calls are balanced (64 columns by 12 are
// 11, 11, 11, 11, 10, 10, not 5 x 12 + 4) so that none runs with too few
// accumulators to cover the FMA latency.
static inline int ColumnTile(int64_t b, int64_t batch, int max_cols) {
  const int64_t calls = (batch + max_cols - 1) / max_cols;
  const int64_t base = batch / calls, extra = batch % calls;
  // The first `extra` calls take base + 1 columns.
  return static_cast<int>(b < extra * (base + 1) ? base + 1 : base);
}

// How a weight-panel driver (weight_panels_*.cpp) blocks a long batch: past
// `tiles` calls of columns, as a GEMM's operands are blocked — per `panels`
// panels and `k` units of k, the weights stay in L2/L3 while column blocks
// pass over them, and a column block's activations (`tiles` calls) stay in
// L2 while each of those panels passes over them. Unblocked (tiles 0, or a
// batch of one column block), each panel's k runs in one pass and every
// panel streams the whole batch's activations: fine while they fit in L2
// (decode), or while the kernel spends long enough per byte.
struct PanelBlocking {
  int tiles = 0;
  int64_t k = 0;
  int64_t panels = 0;
};

// The calls of a panel product over panels [p0, p1), k units [0, nk) in
// chunks of chunk_k (a chunk's weights in L1 for its calls) and columns
// [0, batch) in balanced calls of at most max_cols (ColumnTile), in the
// order `blocking` says: call(p, k0, kc, b, n, lead) for panel p, k units
// [k0, k0 + kc), columns [b, b + n); `lead` marks a chunk's first call
// (which prefetches ahead, or unpacks the chunk). Each (row, column) sees
// its chunks in order of k, whatever the blocking, so its bits do not
// depend on it.
template <typename Call>
static inline void ForEachPanelCall(int64_t p0, int64_t p1, int64_t nk, int64_t chunk_k,
                                    int64_t batch, int max_cols, const PanelBlocking& blocking,
                                    Call&& call) {
  if (p0 >= p1 || batch <= 0) return;
  const bool blocked = blocking.tiles > 0 && batch > int64_t{blocking.tiles} * max_cols;
  const int64_t block_k = blocked ? blocking.k : nk;
  const int64_t block_p = blocked ? blocking.panels : p1 - p0;
  const int64_t tiles = blocked ? blocking.tiles : batch;
  for (int64_t pb = p0; pb < p1; pb += block_p) {
    const int64_t pb_end = Min64(p1, pb + block_p);
    for (int64_t kb = 0; kb < nk; kb += block_k) {
      const int64_t kb_end = Min64(nk, kb + block_k);
      for (int64_t nb = 0, nb_end = 0; nb < batch; nb = nb_end) {
        for (int64_t t = 0; t < tiles && nb_end < batch; ++t) {
          nb_end += ColumnTile(nb_end, batch, max_cols);
        }
        for (int64_t p = pb; p < pb_end; ++p) {
          for (int64_t k0 = kb; k0 < kb_end; k0 += chunk_k) {
            const int kc = static_cast<int>(Min64(chunk_k, kb_end - k0));
            for (int64_t b = nb, n = 0; b < nb_end; b += n) {
              n = ColumnTile(b, batch, max_cols);
              call(p, k0, kc, b, static_cast<int>(n), b == nb);
            }
          }
        }
      }
    }
  }
}

// Prefetches (into L2) bytes [off, off + len) of rows [row, row + n_rows):
// the next panel, while this one is computed. A panel's rows are short
// pieces of rows far apart, which the hardware prefetchers do not follow.
static inline void PrefetchPanel(const MatMulArgs& a, int64_t row, int64_t n_rows, size_t off,
                                 size_t len) {
  for (int64_t i = 0; i < n_rows; ++i) {
    const uintptr_t begin = reinterpret_cast<uintptr_t>(a.w + (row + i) * a.row_bytes + off);
    for (uintptr_t p = begin & ~uintptr_t{63}; p < begin + len; p += 64) {
      _mm_prefetch(reinterpret_cast<const char*>(p), _MM_HINT_T1);
    }
  }
}

// The panel after the one of `panel_rows` rows at (row, bytes [kb, kb +
// kb_bytes)), panels going k-block by k-block along their rows: its rows and
// byte range.
static inline void PrefetchNextPanel(const MatMulArgs& a, int64_t row, int panel_rows, int64_t kb,
                                     int64_t kb_bytes) {
  const int64_t next_kb = kb + kb_bytes < static_cast<int64_t>(a.row_bytes) ? kb + kb_bytes : 0;
  const int64_t next_row = next_kb == 0 ? row + panel_rows : row;
  if (next_row >= a.r1) return;
  PrefetchPanel(a, next_row, Min64(panel_rows, a.r1 - next_row), static_cast<size_t>(next_kb),
                static_cast<size_t>(Min64(kb_bytes, static_cast<int64_t>(a.row_bytes) - next_kb)));
}

// Sub-block j's 6-bit scale and min of a Q4_K/Q5_K super-block (ggml's
// packing of `scales`).
static inline void ScaleMinK4(const uint8_t* q, int j, float* sc, float* m) {
  if (j < 4) {
    *sc = static_cast<float>(q[j] & 63);
    *m = static_cast<float>(q[j + 4] & 63);
  } else {
    *sc = static_cast<float>((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
    *m = static_cast<float>((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}

}  // namespace cpu_internal
}  // namespace pi
