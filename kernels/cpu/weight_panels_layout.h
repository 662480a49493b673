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
// (p nb + k) PanelBlockBytes.
//
// Q4_K: panel p, super-block s (weights 256s .. 256s + 255 of each row):
//   bytes [0, 64):    the 32 rows' d (f16), row i at 2i;
//   bytes [64, 128):  their dmin (f16);
//   byte 128 + 32j + i: sub-block j's 6-bit scale of row i, unpacked;
//   byte 384 + 32j + i: its 6-bit min;
//   then 4 x 2 x 8 vectors of 64 bytes, vector (q, h, c) at
//     640 + ((2q + h) 8 + c) 64: bytes 4c .. 4c + 3 of the super-block's
//     qs[32q ..] (low nibbles: sub-block 2q; high: 2q + 1) of rows 16h + i
//     at 4i.
// 4736 bytes for the file's 4608 (32 x 144): the scales and mins unpacked.
// Q5_K: Q4_K's layout, then its fifth bits: vector (h, c) at
// 4736 + (8h + c) 64 holds bytes 4c .. 4c + 3 of qh (bit j: sub-block j)
// of rows 16h + i at 4i; 5760 bytes for the file's 5632.
//
// Q6_K: panel p, super-block s:
//   bytes [0, 64):   the 32 rows' d (f16), row i at 2i;
//   byte 64 + 32t + i: sub-block t's (16 weights) int8 scale of row i;
//   then ql vectors (H, part, h, c) at 576 + (((2H + part) 2 + h) 8 + c) 64:
//     bytes 4c .. 4c + 3 of ql[64H + 32 part ..] of rows 16h + i at 4i;
//   then qh vectors (H, h, c) at 4672 + ((2H + h) 8 + c) 64: of qh[32H ..].
// Block j of half H (weights 128H + 32j ..) is ql part j % 2's low (j < 2)
// or high nibbles with qh's bits 2j, 2j + 1 on top. 6720 bytes: the file's.
// Super-blocks follow each other, then panels. Scalar constants only:
// included by the AVX-512 files too (matmul_impl.h says why that must stay
// static).
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

static constexpr int kKPanelScales = 128;  // Q4_K: the sub-blocks' scales
static constexpr int kKPanelMins = 384;    // and mins
static constexpr int kKPanelQs = 640;      // then the nibbles
static constexpr int kKPanelSuperBytes = kKPanelQs + 4 * 2 * 8 * 64;  // Q4_K
static constexpr int kQ5PanelSuperBytes = kKPanelSuperBytes + 2 * 8 * 64;
// Where Q5_K's fifth-bit vector (h, c) starts.
static constexpr int Q5PanelQh(int h, int c) {
  return kKPanelSuperBytes + (8 * h + c) * 64;
}
// Where vector (q, h, c) of a Q4_K super-block's nibbles starts.
static constexpr int KPanelVector(int q, int h, int c) {
  return kKPanelQs + ((2 * q + h) * 8 + c) * 64;
}

static constexpr int kQ6PanelScales = 64;
static constexpr int kQ6PanelQl = 576;
static constexpr int kQ6PanelQh = kQ6PanelQl + 2 * 2 * 2 * 8 * 64;
static constexpr int kQ6PanelSuperBytes = kQ6PanelQh + 2 * 2 * 8 * 64;
static constexpr int Q6PanelQl(int H, int part, int h, int c) {
  return kQ6PanelQl + (((2 * H + part) * 2 + h) * 8 + c) * 64;
}
static constexpr int Q6PanelQh(int H, int h, int c) {
  return kQ6PanelQh + ((2 * H + h) * 8 + c) * 64;
}

// A K format's (Q4_K, Q5_K, Q6_K) bytes per panel super-block, and where
// super-block s of panel p starts.
static constexpr int KPanelSuperBytes(DType wtype) {
  return wtype == DType::kQ4_K   ? kKPanelSuperBytes
         : wtype == DType::kQ5_K ? kQ5PanelSuperBytes
                                 : kQ6PanelSuperBytes;
}
static constexpr size_t KPanelOffset(DType wtype, int64_t nsb, int64_t p, int64_t s) {
  return static_cast<size_t>(p * nsb + s) * KPanelSuperBytes(wtype);
}

}  // namespace cpu_internal
}  // namespace pi
