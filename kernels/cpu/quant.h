// Quantized block formats, byte-identical to ggml's (src/ggml-common.h), and
// row conversions between them and f32. A row is ne[0] elements, a whole
// number of blocks.
#pragma once

#include <cstdint>

#include "kernels/dtype.h"

namespace pi {

constexpr int kQK = 32;  // weights per Q8_0/Q4_0 block

struct BlockQ8_0 {
  uint16_t d;  // f16 scale: x = q * d
  int8_t qs[kQK];
};
static_assert(sizeof(BlockQ8_0) == 34, "ggml block_q8_0 layout");

struct BlockQ4_0 {
  uint16_t d;           // f16 scale: x = (nibble - 8) * d
  uint8_t qs[kQK / 2];  // byte j: weight j in the low nibble, weight j+16 in the high
};
static_assert(sizeof(BlockQ4_0) == 18, "ggml block_q4_0 layout");

// ggml's reference quantizers (quantize_row_q8_0_ref / quantize_row_q4_0_ref).
void QuantizeRowQ8_0(const float* x, BlockQ8_0* y, int64_t n);
void QuantizeRowQ4_0(const float* x, BlockQ4_0* y, int64_t n);

// Converts `n` f32 values to a row of `type` (F32, F16, BF16, Q8_0, Q4_0).
void QuantizeRow(DType type, const float* x, void* y, int64_t n);
// Converts a row of `type` to `n` f32 values (F32, F16, BF16, Q8_0, Q4_0).
void DequantizeRow(DType type, const void* x, float* y, int64_t n);

}  // namespace pi
