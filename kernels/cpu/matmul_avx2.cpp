// AVX2 + FMA + F16C kernels (compiled with those -m flags only here). The
// structure mirrors matmul_avx512.cpp with 8-float vectors; there are only 16
// vector registers, so tiles are at most 4 rows x 2 batch columns.
#include <immintrin.h>

#include <cstring>

#include "kernels/cpu/matmul_impl.h"

#define PI_INLINE inline __attribute__((always_inline))

namespace pi {
namespace cpu_internal {
namespace {

// Internal linkage only: see matmul_impl.h.

constexpr int kTileRows = 4;
constexpr int kMaxBatch = 2;
constexpr int64_t kPanelBytes = 192 * 1024;

constexpr int kQ4Bytes = 18;
constexpr int kQ8Bytes = 34;

PI_INLINE int64_t Min64(int64_t a, int64_t b) { return a < b ? a : b; }

PI_INLINE uint64_t LoadU16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

PI_INLINE __m128 LoadScales4(const uint8_t* p, int stride) {
  const uint64_t v = LoadU16(p) | LoadU16(p + stride) << 16 | LoadU16(p + 2 * stride) << 32 |
                     LoadU16(p + 3 * stride) << 48;
  return _mm_cvtph_ps(_mm_cvtsi64_si128(static_cast<long long>(v)));
}

PI_INLINE float HorizontalSum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
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

template <DType T, int R, int B>
void TileFloat(const MatMulArgs& a, int64_t r, int64_t b0) {
  constexpr int U = B == 1 ? 2 : 1;
  const uint8_t* wr[R];
  for (int i = 0; i < R; ++i) wr[i] = a.w + (r + i) * a.row_bytes;
  const float* xs[B];
  for (int j = 0; j < B; ++j) xs[j] = reinterpret_cast<const float*>(a.x + (b0 + j) * a.x_stride);
  __m256 acc[U][R][B];
  for (int u = 0; u < U; ++u)
    for (int i = 0; i < R; ++i)
      for (int j = 0; j < B; ++j) acc[u][i][j] = _mm256_setzero_ps();

  int64_t c = 0;
  for (; c + 8 * U <= a.cols; c += 8 * U) {
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
      if (U == 2) s = _mm256_add_ps(s, acc[U - 1][i][j]);
      float sum = HorizontalSum(s);
      for (int64_t cc = c; cc < a.cols; ++cc) sum += LoadW1<T>(wr[i], cc) * xs[j][cc];
      a.y[(b0 + j) * a.ldy + r + i] = sum;
    }
  }
}

// ---- quantized weights --------------------------------------------------------

PI_INLINE const int8_t* ActQs(const uint8_t* xb, const QActLayout& l, int64_t g) {
  return reinterpret_cast<const int8_t*>(xb + l.qs_off) + g * 128;
}
PI_INLINE const float* ActDx(const uint8_t* xb, const QActLayout& l, int64_t g) {
  return reinterpret_cast<const float*>(xb + l.dx_off) + g * 4;
}
PI_INLINE const int32_t* ActS4(const uint8_t* xb, const QActLayout& l, int64_t g) {
  return reinterpret_cast<const int32_t*>(xb + l.s4_off) + g * 32;
}

// One group of 4 blocks for R rows x B batch columns.
//   Q4_0: the 32 nibbles as unsigned bytes [lo 16 | hi 16] (the activation's
//         order); vpmaddubsw pairs stay small (<= 2*15*127), and the +8 offset
//         is removed with the prepared -sum(x) terms.
//   Q8_0: signed x signed, done as |w| x (x with w's sign) like ggml, since
//         an offset of 128 could overflow vpmaddubsw's 16-bit pairs.
template <bool kQ4, int R, int B>
PI_INLINE void QGroup(const uint8_t* const* blk, const uint8_t* const* xb, const QActLayout& l,
                      int64_t g, __m256 (&acc)[R][B]) {
  constexpr int kBytes = kQ4 ? kQ4Bytes : kQ8Bytes;
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  const __m256i ones = _mm256_set1_epi16(1);

  alignas(16) float scale[R][B][4];
  for (int j = 0; j < B; ++j) {
    const __m128 dx = _mm_loadu_ps(ActDx(xb[j], l, g));
    for (int i = 0; i < R; ++i) _mm_store_ps(scale[i][j], _mm_mul_ps(LoadScales4(blk[i], kBytes), dx));
  }
  for (int k = 0; k < 4; ++k) {
    __m256i xv[B], cv[B];
    for (int j = 0; j < B; ++j) {
      xv[j] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ActQs(xb[j], l, g) + 32 * k));
      if (kQ4) {
        cv[j] = _mm256_slli_epi32(
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ActS4(xb[j], l, g) + 8 * k)), 3);
      }
    }
    for (int i = 0; i < R; ++i) {
      const uint8_t* p = blk[i] + k * kBytes + 2;
      __m256i w;
      if (kQ4) {
        const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
        w = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(q, 4), q), m4);
      } else {
        w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
      }
      for (int j = 0; j < B; ++j) {
        __m256i t;
        if (kQ4) {
          t = _mm256_add_epi32(_mm256_madd_epi16(_mm256_maddubs_epi16(w, xv[j]), ones), cv[j]);
        } else {
          t = _mm256_madd_epi16(
              _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(xv[j], w)), ones);
        }
        acc[i][j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(t), _mm256_broadcast_ss(&scale[i][j][k]),
                                    acc[i][j]);
      }
    }
  }
}

template <bool kQ4, int R, int B>
void TileQuant(const MatMulArgs& a, int64_t r, int64_t b0) {
  constexpr int kBytes = kQ4 ? kQ4Bytes : kQ8Bytes;
  const QActLayout& l = a.layout;
  const uint8_t* wr[R];
  for (int i = 0; i < R; ++i) wr[i] = a.w + (r + i) * a.row_bytes;
  const uint8_t* xb[B];
  for (int j = 0; j < B; ++j) xb[j] = a.x + (b0 + j) * a.x_stride;
  __m256 acc[R][B];
  for (int i = 0; i < R; ++i)
    for (int j = 0; j < B; ++j) acc[i][j] = _mm256_setzero_ps();

  const int64_t full = l.nb / 4;
  const uint8_t* blk[R];
  for (int64_t g = 0; g < full; ++g) {
    for (int i = 0; i < R; ++i) blk[i] = wr[i] + g * 4 * kBytes;
    QGroup<kQ4, R, B>(blk, xb, l, g, acc);
  }
  const int rest = static_cast<int>(l.nb - full * 4);
  if (rest > 0) {
    // Partial last group from zero-padded copies (see matmul_avx512.cpp).
    uint8_t tail[R][4 * kBytes];
    for (int i = 0; i < R; ++i) {
      std::memset(tail[i], 0, sizeof(tail[i]));
      std::memcpy(tail[i], wr[i] + full * 4 * kBytes, static_cast<size_t>(rest) * kBytes);
      blk[i] = tail[i];
    }
    QGroup<kQ4, R, B>(blk, xb, l, full, acc);
  }
  for (int i = 0; i < R; ++i)
    for (int j = 0; j < B; ++j) a.y[(b0 + j) * a.ldy + r + i] = HorizontalSum(acc[i][j]);
}

// ---- tiling driver ------------------------------------------------------------

using TileFn = void (*)(const MatMulArgs&, int64_t r, int64_t b0);

struct TileSet {
  TileFn full[kMaxBatch];
  TileFn single[kMaxBatch];
};

template <DType T>
constexpr TileSet FloatTiles() {
  return {{TileFloat<T, kTileRows, 1>, TileFloat<T, kTileRows, 2>},
          {TileFloat<T, 1, 1>, TileFloat<T, 1, 2>}};
}

template <bool kQ4>
constexpr TileSet QuantTiles() {
  return {{TileQuant<kQ4, kTileRows, 1>, TileQuant<kQ4, kTileRows, 2>},
          {TileQuant<kQ4, 1, 1>, TileQuant<kQ4, 1, 2>}};
}

constexpr TileSet kF32Tiles = FloatTiles<DType::kF32>();
constexpr TileSet kF16Tiles = FloatTiles<DType::kF16>();
constexpr TileSet kBf16Tiles = FloatTiles<DType::kBF16>();
constexpr TileSet kQ8Tiles = QuantTiles<false>();
constexpr TileSet kQ4Tiles = QuantTiles<true>();

void Drive(const MatMulArgs& a, const TileSet& t) {
  int64_t panel = a.r1 - a.r0;
  if (a.batch > kMaxBatch) {
    const int64_t rows = kPanelBytes / static_cast<int64_t>(a.row_bytes ? a.row_bytes : 1);
    panel = rows < kTileRows ? kTileRows : rows / kTileRows * kTileRows;
  }
  for (int64_t p0 = a.r0; p0 < a.r1; p0 += panel) {
    const int64_t p1 = Min64(a.r1, p0 + panel);
    for (int64_t b0 = 0; b0 < a.batch; b0 += kMaxBatch) {
      const int nb = static_cast<int>(Min64(kMaxBatch, a.batch - b0));
      int64_t r = p0;
      for (; r + kTileRows <= p1; r += kTileRows) t.full[nb - 1](a, r, b0);
      for (; r < p1; ++r) t.single[nb - 1](a, r, b0);
    }
  }
}

// ---- axpy ---------------------------------------------------------------------

template <DType T, int K>
void AxpyFloat(const AxpyArgs& a, const int64_t* rows) {
  const uint8_t* wr[K];
  __m256 av[K];
  for (int k = 0; k < K; ++k) {
    wr[k] = a.w + rows[k] * a.row_bytes;
    av[k] = _mm256_set1_ps(a.a[rows[k]]);
  }
  int64_t c = 0;
  for (; c + 8 <= a.cols; c += 8) {
    __m256 y = _mm256_loadu_ps(a.y + c);
    for (int k = 0; k < K; ++k) y = _mm256_fmadd_ps(av[k], LoadW<T>(wr[k], c), y);
    _mm256_storeu_ps(a.y + c, y);
  }
  for (; c < a.cols; ++c) {
    float y = a.y[c];
    for (int k = 0; k < K; ++k) y += a.a[rows[k]] * LoadW1<T>(wr[k], c);
    a.y[c] = y;
  }
}

// 8 int8 values at p, as floats.
PI_INLINE __m256 Int8x8ToFloat(__m128i v) {
  return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v));
}

template <bool kQ4, int K>
void AxpyQuant(const AxpyArgs& a, const int64_t* rows) {
  constexpr int kBytes = kQ4 ? kQ4Bytes : kQ8Bytes;
  const uint8_t* wr[K];
  float ak[K];
  for (int k = 0; k < K; ++k) {
    wr[k] = a.w + rows[k] * a.row_bytes;
    ak[k] = a.a[rows[k]];
  }
  const __m128i m4 = _mm_set1_epi8(0x0F);
  const __m128i eight = _mm_set1_epi8(8);
  const int64_t nb = a.cols / 32;
  for (int64_t ib = 0; ib < nb; ++ib) {
    float* yb = a.y + ib * 32;
    __m256 y[4];
    for (int m = 0; m < 4; ++m) y[m] = _mm256_loadu_ps(yb + 8 * m);
    for (int k = 0; k < K; ++k) {
      const uint8_t* p = wr[k] + ib * kBytes;
      const __m256 s = _mm256_set1_ps(ak[k] * _cvtsh_ss(static_cast<unsigned short>(LoadU16(p))));
      __m128i lo, hi;  // weights 0..15 and 16..31 as int8
      if (kQ4) {
        const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 2));
        lo = _mm_sub_epi8(_mm_and_si128(q, m4), eight);
        hi = _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(q, 4), m4), eight);
      } else {
        lo = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 2));
        hi = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 18));
      }
      y[0] = _mm256_fmadd_ps(s, Int8x8ToFloat(lo), y[0]);
      y[1] = _mm256_fmadd_ps(s, Int8x8ToFloat(_mm_srli_si128(lo, 8)), y[1]);
      y[2] = _mm256_fmadd_ps(s, Int8x8ToFloat(hi), y[2]);
      y[3] = _mm256_fmadd_ps(s, Int8x8ToFloat(_mm_srli_si128(hi, 8)), y[3]);
    }
    for (int m = 0; m < 4; ++m) _mm256_storeu_ps(yb + 8 * m, y[m]);
  }
}

using AxpyFn = void (*)(const AxpyArgs&, const int64_t* rows);

void DriveAxpy(const AxpyArgs& a, const AxpyFn (&fns)[4]) {
  int64_t rows[4];
  int n = 0;
  for (int64_t r = a.r0; r < a.r1; ++r) {
    if (a.a[r] == 0.0f) continue;
    rows[n++] = r;
    if (n == 4) {
      fns[3](a, rows);
      n = 0;
    }
  }
  if (n > 0) fns[n - 1](a, rows);
}

constexpr AxpyFn kAxpyF32[4] = {AxpyFloat<DType::kF32, 1>, AxpyFloat<DType::kF32, 2>,
                                AxpyFloat<DType::kF32, 3>, AxpyFloat<DType::kF32, 4>};
constexpr AxpyFn kAxpyF16[4] = {AxpyFloat<DType::kF16, 1>, AxpyFloat<DType::kF16, 2>,
                                AxpyFloat<DType::kF16, 3>, AxpyFloat<DType::kF16, 4>};
constexpr AxpyFn kAxpyBf16[4] = {AxpyFloat<DType::kBF16, 1>, AxpyFloat<DType::kBF16, 2>,
                                 AxpyFloat<DType::kBF16, 3>, AxpyFloat<DType::kBF16, 4>};
constexpr AxpyFn kAxpyQ8[4] = {AxpyQuant<false, 1>, AxpyQuant<false, 2>, AxpyQuant<false, 3>,
                               AxpyQuant<false, 4>};
constexpr AxpyFn kAxpyQ4[4] = {AxpyQuant<true, 1>, AxpyQuant<true, 2>, AxpyQuant<true, 3>,
                               AxpyQuant<true, 4>};

}  // namespace

void MatMulRowsAvx2(const MatMulArgs& a) {
  switch (a.wtype) {
    case DType::kF32: return Drive(a, kF32Tiles);
    case DType::kF16: return Drive(a, kF16Tiles);
    case DType::kBF16: return Drive(a, kBf16Tiles);
    case DType::kQ8_0: return Drive(a, kQ8Tiles);
    case DType::kQ4_0: return Drive(a, kQ4Tiles);
    default: return;
  }
}

void AxpyRowsAvx2(const AxpyArgs& a) {
  switch (a.wtype) {
    case DType::kF32: return DriveAxpy(a, kAxpyF32);
    case DType::kF16: return DriveAxpy(a, kAxpyF16);
    case DType::kBF16: return DriveAxpy(a, kAxpyBf16);
    case DType::kQ8_0: return DriveAxpy(a, kAxpyQ8);
    case DType::kQ4_0: return DriveAxpy(a, kAxpyQ4);
    default: return;
  }
}

}  // namespace cpu_internal
}  // namespace pi
