// Where each byte of a repacked matrix lives (weight_panels.h).
//
// Float weights (F32, F16, BF16): panel p (rows 32p .. 32p + 31) is
// [cols][32 rows] in the weight's own type, element (k, i) at
// ((p cols + k) 32 + i) x its size: one 64-byte line per k for F16/BF16.
//
// Q4_0, Q8_0: panel p, block k (weights 32k .. 32k + 31 of each row):
//   bytes [0, 64):  the 32 rows' f16 scales, row i at 2i;
//   then 2 x D vectors of 64 bytes, vector (h, c) at 64 + (h D + c) 64:
//     the block's bytes 4c .. 4c + 3 (after the scale) of rows 16h + i at 4i.
// D = 4 for Q4_0 (16 bytes of nibbles: byte j holds weights j and j + 16)
// and 8 for Q8_0. Blocks follow each other, then panels: block (p, k) is at
// (p nb + k) PanelBlockBytes. Scalar constants only: included by the AVX-512
// file too (matmul_impl.h says why that must stay static).
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/dtype.h"

namespace pi {
namespace cpu_internal {

static constexpr bool IsFloatPanel(DType wtype) {
  return wtype == DType::kF32 || wtype == DType::kF16 || wtype == DType::kBF16;
}
static constexpr int PanelElemBytes(DType wtype) {  // float types
  return wtype == DType::kF32 ? 4 : 2;
}
static constexpr size_t FloatPanelOffset(DType wtype, int64_t cols, int64_t p, int64_t k) {
  return static_cast<size_t>((p * cols + k) * 32) * PanelElemBytes(wtype);
}

static constexpr int PanelDwords(DType wtype) {
  return wtype == DType::kQ4_0 ? 4 : 8;
}
// 32 blocks' bytes: 576 for Q4_0 (32 x 18), 1088 for Q8_0 (32 x 34).
static constexpr int PanelBlockBytes(DType wtype) {
  return 64 + 2 * PanelDwords(wtype) * 64;
}
static constexpr size_t PanelOffset(DType wtype, int64_t nb, int64_t p, int64_t k) {
  return static_cast<size_t>(p * nb + k) * PanelBlockBytes(wtype);
}

}  // namespace cpu_internal
}  // namespace pi
