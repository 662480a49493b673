// The weight-panel products at the AVX2 level (weight_panels.h), over the
// same repacked layout as the AVX-512 kernels: a 64-byte vector of 16 rows is
// two 8-row vectors here, and the panel is walked one 8-row octet at a time
// over a chunk of blocks (in L1 after the first octet), so the octet's N sums
// and N dots fit the 16 registers. Q4_0 and Q8_0: the exact integer dot per
// block by vpdpbusd under AVX-VNNI (run-time choice, isa.h), else
// vpmaddubsw + vpmaddwd, exact for Q4_0's nibbles (Q8_0's bytes + 128 would
// overflow its pairs: Q8_0 needs VNNI here); then one FMA with d_w * d_x.
// Floats: one running FMA over k. The same sums as the AVX-512 kernels and
// the scalar reference, so every level gives the same bits.
#if defined(__GNUC__) && !defined(__clang__)  // (clang has no such warning)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include <cstring>

#include "kernels/cpu/avx_vnni_inline.h"
#include "kernels/cpu/gemm_common.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/matmul_impl.h"
#include "kernels/cpu/weight_panels_layout.h"

#define PI_INLINE inline __attribute__((always_inline))

namespace pi {
namespace cpu_internal {
namespace {

// Everything here has internal linkage (see matmul_impl.h).

constexpr int kCols = 6;          // batch columns per call (Q4_0, Q8_0: N sums + N dots)
constexpr int kFloatCols = 12;    // floats: N sums, one weight and one broadcast
constexpr int kChunkBlocks = 16;  // Q4_0: 9 KiB of panel per chunk
constexpr int kChunkK = 128;      // floats: 8 KiB (F16) per chunk
constexpr int kLeadBytes = 16 * 1024;
// Floats' long batches: as the AVX-512 kernels' (weight_panels_float_avx512.cpp).
constexpr PanelBlocking kFloatBlocking = {3, 2048, 8};

// The sums of octets [q0, q0 + G) (rows 8 q ..) of columns [0, N): from y,
// or zero for a panel's first chunk; and back.
template <int G, int N>
PI_INLINE void LoadOctets(const float* y, int64_t ldy, int q0, bool first, __m256 (&acc)[G][N]) {
  for (int g = 0; g < G; ++g) {
    for (int j = 0; j < N; ++j) {
      acc[g][j] = first ? _mm256_setzero_ps() : _mm256_loadu_ps(y + j * ldy + 8 * (q0 + g));
    }
  }
}
template <int G, int N>
PI_INLINE void StoreOctets(float* y, int64_t ldy, int q0, const __m256 (&acc)[G][N]) {
  for (int g = 0; g < G; ++g) {
    for (int j = 0; j < N; ++j) _mm256_storeu_ps(y + j * ldy + 8 * (q0 + g), acc[g][j]);
  }
}

// One block's integer dots for rows 8q .. 8q + 7 x N columns.
template <DType T, bool kVnni, int N>
PI_INLINE void OctetDots(const uint8_t* blk, int q, int b, const QuantColumn* xc,
                         __m256i (&is)[N]) {
  constexpr int kDwords = PanelDwords(T);
  constexpr int kOffset = T == DType::kQ4_0 ? 8 : 128;
  const int h = q / 2, part = q % 2;  // the 16-row half, and which 8 rows of it
  for (int j = 0; j < N; ++j) {
    is[j] = _mm256_set1_epi32(-kOffset * (xc[j].b16[2 * b] + xc[j].b16[2 * b + 1]));
  }
  for (int c = 0; c < kDwords; ++c) {
    const __m256i v = _mm256_load_si256(
        reinterpret_cast<const __m256i*>(blk + 64 + (h * kDwords + c) * 64 + 32 * part));
    if (T == DType::kQ4_0) {
      const __m256i m4 = _mm256_set1_epi8(0x0F);
      const __m256i lo = _mm256_and_si256(v, m4);
      const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
      for (int j = 0; j < N; ++j) {
        int32_t x_lo, x_hi;
        std::memcpy(&x_lo, xc[j].qs + b * 32 + 4 * c, 4);
        std::memcpy(&x_hi, xc[j].qs + b * 32 + 16 + 4 * c, 4);
        is[j] = DotU8S8<kVnni>(is[j], lo, _mm256_set1_epi32(x_lo));
        is[j] = DotU8S8<kVnni>(is[j], hi, _mm256_set1_epi32(x_hi));
      }
    } else {
      const __m256i u = _mm256_xor_si256(v, _mm256_set1_epi8(static_cast<char>(0x80)));
      for (int j = 0; j < N; ++j) {
        int32_t xv;
        std::memcpy(&xv, xc[j].qs + b * 32 + 4 * c, 4);
        is[j] = DotU8S8<kVnni>(is[j], u, _mm256_set1_epi32(xv));
      }
    }
  }
}

// Columns [0, N) over blocks [0, nblk) of one panel chunk, G octets (8 rows
// each) per pass: all 4 for a lone column (decode: four independent chains,
// the chunk read once, in order), else one, so the octet's N sums and N dots
// fit the 16 registers (the chunk is in L1 after the first pass).
template <DType T, bool kVnni, int N>
void QuantMicro(const uint8_t* blocks, int nblk, const QuantColumn* xc, float* y, int64_t ldy,
                bool first, bool prefetch) {
  constexpr int kBlockBytes = PanelBlockBytes(T);
  constexpr int G = N == 1 ? 4 : 1;
  for (int q0 = 0; q0 < 4; q0 += G) {
    __m256 acc[G][N];
    LoadOctets<G, N>(y, ldy, q0, first, acc);
    for (int b = 0; b < nblk; ++b) {
      const uint8_t* blk = blocks + b * kBlockBytes;
      if (prefetch && q0 == 0) {
        for (int l = 0; l < kBlockBytes; l += 64) {
          _mm_prefetch(reinterpret_cast<const char*>(blk + kLeadBytes + l), _MM_HINT_T0);
        }
      }
      for (int g = 0; g < G; ++g) {
        const int q = q0 + g;
        __m256i is[N];
        OctetDots<T, kVnni, N>(blk, q, b, xc, is);
        const __m256 a = _mm256_cvtph_ps(
            _mm_load_si128(reinterpret_cast<const __m128i*>(blk + 32 * (q / 2) + 16 * (q % 2))));
        for (int j = 0; j < N; ++j) {
          const __m256 scale = _mm256_mul_ps(a, _mm256_set1_ps(xc[j].dx[b]));
          acc[g][j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(is[j]), scale, acc[g][j]);
        }
      }
    }
    StoreOctets<G, N>(y, ldy, q0, acc);
  }
}

template <DType T, bool kVnni>
void QuantPanelRows(const uint8_t* panels, int64_t cols, const uint8_t* x, int64_t batch, float* y,
                    int64_t ldy, int64_t r0, int64_t r1) {
  using Fn = void (*)(const uint8_t*, int, const QuantColumn*, float*, int64_t, bool, bool);
  static constexpr Fn kMicro[kCols] = {QuantMicro<T, kVnni, 1>, QuantMicro<T, kVnni, 2>,
                                       QuantMicro<T, kVnni, 3>, QuantMicro<T, kVnni, 4>,
                                       QuantMicro<T, kVnni, 5>, QuantMicro<T, kVnni, 6>};
  const QActLayout l = GetQActLayout(cols);
  const int64_t nb = cols / 32;
  ForEachPanelCall(r0 / 32, r1 / 32, nb, kChunkBlocks, batch, kCols, PanelBlocking(),
                   [&](int64_t p, int64_t k0, int nblk, int64_t b, int n, bool lead) {
                     QuantColumn xc[kCols];
                     QuantColumnsAt(x, l.total, l, b, n, k0, xc);
                     kMicro[n - 1](panels + PanelOffset(T, nb, p, k0), nblk, xc,
                                   y + b * ldy + p * 32, ldy, k0 == 0, lead);
                   });
}

template <DType T>
PI_INLINE __m256 Load8(const uint8_t* p) {
  if (T == DType::kF32) return _mm256_load_ps(reinterpret_cast<const float*>(p));
  const __m128i h = _mm_load_si128(reinterpret_cast<const __m128i*>(p));
  if (T == DType::kF16) return _mm256_cvtph_ps(h);
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));  // bf16
}

// Columns [0, N) over k in [0, kc) of one float panel chunk, G octets per
// pass as QuantMicro's (all 4 up to 2 columns: enough FMA chains).
template <DType T, int N>
void FloatMicro(const uint8_t* w, int kc, const float* const* xs, float* y, int64_t ldy, bool first,
                bool prefetch) {
  constexpr int kE = PanelElemBytes(T);
  constexpr int G = N <= 2 ? 4 : 1;
  for (int q0 = 0; q0 < 4; q0 += G) {
    __m256 acc[G][N];
    LoadOctets<G, N>(y, ldy, q0, first, acc);
    for (int k = 0; k < kc; ++k) {
      const uint8_t* wk = w + k * 32 * kE;
      if (prefetch && q0 == 0) {
        for (int l = 0; l < 32 * kE; l += 64) {
          _mm_prefetch(reinterpret_cast<const char*>(wk + kLeadBytes + l), _MM_HINT_T0);
        }
      }
      for (int g = 0; g < G; ++g) {
        const __m256 wv = Load8<T>(wk + 8 * (q0 + g) * kE);
        for (int j = 0; j < N; ++j) {
          acc[g][j] = _mm256_fmadd_ps(wv, _mm256_set1_ps(xs[j][k]), acc[g][j]);
        }
      }
    }
    StoreOctets<G, N>(y, ldy, q0, acc);
  }
}

template <DType T>
void FloatPanelRows(const uint8_t* panels, int64_t cols, const uint8_t* x, int64_t x_stride,
                    int64_t batch, float* y, int64_t ldy, int64_t r0, int64_t r1) {
  using Fn = void (*)(const uint8_t*, int, const float* const*, float*, int64_t, bool, bool);
  static constexpr Fn kMicro[kFloatCols] = {
      FloatMicro<T, 1>, FloatMicro<T, 2>,  FloatMicro<T, 3>,  FloatMicro<T, 4>,
      FloatMicro<T, 5>, FloatMicro<T, 6>,  FloatMicro<T, 7>,  FloatMicro<T, 8>,
      FloatMicro<T, 9>, FloatMicro<T, 10>, FloatMicro<T, 11>, FloatMicro<T, 12>};
  ForEachPanelCall(r0 / 32, r1 / 32, cols, kChunkK, batch, kFloatCols, kFloatBlocking,
                   [&](int64_t p, int64_t k0, int kc, int64_t b, int n, bool lead) {
                     const float* xs[kFloatCols];
                     for (int j = 0; j < n; ++j) {
                       xs[j] = reinterpret_cast<const float*>(x + (b + j) * x_stride) + k0;
                     }
                     kMicro[n - 1](panels + FloatPanelOffset(T, cols, p, k0), kc, xs,
                                   y + b * ldy + p * 32, ldy, k0 == 0, lead);
                   });
}

}  // namespace

bool HasWeightPanelsAvx2(DType wtype) {
  return wtype == DType::kQ4_0 || (wtype == DType::kQ8_0 && AvxVnniEnabled()) ||
         IsFloatPanel(wtype);
}

void WeightPanelRowsAvx2(DType wtype, const uint8_t* panels, int64_t cols, const uint8_t* x,
                         int64_t x_stride, int64_t batch, float* y, int64_t ldy, int64_t r0,
                         int64_t r1) {
  const bool vnni = AvxVnniEnabled();
  switch (wtype) {
    case DType::kQ4_0:
      return vnni ? QuantPanelRows<DType::kQ4_0, true>(panels, cols, x, batch, y, ldy, r0, r1)
                  : QuantPanelRows<DType::kQ4_0, false>(panels, cols, x, batch, y, ldy, r0, r1);
    case DType::kQ8_0:
      if (vnni) QuantPanelRows<DType::kQ8_0, true>(panels, cols, x, batch, y, ldy, r0, r1);
      return;
    case DType::kF32:
      return FloatPanelRows<DType::kF32>(panels, cols, x, x_stride, batch, y, ldy, r0, r1);
    case DType::kF16:
      return FloatPanelRows<DType::kF16>(panels, cols, x, x_stride, batch, y, ldy, r0, r1);
    case DType::kBF16:
      return FloatPanelRows<DType::kBF16>(panels, cols, x, x_stride, batch, y, ldy, r0, r1);
    default:
      return;
  }
}

}  // namespace cpu_internal
}  // namespace pi
