// AVX-512 kernels (F, BW, VL, DQ, VNNI; compiled with those -m flags only
// here). Same math as matmul_ref.cpp up to summation order.
//
// Decode (batch 1) is bandwidth-bound: the aim is to keep enough DRAM reads
// in flight, with per-type tile shapes and software prefetch (measured on a
// Zen 5 core, see the constants below). Batched products are compute-bound:
// a tile is several weight rows x several batch columns, sharing weight
// unpacking across columns and activation loads across rows. Quantized rows
// are walked 4 blocks (128 weights) at a time against the SIMD copy of the
// prepared activation (matmul_impl.h).

// GCC 12 reports its own _mm512_undefined_*() placeholders (`__m512i __Y =
// __Y;`) as (maybe-)uninitialized once inlined here; the warning is spurious.
#if defined(__GNUC__) && !defined(__clang__)  // (clang has no such warning)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include "kernels/cpu/avx2_inline.h"
#include "kernels/cpu/avx512_inline.h"
#include "kernels/cpu/matmul_impl.h"
#include "kernels/cpu/row_stream_inline.h"

#define PI_INLINE inline __attribute__((always_inline))

namespace pi {
namespace cpu_internal {
namespace {

// Everything here has internal linkage: nothing compiled with AVX-512 flags
// may be shared with the rest of the program (see matmul_impl.h).

constexpr int kTileRows = 4;  // weight rows per tile for batched products
constexpr int kMaxBatch = 4;  // batch columns per tile
// Matrix-vector products (batch 1, decode) are bandwidth-bound. F32/F16/BF16
// and Q8_0 run fastest one row at a time: the matrix is then read as one
// linear stream. Q4_0 needs more arithmetic per byte and runs fastest on
// 4-row tiles, which share the activation loads and corrections.
constexpr int kVecRowsQ4 = 4;
// Prefetch distance into L2 (see Prefetcher), over all rows of a tile.
constexpr size_t kLeadBytes = 32 * 1024;
// Matvec rows at most this long go kTileRows at a time: their own loop is
// too short to hide the horizontal sum and call overhead of a lone row.
constexpr int64_t kShortRowCols = 1024;
// MatMulRows with a large batch walks the rows in panels of about this many
// weight bytes, so a panel stays in L2 while every batch chunk passes over it.
constexpr int64_t kPanelBytes = 192 * 1024;

constexpr int kQ4Bytes = 18;  // sizeof(BlockQ4_0)
constexpr int kQ8Bytes = 34;  // sizeof(BlockQ8_0)

using Vec = __m512;  // the accumulators of matmul_tiles_inline.h
PI_INLINE Vec VecZero() {
  return _mm512_setzero_ps();
}
PI_INLINE float VecSum(Vec v) {
  return _mm512_reduce_add_ps(v);
}

// ---- float weights ----------------------------------------------------------

template <DType T>
PI_INLINE __m512 LoadW(const uint8_t* row, int64_t c) {
  if (T == DType::kF32) return _mm512_loadu_ps(reinterpret_cast<const float*>(row) + c);
  const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + 2 * c));
  if (T == DType::kF16) return _mm512_cvtph_ps(h);
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));  // bf16
}

// R rows (wr[i]) x B batch columns (xs[j]) into out; pf prefetches ahead.
template <DType T, int R, int B, class P>
PI_INLINE void FloatTileBody(const MatMulArgs& a, const uint8_t* const* wr, const float* const* xs,
                             P* pf, float (&out)[R][B]) {
  // One running sum per (row, column) in every tile shape, so a column's
  // sum is formed alike whichever tile computes it: a batch column equals
  // the lone mat-vec bit for bit. (The mat-vec goes kTileRows rows at a
  // time, which keeps enough FMA chains in flight; U stays for that.)
  constexpr int U = 1;
  __m512 acc[U][R][B];
  for (int u = 0; u < U; ++u)
    for (int i = 0; i < R; ++i)
      for (int j = 0; j < B; ++j) acc[u][i][j] = _mm512_setzero_ps();

  constexpr size_t kStepBytes = 16 * U * (T == DType::kF32 ? 4 : 2);
  int64_t c = 0;
  for (; c + 16 * U <= a.cols; c += 16 * U) {
    pf->Step(kStepBytes);
    for (int u = 0; u < U; ++u) {
      __m512 xv[B];
      for (int j = 0; j < B; ++j) xv[j] = _mm512_loadu_ps(xs[j] + c + 16 * u);
      for (int i = 0; i < R; ++i) {
        const __m512 wv = LoadW<T>(wr[i], c + 16 * u);
        for (int j = 0; j < B; ++j) acc[u][i][j] = _mm512_fmadd_ps(wv, xv[j], acc[u][i][j]);
      }
    }
  }
  for (; c < a.cols; c += 16) {
    const int64_t n = Min64(16, a.cols - c);
    const __mmask16 m = static_cast<__mmask16>((1u << n) - 1);
    __m512 xv[B];
    for (int j = 0; j < B; ++j) xv[j] = _mm512_maskz_loadu_ps(m, xs[j] + c);
    for (int i = 0; i < R; ++i) {
      const __m512 wv = LoadWMasked<T>(wr[i], c, m);
      for (int j = 0; j < B; ++j) acc[0][i][j] = _mm512_fmadd_ps(wv, xv[j], acc[0][i][j]);
    }
  }
  for (int i = 0; i < R; ++i) {
    for (int j = 0; j < B; ++j) {
      __m512 s = acc[0][i][j];
      for (int u = 1; u < U; ++u) s = _mm512_add_ps(s, acc[u][i][j]);
      out[i][j] = _mm512_reduce_add_ps(s);
    }
  }
}

// ---- quantized weights --------------------------------------------------------

// One group of 4 blocks for R rows (blk[i] -> the group's first block) x B
// batch columns. kQ4 selects Q4_0 (18-byte blocks, offset 8) or Q8_0
// (34-byte blocks, offset 128).
template <bool kQ4, int R, int B>
PI_INLINE void QGroup(const uint8_t* const* blk, const uint8_t* const* xb, const QActLayout& l,
                      int64_t g, __m512 (&acc)[R][B]) {
  constexpr int kBytes = kQ4 ? kQ4Bytes : kQ8Bytes;
  const __m512i shifts = _mm512_set_epi64(4, 4, 0, 0, 4, 4, 0, 0);
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  const __m512i bias = _mm512_set1_epi8(static_cast<char>(0x80));
  const __m512i idx01 = _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);
  const __m512i idx23 = _mm512_set_epi32(3, 3, 3, 3, 3, 3, 3, 3, 2, 2, 2, 2, 2, 2, 2, 2);

  __m512i x01[B], x23[B], c01[B], c23[B];
  __m128 dx[B];
  for (int j = 0; j < B; ++j) {
    const int8_t* q = ActQs(xb[j], l, g);
    const int32_t* s4 = ActS4(xb[j], l, g);
    x01[j] = _mm512_loadu_si512(q);
    x23[j] = _mm512_loadu_si512(q + 64);
    // offset * (-sum of 4 x's): the correction for unsigned weights.
    c01[j] = _mm512_slli_epi32(_mm512_loadu_si512(s4), kQ4 ? 3 : 7);
    c23[j] = _mm512_slli_epi32(_mm512_loadu_si512(s4 + 16), kQ4 ? 3 : 7);
    dx[j] = _mm_loadu_ps(ActDx(xb[j], l, g));
  }
  for (int i = 0; i < R; ++i) {
    const uint8_t* p = blk[i];
    __m512i w01, w23;
    if (kQ4) {
      w01 = Q4Pair(p, p + kBytes, shifts, m4);
      w23 = Q4Pair(p + 2 * kBytes, p + 3 * kBytes, shifts, m4);
    } else {
      w01 = Q8Pair(p, p + kBytes, bias);
      w23 = Q8Pair(p + 2 * kBytes, p + 3 * kBytes, bias);
    }
    const __m128 dw = LoadScales4(p, kBytes);
    for (int j = 0; j < B; ++j) {
      const __m512i t01 = _mm512_dpbusd_epi32(c01[j], w01, x01[j]);
      const __m512i t23 = _mm512_dpbusd_epi32(c23[j], w23, x23[j]);
      const __m512 sc = _mm512_castps128_ps512(_mm_mul_ps(dw, dx[j]));
      acc[i][j] =
          _mm512_fmadd_ps(_mm512_cvtepi32_ps(t01), _mm512_permutexvar_ps(idx01, sc), acc[i][j]);
      acc[i][j] =
          _mm512_fmadd_ps(_mm512_cvtepi32_ps(t23), _mm512_permutexvar_ps(idx23, sc), acc[i][j]);
    }
  }
}

// ---- axpy ---------------------------------------------------------------------

// Groups of kAxpyRows rows with a != 0 (DriveAxpy, matmul_impl.h), the next
// group prefetched at the same column position while one runs.

// Float rows. Each y vector takes one FMA per row, a chain as long as the
// group; a step covers 4 vectors so that 4 chains overlap.
template <DType T, int K>
PI_INLINE void AxpyFloat(const AxpyArgs& a, const AxpyGroup& g, const AxpyGroup& next) {
  constexpr int kVecs = 4;
  constexpr int kCols = 16 * kVecs;
  constexpr size_t kEsize = T == DType::kF32 ? 4 : 2;
  __m512 av[K];
  for (int k = 0; k < K; ++k) av[k] = _mm512_set1_ps(g.a[k]);
  int64_t c = 0;
  for (; c + kCols <= a.cols; c += kCols) {
    PrefetchGroup(next, c * kEsize, kCols * kEsize);
    __m512 y[kVecs];
    for (int v = 0; v < kVecs; ++v) y[v] = _mm512_loadu_ps(a.y + c + 16 * v);
    for (int k = 0; k < K; ++k) {
      for (int v = 0; v < kVecs; ++v) {
        y[v] = _mm512_fmadd_ps(av[k], LoadW<T>(g.w[k], c + 16 * v), y[v]);
      }
    }
    for (int v = 0; v < kVecs; ++v) _mm512_storeu_ps(a.y + c + 16 * v, y[v]);
  }
  for (; c < a.cols; c += 16) {
    const int64_t n = Min64(16, a.cols - c);
    const __mmask16 m = static_cast<__mmask16>((1u << n) - 1);
    __m512 y = _mm512_maskz_loadu_ps(m, a.y + c);
    for (int k = 0; k < K; ++k) y = _mm512_fmadd_ps(av[k], LoadWMasked<T>(g.w[k], c, m), y);
    _mm512_mask_storeu_ps(a.y + c, m, y);
  }
}

// The f16 scales of 8 consecutive Q4_0 blocks from p (the first block's
// start): block j's scale is word 9 j of the 144 bytes (18-byte blocks),
// which the step reads anyway; one word permute gathers them.
PI_INLINE __m128i ScalesOf8Q4Blocks(const uint8_t* p) {
  const __m512i words = _mm512_set_epi16(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                                         0, 0, 0, 0, 63, 54, 45, 36, 27, 18, 9, 0);
  return _mm512_castsi512_si128(
      _mm512_permutex2var_epi16(_mm512_loadu_si512(p), words, _mm512_loadu_si512(p + 64)));
}

// NB quantized blocks (32 columns each) of a K-row group: weight = q * d, so
// each row adds (a * d) * q. NB = 4 gives 8 independent FMA chains, NB = 8
// (Q4_0) 16. The scales a*d: for NB = 8, each row's 8 at once
// (ScalesOf8Q4Blocks), else the K rows' scales of a block together. The same
// products either way.
template <bool kQ4, int K, int NB>
PI_INLINE void AxpyQuantStep(const AxpyArgs& a, const AxpyGroup& g, __m256 av, int64_t ib) {
  constexpr int kBytes = kQ4 ? kQ4Bytes : kQ8Bytes;
  constexpr bool kRowScales = kQ4 && NB == 8;
  // Nibble n -> float (n - 8), by permute.
  const __m512 minus8 = _mm512_set_ps(7, 6, 5, 4, 3, 2, 1, 0, -1, -2, -3, -4, -5, -6, -7, -8);
  // s[j][k] (a block's rows together) or, kRowScales, s[k][j] (a row's blocks).
  alignas(32) float s[kRowScales ? K : NB][8];
  if constexpr (kRowScales) {
    for (int k = 0; k < K; ++k) {
      const __m128i d = ScalesOf8Q4Blocks(g.w[k] + ib * kBytes);
      _mm256_store_ps(s[k], _mm256_mul_ps(_mm256_cvtph_ps(d), _mm256_set1_ps(g.a[k])));
    }
  } else {
    for (int j = 0; j < NB; ++j) {
      uint64_t dbits[2] = {0, 0};
      for (int k = 0; k < K; ++k) {
        dbits[k / 4] |= LoadU16(g.w[k] + (ib + j) * kBytes) << (16 * (k % 4));
      }
      const __m128i d16 =
          _mm_set_epi64x(static_cast<long long>(dbits[1]), static_cast<long long>(dbits[0]));
      _mm256_store_ps(s[j], _mm256_mul_ps(_mm256_cvtph_ps(d16), av));
    }
  }
  float* yb = a.y + ib * 32;
  __m512 y[2 * NB];
  for (int v = 0; v < 2 * NB; ++v) y[v] = _mm512_loadu_ps(yb + 16 * v);
  for (int k = 0; k < K; ++k) {
    for (int j = 0; j < NB; ++j) {
      const uint8_t* p = g.w[k] + (ib + j) * kBytes + 2;
      float scale;
      if constexpr (kRowScales) {
        scale = s[k][j];
      } else {
        scale = s[j][k];
      }
      const __m512 sk = _mm512_set1_ps(scale);
      __m512 w0, w1;
      if (kQ4) {
        const __m512i q =
            _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
        // vpermps reads an index's low 4 bits only: the low nibble as it is.
        w0 = _mm512_permutexvar_ps(q, minus8);
        w1 = _mm512_permutexvar_ps(_mm512_srli_epi32(q, 4), minus8);
      } else {
        w0 = _mm512_cvtepi32_ps(
            _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
        w1 = _mm512_cvtepi32_ps(
            _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16))));
      }
      y[2 * j] = _mm512_fmadd_ps(sk, w0, y[2 * j]);
      y[2 * j + 1] = _mm512_fmadd_ps(sk, w1, y[2 * j + 1]);
    }
  }
  for (int v = 0; v < 2 * NB; ++v) _mm512_storeu_ps(yb + 16 * v, y[v]);
}

template <bool kQ4, int K>
PI_INLINE void AxpyQuant(const AxpyArgs& a, const AxpyGroup& g, const AxpyGroup& next) {
  constexpr int kBytes = kQ4 ? kQ4Bytes : kQ8Bytes;
  alignas(32) float a8[8] = {};
  for (int k = 0; k < K; ++k) a8[k] = g.a[k];
  const __m256 av = _mm256_load_ps(a8);
  const int64_t nb = a.cols / 32;
  int64_t ib = 0;
  // Q4_0 8 blocks a step (16 FMA chains, its scales by permute); Q8_0, which
  // reads twice the bytes per weight, runs at the memory's pace with 4 and
  // loses a tenth with 8.
  if constexpr (kQ4) {
    for (; ib + 8 <= nb; ib += 8) {
      PrefetchGroup(next, ib * kBytes, 8 * kBytes);
      AxpyQuantStep<kQ4, K, 8>(a, g, av, ib);
    }
  }
  for (; ib + 4 <= nb; ib += 4) {
    PrefetchGroup(next, ib * kBytes, 4 * kBytes);
    AxpyQuantStep<kQ4, K, 4>(a, g, av, ib);
  }
  for (; ib < nb; ++ib) {
    PrefetchGroup(next, ib * kBytes, kBytes);
    AxpyQuantStep<kQ4, K, 1>(a, g, av, ib);
  }
}

}  // namespace
}  // namespace cpu_internal
}  // namespace pi

// The tiles over the bodies above, and their dispatch by weight type.
#include "kernels/cpu/matmul_tiles_inline.h"

namespace pi {
namespace cpu_internal {

void MatMulRowsAvx512(const MatMulArgs& a) {
  MatMulRowsTiled(a);
}

void AxpyRowsAvx512(const AxpyArgs& a) {
  AxpyRowsTiled(a);
}

}  // namespace cpu_internal
}  // namespace pi
