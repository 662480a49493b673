// Matrix-matrix products for prompt batches on AVX-512 VNNI, block-format
// weights: Q8_0, Q4_0 and the K-quants Q4_K, Q5_K, Q6_K. gemm_avx512.cpp
// describes the scheme (weight panels packed into L1, transposed so that a
// vector holds 16 rows at one k, every batch column passing over the panel
// with 32 rows x N columns of accumulators in registers); this file packs
// and multiplies the block formats.
//
// The panel is unsigned bytes [block][dword c][32 rows][4] — one block is
// the 32 weights of one activation block — with f32 scales per (block,
// half, row) and mins per (block, row). Every format is, per 32 (or, for
// Q6_K, 16) weights, w = a * u + c with u an unsigned byte:
//   Q4_0: u = the nibble, a = d, c = -8 d;  Q8_0: u = q + 128, c = -128 d;
//   Q4_K, Q5_K: u = 4 or 5 bits, a = d sc, c = -dmin m per 32;
//   Q6_K: u = 6 bits, a = d sc, c = -32 a per 16.
// An activation block x = dx * qx then gets dx * (a * sum(u qx) + c *
// sum(qx)), the integer dot by vpdpbusd (unsigned weight bytes times the
// broadcast signed activation bytes). Where c is a whole multiple of a
// (Q4_0, Q8_0, Q6_K) the offset starts the integer accumulator at -offset *
// sum(qx) (the activation's sums of 16), so each (half-)block's dot is exact
// and is scaled once in f32; the mins of Q4_K and Q5_K add c * dx * sum(qx)
// with one more FMA per block. Blocks are added in order, so a column's
// result depends only on that column and row.
#if defined(__GNUC__) && !defined(__clang__)  // (clang has no such warning)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include <cstring>

#include "kernels/cpu/avx512_inline.h"
#include "kernels/cpu/gemm_avx512_inline.h"
#include "kernels/cpu/gemm_common.h"
#include "kernels/cpu/kquant.h"
#include "kernels/cpu/matmul_impl.h"

namespace pi {
namespace cpu_internal {
namespace {

// Everything here has internal linkage (see matmul_impl.h).

constexpr int kQuantCols = 6;  // batch columns per micro-kernel call
constexpr int kQuantKb = 16;   // blocks per panel: 32 x 512 B = 16 KiB (two super-blocks)
constexpr int kQK = kGemmQK;
constexpr int kQ4Bytes = 18;
constexpr int kQ8Bytes = 34;

PI_INLINE float F16At(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, sizeof(h));
  return _cvtsh_ss(h);
}

// The f32 terms of a pair of blocks: a[block][half], c[block].
struct PairTerms {
  float a[2][2];
  float c[2];
};

// Blocks g and g + 1 (g even) of a row as 64 unsigned bytes in weight order,
// and their terms. Q4_0/Q8_0: a lone last block (two false) pairs with
// itself; the K-quants always come in whole super-blocks of 8.
template <DType T>
PI_INLINE __m512i PairOf(const uint8_t* row, int64_t g, bool two, PairTerms* t) {
  if (T == DType::kQ4_0 || T == DType::kQ8_0) {
    constexpr int kBytes = T == DType::kQ4_0 ? kQ4Bytes : kQ8Bytes;
    const uint8_t* b0 = row + g * kBytes;
    const uint8_t* b1 = two ? b0 + kBytes : b0;
    t->a[0][0] = t->a[0][1] = F16At(b0);
    t->a[1][0] = t->a[1][1] = F16At(b1);
    if (T == DType::kQ4_0) {
      return Q4Pair(b0, b1, _mm512_set_epi64(4, 4, 0, 0, 4, 4, 0, 0), _mm512_set1_epi8(0x0F));
    }
    return Q8Pair(b0, b1, _mm512_set1_epi8(static_cast<char>(0x80)));
  }
  if (T == DType::kQ4_K || T == DType::kQ5_K) {
    // Chunk j (64 weights): sub-block 2j in the low nibbles of 32 bytes,
    // 2j + 1 in the high ones; Q5_K's fifth bit of weight l of sub-block s
    // at bit s of qh[l].
    const uint8_t* sb = row + BlockBytes(T, g);
    const int j = static_cast<int>(g % 8) / 2;
    const float d = F16At(sb), dmin = F16At(sb + 2);
    for (int k = 0; k < 2; ++k) {
      float sc, m;
      ScaleMinK4(sb + 4, 2 * j + k, &sc, &m);
      t->a[k][0] = t->a[k][1] = d * sc;
      t->c[k] = -dmin * m;
    }
    const uint8_t* qs = sb + (T == DType::kQ5_K ? 48 : 16);
    const __m512i q =
        _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs + 32 * j)));
    const __m512i nib_shift = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(4), 1);
    __m512i u = _mm512_and_si512(_mm512_srlv_epi16(q, nib_shift), _mm512_set1_epi8(0x0F));
    if (T == DType::kQ5_K) {
      const __m512i qh =
          _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(sb + 16)));
      const __m512i bit_shift =
          _mm512_inserti64x4(_mm512_set1_epi16(static_cast<short>(2 * j)),
                             _mm256_set1_epi16(static_cast<short>(2 * j + 1)), 1);
      const __m512i fifth = _mm512_and_si512(_mm512_srlv_epi16(qh, bit_shift), _mm512_set1_epi8(1));
      u = _mm512_or_si512(u, _mm512_slli_epi16(fifth, 4));
    }
    return u;
  }
  // Q6_K: half H (128 weights) has ql[64H .. 64H + 63] and qh[32H .. + 31];
  // its blocks 0 and 1 are the low nibbles of ql's two 32-byte halves with
  // qh's bits 0-1 and 2-3 on top, blocks 2 and 3 the high nibbles with
  // bits 4-5 and 6-7. Scales per 16 weights.
  const BlockQ6_K* sb = reinterpret_cast<const BlockQ6_K*>(row + BlockBytes(T, g));
  const int p = static_cast<int>(g % 8), half = p / 4, hi = (p % 4) / 2;
  const float d = F16At(reinterpret_cast<const uint8_t*>(&sb->d));
  for (int k = 0; k < 2; ++k) {
    t->a[k][0] = d * static_cast<float>(sb->scales[2 * (p + k)]);
    t->a[k][1] = d * static_cast<float>(sb->scales[2 * (p + k) + 1]);
  }
  const __m512i ql = _mm512_loadu_si512(sb->ql + 64 * half);
  const __m512i qh = _mm512_broadcast_i64x4(
      _mm256_loadu_si256(reinterpret_cast<const __m256i*>(sb->qh + 32 * half)));
  const __m512i low = _mm512_and_si512(_mm512_srli_epi16(ql, 4 * hi), _mm512_set1_epi8(0x0F));
  const __m512i top_shift =
      _mm512_inserti64x4(_mm512_set1_epi16(static_cast<short>(4 * hi)),
                         _mm256_set1_epi16(static_cast<short>(4 * hi + 2)), 1);
  const __m512i top = _mm512_and_si512(_mm512_srlv_epi16(qh, top_shift), _mm512_set1_epi8(3));
  return _mm512_or_si512(low, _mm512_slli_epi16(top, 4));
}

// A panel: blocks [blk0, blk0 + nblk) of rows [row, row + 32).
//   q[(blk * 8 + c) * 32 + i]: the 4 bytes c of block blk of row i (dwords);
//   a[(blk * 2 + h) * 32 + i]: half h's scale (halves alike but for Q6_K);
//   c[blk * 32 + i]: the block's min term (Q4_K, Q5_K).
// Rows past n_rows are 0 (scales 0).
struct QuantPanel {
  alignas(64) int32_t q[kQuantKb * 8 * kPanelRows];
  alignas(64) float a[kQuantKb * 2 * kPanelRows];
  alignas(64) float c[kQuantKb * kPanelRows];
};

template <DType T>
void PackQuant(const MatMulArgs& args, int64_t row, int n_rows, int64_t blk0, int nblk,
               QuantPanel* p) {
  for (int b = 0; b < nblk; b += 2) {
    const bool two = b + 1 < nblk;
    for (int h = 0; h < 2; ++h) {
      __m512 r[16];
      for (int i = 0; i < 16; ++i) {
        const int ri = 16 * h + i;
        PairTerms t = {};
        r[i] = ri < n_rows ? _mm512_castsi512_ps(
                                 PairOf<T>(args.w + (row + ri) * args.row_bytes, blk0 + b, two, &t))
                           : _mm512_setzero_ps();
        for (int k = 0; k < (two ? 2 : 1); ++k) {
          p->a[(b + k) * 64 + ri] = t.a[k][0];
          if (PerHalf(T)) p->a[(b + k) * 64 + 32 + ri] = t.a[k][1];
          if (HasMins(T)) p->c[(b + k) * 32 + ri] = t.c[k];
        }
      }
      Transpose16(r);  // r[c]: dword c of the pair for 16 rows
      for (int c = 0; c < (two ? 16 : 8); ++c) {
        _mm512_store_ps(reinterpret_cast<float*>(p->q + ((b + c / 8) * 8 + c % 8) * 32 + 16 * h),
                        r[c]);
      }
    }
  }
}

// Columns [b, b + N) over a packed panel: per block (or half-block), the
// exact integer dot of each (row, column) in one lane, then scaled and
// added in f32.
template <DType T, int N>
void QuantMicro(const QuantPanel* p, int nblk, const QuantColumn* xc, float* y, int64_t ldy,
                int n_rows, bool first) {
  constexpr int kParts = PerHalf(T) ? 2 : 1;  // integer dots per block
  constexpr int kDwords = 8 / kParts;
  __m512 acc[2][N];
  LoadAcc<N>(y, ldy, n_rows, first, acc);
  for (int b = 0; b < nblk; ++b) {
    const int32_t* q = p->q + b * 8 * 32;
    for (int part = 0; part < kParts; ++part) {
      __m512i is[2][N];
      for (int j = 0; j < N; ++j) {
        const int sum =
            kParts == 2 ? xc[j].b16[2 * b + part] : xc[j].b16[2 * b] + xc[j].b16[2 * b + 1];
        is[0][j] = _mm512_set1_epi32(-Offset(T) * sum);
        is[1][j] = is[0][j];
      }
      for (int c = part * kDwords; c < (part + 1) * kDwords; ++c) {
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
      const __m512 a0 = _mm512_load_ps(p->a + (b * 2 + part) * 32);
      const __m512 a1 = _mm512_load_ps(p->a + (b * 2 + part) * 32 + 16);
      for (int j = 0; j < N; ++j) {
        const __m512 dx = _mm512_set1_ps(xc[j].dx[b]);
        acc[0][j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(is[0][j]), _mm512_mul_ps(a0, dx), acc[0][j]);
        acc[1][j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(is[1][j]), _mm512_mul_ps(a1, dx), acc[1][j]);
      }
    }
    if (HasMins(T)) {
      const __m512 c0 = _mm512_load_ps(p->c + b * 32);
      const __m512 c1 = _mm512_load_ps(p->c + b * 32 + 16);
      for (int j = 0; j < N; ++j) {
        const float sum = static_cast<float>(xc[j].b16[2 * b] + xc[j].b16[2 * b + 1]);
        const __m512 s = _mm512_set1_ps(xc[j].dx[b] * sum);
        acc[0][j] = _mm512_fmadd_ps(c0, s, acc[0][j]);
        acc[1][j] = _mm512_fmadd_ps(c1, s, acc[1][j]);
      }
    }
  }
  StoreAcc<N>(y, ldy, n_rows, acc);
}

using QuantMicroFn = void (*)(const QuantPanel*, int, const QuantColumn*, float*, int64_t, int,
                              bool);
template <DType T>
constexpr QuantMicroFn kQuantMicro[kQuantCols] = {QuantMicro<T, 1>, QuantMicro<T, 2>,
                                                  QuantMicro<T, 3>, QuantMicro<T, 4>,
                                                  QuantMicro<T, 5>, QuantMicro<T, 6>};

template <DType T>
void GemmQuant(const MatMulArgs& a) {
  const QActLayout& l = a.layout;
  QuantPanel panel;
  for (int64_t row = a.r0; row < a.r1; row += kPanelRows) {
    const int n_rows = static_cast<int>(Min64(kPanelRows, a.r1 - row));
    for (int64_t blk0 = 0; blk0 < l.nb; blk0 += kQuantKb) {
      const int nblk = static_cast<int>(Min64(kQuantKb, l.nb - blk0));
      PackQuant<T>(a, row, n_rows, blk0, nblk, &panel);
      PrefetchNextPanel(a, row, kPanelRows, BlockBytes(T, blk0), BlockBytes(T, kQuantKb));
      for (int64_t b = 0, n = 0; b < a.batch; b += n) {
        n = ColumnTile(b, a.batch, kQuantCols);
        QuantColumn xc[kQuantCols];
        QuantColumnsAt(a.x, a.x_stride, l, b, n, blk0, xc);
        kQuantMicro<T>[n - 1](&panel, nblk, xc, a.y + b * a.ldy + row, a.ldy, n_rows, blk0 == 0);
      }
    }
  }
}

}  // namespace

bool HasGemmQuantAvx512(DType wtype) {
  return wtype == DType::kQ8_0 || wtype == DType::kQ4_0 || IsKFormat(wtype);
}

void GemmQuantAvx512(const MatMulArgs& a) {
  switch (a.wtype) {
    case DType::kQ8_0:
      return GemmQuant<DType::kQ8_0>(a);
    case DType::kQ4_0:
      return GemmQuant<DType::kQ4_0>(a);
    case DType::kQ4_K:
      return GemmQuant<DType::kQ4_K>(a);
    case DType::kQ5_K:
      return GemmQuant<DType::kQ5_K>(a);
    case DType::kQ6_K:
      return GemmQuant<DType::kQ6_K>(a);
    default:
      return;
  }
}

}  // namespace cpu_internal
}  // namespace pi
