// The AVX2 (+FMA, F16C) variants of ops.cpp's row operations, chosen at run
// time by ops.cpp.
//
// Softmax with an 8-wide exp: attention runs one softmax over the cached
// positions per head and token, so at long contexts a scalar std::exp per
// position is a visible share of decode time.
//
// exp(x) = 2^n * e^r with n = round(x / ln 2), r = x - n ln 2 (|r| <= ln2/2,
// ln 2 split in two parts so r is exact to float precision), e^r by its
// degree-6 Taylor polynomial (truncation error < 2e-8 relative on that
// range), and 2^n built in the exponent bits. Inputs below -87.3 give 0
// (softmax inputs are x - max <= 0, so nothing overflows).
#include <immintrin.h>

#include <cstdint>

#include "kernels/cpu/avx2_inline.h"
#include "kernels/cpu/ops_impl.h"

namespace pi {
namespace cpu_internal {
namespace {

inline __m256 Exp8(__m256 x) {
  const __m256 kLog2e = _mm256_set1_ps(1.44269504088896341f);
  const __m256 kLn2Hi = _mm256_set1_ps(0.693359375f);
  const __m256 kLn2Lo = _mm256_set1_ps(-2.12194440e-4f);
  const __m256 kMin = _mm256_set1_ps(-87.3f);
  const __m256 under = _mm256_cmp_ps(x, kMin, _CMP_LT_OQ);
  x = _mm256_max_ps(x, kMin);
  const __m256 n =
      _mm256_round_ps(_mm256_mul_ps(x, kLog2e), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, kLn2Hi, x);
  r = _mm256_fnmadd_ps(n, kLn2Lo, r);
  // 1 + r + r^2/2! + ... + r^6/6!, Horner.
  __m256 p = _mm256_set1_ps(1.0f / 720);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  const __m256i e =
      _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  const __m256 y = _mm256_mul_ps(p, _mm256_castsi256_ps(e));
  return _mm256_andnot_ps(under, y);
}

// The sum of v's 8 floats, added in double.
inline double HorizontalSumDouble(__m256 v) {
  alignas(32) float f[8];
  _mm256_store_ps(f, v);
  double s = 0;
  for (float x : f) s += x;
  return s;
}

}  // namespace

void SoftmaxAvx2(float* x, int64_t n) {
  int64_t i = 0;
  __m256 vmax = _mm256_set1_ps(x[0]);
  for (; i + 8 <= n; i += 8) vmax = _mm256_max_ps(vmax, _mm256_loadu_ps(x + i));
  float max = HorizontalMax(vmax);
  for (; i < n; ++i) max = x[i] > max ? x[i] : max;

  // Sums in 8 float lanes per block of 1024 values, blocks added in double:
  // a float sum of at most 128 terms per lane loses nothing that matters.
  const __m256 vm = _mm256_set1_ps(max);
  double sum = 0;
  i = 0;
  while (i + 8 <= n) {
    __m256 acc = _mm256_setzero_ps();
    const int64_t end = i + 1024 < n ? i + 1024 : n;
    for (; i + 8 <= end; i += 8) {
      const __m256 e = Exp8(_mm256_sub_ps(_mm256_loadu_ps(x + i), vm));
      _mm256_storeu_ps(x + i, e);
      acc = _mm256_add_ps(acc, e);
    }
    sum += HorizontalSumDouble(acc);
  }
  if (i < n) {
    // The tail through the same exp, so every value is computed alike.
    alignas(32) float tail[8] = {0};
    const int64_t m = n - i;
    for (int64_t k = 0; k < m; ++k) tail[k] = x[i + k] - max;
    for (int64_t k = m; k < 8; ++k) tail[k] = -1e30f;  // exp -> 0
    const __m256 e = Exp8(_mm256_load_ps(tail));
    _mm256_store_ps(tail, e);
    for (int64_t k = 0; k < m; ++k) {
      x[i + k] = tail[k];
      sum += tail[k];
    }
  }
  const __m256 inv = _mm256_set1_ps(static_cast<float>(1.0 / sum));
  i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(x + i, _mm256_mul_ps(_mm256_loadu_ps(x + i), inv));
  const float s = static_cast<float>(1.0 / sum);
  for (; i < n; ++i) x[i] *= s;
}

// IEEE round to nearest even, as F32ToF16 (kernels/cpu/fp16.h) and ggml's
// F16C path: the same bits for every finite value and infinity.
void F32ToF16RowAvx2(const float* x, uint16_t* y, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(y + i), h);
  }
  if (i < n) {
    alignas(32) float tail[8] = {0};
    alignas(16) uint16_t out[8];
    for (int64_t k = i; k < n; ++k) tail[k - i] = x[k];
    _mm_store_si128(reinterpret_cast<__m128i*>(out),
                    _mm256_cvtps_ph(_mm256_load_ps(tail), _MM_FROUND_TO_NEAREST_INT));
    for (int64_t k = i; k < n; ++k) y[k] = out[k - i];
  }
}

}  // namespace cpu_internal
}  // namespace pi
