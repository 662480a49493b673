// PackedMatrix: the layout the CUDA kernels read weights in. Float rows (F32,
// F16, BF16) stay as the file has them. Q8_0 and Q4_0 rows are repacked:
// ggml's blocks put a 2-byte scale before 32 (Q8_0) or 16 (Q4_0) bytes of
// quants, so a block's quants are only 2-byte aligned and a lane can read
// them 2 bytes at a time — far too few bytes in flight for HBM. Packed, the
// quants of all rows come first, every block on a 16-byte boundary, then
// all the f16 scales:
//
//   quants  [rows][cols / 32][32 or 16 bytes]   block b of row r at (r * nb + b) * qbytes
//   (zero padding to a 256-byte boundary)
//   scales  [rows][cols / 32] f16               the blocks' d, in the same order
//
// so a lane reads a whole Q4_0 block (or half a Q8_0 block) with one 16-byte
// load. The bytes (quants and scales) are the file's: dequantizing a packed
// row gives the same floats as DequantizeRow on the original.
//
// Plain C++ (no CUDA): packing runs on the host before the upload, and is
// tested on machines without a GPU.
#pragma once

#include <cstdint>

#include "kernels/dtype.h"

namespace pi {

// Whether the kernels read this type (F32, F16, BF16, Q8_0, Q4_0).
bool PackedTypeSupported(DType t);

// Bytes of quants per 32-weight block (Q8_0: 32, Q4_0: 16); 0 for float types.
int PackedQuantBytes(DType t);

// Bytes of a packed matrix of `rows` x `cols` (cols a multiple of 32 for the
// quantized types), padding included; a multiple of 256.
int64_t PackedMatrixBytes(DType t, int64_t rows, int64_t cols);

// Byte offset of the scales inside a packed quantized matrix.
int64_t PackedScalesOffset(DType t, int64_t rows, int64_t cols);

// Writes rows ids[0..n) of the row-major matrix at `src` (rows of
// RowBytes(t, cols) bytes; ids null = rows 0..n-1 in order) as a packed
// n x cols matrix into `dst` (PackedMatrixBytes(t, n, cols) bytes, padding
// zeroed).
void PackRows(DType t, const uint8_t* src, int64_t cols, const int32_t* ids, int64_t n, void* dst);

// Row r of a packed matrix as floats (tests and checks).
void UnpackRow(DType t, const void* packed, int64_t rows, int64_t cols, int64_t r, float* out);

}  // namespace pi
