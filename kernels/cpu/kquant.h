// The other block formats llama.cpp's files hold — the legacy Q4_1, Q5_0 and
// Q5_1 (blocks of 32, what llama-quantize falls back to for rows that are
// not whole 256s) and the K-quants Q4_K, Q5_K and Q6_K (super-blocks of
// 256: Q4_K_M, Q5_K_M and Q6_K files, and llama.cpp's Q4_0 files' Q6_K
// output.weight) — byte-identical to ggml's (src/ggml-common.h) and
// dequantized by ggml's formulas.
//
// Their products read the Q8_0-prepared activation (kernels/cpu/matmul.h):
// the scalar reference dequantizes a block at a time; the SIMD kernels
// (matmul_blocks_avx2.cpp) take integer dots per 32 weights, scaled by the
// block's and the activation block's scales.
#pragma once

#include <cstdint>

#include "kernels/dtype.h"

namespace pi {

constexpr int kQK_K = 256;  // weights per K-quant super-block

struct BlockQ4_1 {
  uint16_t d, m;  // f16: x = d * q + m, q a nibble
  uint8_t qs[16];
};
static_assert(sizeof(BlockQ4_1) == 20, "ggml block_q4_1 layout");

struct BlockQ5_0 {
  uint16_t d;     // f16: x = d * (q - 16), q = nibble | fifth bit << 4
  uint8_t qh[4];  // the fifth bits, weight j at bit j
  uint8_t qs[16];
};
static_assert(sizeof(BlockQ5_0) == 22, "ggml block_q5_0 layout");

struct BlockQ5_1 {
  uint16_t d, m;  // f16: x = d * q + m
  uint8_t qh[4];
  uint8_t qs[16];
};
static_assert(sizeof(BlockQ5_1) == 24, "ggml block_q5_1 layout");

struct BlockQ4_K {
  uint16_t d, dmin;    // f16 super-block scales of the sub-block scales and mins
  uint8_t scales[12];  // 8 sub-blocks' 6-bit scales and mins, packed
  uint8_t qs[128];     // 4-bit quants
};
static_assert(sizeof(BlockQ4_K) == 144, "ggml block_q4_K layout");

struct BlockQ5_K {
  uint16_t d, dmin;
  uint8_t scales[12];
  uint8_t qh[32];   // the fifth bits
  uint8_t qs[128];  // the low 4 bits
};
static_assert(sizeof(BlockQ5_K) == 176, "ggml block_q5_K layout");

struct BlockQ6_K {
  uint8_t ql[128];    // the low 4 bits
  uint8_t qh[64];     // the high 2 bits
  int8_t scales[16];  // 16 sub-blocks' 8-bit scales
  uint16_t d;         // f16 super-block scale
};
static_assert(sizeof(BlockQ6_K) == 210, "ggml block_q6_K layout");

// Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K.
bool IsBlockDequantDType(DType t);

// Block `i` of a row of `t` as f32 into out (32 or 256 values, returned).
int DequantizeBlock(DType t, const void* row, int64_t i, float* out);

// n values (whole blocks) as a row of `t`. The legacy formats as ggml's
// reference quantizers; the K-quants by a direct fit (each sub-block's
// range, its scale and min rounded to 6 bits against the super-block's):
// valid files, not llama-quantize's iterative search.
void QuantizeBlocks(DType t, const float* x, void* y, int64_t n);

}  // namespace pi
