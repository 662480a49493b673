// Internal to the CPU matmul kernels: the prepared-activation layout and the
// per-ISA entry points that matmul.cpp dispatches to.
//
// The AVX2/AVX-512 files are compiled with their own -m flags, so this header
// holds declarations and plain structs only: an inline function instantiated
// in such a file could be picked by the linker for the whole program and then
// execute AVX-512 instructions on a CPU without them.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/dtype.h"

namespace pi {
namespace cpu_internal {

// Layout of a prepared activation for quantized weights (every block format
// shares it, so one preparation serves all). All offsets are from the start.
//
//   [0, nb*34)      the activation as ggml block_q8_0 (reference quantizer);
//                   the scalar path reads only this part.
//   qs_off          int8 q values, contiguous, ng*128 bytes (zero padded):
//                   lets SIMD code load whole 64-byte vectors.
//   dx_off          float block scales (= the f16 d of each block), ng*4.
//   s4_off          int32, ng*32: minus the sum of each 4 consecutive q's.
//                   Integer dot products need unsigned x signed bytes
//                   (vpdpbusd, vpmaddubsw); weights are made unsigned with an
//                   offset (Q4_0 nibbles are q+8, Q8_0 bytes get +128), and
//                   offset * s4 cancels it exactly.
//   b16_off         int16, ng*8: the sum of each 16 consecutive q's, for the
//                   formats with a per-(sub-)block offset or min (Q4_1,
//                   Q5_0, Q5_1, Q4_K, Q5_K, Q6_K), whose dots are
//                   d*dx*sum(q_w*q_x) plus a multiple of dx*sum(q_x).
//
// nb = cols / 32 blocks, grouped 4 blocks (128 values) per SIMD step; ng =
// ceil(nb / 4). Every section starts on a 64-byte boundary.
struct QActLayout {
  int64_t nb;
  int64_t ng;
  size_t qs_off;
  size_t dx_off;
  size_t s4_off;
  size_t b16_off;
  size_t total;
};

QActLayout GetQActLayout(int64_t cols);

// The whole prepared activation of x (l.nb * 32 values) into `out`, bytes
// identical to the scalar path's, at the AVX2 level and above
// (prepare_avx2.cpp).
void PrepareQ8Avx2(const float* x, const QActLayout& l, uint8_t* out);

// What every ISA implements; matmul.h documents the semantics. row_bytes is
// RowBytes(wtype, cols); x_stride is PreparedActivationBytes(wtype, cols) (a
// float GEMM's may be a padded copy's: matmul.cpp, WithUnaliasedRows);
// `layout` is GetQActLayout(cols) (unused for float types).
struct MatMulArgs {
  DType wtype;
  const uint8_t* w;
  int64_t cols;
  size_t row_bytes;
  const uint8_t* x;
  size_t x_stride;
  QActLayout layout;
  int64_t batch;
  float* y;
  int64_t ldy;
  int64_t r0;
  int64_t r1;
  // nullptr: rows r0..r1-1. Otherwise (batch 1 only) row ids[k] for k in
  // [r0, r1), its result stored at y[ids[k]].
  const int32_t* ids;
};

struct AxpyArgs {
  DType wtype;
  const uint8_t* w;
  int64_t cols;
  size_t row_bytes;
  const float* a;
  float* y;
  int64_t r0;
  int64_t r1;
  // nullptr: row r with coefficient a[r] for r in [r0, r1). Otherwise row
  // ids[k] with coefficient a[k] for k in [r0, r1).
  const int32_t* ids;
};

// ---- the tiling driver, shared by the SIMD levels ---------------------------
// Each level (matmul_avx2.cpp, matmul_avx512.cpp) compiles its tiles with its
// own flags and describes them here; DriveTiles / DriveIdTiles (in
// matmul_drive.cpp, compiled without -m flags: they only call through these
// pointers) walk the rows.

// Tile that computes rows [r, r + rows) x batch columns [b0, b0 + B).
using TileFn = void (*)(const MatMulArgs&, int64_t r, int64_t b0);
constexpr int kMaxTileBatch = 4;

// Tiles for one weight type at one level: vec covers vec_rows rows of a
// batch-1 product; full[B-1] covers tile_rows rows and single[B-1] one row,
// with B <= max_batch batch columns.
struct TileSet {
  int vec_rows;
  TileFn vec;
  TileFn full[kMaxTileBatch];
  TileFn single[kMaxTileBatch];
  int tile_rows;
  int max_batch;
  // Batched products go over row panels of about this many bytes, so each
  // panel stays in L2 while every chunk of batch columns passes over it.
  int64_t panel_bytes;
  // Batch-1 rows of at most this many weights go tile_rows at a time (their
  // own loop is too short to hide a lone row's horizontal sum); 0: never.
  int64_t short_row_cols;
};

// Indexed (batch 1): tile that computes rows ids[k ..) of a.ids.
using IdTileFn = void (*)(const MatMulArgs&, int64_t k);

struct IdTileSet {
  int vec_rows;
  IdTileFn vec;
  IdTileFn single;
  IdTileFn short_rows;  // tile_rows ids at a time, for rows <= short_row_cols
  int tile_rows;
  int64_t short_row_cols;  // 0: never
};

void DriveTiles(const MatMulArgs& a, const TileSet& t);
void DriveIdTiles(const MatMulArgs& a, const IdTileSet& t);

// The transposed product's walk (every SIMD level): the rows with a != 0 go
// kAxpyRows at a time, so y is loaded and stored once per group while each
// y element still sees the rows' additions in order. The next group's rows
// are known one group ahead, so the kernel prefetches them at the column
// position it is at -- the rows of a sparse `a` are scattered, which no
// hardware prefetcher can follow.
constexpr int kAxpyRows = 8;
struct AxpyGroup {
  const uint8_t* w[kAxpyRows];
  float a[kAxpyRows];
  int n;
};
// Adds group g (fns[g.n - 1] handles g.n rows); `next` is the group after it
// (n = 0 at the end).
using AxpyFn = void (*)(const AxpyArgs&, const AxpyGroup& g, const AxpyGroup& next);
void DriveAxpy(const AxpyArgs& a, const AxpyFn (&fns)[kAxpyRows]);

void MatMulRowsRef(const MatMulArgs& args);
void AxpyRowsRef(const AxpyArgs& args);
void MatMulRowsAvx2(const MatMulArgs& args);
void AxpyRowsAvx2(const AxpyArgs& args);
void MatMulRowsAvx512(const MatMulArgs& args);
void AxpyRowsAvx512(const AxpyArgs& args);
// The block formats of kquant.h on AVX2 (matmul_blocks_avx2.cpp); the AVX-512
// level runs them too, with its own row dots where it has them (`avx512`).
// False when `wtype` has no SIMD kernel there.
bool HasBlockKernelsAvx2(DType wtype);
void MatMulRowsBlocksAvx2(const MatMulArgs& args, bool avx512);
// One batch column of a prepared activation as the block-format row dots
// read it (the Q8_0 layout, QActLayout).
struct BlockAct {
  const int8_t* qs;    // the values
  const float* dx;     // the scale of each 32
  const int16_t* b16;  // the sum of each 16 values
};
// One row's dots: (row, the row to prefetch, N activations, super-blocks or
// blocks in a row, N results), for N = 1 and N = kBlockBatchTile; both give
// each column the same bits.
using BlockDotsFn = void (*)(const uint8_t*, const uint8_t*, const BlockAct*, int64_t, float*);
struct BlockDotsFns {
  BlockDotsFn one;
  BlockDotsFn tile;
};
constexpr int kBlockBatchTile = 4;
// The AVX-512 VNNI level's row dots (matmul_blocks_avx512.cpp): Q4_K, Q5_K
// and Q6_K; null for the other types.
BlockDotsFns BlockDotsAvx512(DType wtype);
// Matrix-matrix products for prompt batches (gemm_avx512.cpp; matmul.h's
// GemmRows). False when `wtype` has no such kernel there.
bool HasGemmAvx512(DType wtype);
void GemmRowsAvx512(const MatMulArgs& args);
// Their block-format half (gemm_quant_avx512.cpp): Q8_0, Q4_0, Q4_K, Q5_K,
// Q6_K.
bool HasGemmQuantAvx512(DType wtype);
void GemmQuantAvx512(const MatMulArgs& args);
// The AVX2 level's (gemm_avx2.cpp): Q4_0, Q4_K, Q5_K, Q6_K, and Q8_0 under
// AVX-VNNI.
bool HasGemmAvx2(DType wtype);
void GemmRowsAvx2(const MatMulArgs& args);
void AxpyRowsBlocksAvx2(const AxpyArgs& args);
// A batch of f32 activation rows (`stride` bytes apart, `cols` each) as the
// float matrix-matrix kernels want it: rows a multiple of 4 KiB apart are
// copied (a thread-local buffer, grown once) to rows 64 bytes further apart;
// *out_stride says where the rows are.
const uint8_t* UnaliasedRows(const uint8_t* x, size_t stride, int64_t batch, int64_t cols,
                             size_t* out_stride);
// Products over repacked weights (weight_panels.h): the scalar reference and
// the AVX-512 kernels; x is a batch of prepared activations (block formats:
// GetQActLayout apart; floats: x_stride apart).
void WeightPanelRowsRef(DType wtype, const uint8_t* panels, int64_t cols, const uint8_t* x,
                        int64_t batch, float* y, int64_t ldy, int64_t r0, int64_t r1);
void WeightPanelRowsAvx512(DType wtype, const uint8_t* panels, int64_t cols, const uint8_t* x,
                           int64_t batch, float* y, int64_t ldy, int64_t r0, int64_t r1);
void KPanelRowsAvx512(DType wtype, const uint8_t* panels, int64_t cols, const uint8_t* x,
                      int64_t batch, float* y, int64_t ldy, int64_t r0, int64_t r1);  // Q4_K, Q6_K
void FloatPanelRowsAvx512(DType wtype, const uint8_t* panels, int64_t cols, const uint8_t* x,
                          int64_t x_stride, int64_t batch, float* y, int64_t ldy, int64_t r0,
                          int64_t r1);
// The AVX2 level's (weight_panels_avx2.cpp): false where it has no kernel
// for `wtype` (Q8_0 without AVX-VNNI).
bool HasWeightPanelsAvx2(DType wtype);
void WeightPanelRowsAvx2(DType wtype, const uint8_t* panels, int64_t cols, const uint8_t* x,
                         int64_t x_stride, int64_t batch, float* y, int64_t ldy, int64_t r0,
                         int64_t r1);

}  // namespace cpu_internal
}  // namespace pi
