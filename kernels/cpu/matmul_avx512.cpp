// AVX-512 kernels (F, BW, VL, DQ, VNNI; compiled with those -m flags only
// here). Same math as matmul_ref.cpp up to summation order.
//
// Decode is bandwidth-bound, so the kernels aim to keep the load units busy:
// a tile is several weight rows x several batch columns, the activation is
// loaded once per tile step and shared by the rows, and every row keeps its
// own accumulators. Quantized rows are walked 4 blocks (128 weights) at a
// time against the SIMD copy of the prepared activation (matmul_impl.h).
// GCC 12 reports its own _mm512_undefined_*() placeholders (`__m512i __Y =
// __Y;`) as (maybe-)uninitialized once inlined here; the warning is spurious.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include <cstring>

#include "kernels/cpu/matmul_impl.h"

#define PI_INLINE inline __attribute__((always_inline))

namespace pi {
namespace cpu_internal {
namespace {

// Everything here has internal linkage: nothing compiled with AVX-512 flags
// may be shared with the rest of the program (see matmul_impl.h).

constexpr int kTileRows = 4;  // weight rows per tile
constexpr int kMaxBatch = 4;  // batch columns per tile
// MatMulRows with a large batch walks the rows in panels of about this many
// weight bytes, so a panel stays in L2 while every batch chunk passes over it.
constexpr int64_t kPanelBytes = 192 * 1024;

constexpr int kQ4Bytes = 18;  // sizeof(BlockQ4_0)
constexpr int kQ8Bytes = 34;  // sizeof(BlockQ8_0)

PI_INLINE int64_t Min64(int64_t a, int64_t b) { return a < b ? a : b; }

PI_INLINE uint64_t LoadU16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

// The f16 scales (the first 2 bytes of a block) of 4 blocks `stride` apart.
PI_INLINE __m128 LoadScales4(const uint8_t* p, int stride) {
  const uint64_t v = LoadU16(p) | LoadU16(p + stride) << 16 | LoadU16(p + 2 * stride) << 32 |
                     LoadU16(p + 3 * stride) << 48;
  return _mm_cvtph_ps(_mm_cvtsi64_si128(static_cast<long long>(v)));
}

// ---- float weights ----------------------------------------------------------

template <DType T>
PI_INLINE __m512 LoadW(const uint8_t* row, int64_t c) {
  if (T == DType::kF32) return _mm512_loadu_ps(reinterpret_cast<const float*>(row) + c);
  const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + 2 * c));
  if (T == DType::kF16) return _mm512_cvtph_ps(h);
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));  // bf16
}

// Masked load of the first n < 16 weights at c; masked-off lanes are 0 and
// are not read (no access past the end of the row).
template <DType T>
PI_INLINE __m512 LoadWMasked(const uint8_t* row, int64_t c, __mmask16 m) {
  if (T == DType::kF32) return _mm512_maskz_loadu_ps(m, reinterpret_cast<const float*>(row) + c);
  const __m256i h = _mm256_maskz_loadu_epi16(m, row + 2 * c);
  if (T == DType::kF16) return _mm512_cvtph_ps(h);
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

// R rows [r, r+R) x B batch columns [b0, b0+B).
template <DType T, int R, int B>
void TileFloat(const MatMulArgs& a, int64_t r, int64_t b0) {
  // One batch column has few independent sums (R), so give each row two.
  constexpr int U = B == 1 ? 2 : 1;
  const uint8_t* wr[R];
  for (int i = 0; i < R; ++i) wr[i] = a.w + (r + i) * a.row_bytes;
  const float* xs[B];
  for (int j = 0; j < B; ++j) xs[j] = reinterpret_cast<const float*>(a.x + (b0 + j) * a.x_stride);
  __m512 acc[U][R][B];
  for (int u = 0; u < U; ++u)
    for (int i = 0; i < R; ++i)
      for (int j = 0; j < B; ++j) acc[u][i][j] = _mm512_setzero_ps();

  int64_t c = 0;
  for (; c + 16 * U <= a.cols; c += 16 * U) {
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
      if (U == 2) s = _mm512_add_ps(s, acc[U - 1][i][j]);
      a.y[(b0 + j) * a.ldy + r + i] = _mm512_reduce_add_ps(s);
    }
  }
}

// ---- quantized weights --------------------------------------------------------

// Where group g (4 blocks) of one prepared activation lives.
PI_INLINE const int8_t* ActQs(const uint8_t* xb, const QActLayout& l, int64_t g) {
  return reinterpret_cast<const int8_t*>(xb + l.qs_off) + g * 128;
}
PI_INLINE const float* ActDx(const uint8_t* xb, const QActLayout& l, int64_t g) {
  return reinterpret_cast<const float*>(xb + l.dx_off) + g * 4;
}
PI_INLINE const int32_t* ActS4(const uint8_t* xb, const QActLayout& l, int64_t g) {
  return reinterpret_cast<const int32_t*>(xb + l.s4_off) + g * 32;
}

// Two Q4_0 blocks as 64 unsigned nibble bytes laid out like their 64
// activation bytes: [lo(b0), hi(b0), lo(b1), hi(b1)] (16 bytes each).
PI_INLINE __m512i Q4Pair(const uint8_t* b0, const uint8_t* b1, __m512i shifts, __m512i m4) {
  __m512i v = _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b0 + 2)));
  v = _mm512_mask_broadcast_i32x4(v, 0xFF00,
                                  _mm_loadu_si128(reinterpret_cast<const __m128i*>(b1 + 2)));
  return _mm512_and_si512(_mm512_srlv_epi64(v, shifts), m4);
}

// Two Q8_0 blocks as 64 bytes, offset by +128 to make them unsigned.
PI_INLINE __m512i Q8Pair(const uint8_t* b0, const uint8_t* b1, __m512i bias) {
  __m512i v = _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b0 + 2)));
  v = _mm512_inserti64x4(v, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b1 + 2)), 1);
  return _mm512_xor_si512(v, bias);
}

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

template <bool kQ4, int R, int B>
void TileQuant(const MatMulArgs& a, int64_t r, int64_t b0) {
  constexpr int kBytes = kQ4 ? kQ4Bytes : kQ8Bytes;
  const QActLayout& l = a.layout;
  const uint8_t* wr[R];
  for (int i = 0; i < R; ++i) wr[i] = a.w + (r + i) * a.row_bytes;
  const uint8_t* xb[B];
  for (int j = 0; j < B; ++j) xb[j] = a.x + (b0 + j) * a.x_stride;
  __m512 acc[R][B];
  for (int i = 0; i < R; ++i)
    for (int j = 0; j < B; ++j) acc[i][j] = _mm512_setzero_ps();

  const int64_t full = l.nb / 4;
  const uint8_t* blk[R];
  for (int64_t g = 0; g < full; ++g) {
    for (int i = 0; i < R; ++i) blk[i] = wr[i] + g * 4 * kBytes;
    QGroup<kQ4, R, B>(blk, xb, l, g, acc);
  }
  const int rest = static_cast<int>(l.nb - full * 4);
  if (rest > 0) {
    // Last partial group: copy the remaining blocks into zeroed 4-block
    // buffers so the group code never reads past the row; the padded blocks
    // have d = 0 and meet zero activations.
    uint8_t tail[R][4 * kBytes];
    for (int i = 0; i < R; ++i) {
      std::memset(tail[i], 0, sizeof(tail[i]));
      std::memcpy(tail[i], wr[i] + full * 4 * kBytes, static_cast<size_t>(rest) * kBytes);
      blk[i] = tail[i];
    }
    QGroup<kQ4, R, B>(blk, xb, l, full, acc);
  }
  for (int i = 0; i < R; ++i)
    for (int j = 0; j < B; ++j) a.y[(b0 + j) * a.ldy + r + i] = _mm512_reduce_add_ps(acc[i][j]);
}

// ---- tiling driver ------------------------------------------------------------

using TileFn = void (*)(const MatMulArgs&, int64_t r, int64_t b0);

// Tiles for one weight type: full[B-1] covers kTileRows rows, single[B-1]
// one row, both with B batch columns.
struct TileSet {
  TileFn full[kMaxBatch];
  TileFn single[kMaxBatch];
};

template <DType T>
constexpr TileSet FloatTiles() {
  return {{TileFloat<T, kTileRows, 1>, TileFloat<T, kTileRows, 2>, TileFloat<T, kTileRows, 3>,
           TileFloat<T, kTileRows, 4>},
          {TileFloat<T, 1, 1>, TileFloat<T, 1, 2>, TileFloat<T, 1, 3>, TileFloat<T, 1, 4>}};
}

template <bool kQ4>
constexpr TileSet QuantTiles() {
  return {{TileQuant<kQ4, kTileRows, 1>, TileQuant<kQ4, kTileRows, 2>,
           TileQuant<kQ4, kTileRows, 3>, TileQuant<kQ4, kTileRows, 4>},
          {TileQuant<kQ4, 1, 1>, TileQuant<kQ4, 1, 2>, TileQuant<kQ4, 1, 3>,
           TileQuant<kQ4, 1, 4>}};
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

// y += sum over the K rows of a[row] * W[row, :], rows processed in order so
// each y element sees the same sequence of additions as the reference.
template <DType T, int K>
void AxpyFloat(const AxpyArgs& a, const int64_t* rows) {
  const uint8_t* wr[K];
  __m512 av[K];
  for (int k = 0; k < K; ++k) {
    wr[k] = a.w + rows[k] * a.row_bytes;
    av[k] = _mm512_set1_ps(a.a[rows[k]]);
  }
  int64_t c = 0;
  for (; c + 16 <= a.cols; c += 16) {
    __m512 y = _mm512_loadu_ps(a.y + c);
    for (int k = 0; k < K; ++k) y = _mm512_fmadd_ps(av[k], LoadW<T>(wr[k], c), y);
    _mm512_storeu_ps(a.y + c, y);
  }
  if (c < a.cols) {
    const __mmask16 m = static_cast<__mmask16>((1u << (a.cols - c)) - 1);
    __m512 y = _mm512_maskz_loadu_ps(m, a.y + c);
    for (int k = 0; k < K; ++k) y = _mm512_fmadd_ps(av[k], LoadWMasked<T>(wr[k], c, m), y);
    _mm512_mask_storeu_ps(a.y + c, m, y);
  }
}

// Quantized rows: weight = q * d; each row contributes (a * d) * q.
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
  // Nibble n -> float (n - 8), by permute.
  const __m512 minus8 = _mm512_set_ps(7, 6, 5, 4, 3, 2, 1, 0, -1, -2, -3, -4, -5, -6, -7, -8);
  const int64_t nb = a.cols / 32;
  for (int64_t ib = 0; ib < nb; ++ib) {
    float* yb = a.y + ib * 32;
    __m512 y0 = _mm512_loadu_ps(yb);
    __m512 y1 = _mm512_loadu_ps(yb + 16);
    for (int k = 0; k < K; ++k) {
      const uint8_t* p = wr[k] + ib * kBytes;
      const __m512 s = _mm512_set1_ps(ak[k] * _cvtsh_ss(static_cast<unsigned short>(LoadU16(p))));
      __m512 w0, w1;
      if (kQ4) {
        const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 2));
        const __m512i lo = _mm512_cvtepu8_epi32(_mm_and_si128(q, m4));
        const __m512i hi = _mm512_cvtepu8_epi32(_mm_and_si128(_mm_srli_epi16(q, 4), m4));
        w0 = _mm512_permutexvar_ps(lo, minus8);
        w1 = _mm512_permutexvar_ps(hi, minus8);
      } else {
        w0 = _mm512_cvtepi32_ps(
            _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 2))));
        w1 = _mm512_cvtepi32_ps(
            _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 18))));
      }
      y0 = _mm512_fmadd_ps(s, w0, y0);
      y1 = _mm512_fmadd_ps(s, w1, y1);
    }
    _mm512_storeu_ps(yb, y0);
    _mm512_storeu_ps(yb + 16, y1);
  }
}

using AxpyFn = void (*)(const AxpyArgs&, const int64_t* rows);

// Batches the rows with a != 0 four at a time, so y is loaded and stored once
// per four weight rows. fns[k-1] handles k rows.
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

void MatMulRowsAvx512(const MatMulArgs& a) {
  switch (a.wtype) {
    case DType::kF32: return Drive(a, kF32Tiles);
    case DType::kF16: return Drive(a, kF16Tiles);
    case DType::kBF16: return Drive(a, kBf16Tiles);
    case DType::kQ8_0: return Drive(a, kQ8Tiles);
    case DType::kQ4_0: return Drive(a, kQ4Tiles);
    default: return;
  }
}

void AxpyRowsAvx512(const AxpyArgs& a) {
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
