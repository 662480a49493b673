// The prepared activation for quantized weights (matmul_impl.h, QActLayout)
// at the AVX2 level and above: one pass over x, 32 values a block, giving the
// scalar path's bytes exactly — ggml's reference Q8_0 quantizer (d = max|x| /
// 127, q = roundf(x / d), as quant.cpp's RoundQ8 clamps and rounds it) and
// the copies and sums the SIMD kernels read. Every decode step prepares each
// matrix product's input once, on one thread: the scalar form took about 14
// µs for 4096 values, a serial piece of every layer on a many-core host.
#include <immintrin.h>

#include <cstring>

#include "kernels/cpu/avx2_inline.h"
#include "kernels/cpu/fp16.h"
#include "kernels/cpu/matmul_impl.h"
#include "kernels/cpu/quant.h"

#define PI_INLINE inline __attribute__((always_inline))

namespace pi {
namespace cpu_internal {
namespace {

// Internal linkage only: see matmul_impl.h.

// RoundQ8 on 8 lanes: clamped to [-127.5, 127.5] (NaN, from inf * 0, to
// -127.5: maxps returns its second operand when the first is NaN), then
// truncated and moved a step away from zero when the dropped part is half or
// more — roundf's result.
PI_INLINE __m256i RoundQ8(__m256 v) {
  v = _mm256_min_ps(_mm256_max_ps(v, _mm256_set1_ps(-127.5f)), _mm256_set1_ps(127.5f));
  const __m256 t = _mm256_round_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
  const __m256 frac = _mm256_sub_ps(v, t);
  const __m256 one = _mm256_set1_ps(1.0f);
  const __m256 up = _mm256_and_ps(_mm256_cmp_ps(frac, _mm256_set1_ps(0.5f), _CMP_GE_OQ), one);
  const __m256 down = _mm256_and_ps(_mm256_cmp_ps(frac, _mm256_set1_ps(-0.5f), _CMP_LE_OQ), one);
  return _mm256_cvttps_epi32(_mm256_sub_ps(_mm256_add_ps(t, up), down));
}

}  // namespace

void PrepareQ8Avx2(const float* x, const QActLayout& l, uint8_t* out) {
  BlockQ8_0* blocks = reinterpret_cast<BlockQ8_0*>(out);
  int8_t* qs = reinterpret_cast<int8_t*>(out + l.qs_off);
  float* dx = reinterpret_cast<float*>(out + l.dx_off);
  int32_t* s4 = reinterpret_cast<int32_t*>(out + l.s4_off);
  int16_t* b16 = reinterpret_cast<int16_t*>(out + l.b16_off);
  // Padding (blocks nb..4*ng) is zero: q = 0, d = 0 contribute nothing.
  std::memset(out + l.nb * sizeof(BlockQ8_0), 0, l.qs_off - l.nb * sizeof(BlockQ8_0));
  std::memset(qs + l.nb * 32, 0, static_cast<size_t>(l.ng * 4 - l.nb) * 32);
  std::memset(dx + l.nb, 0, l.s4_off - l.dx_off - l.nb * sizeof(float));
  std::memset(s4 + l.nb * 8, 0, l.total - l.s4_off - l.nb * 8 * sizeof(int32_t));
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
  const __m256i ones8 = _mm256_set1_epi8(1), ones16 = _mm256_set1_epi16(1);
  for (int64_t i = 0; i < l.nb; ++i) {
    const float* xb = x + 32 * i;
    __m256 v[4];
    __m256 amax = _mm256_setzero_ps(), nan = _mm256_setzero_ps();
    for (int k = 0; k < 4; ++k) {
      v[k] = _mm256_loadu_ps(xb + 8 * k);
      amax = _mm256_max_ps(amax, _mm256_and_ps(v[k], abs_mask));
      nan = _mm256_or_ps(nan, _mm256_cmp_ps(v[k], v[k], _CMP_UNORD_Q));
    }
    if (_mm256_movemask_ps(nan) != 0) {
      // ggml's running max lets a NaN through or not by its place in the
      // block: the reference decides.
      QuantizeRowQ8_0(xb, blocks + i, 32);
    } else {
      const float d = HorizontalMax(amax) / 127.0f;
      const float id = d != 0.0f ? 1.0f / d : 0.0f;
      blocks[i].d = F32ToF16(d);
      __m256i q[4];
      for (int k = 0; k < 4; ++k) q[k] = RoundQ8(_mm256_mul_ps(v[k], _mm256_set1_ps(id)));
      // To bytes in order (|q| <= 128; only q = 128 saturates, and it never
      // comes from a finite block: |x / d| <= 127 up to rounding).
      const __m256i q16 =
          _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
      const __m256i bytes =
          _mm256_permutevar8x32_epi32(q16, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(blocks[i].qs), bytes);
    }
    const __m256i bytes = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blocks[i].qs));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(qs + 32 * i), bytes);
    dx[i] = F16ToF32(blocks[i].d);
    // Minus each 4 consecutive q's sum, then the 16-sums from those.
    const __m256i sum4 = _mm256_madd_epi16(_mm256_maddubs_epi16(ones8, bytes), ones16);
    const __m256i neg4 = _mm256_sub_epi32(_mm256_setzero_si256(), sum4);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(s4 + 8 * i), neg4);
    alignas(32) int32_t s[8];
    _mm256_store_si256(reinterpret_cast<__m256i*>(s), sum4);
    b16[2 * i] = static_cast<int16_t>(s[0] + s[1] + s[2] + s[3]);
    b16[2 * i + 1] = static_cast<int16_t>(s[4] + s[5] + s[6] + s[7]);
  }
}

}  // namespace cpu_internal
}  // namespace pi
