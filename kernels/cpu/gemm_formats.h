// The block formats as the matrix-matrix kernels see them (gemm_quant_avx512.cpp,
// gemm_avx2.cpp): per 32 weights — per 16 for Q6_K — w = a * u + c with u an
// unsigned byte. Where c is a whole multiple of a the kernels fold it into
// the integer dot's start (Offset); Q4_K and Q5_K carry it as an f32 min.
// Plain scalar code, all static: each kernel file gets its own copy
// (matmul_impl.h says why that matters for files with their own -m flags).
#pragma once

#include <cstdint>

#include "kernels/cpu/kquant.h"
#include "kernels/dtype.h"

namespace pi {
namespace cpu_internal {

static constexpr int kGemmQK = 32;  // weights per block (an activation block)

static constexpr bool IsKFormat(DType t) {
  return t == DType::kQ4_K || t == DType::kQ5_K || t == DType::kQ6_K;
}
// The integer offset folded into each dot: u - Offset is the signed weight.
static constexpr int Offset(DType t) {
  return t == DType::kQ4_0 ? 8 : t == DType::kQ8_0 ? 128 : t == DType::kQ6_K ? 32 : 0;
}
static constexpr bool PerHalf(DType t) {  // scales per 16 weights
  return t == DType::kQ6_K;
}
static constexpr bool HasMins(DType t) {
  return t == DType::kQ4_K || t == DType::kQ5_K;
}
// Bytes of `n` blocks of 32 (n a multiple of 8 for the K formats).
static constexpr int64_t BlockBytes(DType t, int64_t n) {
  return t == DType::kQ4_0   ? n * 18
         : t == DType::kQ8_0 ? n * 34
         : t == DType::kQ4_K ? n / 8 * int64_t{sizeof(BlockQ4_K)}
         : t == DType::kQ5_K ? n / 8 * int64_t{sizeof(BlockQ5_K)}
                             : n / 8 * int64_t{sizeof(BlockQ6_K)};
}

// Sub-block j's 6-bit scale and min of a Q4_K/Q5_K super-block (ggml's
// packing of `scales`).
static inline void ScaleMinK4(const uint8_t* q, int j, float* sc, float* m) {
  if (j < 4) {
    *sc = static_cast<float>(q[j] & 63);
    *m = static_cast<float>(q[j + 4] & 63);
  } else {
    *sc = static_cast<float>((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
    *m = static_cast<float>((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}

}  // namespace cpu_internal
}  // namespace pi
