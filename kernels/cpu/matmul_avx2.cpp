// AVX2 + FMA + F16C kernels (compiled with those -m flags only here). The
// structure mirrors matmul_avx512.cpp with 8-float vectors; there are only 16
// vector registers, so tiles are at most 4 rows x 2 batch columns.
#include <immintrin.h>

#include <cstring>

#include "kernels/cpu/avx2_inline.h"
#include "kernels/cpu/matmul_impl.h"
#include "kernels/cpu/row_stream_inline.h"

#define PI_INLINE inline __attribute__((always_inline))

namespace pi {
namespace cpu_internal {
namespace {

// Internal linkage only: see matmul_impl.h.

constexpr int kTileRows = 4;  // weight rows per tile for batched products
constexpr int kMaxBatch = 2;  // batch columns per tile
// Batch-1 tiles and prefetch distances: see matmul_avx512.cpp.
constexpr int kVecRowsQ4 = 4;
constexpr size_t kLeadBytes = 32 * 1024;
constexpr int64_t kPanelBytes = 192 * 1024;
// No short-row tiles (matmul_avx512.cpp's kShortRowCols): measured on AVX-512 only.
constexpr int64_t kShortRowCols = 0;

constexpr int kQ4Bytes = 18;
constexpr int kQ8Bytes = 34;

using Vec = __m256;  // the accumulators of matmul_tiles_inline.h
PI_INLINE Vec VecZero() {
  return _mm256_setzero_ps();
}
PI_INLINE float VecSum(Vec v) {
  return HorizontalSum(v);
}

// ---- float weights ----------------------------------------------------------

template <DType T>
PI_INLINE __m256 LoadW(const uint8_t* row, int64_t c) {
  if (T == DType::kF32) return _mm256_loadu_ps(reinterpret_cast<const float*>(row) + c);
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 2 * c));
  if (T == DType::kF16) return _mm256_cvtph_ps(h);
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));  // bf16
}

template <DType T>
PI_INLINE float LoadW1(const uint8_t* row, int64_t c) {
  if (T == DType::kF32) return reinterpret_cast<const float*>(row)[c];
  const uint32_t h = static_cast<uint32_t>(LoadU16(row + 2 * c));
  if (T == DType::kF16) return _cvtsh_ss(static_cast<unsigned short>(h));
  const uint32_t bits = h << 16;
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
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
  __m256 acc[U][R][B];
  for (int u = 0; u < U; ++u)
    for (int i = 0; i < R; ++i)
      for (int j = 0; j < B; ++j) acc[u][i][j] = _mm256_setzero_ps();

  constexpr size_t kStepBytes = 8 * U * (T == DType::kF32 ? 4 : 2);
  int64_t c = 0;
  for (; c + 8 * U <= a.cols; c += 8 * U) {
    pf->Step(kStepBytes);
    for (int u = 0; u < U; ++u) {
      __m256 xv[B];
      for (int j = 0; j < B; ++j) xv[j] = _mm256_loadu_ps(xs[j] + c + 8 * u);
      for (int i = 0; i < R; ++i) {
        const __m256 wv = LoadW<T>(wr[i], c + 8 * u);
        for (int j = 0; j < B; ++j) acc[u][i][j] = _mm256_fmadd_ps(wv, xv[j], acc[u][i][j]);
      }
    }
  }
  for (; c + 8 <= a.cols; c += 8) {
    __m256 xv[B];
    for (int j = 0; j < B; ++j) xv[j] = _mm256_loadu_ps(xs[j] + c);
    for (int i = 0; i < R; ++i) {
      const __m256 wv = LoadW<T>(wr[i], c);
      for (int j = 0; j < B; ++j) acc[0][i][j] = _mm256_fmadd_ps(wv, xv[j], acc[0][i][j]);
    }
  }
  for (int i = 0; i < R; ++i) {
    for (int j = 0; j < B; ++j) {
      __m256 s = acc[0][i][j];
      for (int u = 1; u < U; ++u) s = _mm256_add_ps(s, acc[u][i][j]);
      float sum = HorizontalSum(s);
      for (int64_t cc = c; cc < a.cols; ++cc) sum += LoadW1<T>(wr[i], cc) * xs[j][cc];
      out[i][j] = sum;
    }
  }
}

// ---- quantized weights --------------------------------------------------------

// One group of 4 Q4_0 blocks for R rows x B batch columns, two blocks per
// vector: the nibbles of blocks k, k+1 are loaded side by side, so one
// and/shift unpacks both, and the activation is re-paired to match
// ([x_k[0:16], x_k+1[0:16]] and [x_k[16:32], x_k+1[16:32]]) once per group
// for all rows. Nibbles are unsigned, so vpmaddubsw pairs stay small
// (<= 2*15*127, two of them still fit int16) and the +8 offset is removed
// with the prepared -sum(x) terms.
template <int R, int B>
PI_INLINE void Q4Group(const uint8_t* const* blk, const uint8_t* const* xb, const QActLayout& l,
                       int64_t g, __m256 (&acc)[R][B]) {
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  const __m256i ones = _mm256_set1_epi16(1);
  const __m256i idx_lo = _mm256_set_epi32(1, 1, 1, 1, 0, 0, 0, 0);
  const __m256i idx_hi = _mm256_set_epi32(3, 3, 3, 3, 2, 2, 2, 2);

  __m256i xlo[B][2], xhi[B][2], corr[B][2];
  __m128 dx[B];
  for (int j = 0; j < B; ++j) {
    const int8_t* q = ActQs(xb[j], l, g);
    const int32_t* s4 = ActS4(xb[j], l, g);
    for (int h = 0; h < 2; ++h) {  // blocks 2h, 2h+1
      const __m256i x0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + 64 * h));
      const __m256i x1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + 64 * h + 32));
      xlo[j][h] = _mm256_permute2x128_si256(x0, x1, 0x20);
      xhi[j][h] = _mm256_permute2x128_si256(x0, x1, 0x31);
      // Lane i of a block sums x[4i..4i+3] and x[16+4i..16+4i+3].
      const __m256i c0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s4 + 16 * h));
      const __m256i c1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s4 + 16 * h + 8));
      corr[j][h] = _mm256_slli_epi32(_mm256_add_epi32(_mm256_permute2x128_si256(c0, c1, 0x20),
                                                      _mm256_permute2x128_si256(c0, c1, 0x31)),
                                     3);
    }
    dx[j] = _mm_loadu_ps(ActDx(xb[j], l, g));
  }
  for (int i = 0; i < R; ++i) {
    const uint8_t* p = blk[i];
    const __m128 dw = LoadScales4(p, kQ4Bytes);
    for (int h = 0; h < 2; ++h) {
      const uint8_t* b0 = p + 2 * h * kQ4Bytes + 2;
      const __m256i q =
          _mm256_set_m128i(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b0 + kQ4Bytes)),
                           _mm_loadu_si128(reinterpret_cast<const __m128i*>(b0)));
      const __m256i lo = _mm256_and_si256(q, m4);
      const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
      for (int j = 0; j < B; ++j) {
        const __m256i t16 = _mm256_add_epi16(_mm256_maddubs_epi16(lo, xlo[j][h]),
                                             _mm256_maddubs_epi16(hi, xhi[j][h]));
        const __m256i t = _mm256_add_epi32(_mm256_madd_epi16(t16, ones), corr[j][h]);
        const __m256 sc = _mm256_castps128_ps256(_mm_mul_ps(dw, dx[j]));
        acc[i][j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(t),
                                    _mm256_permutevar8x32_ps(sc, h ? idx_hi : idx_lo), acc[i][j]);
      }
    }
  }
}

// One group of 4 Q8_0 blocks: signed x signed, done as |w| x (x with w's
// sign) like ggml, since an offset of 128 could overflow vpmaddubsw's 16-bit
// pairs.
template <int R, int B>
PI_INLINE void Q8Group(const uint8_t* const* blk, const uint8_t* const* xb, const QActLayout& l,
                       int64_t g, __m256 (&acc)[R][B]) {
  const __m256i ones = _mm256_set1_epi16(1);
  alignas(16) float scale[R][B][4];
  for (int j = 0; j < B; ++j) {
    const __m128 dx = _mm_loadu_ps(ActDx(xb[j], l, g));
    for (int i = 0; i < R; ++i) {
      _mm_store_ps(scale[i][j], _mm_mul_ps(LoadScales4(blk[i], kQ8Bytes), dx));
    }
  }
  for (int k = 0; k < 4; ++k) {
    __m256i xv[B];
    for (int j = 0; j < B; ++j) {
      xv[j] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ActQs(xb[j], l, g) + 32 * k));
    }
    for (int i = 0; i < R; ++i) {
      const __m256i w =
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk[i] + k * kQ8Bytes + 2));
      const __m256i aw = _mm256_sign_epi8(w, w);
      for (int j = 0; j < B; ++j) {
        const __m256i t =
            _mm256_madd_epi16(_mm256_maddubs_epi16(aw, _mm256_sign_epi8(xv[j], w)), ones);
        acc[i][j] =
            _mm256_fmadd_ps(_mm256_cvtepi32_ps(t), _mm256_broadcast_ss(&scale[i][j][k]), acc[i][j]);
      }
    }
  }
}

template <bool kQ4, int R, int B>
PI_INLINE void QGroup(const uint8_t* const* blk, const uint8_t* const* xb, const QActLayout& l,
                      int64_t g, __m256 (&acc)[R][B]) {
  if (kQ4) {
    Q4Group<R, B>(blk, xb, l, g, acc);
  } else {
    Q8Group<R, B>(blk, xb, l, g, acc);
  }
}

// ---- axpy ---------------------------------------------------------------------

// Groups of kAxpyRows rows with a != 0 (DriveAxpy), the next group
// prefetched while one runs, several independent FMA chains per step: see
// matmul_avx512.cpp.

template <DType T, int K>
PI_INLINE void AxpyFloat(const AxpyArgs& a, const AxpyGroup& g, const AxpyGroup& next) {
  constexpr int kVecs = 4;
  constexpr int kCols = 8 * kVecs;
  constexpr size_t kEsize = T == DType::kF32 ? 4 : 2;
  __m256 av[K];
  for (int k = 0; k < K; ++k) av[k] = _mm256_set1_ps(g.a[k]);
  int64_t c = 0;
  for (; c + kCols <= a.cols; c += kCols) {
    PrefetchGroup(next, c * kEsize, kCols * kEsize);
    __m256 y[kVecs];
    for (int v = 0; v < kVecs; ++v) y[v] = _mm256_loadu_ps(a.y + c + 8 * v);
    for (int k = 0; k < K; ++k) {
      for (int v = 0; v < kVecs; ++v) {
        y[v] = _mm256_fmadd_ps(av[k], LoadW<T>(g.w[k], c + 8 * v), y[v]);
      }
    }
    for (int v = 0; v < kVecs; ++v) _mm256_storeu_ps(a.y + c + 8 * v, y[v]);
  }
  for (; c + 8 <= a.cols; c += 8) {
    __m256 y = _mm256_loadu_ps(a.y + c);
    for (int k = 0; k < K; ++k) y = _mm256_fmadd_ps(av[k], LoadW<T>(g.w[k], c), y);
    _mm256_storeu_ps(a.y + c, y);
  }
  for (; c < a.cols; ++c) {
    float y = a.y[c];
    for (int k = 0; k < K; ++k) y += g.a[k] * LoadW1<T>(g.w[k], c);
    a.y[c] = y;
  }
}

// 8 int8 values as floats.
PI_INLINE __m256 Int8x8ToFloat(__m128i v) {
  return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v));
}

// NB blocks of a K-row group; each block is 4 y vectors (NB = 2: 8 chains).
template <bool kQ4, int K, int NB>
PI_INLINE void AxpyQuantStep(const AxpyArgs& a, const AxpyGroup& g, __m256 av, int64_t ib) {
  constexpr int kBytes = kQ4 ? kQ4Bytes : kQ8Bytes;
  const __m128i m4 = _mm_set1_epi8(0x0F);
  const __m128i eight = _mm_set1_epi8(8);
  alignas(32) float s[NB][8];
  for (int j = 0; j < NB; ++j) {
    uint64_t dbits[2] = {0, 0};
    for (int k = 0; k < K; ++k) {
      dbits[k / 4] |= LoadU16(g.w[k] + (ib + j) * kBytes) << (16 * (k % 4));
    }
    const __m128i d16 =
        _mm_set_epi64x(static_cast<long long>(dbits[1]), static_cast<long long>(dbits[0]));
    _mm256_store_ps(s[j], _mm256_mul_ps(_mm256_cvtph_ps(d16), av));
  }
  float* yb = a.y + ib * 32;
  __m256 y[4 * NB];
  for (int v = 0; v < 4 * NB; ++v) y[v] = _mm256_loadu_ps(yb + 8 * v);
  for (int k = 0; k < K; ++k) {
    for (int j = 0; j < NB; ++j) {
      const uint8_t* p = g.w[k] + (ib + j) * kBytes + 2;
      const __m256 sk = _mm256_broadcast_ss(&s[j][k]);
      __m128i lo, hi;  // weights 0..15 and 16..31 as int8
      if (kQ4) {
        const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
        lo = _mm_sub_epi8(_mm_and_si128(q, m4), eight);
        hi = _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(q, 4), m4), eight);
      } else {
        lo = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
        hi = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16));
      }
      y[4 * j] = _mm256_fmadd_ps(sk, Int8x8ToFloat(lo), y[4 * j]);
      y[4 * j + 1] = _mm256_fmadd_ps(sk, Int8x8ToFloat(_mm_srli_si128(lo, 8)), y[4 * j + 1]);
      y[4 * j + 2] = _mm256_fmadd_ps(sk, Int8x8ToFloat(hi), y[4 * j + 2]);
      y[4 * j + 3] = _mm256_fmadd_ps(sk, Int8x8ToFloat(_mm_srli_si128(hi, 8)), y[4 * j + 3]);
    }
  }
  for (int v = 0; v < 4 * NB; ++v) _mm256_storeu_ps(yb + 8 * v, y[v]);
}

template <bool kQ4, int K>
PI_INLINE void AxpyQuant(const AxpyArgs& a, const AxpyGroup& g, const AxpyGroup& next) {
  constexpr int kBytes = kQ4 ? kQ4Bytes : kQ8Bytes;
  alignas(32) float a8[8] = {};
  for (int k = 0; k < K; ++k) a8[k] = g.a[k];
  const __m256 av = _mm256_load_ps(a8);
  const int64_t nb = a.cols / 32;
  int64_t ib = 0;
  for (; ib + 2 <= nb; ib += 2) {
    PrefetchGroup(next, ib * kBytes, 2 * kBytes);
    AxpyQuantStep<kQ4, K, 2>(a, g, av, ib);
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

void MatMulRowsAvx2(const MatMulArgs& a) {
  MatMulRowsTiled(a);
}

void AxpyRowsAvx2(const AxpyArgs& a) {
  AxpyRowsTiled(a);
}

}  // namespace cpu_internal
}  // namespace pi
