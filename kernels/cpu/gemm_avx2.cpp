// Matrix-matrix products for prompt batches at the AVX2 level, block-format
// weights: Q4_0, Q4_K, Q5_K, Q6_K, and Q8_0 where the CPU has AVX-VNNI.
// The AVX-512 kernels' scheme (gemm_avx512.cpp, gemm_quant_avx512.cpp) on
// 8-lane vectors and 16 registers: a panel is 8 rows x kKb blocks of
// unsigned weight bytes, transposed so that one vector holds the 8 rows'
// dword c of a block, and each batch column passes over it with 8 rows x N
// columns of accumulators. The integer dot of 4 unsigned weight bytes and 4
// broadcast activation bytes is `vpdpbusd` under AVX-VNNI, else
// `vpmaddubsw` + `vpmaddwd` (exact: a byte pair's sum stays under 2^15 for
// weights below 64, which is why Q8_0's bytes + 128 need VNNI). Each block's
// dot is then scaled and added in f32 exactly as at the AVX-512 level, so
// both levels give a column the same bits.
//
// Compiled with -mavxvnni for the one intrinsic that needs it; that code
// runs only where HasAvxVnni() says the CPU has it.
#include <immintrin.h>

#include <cstring>

#include "kernels/cpu/avx_vnni_inline.h"
#include "kernels/cpu/gemm_common.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/kquant.h"
#include "kernels/cpu/matmul_impl.h"

#define PI_INLINE inline __attribute__((always_inline))

namespace pi {
namespace cpu_internal {
namespace {

// Everything here has internal linkage (see matmul_impl.h).

constexpr int kRows = 8;     // rows per panel: one vector
constexpr int kMaxCols = 6;  // batch columns per micro-kernel call (VNNI; 5 without)
constexpr int kKb = 32;      // blocks per panel: 8 rows x 32 x 32 B = 8 KiB
constexpr int kQK = kGemmQK;
constexpr int kQ4Bytes = 18;
constexpr int kQ8Bytes = 34;

PI_INLINE float F16At(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, sizeof(h));
  return _cvtsh_ss(h);
}

PI_INLINE __m256i Load32(const uint8_t* p) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}

// Lanes [0, n) set.
PI_INLINE __m256i RowMask(int n) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

// Block g of a row as 32 unsigned bytes in weight order, its scales a[half]
// (alike but for Q6_K) and min term c.
struct BlockTerms {
  float a[2];
  float c;
};

template <DType T>
PI_INLINE __m256i BlockOf(const uint8_t* row, int64_t g, BlockTerms* t) {
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  if (T == DType::kQ4_0) {
    const uint8_t* b = row + g * kQ4Bytes;
    t->a[0] = t->a[1] = F16At(b);
    const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 2));
    const __m256i v = _mm256_set_m128i(_mm_srli_epi16(q, 4), q);
    return _mm256_and_si256(v, m4);
  }
  if (T == DType::kQ8_0) {
    const uint8_t* b = row + g * kQ8Bytes;
    t->a[0] = t->a[1] = F16At(b);
    return _mm256_xor_si256(Load32(b + 2), _mm256_set1_epi8(static_cast<char>(0x80)));
  }
  if (T == DType::kQ4_K || T == DType::kQ5_K) {
    // Sub-block s: the low (s even) or high nibbles of chunk s / 2's 32
    // bytes; Q5_K's fifth bit of weight l at bit s of qh[l].
    const uint8_t* sb = row + BlockBytes(T, g);
    const int s = static_cast<int>(g % 8);
    float scale, min;
    ScaleMinK4(sb + 4, s, &scale, &min);
    t->a[0] = t->a[1] = F16At(sb) * scale;
    t->c = -F16At(sb + 2) * min;
    const uint8_t* qs = sb + (T == DType::kQ5_K ? 48 : 16);
    __m256i u = _mm256_and_si256(_mm256_srli_epi16(Load32(qs + 32 * (s / 2)), 4 * (s % 2)), m4);
    if (T == DType::kQ5_K) {
      const __m256i fifth =
          _mm256_and_si256(_mm256_srli_epi16(Load32(sb + 16), s), _mm256_set1_epi8(1));
      u = _mm256_or_si256(u, _mm256_slli_epi16(fifth, 4));
    }
    return u;
  }
  // Q6_K block p of a super-block: half p / 4, k = p % 4: the low (k < 2) or
  // high nibbles of ql's 32 bytes k % 2 with qh's bits 2k, 2k + 1 on top.
  const BlockQ6_K* sb = reinterpret_cast<const BlockQ6_K*>(row + BlockBytes(T, g));
  const int p = static_cast<int>(g % 8), half = p / 4, k = p % 4;
  const float d = F16At(reinterpret_cast<const uint8_t*>(&sb->d));
  t->a[0] = d * static_cast<float>(sb->scales[2 * p]);
  t->a[1] = d * static_cast<float>(sb->scales[2 * p + 1]);
  const __m256i low = _mm256_and_si256(
      _mm256_srli_epi16(Load32(sb->ql + 64 * half + 32 * (k % 2)), 4 * (k / 2)), m4);
  const __m256i top =
      _mm256_and_si256(_mm256_srli_epi16(Load32(sb->qh + 32 * half), 2 * k), _mm256_set1_epi8(3));
  return _mm256_or_si256(low, _mm256_slli_epi16(top, 4));
}

// 8 x 8 transpose of 32-bit lanes: in r[i] element c -> out r[c] element i.
PI_INLINE void Transpose8(__m256 (&r)[8]) {
  __m256 t[8], s[8];
  for (int i = 0; i < 4; ++i) {
    t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  for (int h = 0; h < 2; ++h) {  // rows 4h .. 4h + 3: columns q | q + 4
    s[4 * h + 0] = _mm256_shuffle_ps(t[4 * h], t[4 * h + 2], 0x44);
    s[4 * h + 1] = _mm256_shuffle_ps(t[4 * h], t[4 * h + 2], 0xEE);
    s[4 * h + 2] = _mm256_shuffle_ps(t[4 * h + 1], t[4 * h + 3], 0x44);
    s[4 * h + 3] = _mm256_shuffle_ps(t[4 * h + 1], t[4 * h + 3], 0xEE);
  }
  for (int q = 0; q < 4; ++q) {
    r[q] = _mm256_permute2f128_ps(s[q], s[4 + q], 0x20);
    r[4 + q] = _mm256_permute2f128_ps(s[q], s[4 + q], 0x31);
  }
}

// A panel: blocks [blk0, blk0 + nblk) of rows [row, row + 8).
//   q[(blk * 8 + c) * 8 + i]: the 4 bytes c of block blk of row i (dwords);
//   a[(blk * 2 + h) * 8 + i]: half h's scale; c[blk * 8 + i]: the min term.
// Rows past n_rows are 0 (scales 0).
struct Panel {
  alignas(32) int32_t q[kKb * 8 * kRows];
  alignas(32) float a[kKb * 2 * kRows];
  alignas(32) float c[kKb * kRows];
};

template <DType T>
void PackPanel(const MatMulArgs& args, int64_t row, int n_rows, int64_t blk0, int nblk, Panel* p) {
  for (int b = 0; b < nblk; ++b) {
    __m256 r[8];
    for (int i = 0; i < kRows; ++i) {
      BlockTerms t = {};
      r[i] =
          i < n_rows
              ? _mm256_castsi256_ps(BlockOf<T>(args.w + (row + i) * args.row_bytes, blk0 + b, &t))
              : _mm256_setzero_ps();
      p->a[b * 16 + i] = t.a[0];
      if (PerHalf(T)) p->a[b * 16 + 8 + i] = t.a[1];
      if (HasMins(T)) p->c[b * 8 + i] = t.c;
    }
    Transpose8(r);
    for (int c = 0; c < 8; ++c)
      _mm256_store_ps(reinterpret_cast<float*>(p->q + (b * 8 + c) * 8), r[c]);
  }
}

// Columns [b, b + N) over a panel: per block (or half-block), the exact
// integer dot of each (row, column) in one lane, then scaled and added in
// f32 in block order.
template <DType T, bool kVnni, int N>
void Micro(const Panel* p, int nblk, const QuantColumn* xc, float* y, int64_t ldy, int n_rows,
           bool first) {
  constexpr int kParts = PerHalf(T) ? 2 : 1;
  constexpr int kDwords = 8 / kParts;
  const __m256i mask = RowMask(n_rows);
  __m256 acc[N];
  for (int j = 0; j < N; ++j) {
    acc[j] = first ? _mm256_setzero_ps() : _mm256_maskload_ps(y + j * ldy, mask);
  }
  for (int b = 0; b < nblk; ++b) {
    const int32_t* q = p->q + b * 8 * 8;
    for (int part = 0; part < kParts; ++part) {
      __m256i is[N];
      for (int j = 0; j < N; ++j) {
        const int sum =
            kParts == 2 ? xc[j].b16[2 * b + part] : xc[j].b16[2 * b] + xc[j].b16[2 * b + 1];
        is[j] = _mm256_set1_epi32(-Offset(T) * sum);
      }
      for (int c = part * kDwords; c < (part + 1) * kDwords; ++c) {
        const __m256i w = _mm256_load_si256(reinterpret_cast<const __m256i*>(q + c * 8));
        for (int j = 0; j < N; ++j) {
          int32_t xv;
          std::memcpy(&xv, xc[j].qs + b * kQK + 4 * c, sizeof(xv));
          is[j] = DotU8S8<kVnni>(is[j], w, _mm256_set1_epi32(xv));
        }
      }
      const __m256 a = _mm256_load_ps(p->a + (b * 2 + part) * 8);
      for (int j = 0; j < N; ++j) {
        acc[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(is[j]),
                                 _mm256_mul_ps(a, _mm256_set1_ps(xc[j].dx[b])), acc[j]);
      }
    }
    if (HasMins(T)) {
      const __m256 c = _mm256_load_ps(p->c + b * 8);
      for (int j = 0; j < N; ++j) {
        const float sum = static_cast<float>(xc[j].b16[2 * b] + xc[j].b16[2 * b + 1]);
        acc[j] = _mm256_fmadd_ps(c, _mm256_set1_ps(xc[j].dx[b] * sum), acc[j]);
      }
    }
  }
  for (int j = 0; j < N; ++j) _mm256_maskstore_ps(y + j * ldy, mask, acc[j]);
}

using MicroFn = void (*)(const Panel*, int, const QuantColumn*, float*, int64_t, int, bool);
template <DType T, bool kVnni>
constexpr MicroFn kMicro[kMaxCols] = {Micro<T, kVnni, 1>, Micro<T, kVnni, 2>, Micro<T, kVnni, 3>,
                                      Micro<T, kVnni, 4>, Micro<T, kVnni, 5>, Micro<T, kVnni, 6>};

template <DType T, bool kVnni>
void Gemm(const MatMulArgs& a) {
  constexpr int kCols = kVnni ? 6 : 5;  // registers: N accumulators, N dots, w, x (+ ones)
  const QActLayout& l = a.layout;
  Panel panel;
  for (int64_t row = a.r0; row < a.r1; row += kRows) {
    const int n_rows = static_cast<int>(Min64(kRows, a.r1 - row));
    for (int64_t blk0 = 0; blk0 < l.nb; blk0 += kKb) {
      const int nblk = static_cast<int>(Min64(kKb, l.nb - blk0));
      PackPanel<T>(a, row, n_rows, blk0, nblk, &panel);
      PrefetchNextPanel(a, row, kRows, BlockBytes(T, blk0), BlockBytes(T, kKb));
      for (int64_t b = 0, n = 0; b < a.batch; b += n) {
        n = ColumnTile(b, a.batch, kCols);
        QuantColumn xc[kMaxCols];
        QuantColumnsAt(a.x, a.x_stride, l, b, n, blk0, xc);
        kMicro<T, kVnni>[n - 1](&panel, nblk, xc, a.y + b * a.ldy + row, a.ldy, n_rows, blk0 == 0);
      }
    }
  }
}

template <DType T>
void GemmFor(const MatMulArgs& a) {
  if (AvxVnniEnabled()) return Gemm<T, true>(a);
  return Gemm<T, false>(a);
}

}  // namespace

bool HasGemmAvx2(DType wtype) {
  switch (wtype) {
    case DType::kQ4_0:
    case DType::kQ4_K:
    case DType::kQ5_K:
    case DType::kQ6_K:
      return true;
    case DType::kQ8_0:
      return AvxVnniEnabled();
    default:
      return false;
  }
}

void GemmRowsAvx2(const MatMulArgs& a) {
  switch (a.wtype) {
    case DType::kQ4_0:
      return GemmFor<DType::kQ4_0>(a);
    case DType::kQ8_0:
      return Gemm<DType::kQ8_0, true>(a);  // HasGemmAvx2: only under AVX-VNNI
    case DType::kQ4_K:
      return GemmFor<DType::kQ4_K>(a);
    case DType::kQ5_K:
      return GemmFor<DType::kQ5_K>(a);
    case DType::kQ6_K:
      return GemmFor<DType::kQ6_K>(a);
    default:
      return;
  }
}

}  // namespace cpu_internal
}  // namespace pi
