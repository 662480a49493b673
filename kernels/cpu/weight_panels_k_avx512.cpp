// The weight-panel product on AVX-512 VNNI for the K formats Q4_K, Q5_K, Q6_K
// (weight_panels.h, weight_panels_layout.h), per super-block and half of 16
// rows. Q4_K: each nibble vector feeds two sub-blocks (low nibbles:
// sub-block 2q, high: 2q + 1; Q5_K puts its fifth bits on top), so a pair's
// exact integer dots come from 8 vectors; then per sub-block
//   y = fma(dot, (d sc) dx, y);  y = fma(-dmin m, dx sum(qx), y).
// Q6_K: each block's 6-bit weights put together from its ql nibbles and qh
// bits, per 16 weights the exact dot of (u - 32) and x, then
//   y = fma(dot, (d sc) dx, y).
// Both in block order — GemmRows' arithmetic (gemm_quant_avx512.cpp; d sc
// and dmin m are exact in f32), so the two give the same bits, and a
// column's bits do not depend on the batch around it.
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

constexpr int kCols = 8;               // batch columns per micro-kernel call
constexpr int kChunkSupers = 2;        // 9 KiB of panel, in L1 while every call passes over it
constexpr int kLeadBytes = 32 * 1024;  // software prefetch distance into L2 (decode)

// Q5_K's fifth bits of sub-block `bit` (bit `bit` of each qh byte) moved to
// bit 4 (16-bit shifts: what crosses into the next byte is masked off).
PI_INLINE __m512i FifthBits(__m512i qh, int bit) {
  const __m512i t = bit <= 4 ? _mm512_slli_epi16(qh, 4 - bit) : _mm512_srli_epi16(qh, bit - 4);
  return _mm512_and_si512(t, _mm512_set1_epi8(0x10));
}

// The integer dots of sub-blocks 2q (lo) and 2q + 1 (hi) of Q4_K or Q5_K
// super-block `sb` for 16 rows (half h) x N columns; blk: sub-block 2q's
// activation block.
template <DType T, int N>
PI_INLINE void PairDots(const uint8_t* sb, int h, int q, int64_t blk, const QuantColumn* xc,
                        __m512i (&lo)[N], __m512i (&hi)[N]) {
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  for (int j = 0; j < N; ++j) lo[j] = hi[j] = _mm512_setzero_si512();
  for (int c = 0; c < 8; ++c) {
    const __m512i v = _mm512_load_si512(sb + KPanelVector(q, h, c));
    __m512i ul = _mm512_and_si512(v, m4);
    __m512i uh = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
    if (T == DType::kQ5_K) {
      const __m512i qh = _mm512_load_si512(sb + Q5PanelQh(h, c));
      ul = _mm512_or_si512(ul, FifthBits(qh, 2 * q));
      uh = _mm512_or_si512(uh, FifthBits(qh, 2 * q + 1));
    }
    for (int j = 0; j < N; ++j) {
      int32_t xl, xh;
      std::memcpy(&xl, xc[j].qs + blk * kGemmQK + 4 * c, 4);
      std::memcpy(&xh, xc[j].qs + (blk + 1) * kGemmQK + 4 * c, 4);
      lo[j] = _mm512_dpbusd_epi32(lo[j], ul, _mm512_set1_epi32(xl));
      hi[j] = _mm512_dpbusd_epi32(hi[j], uh, _mm512_set1_epi32(xh));
    }
  }
}

// Sub-block s of the super-block (activation block blk): its dot term, then
// its min term, for 16 rows (d16, dmin16: their f32 d and dmin).
template <int N>
PI_INLINE void AddSubBlock(const uint8_t* sb, int h, int s, int64_t blk, __m512 d16, __m512 dmin16,
                           const QuantColumn* xc, const __m512i (&is)[N], __m512 (&acc)[N]) {
  const __m512 sc = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(
      _mm_load_si128(reinterpret_cast<const __m128i*>(sb + kKPanelScales + 32 * s + 16 * h))));
  const __m512 m = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(
      _mm_load_si128(reinterpret_cast<const __m128i*>(sb + kKPanelMins + 32 * s + 16 * h))));
  const __m512 a = _mm512_mul_ps(d16, sc);                                          // exact
  const __m512 c = _mm512_mul_ps(_mm512_xor_ps(dmin16, _mm512_set1_ps(-0.0f)), m);  // -dmin m
  for (int j = 0; j < N; ++j) {
    const float dx = xc[j].dx[blk];
    const float sum = static_cast<float>(xc[j].b16[2 * blk] + xc[j].b16[2 * blk + 1]);
    acc[j] =
        _mm512_fmadd_ps(_mm512_cvtepi32_ps(is[j]), _mm512_mul_ps(a, _mm512_set1_ps(dx)), acc[j]);
    acc[j] = _mm512_fmadd_ps(c, _mm512_set1_ps(dx * sum), acc[j]);
  }
}

PI_INLINE void PrefetchAhead(const uint8_t* p, int bytes) {
  for (int l = 0; l < bytes; l += 64) {
    _mm_prefetch(reinterpret_cast<const char*>(p + kLeadBytes + l), _MM_HINT_T1);
  }
}

// Q4_K or Q5_K super-block `sb` (activation blocks from k0), rows of half
// h, into acc: per pair of sub-blocks their dots, then each one's terms in
// order.
template <DType T, int N>
PI_INLINE void Q45KSuperHalf(const uint8_t* sb, int h, int64_t k0, const QuantColumn* xc,
                             __m512 (&acc)[N]) {
  const __m512 d16 =
      _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(sb + 32 * h)));
  const __m512 dmin16 =
      _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(sb + 64 + 32 * h)));
  for (int q = 0; q < 4; ++q) {
    const int64_t blk = k0 + 2 * q;
    __m512i lo[N], hi[N];
    PairDots<T, N>(sb, h, q, blk, xc, lo, hi);
    AddSubBlock<N>(sb, h, 2 * q, blk, d16, dmin16, xc, lo, acc);
    AddSubBlock<N>(sb, h, 2 * q + 1, blk + 1, d16, dmin16, xc, hi, acc);
  }
}

// Q6_K block j's unsigned 6-bit weights from its ql vector (part j % 2) and
// the qh vector: ql's nibble (low for j < 2) under qh's bits 2j, 2j + 1
// moved to bits 4, 5 of each byte (16-bit shifts: what crosses into the
// next byte is masked off).
PI_INLINE __m512i Q6Assemble(__m512i ql, __m512i qh, int j) {
  if (j >= 2) ql = _mm512_srli_epi16(ql, 4);
  if (j < 2) qh = _mm512_slli_epi16(qh, 4 - 2 * j);
  if (j == 3) qh = _mm512_srli_epi16(qh, 2);
  const __m512i top = _mm512_and_si512(qh, _mm512_set1_epi8(0x30));
  // (ql & 0x0F) | top in one instruction: truth table of (a & c) | b.
  return _mm512_ternarylogic_epi32(ql, top, _mm512_set1_epi8(0x0F), 0xEC);
}

// Q6_K block j of half H, dwords c: the weights of 16 rows (half h).
PI_INLINE __m512i Q6Weights(const uint8_t* sb, int H, int j, int h, int c) {
  return Q6Assemble(_mm512_load_si512(sb + Q6PanelQl(H, j % 2, h, c)),
                    _mm512_load_si512(sb + Q6PanelQh(H, h, c)), j);
}

// Q6_K super-block `sb` (activation blocks from k0), rows of half h, into
// acc: per block and half of 16 weights, the dot (offset folded in) and its
// scaled term.
template <int N>
PI_INLINE void Q6KSuperHalf(const uint8_t* sb, int h, int64_t k0, const QuantColumn* xc,
                            __m512 (&acc)[N]) {
  const __m512 d16 =
      _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(sb + 32 * h)));
  for (int blk = 0; blk < 8; ++blk) {
    const int H = blk / 4, jb = blk % 4;
    const int64_t k = k0 + blk;  // the activation block
    for (int part = 0; part < 2; ++part) {
      __m512i is[N];
      for (int j = 0; j < N; ++j) is[j] = _mm512_set1_epi32(-32 * xc[j].b16[2 * k + part]);
      for (int c = 4 * part; c < 4 * part + 4; ++c) {
        const __m512i u = Q6Weights(sb, H, jb, h, c);
        for (int j = 0; j < N; ++j) {
          int32_t xv;
          std::memcpy(&xv, xc[j].qs + k * kGemmQK + 4 * c, 4);
          is[j] = _mm512_dpbusd_epi32(is[j], u, _mm512_set1_epi32(xv));
        }
      }
      const __m512 sc = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_load_si128(
          reinterpret_cast<const __m128i*>(sb + kQ6PanelScales + 32 * (2 * blk + part) + 16 * h))));
      const __m512 a = _mm512_mul_ps(d16, sc);  // exact
      for (int j = 0; j < N; ++j) {
        acc[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(is[j]),
                                 _mm512_mul_ps(a, _mm512_set1_ps(xc[j].dx[k])), acc[j]);
      }
    }
  }
}

// Columns [0, N) over super-blocks [0, ns) of one panel chunk (its first
// activation block is 8 x its first super-block). Few columns (decode):
// both halves per pass, so the panel is read once, in order; more: one
// half per pass, the chunk still in L1 for the second.
template <DType T, int N>
void KPanelMicro(const uint8_t* supers, int ns, const QuantColumn* xc, float* y, int64_t ldy,
                 bool first, bool prefetch) {
  constexpr int kHalves = N <= 4 ? 2 : 1;
  constexpr int kBytes = KPanelSuperBytes(T);
  for (int h0 = 0; h0 < 2; h0 += kHalves) {
    __m512 acc[kHalves][N];
    LoadHalves<kHalves, N>(y, ldy, h0, first, acc);
    for (int s = 0; s < ns; ++s) {
      const uint8_t* sb = supers + s * kBytes;
      if (prefetch && h0 == 0) PrefetchAhead(sb, kBytes);
      for (int g = 0; g < kHalves; ++g) {
        if (T == DType::kQ6_K) {
          Q6KSuperHalf<N>(sb, h0 + g, 8 * s, xc, acc[g]);
        } else {
          Q45KSuperHalf<T, N>(sb, h0 + g, 8 * s, xc, acc[g]);
        }
      }
    }
    StoreHalves<kHalves, N>(y, ldy, h0, acc);
  }
}

// Q6_K for one column (a decode step): a half's ql and qh vectors loaded
// once for the four blocks they hold, both halves per pass so the panel is
// read once, in order; the same terms in the same order as KPanelMicro.
void Q6PanelMicro1(const uint8_t* supers, int ns, const QuantColumn* xc, float* y, int64_t,
                   bool first, bool prefetch) {
  __m512 acc[2];
  for (int h = 0; h < 2; ++h) acc[h] = first ? _mm512_setzero_ps() : _mm512_loadu_ps(y + 16 * h);
  for (int s = 0; s < ns; ++s) {
    const uint8_t* sb = supers + s * kQ6PanelSuperBytes;
    if (prefetch) PrefetchAhead(sb, kQ6PanelSuperBytes);
    for (int H = 0; H < 2; ++H) {
      const int64_t k0 = 8 * s + 4 * H;  // the half's first activation block
      __m512i is[2][2][4];               // [row half][part][block]
      for (int part = 0; part < 2; ++part) {
        for (int j = 0; j < 4; ++j) {
          is[0][part][j] = is[1][part][j] = _mm512_set1_epi32(-32 * xc[0].b16[2 * (k0 + j) + part]);
        }
      }
      for (int c = 0; c < 8; ++c) {
        const int part = c / 4;
        __m512i xv[4];
        for (int j = 0; j < 4; ++j) {
          int32_t v;
          std::memcpy(&v, xc[0].qs + (k0 + j) * kGemmQK + 4 * c, 4);
          xv[j] = _mm512_set1_epi32(v);
        }
        for (int h = 0; h < 2; ++h) {
          const __m512i ql0 = _mm512_load_si512(sb + Q6PanelQl(H, 0, h, c));
          const __m512i ql1 = _mm512_load_si512(sb + Q6PanelQl(H, 1, h, c));
          const __m512i qh = _mm512_load_si512(sb + Q6PanelQh(H, h, c));
          const __m512i u[4] = {Q6Assemble(ql0, qh, 0), Q6Assemble(ql1, qh, 1),
                                Q6Assemble(ql0, qh, 2), Q6Assemble(ql1, qh, 3)};
          for (int j = 0; j < 4; ++j)
            is[h][part][j] = _mm512_dpbusd_epi32(is[h][part][j], u[j], xv[j]);
        }
      }
      for (int h = 0; h < 2; ++h) {
        const __m512 d16 =
            _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(sb + 32 * h)));
        for (int j = 0; j < 4; ++j) {
          const int blk = 4 * H + j;
          const __m512 dx = _mm512_set1_ps(xc[0].dx[k0 + j]);
          for (int part = 0; part < 2; ++part) {
            const __m512 sc = _mm512_cvtepi32_ps(
                _mm512_cvtepi8_epi32(_mm_load_si128(reinterpret_cast<const __m128i*>(
                    sb + kQ6PanelScales + 32 * (2 * blk + part) + 16 * h))));
            acc[h] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(is[h][part][j]),
                                     _mm512_mul_ps(_mm512_mul_ps(d16, sc), dx), acc[h]);
          }
        }
      }
    }
  }
  for (int h = 0; h < 2; ++h) _mm512_storeu_ps(y + 16 * h, acc[h]);
}

using KPanelMicroFn = void (*)(const uint8_t*, int, const QuantColumn*, float*, int64_t, bool,
                               bool);
constexpr KPanelMicroFn kQ4KMicro[kCols] = {
    KPanelMicro<DType::kQ4_K, 1>, KPanelMicro<DType::kQ4_K, 2>, KPanelMicro<DType::kQ4_K, 3>,
    KPanelMicro<DType::kQ4_K, 4>, KPanelMicro<DType::kQ4_K, 5>, KPanelMicro<DType::kQ4_K, 6>,
    KPanelMicro<DType::kQ4_K, 7>, KPanelMicro<DType::kQ4_K, 8>};
constexpr KPanelMicroFn kQ5KMicro[kCols] = {
    KPanelMicro<DType::kQ5_K, 1>, KPanelMicro<DType::kQ5_K, 2>, KPanelMicro<DType::kQ5_K, 3>,
    KPanelMicro<DType::kQ5_K, 4>, KPanelMicro<DType::kQ5_K, 5>, KPanelMicro<DType::kQ5_K, 6>,
    KPanelMicro<DType::kQ5_K, 7>, KPanelMicro<DType::kQ5_K, 8>};
constexpr KPanelMicroFn kQ6KMicro[kCols] = {Q6PanelMicro1,
                                            KPanelMicro<DType::kQ6_K, 2>,
                                            KPanelMicro<DType::kQ6_K, 3>,
                                            KPanelMicro<DType::kQ6_K, 4>,
                                            KPanelMicro<DType::kQ6_K, 5>,
                                            KPanelMicro<DType::kQ6_K, 6>,
                                            KPanelMicro<DType::kQ6_K, 7>,
                                            KPanelMicro<DType::kQ6_K, 8>};

}  // namespace

void KPanelRowsAvx512(DType wtype, const uint8_t* panels, int64_t cols, const uint8_t* x,
                      int64_t batch, float* y, int64_t ldy, int64_t r0, int64_t r1) {
  const QActLayout l = GetQActLayout(cols);
  const int64_t nsb = cols / kQK_K;
  const KPanelMicroFn* micro = wtype == DType::kQ4_K   ? kQ4KMicro
                               : wtype == DType::kQ5_K ? kQ5KMicro
                                                       : kQ6KMicro;
  ForEachPanelCall(r0 / kPanelRows, r1 / kPanelRows, nsb, kChunkSupers, batch, kCols,
                   PanelBlocking(),
                   [&](int64_t p, int64_t s0, int ns, int64_t b, int n, bool lead) {
                     QuantColumn xc[kCols];
                     QuantColumnsAt(x, l.total, l, b, n, s0 * 8, xc);
                     micro[n - 1](panels + KPanelOffset(wtype, nsb, p, s0), ns, xc,
                                  y + b * ldy + p * kPanelRows, ldy, s0 == 0, lead);
                   });
}

}  // namespace cpu_internal
}  // namespace pi
