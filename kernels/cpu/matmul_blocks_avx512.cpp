// Row kernels for the K formats at the AVX-512 VNNI level, where the AVX2
// ones (matmul_blocks_avx2.cpp, which this level runs for the other block
// formats) are arithmetic-bound: in L2 on one core, Q4_K's AVX2 dot reads
// ~13 GB/s, Q5_K's ~13 and Q6_K's ~23, below what memory gives. Driven by
// MatMulRowsBlocksAvx2 (rows, sparse ids, batch tiles); only the per-row
// dots differ. Each 64 unsigned weights are one vpdpbusd against 64
// activation bytes; lanes are scaled in f32 by the weight scale times dx, the
// offset or mins term subtracted at the end, as the AVX2 kernels do.
//
// Q6_K, one super-block (256 weights): per half h (128 weights) the 64 ql
// bytes are one vector — bytes l and 32 + l hold the low nibbles of weights
// l, 32 + l (blocks 4h, 4h + 1) and the high nibbles those of 64 + l, 96 + l
// (blocks 4h + 2, 4h + 3) — and the 32 qh bytes, broadcast to both halves,
// give each its bit pair by a per-half variable shift. Vector v's lane l sums
// 4 weights of scale group 4v + l / 4, activation block 2v + l / 8.
#if defined(__GNUC__) && !defined(__clang__)  // (clang has no such warning)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include <cstring>

#include "kernels/cpu/avx2_inline.h"
#include "kernels/cpu/kquant.h"
#include "kernels/cpu/matmul_impl.h"

#define PI_INLINE inline __attribute__((always_inline))

namespace pi {
namespace cpu_internal {
namespace {

// Internal linkage only: see matmul_impl.h.

PI_INLINE float F16(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}

PI_INLINE void Prefetch(const uint8_t* p, int bytes) {
  for (int off = 0; off < bytes; off += 64) {
    _mm_prefetch(reinterpret_cast<const char*>(p + off), _MM_HINT_T0);
  }
}

// The four 64-weight vectors of a Q6_K super-block: v = 2h + j holds blocks
// 2v, 2v + 1 (weights 64v ..), unsigned 0..63.
PI_INLINE void Q6KWeights(const BlockQ6_K* b, __m512i (&u)[4]) {
  // Per 16-bit word: the low 256 bits take one shift, the high 256 another.
  const __m512i shl01 = _mm512_inserti64x4(_mm512_set1_epi16(4), _mm256_set1_epi16(2), 1);
  const __m512i shr23 = _mm512_inserti64x4(_mm512_set1_epi16(0), _mm256_set1_epi16(2), 1);
  const __m512i low4 = _mm512_set1_epi8(0x0F), top2 = _mm512_set1_epi8(0x30);
  for (int h = 0; h < 2; ++h) {
    const __m512i ql = _mm512_loadu_si512(b->ql + 64 * h);
    const __m512i qh = _mm512_broadcast_i64x4(
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b->qh + 32 * h)));
    // (a & c) | b: a nibble under its bit pair (what a 16-bit shift carries
    // across a byte is masked off).
    u[2 * h] = _mm512_ternarylogic_epi32(ql, _mm512_and_si512(_mm512_sllv_epi16(qh, shl01), top2),
                                         low4, 0xEC);
    u[2 * h + 1] = _mm512_ternarylogic_epi32(
        _mm512_srli_epi16(ql, 4), _mm512_and_si512(_mm512_srlv_epi16(qh, shr23), top2), low4, 0xEC);
  }
}

// One row against N activations, each with the same arithmetic in the same
// order whatever N (a batch row gets a lone row's bits).
template <int N>
void DotsQ6K(const uint8_t* row, const uint8_t* next, const BlockAct* x, int64_t nsb, float* out) {
  // Lane l of vector v: scale group 4v + l / 4; activation block 2v + l / 8.
  __m512i group[4], block[4];
  for (int v = 0; v < 4; ++v) {
    alignas(64) int32_t g[16], k[16];
    for (int l = 0; l < 16; ++l) {
      g[l] = 4 * v + l / 4;
      k[l] = 2 * v + l / 8;
    }
    group[v] = _mm512_load_si512(g);
    block[v] = _mm512_load_si512(k);
  }
  __m512 acc[N];
  __m256 offsets[N];
  for (int b = 0; b < N; ++b) {
    acc[b] = _mm512_setzero_ps();
    offsets[b] = _mm256_setzero_ps();
  }
  for (int64_t i = 0; i < nsb; ++i) {
    const BlockQ6_K* blk = reinterpret_cast<const BlockQ6_K*>(row + i * sizeof(BlockQ6_K));
    Prefetch(next + i * sizeof(BlockQ6_K), sizeof(BlockQ6_K));
    const float d = F16(reinterpret_cast<const uint8_t*>(&blk->d));
    const __m128i sc = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk->scales));
    const __m512i sc32 = _mm512_cvtepi8_epi32(sc);
    const __m256i sc16 = _mm256_cvtepi8_epi16(sc);
    __m512 dsc[4];  // d * sc per lane
    for (int v = 0; v < 4; ++v) {
      dsc[v] = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_permutexvar_epi32(group[v], sc32)),
                             _mm512_set1_ps(d));
    }
    __m512i u[4];
    Q6KWeights(blk, u);
    for (int b = 0; b < N; ++b) {
      const __m256 dx8 = _mm256_loadu_ps(x[b].dx + 8 * i);
      // Block k's offset: 32 x sum of sc[g] x b16[g] over its two groups.
      const __m256i off = _mm256_madd_epi16(
          sc16, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[b].b16 + 16 * i)));
      offsets[b] = _mm256_fmadd_ps(
          _mm256_cvtepi32_ps(off),
          _mm256_mul_ps(_mm256_mul_ps(dx8, _mm256_set1_ps(d)), _mm256_set1_ps(32.0f)), offsets[b]);
      const __m512 dx = _mm512_castps256_ps512(dx8);
      const int8_t* xq = x[b].qs + kQK_K * i;
      for (int v = 0; v < 4; ++v) {
        const __m512i p =
            _mm512_dpbusd_epi32(_mm512_setzero_si512(), u[v], _mm512_loadu_si512(xq + 64 * v));
        const __m512 scale = _mm512_mul_ps(dsc[v], _mm512_permutexvar_ps(block[v], dx));
        acc[b] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), scale, acc[b]);
      }
    }
  }
  for (int b = 0; b < N; ++b) out[b] = _mm512_reduce_add_ps(acc[b]) - HorizontalSum(offsets[b]);
}

// Q4_K and Q5_K: chunk j's 32 qs bytes hold sub-block 2j in the low nibbles
// and 2j + 1 in the high ones (Q5_K's fifth bits: bit s of qh[l]), so the
// chunk broadcast to both halves and shifted per half by 0 or 4 (1 more for
// the fifth bit) gives the 64 unsigned weights of activation blocks 2j,
// 2j + 1. Sub-block s is d*sc[s]*q - dmin*m[s]: lane l of chunk j's dot is
// scaled by d*sc*dx of block 2j + l / 8; the mins term per block, as the
// AVX2 kernel, subtracted at the end.
template <bool kQ5, int N>
void DotsQ45K(const uint8_t* row, const uint8_t* next, const BlockAct* x, int64_t nsb, float* out) {
  constexpr int kBytes = kQ5 ? sizeof(BlockQ5_K) : sizeof(BlockQ4_K);
  const __m512i nibble_shift = _mm512_inserti64x4(_mm512_set1_epi16(0), _mm256_set1_epi16(4), 1);
  const __m512i low4 = _mm512_set1_epi8(0x0F), one = _mm512_set1_epi8(1);
  __m512i block[4];  // lane l of chunk j: activation block 2j + l / 8
  for (int j = 0; j < 4; ++j) {
    block[j] = _mm512_inserti64x4(_mm512_set1_epi32(2 * j), _mm256_set1_epi32(2 * j + 1), 1);
  }
  __m512 acc[N];
  __m256 mins[N];
  for (int b = 0; b < N; ++b) {
    acc[b] = _mm512_setzero_ps();
    mins[b] = _mm256_setzero_ps();
  }
  for (int64_t i = 0; i < nsb; ++i) {
    const uint8_t* blk = row + i * kBytes;
    Prefetch(next + i * kBytes, kBytes);
    __m256 sc, mn;
    ScalesMinsK4Floats(blk + 4, &sc, &mn);
    const __m256 dsc = _mm256_mul_ps(sc, _mm256_set1_ps(F16(blk)));
    const __m256 dmn = _mm256_mul_ps(mn, _mm256_set1_ps(F16(blk + 2)));
    const uint8_t* qs = blk + (kQ5 ? 48 : 16);
    const __m512i qh =
        kQ5 ? _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 16)))
            : _mm512_setzero_si512();
    __m512i u[4];
    for (int j = 0; j < 4; ++j) {
      const __m512i q =
          _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs + 32 * j)));
      u[j] = _mm512_and_si512(_mm512_srlv_epi16(q, nibble_shift), low4);
      if (kQ5) {  // bit 2j of qh under the low half, 2j + 1 under the high one
        const __m512i bit =
            _mm512_inserti64x4(_mm512_set1_epi16(2 * j), _mm256_set1_epi16(2 * j + 1), 1);
        const __m512i fifth = _mm512_and_si512(_mm512_srlv_epi16(qh, bit), one);
        u[j] = _mm512_or_si512(u[j], _mm512_slli_epi16(fifth, 4));
      }
    }
    for (int b = 0; b < N; ++b) {
      const __m256 dx8 = _mm256_loadu_ps(x[b].dx + 8 * i);
      // Block s's sum of activations: its two 16-sums.
      const __m256i b16 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[b].b16 + 16 * i));
      const __m256i bsum = _mm256_madd_epi16(b16, _mm256_set1_epi16(1));
      mins[b] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(bsum), _mm256_mul_ps(dmn, dx8), mins[b]);
      const __m512 scale = _mm512_castps256_ps512(_mm256_mul_ps(dsc, dx8));
      const int8_t* xq = x[b].qs + kQK_K * i;
      for (int j = 0; j < 4; ++j) {
        const __m512i p =
            _mm512_dpbusd_epi32(_mm512_setzero_si512(), u[j], _mm512_loadu_si512(xq + 64 * j));
        acc[b] =
            _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), _mm512_permutexvar_ps(block[j], scale), acc[b]);
      }
    }
  }
  for (int b = 0; b < N; ++b) out[b] = _mm512_reduce_add_ps(acc[b]) - HorizontalSum(mins[b]);
}

}  // namespace

BlockDotsFns BlockDotsAvx512(DType wtype) {
  switch (wtype) {
    case DType::kQ4_K:
      return {DotsQ45K<false, 1>, DotsQ45K<false, kBlockBatchTile>};
    case DType::kQ5_K:
      return {DotsQ45K<true, 1>, DotsQ45K<true, kBlockBatchTile>};
    case DType::kQ6_K:
      return {DotsQ6K<1>, DotsQ6K<kBlockBatchTile>};
    default:
      return {nullptr, nullptr};
  }
}

}  // namespace cpu_internal
}  // namespace pi
