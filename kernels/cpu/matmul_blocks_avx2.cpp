// AVX2 kernels for the block formats of kquant.h (compiled with -mavx2 -mfma
// -mf16c only here; the AVX-512 level runs them too — most products are bound
// by memory bandwidth at this width already — with its own row dots where
// they are not, matmul_blocks_avx512.cpp).
//
// Every format is dotted against the Q8_0-prepared activation (matmul_impl.h)
// 32 weights at a time, one activation block: the weights' small unsigned
// integers (0..63) times the activation's int8 by vpmaddubsw (no overflow:
// 2 * 63 * 128 fits an int16), summed to int32, converted once and scaled by
// the weight block's scale times the activation block's dx. What a format
// subtracts or adds per (sub-)block — a min, or the offset that made its
// integers unsigned — multiplies the activation block's sum, which the
// preparation keeps per 16 values (b16).
//
// Rows are walked one at a time (a row of a K-quant is whole super-blocks),
// prefetching the same offset of the row that comes next, so dense and
// indexed (sparse) products stream alike; a batch reuses each row from cache.
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

PI_INLINE __m256i Load32(const void* p) {
  return _mm256_loadu_si256(static_cast<const __m256i*>(p));
}

// 32 unsigned weights times 32 activation bytes: 8 int32 partial sums, lanes
// 0-3 over the first 16 values and lanes 4-7 over the last 16.
PI_INLINE __m256i Dot32(__m256i w, __m256i x) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(w, x), _mm256_set1_epi16(1));
}

// Prefetches `bytes` from p (the same block of the next row).
PI_INLINE void Prefetch(const uint8_t* p, int bytes) {
  for (int off = 0; off < bytes; off += 64)
    _mm_prefetch(reinterpret_cast<const char*>(p + off), _MM_HINT_T0);
}

// Rows picked by id defeat the hardware prefetchers, and the same offset of
// the next row is too short a lead for them: the row that many ahead in the
// list is also prefetched whole, into L2 (matmul_avx512.cpp's Prefetcher
// says why L2). Dense rows keep the one-row lead alone, which measured
// faster for them.
constexpr int64_t kIdRowsAhead = 2;

PI_INLINE void PrefetchRowL2(const uint8_t* p, size_t bytes) {
  for (size_t off = 0; off < bytes; off += 64)
    _mm_prefetch(reinterpret_cast<const char*>(p + off), _MM_HINT_T1);
}

using Act = BlockAct;  // one batch column of the prepared activation

// ---- the legacy formats: blocks of 32 ------------------------------------------

// The fifth bits of Q5_0/Q5_1 (bit j of `bits` for weight j) as 0x10 bytes.
PI_INLINE __m256i FifthBits(const uint8_t* qh) {
  uint32_t bits;
  std::memcpy(&bits, qh, 4);
  const __m256i spread = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2,
                                          2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
  const __m256i bit = _mm256_set1_epi64x(0x8040201008040201LL);
  __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int>(bits)), spread);
  v = _mm256_cmpeq_epi8(_mm256_and_si256(v, bit), bit);
  return _mm256_and_si256(v, _mm256_set1_epi8(0x10));
}

// A Q4_1/Q5_0/Q5_1 block's 32 quants as bytes (`bytes`: the block's size;
// its 16 nibble bytes end it, Q5's 4 bytes of fifth bits come just before):
// the nibble of byte j is weight j, its high nibble weight j + 16.
PI_INLINE __m256i LegacyQuants(const uint8_t* blk, int bytes, bool fifth_bits) {
  const __m128i low4 = _mm_set1_epi8(0x0F);
  const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + bytes - 16));
  const __m256i w =
      _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(q, 4), low4), _mm_and_si128(q, low4));
  return fifth_bits ? _mm256_or_si256(w, FifthBits(blk + bytes - 20)) : w;
}

// Q4_1 (x = d*q + m), Q5_0 (x = d*(q - 16)) and Q5_1 (x = d*q + m).
template <DType T>
float DotLegacy(const uint8_t* row, const uint8_t* next, const Act& x, int64_t nb) {
  constexpr int kBytes = T == DType::kQ4_1 ? 20 : T == DType::kQ5_0 ? 22 : 24;
  __m256 acc = _mm256_setzero_ps();
  float offsets = 0.0f;
  for (int64_t i = 0; i < nb; ++i) {
    const uint8_t* blk = row + i * kBytes;
    Prefetch(next + i * kBytes, kBytes);
    const __m256i w = LegacyQuants(blk, kBytes, T != DType::kQ4_1);
    const float d = F16(blk) * x.dx[i];
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(Dot32(w, Load32(x.qs + 32 * i))), _mm256_set1_ps(d),
                          acc);
    const float sum = static_cast<float>(x.b16[2 * i] + x.b16[2 * i + 1]);
    offsets += T == DType::kQ5_0 ? -16.0f * d * sum : F16(blk + 2) * x.dx[i] * sum;
  }
  return HorizontalSum(acc) + offsets;
}

// ---- the K-quants: super-blocks of 256 -----------------------------------------

// The 8 six-bit scales and mins of a Q4_K/Q5_K super-block (ggml's packing,
// as kquant.cpp's ScaleMinK4 reads it).
PI_INLINE void ScalesMinsK4(const uint8_t* q, uint8_t* sc, uint8_t* m) {
  for (int j = 0; j < 4; ++j) {
    sc[j] = q[j] & 63;
    m[j] = q[j + 4] & 63;
    sc[j + 4] = (q[j + 8] & 0xF) | ((q[j] >> 6) << 4);
    m[j + 4] = (q[j + 8] >> 4) | ((q[j + 4] >> 6) << 4);
  }
}

// Chunk j (64 weights) of a Q4_K/Q5_K super-block's quants as bytes:
// sub-block 2j into *lo, 2j+1 into *hi (qh: Q5_K's fifth bits, else unused).
template <bool kQ5>
PI_INLINE void Q45KChunk(const uint8_t* qs, __m256i qh, int j, __m256i* lo, __m256i* hi) {
  const __m256i low4 = _mm256_set1_epi8(0x0F), one = _mm256_set1_epi8(1);
  const __m256i q = Load32(qs + 32 * j);
  *lo = _mm256_and_si256(q, low4);
  *hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), low4);
  if (kQ5) {
    *lo = _mm256_or_si256(
        *lo, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * j), one), 4));
    *hi = _mm256_or_si256(
        *hi, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * j + 1), one), 4));
  }
}

// Half h (128 weights) of a Q6_K super-block as unsigned bytes 0..63, four
// activation blocks' worth: v[k] is weights 128h + 32k .. + 31.
PI_INLINE void Q6KHalf(const BlockQ6_K* b, int h, __m256i* v) {
  const __m256i low4 = _mm256_set1_epi8(0x0F), three = _mm256_set1_epi8(3);
  const __m256i l0 = Load32(b->ql + 64 * h), l1 = Load32(b->ql + 64 * h + 32);
  const __m256i hb = Load32(b->qh + 32 * h);
  v[0] = _mm256_or_si256(_mm256_and_si256(l0, low4),
                         _mm256_slli_epi16(_mm256_and_si256(hb, three), 4));
  v[1] = _mm256_or_si256(_mm256_and_si256(l1, low4),
                         _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 2), three), 4));
  v[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), low4),
                         _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 4), three), 4));
  v[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), low4),
                         _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 6), three), 4));
}

// Q4_K and Q5_K: sub-block s (32 weights, activation block s) is
// d*sc[s]*q - dmin*m[s]; chunk j's 32 bytes hold sub-block 2j in the low
// nibbles and 2j+1 in the high ones, Q5_K's fifth bits at bit s of qh.
// One row against N activations (a batch's tile): each super-block's quants
// are unpacked once for all N, and each dot's arithmetic is the same, in the
// same order, whatever N — a row of a batch gets what a lone row does.
template <bool kQ5, int N>
void DotsQ45K(const uint8_t* row, const uint8_t* next, const Act* x, int64_t nsb, float* out) {
  constexpr int kBytes = kQ5 ? sizeof(BlockQ5_K) : sizeof(BlockQ4_K);
  const __m128i pairs = _mm_setr_epi8(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7);
  __m256 acc[N], mins[N];
  for (int b = 0; b < N; ++b) acc[b] = mins[b] = _mm256_setzero_ps();
  for (int64_t i = 0; i < nsb; ++i) {
    const uint8_t* blk = row + i * kBytes;
    Prefetch(next + i * kBytes, kBytes);
    alignas(8) uint8_t sc[8], mn[8];
    ScalesMinsK4(blk + 4, sc, mn);
    const __m256 scf =
        _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<__m128i*>(sc))));
    const __m256 d = _mm256_set1_ps(F16(blk)), dmin = _mm256_set1_ps(F16(blk + 2));
    // m[s] per int16 pair: lane s of a madd with the activation's 16-sums is
    // m[s] times activation block s's sum.
    const __m256i m16 = _mm256_cvtepu8_epi16(
        _mm_shuffle_epi8(_mm_loadl_epi64(reinterpret_cast<__m128i*>(mn)), pairs));
    const uint8_t* qs = blk + (kQ5 ? 48 : 16);
    const __m256i qh = kQ5 ? Load32(blk + 16) : _mm256_setzero_si256();
    __m256i lo[4], hi[4];
    for (int j = 0; j < 4; ++j) Q45KChunk<kQ5>(qs, qh, j, &lo[j], &hi[j]);
    for (int b = 0; b < N; ++b) {
      const __m256 dx = _mm256_loadu_ps(x[b].dx + 8 * i);
      const __m256 scale = _mm256_mul_ps(scf, _mm256_mul_ps(dx, d));
      const __m256i msum = _mm256_madd_epi16(m16, Load32(x[b].b16 + 16 * i));
      mins[b] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(msum), _mm256_mul_ps(dx, dmin), mins[b]);
      const int8_t* xq = x[b].qs + kQK_K * i;
      for (int j = 0; j < 4; ++j) {
        const __m256i p0 = Dot32(lo[j], Load32(xq + 64 * j));
        const __m256i p1 = Dot32(hi[j], Load32(xq + 64 * j + 32));
        acc[b] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p0),
                                 _mm256_permutevar8x32_ps(scale, _mm256_set1_epi32(2 * j)), acc[b]);
        acc[b] =
            _mm256_fmadd_ps(_mm256_cvtepi32_ps(p1),
                            _mm256_permutevar8x32_ps(scale, _mm256_set1_epi32(2 * j + 1)), acc[b]);
      }
    }
  }
  for (int b = 0; b < N; ++b) out[b] = HorizontalSum(_mm256_sub_ps(acc[b], mins[b]));
}

// Q6_K: 16 groups of 16 weights, group g = d*sc[g]*(q - 32) with q in 0..63.
// Each half (128 weights) holds 64 bytes of low nibbles and 32 of high bit
// pairs: weights l, l+32, l+64, l+96 take the low nibbles of ql[l],
// ql[l+32] and the high ones, and bit pairs 0, 2, 4, 6 of qh[l]. N
// activations at once, as DotsQ45K.
template <int N>
void DotsQ6K(const uint8_t* row, const uint8_t* next, const Act* x, int64_t nsb, float* out) {
  const __m256i group[4] = {
      _mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1), _mm256_setr_epi32(2, 2, 2, 2, 3, 3, 3, 3),
      _mm256_setr_epi32(4, 4, 4, 4, 5, 5, 5, 5), _mm256_setr_epi32(6, 6, 6, 6, 7, 7, 7, 7)};
  const __m256i dup_lo = _mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3);
  const __m256i dup_hi = _mm256_setr_epi32(4, 4, 5, 5, 6, 6, 7, 7);
  __m256 acc[N], offsets[N];
  for (int b = 0; b < N; ++b) acc[b] = offsets[b] = _mm256_setzero_ps();
  for (int64_t i = 0; i < nsb; ++i) {
    const BlockQ6_K* blk = reinterpret_cast<const BlockQ6_K*>(row + i * sizeof(BlockQ6_K));
    Prefetch(next + i * sizeof(BlockQ6_K), sizeof(BlockQ6_K));
    const __m256 d = _mm256_set1_ps(F16(reinterpret_cast<const uint8_t*>(&blk->d)));
    const __m128i sc = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk->scales));
    const __m256i sc16 = _mm256_cvtepi8_epi16(sc);
    const __m256 scf[2] = {_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(sc)),
                           _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(sc, 8)))};
    __m256i v[8];
    Q6KHalf(blk, 0, v);
    Q6KHalf(blk, 1, v + 4);
    for (int b = 0; b < N; ++b) {
      const __m256 ddx = _mm256_mul_ps(_mm256_loadu_ps(x[b].dx + 8 * i), d);
      // Lane k: the 32 offset of activation block k, sc-weighted per 16.
      const __m256i off = _mm256_madd_epi16(sc16, Load32(x[b].b16 + 16 * i));
      offsets[b] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(off),
                                   _mm256_mul_ps(ddx, _mm256_set1_ps(32.0f)), offsets[b]);
      const __m256 scale[2] = {_mm256_mul_ps(scf[0], _mm256_permutevar8x32_ps(ddx, dup_lo)),
                               _mm256_mul_ps(scf[1], _mm256_permutevar8x32_ps(ddx, dup_hi))};
      const int8_t* xq = x[b].qs + kQK_K * i;
      for (int k = 0; k < 8; ++k) {
        const __m256i p = Dot32(v[k], Load32(xq + 32 * k));
        acc[b] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p),
                                 _mm256_permutevar8x32_ps(scale[k / 4], group[k % 4]), acc[b]);
      }
    }
  }
  for (int b = 0; b < N; ++b) out[b] = HorizontalSum(_mm256_sub_ps(acc[b], offsets[b]));
}

// ---- the transposed product: y += sum over rows of a_r * row r ----------------
//
// Per group of rows (DriveAxpy), block by block. Every weight is formed whole
// (dsc*q - dm, as kquant.cpp's formulas give it, up to the one rounding of
// the fused form) before a_r scales it: folding a_r into dsc and dm would
// save an instruction but round the min or offset term on its own, which can
// be larger than the weight. Each y element sees the rows' fused
// multiply-adds in row order. The AVX-512 level runs these kernels too.

// acc += coef * (q * dsc - dm) for 8 weights' q as floats.
PI_INLINE void AddFloats8(__m256 q, __m256 dsc, __m256 dm, __m256 coef, __m256* acc) {
  *acc = _mm256_fmadd_ps(coef, _mm256_fmsub_ps(q, dsc, dm), *acc);
}

// 8 bytes as unsigned epi32 lanes.
PI_INLINE __m256i Bytes8(const uint8_t* p) {
  return _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
}

PI_INLINE void Store32(uint8_t* p, __m256i v) {
  _mm256_store_si256(reinterpret_cast<__m256i*>(p), v);
}

// The K formats: a super-block a quarter (64 columns, 8 registers of y) at a
// time, every row of the group adding its quarter, its scales formed once per
// super-block. Q4_K's quarter j comes from the file's bytes: chunk j, weights
// 64j + l in the low nibbles of qs[32j + l] (sub-block 2j), 64j + 32 + l in
// the high ones (2j + 1). Q5_K's and Q6_K's quants are assembled in bytes
// first (Q45KChunk, Q6KHalf: their high bits cost less per byte than per
// lane), into a buffer the quarters read back; Q6_K's as q - 32, so each
// weight is one product, d*sc * (q - 32) — exactly d*sc*q - 32*d*sc, rounded
// once. The AVX-512 level runs these too: a 512-bit version (16 registers of
// y, a whole super-block per row) measured slower on Zen 4, whose 512-bit
// operations take two 256-bit passes.
template <DType T>
void AxpyK(const AxpyArgs& a, const AxpyGroup& g, const AxpyGroup& next) {
  constexpr bool kQ6 = T == DType::kQ6_K, kQ5 = T == DType::kQ5_K, kBytesFirst = kQ5 || kQ6;
  constexpr size_t kBytes = kQ6 ? sizeof(BlockQ6_K) : kQ5 ? sizeof(BlockQ5_K) : sizeof(BlockQ4_K);
  alignas(32) float dsc[kAxpyRows][kQ6 ? 16 : 8], dm[kAxpyRows][8];  // per scale group
  alignas(32) uint8_t q[kBytesFirst ? kAxpyRows : 1][kBytesFirst ? kQK_K : 32];
  const __m256i low4 = _mm256_set1_epi32(0x0F);
  const int64_t nsb = a.cols / kQK_K;
  for (int64_t i = 0; i < nsb; ++i) {
    PrefetchGroup(next, i * kBytes, kBytes);
    for (int k = 0; k < g.n; ++k) {  // the rows' scales (and quants in bytes) for this block
      const uint8_t* blk = g.w[k] + i * kBytes;
      if (kQ6) {
        const BlockQ6_K* b6 = reinterpret_cast<const BlockQ6_K*>(blk);
        const __m256 d = _mm256_set1_ps(F16(reinterpret_cast<const uint8_t*>(&b6->d)));
        for (int h = 0; h < 2; ++h) {
          const __m256 sc = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(
              _mm_loadl_epi64(reinterpret_cast<const __m128i*>(b6->scales + 8 * h))));
          _mm256_store_ps(dsc[k] + 8 * h, _mm256_mul_ps(d, sc));
          __m256i v[4];
          Q6KHalf(b6, h, v);
          for (int j = 0; j < 4; ++j) {
            Store32(q[k] + 128 * h + 32 * j, _mm256_sub_epi8(v[j], _mm256_set1_epi8(32)));
          }
        }
        continue;
      }
      __m256 sc, mn;
      ScalesMinsK4Floats(blk + 4, &sc, &mn);
      _mm256_store_ps(dsc[k], _mm256_mul_ps(_mm256_set1_ps(F16(blk)), sc));
      _mm256_store_ps(dm[k], _mm256_mul_ps(_mm256_set1_ps(F16(blk + 2)), mn));
      if (kQ5) {
        const __m256i qh = Load32(blk + 16);
        for (int j = 0; j < 4; ++j) {
          __m256i lo, hi;
          Q45KChunk<true>(blk + 48, qh, j, &lo, &hi);
          Store32(q[k] + 64 * j, lo);
          Store32(q[k] + 64 * j + 32, hi);
        }
      }
    }
    for (int j = 0; j < 4; ++j) {
      float* y = a.y + i * kQK_K + 64 * j;
      __m256 acc[8];
      for (int v = 0; v < 8; ++v) acc[v] = _mm256_loadu_ps(y + 8 * v);
      for (int k = 0; k < g.n; ++k) {
        const __m256 coef = _mm256_set1_ps(g.a[k]);
        if (kQ6) {  // weight 64j + 8v + l is byte 64j + 8v + l, q - 32 as int8
          for (int v = 0; v < 8; ++v) {
            const __m256 qf = _mm256_cvtepi32_ps(
                _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(
                    reinterpret_cast<const int8_t*>(q[k]) + 64 * j + 8 * v))));
            const __m256 w = _mm256_mul_ps(qf, _mm256_set1_ps(dsc[k][4 * j + v / 2]));
            acc[v] = _mm256_fmadd_ps(coef, w, acc[v]);
          }
          continue;
        }
        if (kQ5) {  // weight 64j + 8v + l is byte 64j + 8v + l
          for (int v = 0; v < 8; ++v) {
            const __m256 qf = _mm256_cvtepi32_ps(Bytes8(q[k] + 64 * j + 8 * v));
            AddFloats8(qf, _mm256_set1_ps(dsc[k][2 * j + v / 4]),
                       _mm256_set1_ps(dm[k][2 * j + v / 4]), coef, &acc[v]);
          }
          continue;
        }
        const uint8_t* qs = g.w[k] + i * kBytes + 16 + 32 * j;
        const __m256 dsc_lo = _mm256_set1_ps(dsc[k][2 * j]), dm_lo = _mm256_set1_ps(dm[k][2 * j]);
        const __m256 dsc_hi = _mm256_set1_ps(dsc[k][2 * j + 1]);
        const __m256 dm_hi = _mm256_set1_ps(dm[k][2 * j + 1]);
        for (int m = 0; m < 4; ++m) {  // l in [8m, 8m + 8)
          const __m256i z = Bytes8(qs + 8 * m);
          AddFloats8(_mm256_cvtepi32_ps(_mm256_and_si256(z, low4)), dsc_lo, dm_lo, coef, &acc[m]);
          AddFloats8(_mm256_cvtepi32_ps(_mm256_srli_epi32(z, 4)), dsc_hi, dm_hi, coef, &acc[4 + m]);
        }
      }
      for (int v = 0; v < 8; ++v) _mm256_storeu_ps(y + 8 * v, acc[v]);
    }
  }
}

// The legacy formats (Q4_1, Q5_0, Q5_1): block by block, each row's block
// unpacked to bytes (w = dsc*q - dm), then y loaded and stored once per 8
// columns for all the rows.
void AxpyLegacy(const AxpyArgs& a, const AxpyGroup& g, const AxpyGroup& next) {
  const int bytes = a.wtype == DType::kQ4_1 ? 20 : a.wtype == DType::kQ5_0 ? 22 : 24;
  alignas(32) uint8_t q[kAxpyRows][32];
  float dsc[kAxpyRows], dm[kAxpyRows];
  for (int64_t i = 0; i < a.cols / 32; ++i) {
    PrefetchGroup(next, i * bytes, bytes);
    for (int r = 0; r < g.n; ++r) {
      const uint8_t* blk = g.w[r] + i * bytes;
      Store32(q[r], LegacyQuants(blk, bytes, a.wtype != DType::kQ4_1));
      dsc[r] = F16(blk);
      dm[r] = a.wtype == DType::kQ5_0 ? 16.0f * dsc[r] : -F16(blk + 2);
    }
    for (int j = 0; j < 32; j += 8) {
      __m256 acc = _mm256_loadu_ps(a.y + 32 * i + j);
      for (int r = 0; r < g.n; ++r) {
        const __m256 qf = _mm256_cvtepi32_ps(Bytes8(q[r] + j));
        AddFloats8(qf, _mm256_set1_ps(dsc[r]), _mm256_set1_ps(dm[r]), _mm256_set1_ps(g.a[r]), &acc);
      }
      _mm256_storeu_ps(a.y + 32 * i + j, acc);
    }
  }
}

// One kernel for every group size: a row's work per block dwarfs the loop
// over the group.
template <AxpyFn F>
constexpr AxpyFn kAxpyAll[kAxpyRows] = {F, F, F, F, F, F, F, F};

// ---- drivers ----------------------------------------------------------------------

// The legacy formats share nothing worth unpacking once per block: a tile
// is its dots one after the other.
template <DType T, int N>
void DotsLegacy(const uint8_t* row, const uint8_t* next, const Act* x, int64_t nb, float* out) {
  for (int b = 0; b < N; ++b) out[b] = DotLegacy<T>(row, b == 0 ? next : row, x[b], nb);
}

constexpr int kBatchTile = kBlockBatchTile;  // activations a row is dotted with per pass

BlockDotsFns DotsFor(DType t) {
  switch (t) {
    case DType::kQ4_1:
      return {DotsLegacy<DType::kQ4_1, 1>, DotsLegacy<DType::kQ4_1, kBatchTile>};
    case DType::kQ5_0:
      return {DotsLegacy<DType::kQ5_0, 1>, DotsLegacy<DType::kQ5_0, kBatchTile>};
    case DType::kQ5_1:
      return {DotsLegacy<DType::kQ5_1, 1>, DotsLegacy<DType::kQ5_1, kBatchTile>};
    case DType::kQ4_K:
      return {DotsQ45K<false, 1>, DotsQ45K<false, kBatchTile>};
    case DType::kQ5_K:
      return {DotsQ45K<true, 1>, DotsQ45K<true, kBatchTile>};
    case DType::kQ6_K:
      return {DotsQ6K<1>, DotsQ6K<kBatchTile>};
    default:
      return {nullptr, nullptr};
  }
}

}  // namespace

bool HasBlockKernelsAvx2(DType wtype) {
  return DotsFor(wtype).one != nullptr;
}

void MatMulRowsBlocksAvx2(const MatMulArgs& a, bool avx512) {
  const BlockDotsFns own = avx512 ? BlockDotsAvx512(a.wtype) : BlockDotsFns{nullptr, nullptr};
  const BlockDotsFns dots = own.one ? own : DotsFor(a.wtype);
  const int block = GetDTypeInfo(static_cast<uint32_t>(a.wtype)).block_elems;
  const int64_t nb = a.cols / block;
  Act x[kBatchTile];
  float out[kBatchTile];
  for (int64_t k = a.r0; k < a.r1; ++k) {
    const int64_t r = a.ids ? a.ids[k] : k;
    const uint8_t* row = a.w + r * a.row_bytes;
    // The next row of this call (the last one prefetches itself: harmless).
    const int64_t r_next = k + 1 < a.r1 ? (a.ids ? a.ids[k + 1] : k + 1) : r;
    const uint8_t* next = a.w + r_next * a.row_bytes;
    if (a.ids && k + kIdRowsAhead < a.r1) {
      PrefetchRowL2(a.w + a.ids[k + kIdRowsAhead] * a.row_bytes, a.row_bytes);
    }
    for (int64_t b0 = 0; b0 < a.batch; b0 += kBatchTile) {
      const int n = a.batch - b0 < kBatchTile ? static_cast<int>(a.batch - b0) : kBatchTile;
      for (int b = 0; b < n; ++b) {
        const uint8_t* xb = a.x + (b0 + b) * a.x_stride;
        x[b] = {reinterpret_cast<const int8_t*>(xb + a.layout.qs_off),
                reinterpret_cast<const float*>(xb + a.layout.dx_off),
                reinterpret_cast<const int16_t*>(xb + a.layout.b16_off)};
      }
      const uint8_t* pf = b0 == 0 ? next : row;
      if (n == kBatchTile) {
        dots.tile(row, pf, x, nb, out);
      } else {
        for (int b = 0; b < n; ++b) dots.one(row, b == 0 ? pf : row, x + b, nb, out + b);
      }
      for (int b = 0; b < n; ++b) a.y[(b0 + b) * a.ldy + r] = out[b];
    }
  }
}

void AxpyRowsBlocksAvx2(const AxpyArgs& a) {
  switch (a.wtype) {
    case DType::kQ4_K:
      return DriveAxpy(a, kAxpyAll<AxpyK<DType::kQ4_K>>);
    case DType::kQ5_K:
      return DriveAxpy(a, kAxpyAll<AxpyK<DType::kQ5_K>>);
    case DType::kQ6_K:
      return DriveAxpy(a, kAxpyAll<AxpyK<DType::kQ6_K>>);
    default:
      return DriveAxpy(a, kAxpyAll<AxpyLegacy>);
  }
}

}  // namespace cpu_internal
}  // namespace pi
