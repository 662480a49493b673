// Weight panels: a Q4_0, Q8_0, Q4_K, Q5_K, Q6_K or float (F32, F16, BF16) matrix
// repacked once, at load, into the layout the matrix-matrix kernels read, so
// that decode steps, batched decode and prompts all run one kernel with no
// per-call packing.
//
// GemmRows (matmul.h) packs each 32-row panel of the weights on every call:
// cheap against a 512-token prompt, but at a batch of 8 (a continuous-batching
// step, a short prompt chunk) the pack costs several times the arithmetic.
// Repacked, the pack is paid once. A panel is 32 rows; for each block of 32
// weights along the row it holds the 32 rows' f16 scales, then the weights
// as dwords transposed so that one 64-byte vector holds the same 4 bytes of 16
// rows (Q4_0 keeps its nibbles: the same bytes as the file, in another
// order); the K formats hold per 256-weight super-block the 32 rows' scales,
// then their weight bytes transposed alike (Q4_K's and Q5_K's packed 6-bit
// scales and mins unpacked to bytes: 2.3-2.8 % more than the file; Q6_K:
// the file's size);
// float panels are [k][32 rows] in the weight's type
// (weight_panels_layout.h). Panel pieces follow each other along the row,
// panels follow each other down the matrix: a matrix-vector product reads
// one linear stream.
//
// Every (row, column) is summed the same way whatever the batch: per block
// (Q6_K: per 16 weights), the exact integer dot (offset folded in, as
// GemmRows does), then y = fma(dot, d_w * d_x, y) (Q4_K, Q5_K: d_w = d *
// scale, then their min term), blocks in order; floats y = fma(w, x, y) over k in
// order. So a column's result depends only on that column and row —
// batched decode gives each sequence the bits of its lone decode, and a
// prompt row the bits of the same token decoded — and equals GemmRows' for
// the same weights bit for bit, at every level.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/dtype.h"

namespace pi {

constexpr int kWeightPanelRows = 32;

// Whether a [cols, rows] matrix of `wtype` can be repacked: Q4_0, Q8_0
// (cols a multiple of 32), Q4_K, Q5_K, Q6_K (of 256), F32, F16 or BF16, rows a
// multiple of kWeightPanelRows. (Every level computes it: SIMD kernels, else
// the scalar reference, which is slow; WeightPanelsFast says whether
// repacking pays.)
bool CanRepackWeights(DType wtype, int64_t rows, int64_t cols);
// True when the active CPU level has a SIMD panel kernel for `wtype`:
// AVX-512 VNNI for all of them; AVX2 for the floats and Q4_0, and Q8_0 with
// AVX-VNNI (isa.h); not for the K formats.
bool WeightPanelsFast(DType wtype);
// Whether callers holding repacked matrices use them (default on); pi-bench
// and tests turn it off to run the file's layout side by side.
bool WeightPanelsEnabled();
void SetWeightPanelsEnabled(bool on);

// Bytes of the repacked matrix (the matrix's own bytes; Q4_K's and Q5_K's
// 2.3-2.8 % more).
size_t WeightPanelBytes(DType wtype, int64_t rows, int64_t cols);

// Repacks rows [r0, r1) (multiples of kWeightPanelRows) of the matrix at `w`
// into `panels` (WeightPanelBytes bytes for the whole matrix; 64-byte aligned);
// disjoint row ranges may be repacked concurrently.
void RepackWeights(DType wtype, const void* w, int64_t cols, int64_t r0, int64_t r1, void* panels);

// Y[b * ldy + r] = dot(W[r, :], X_b) for b in [0, batch), r in [r0, r1)
// (multiples of kWeightPanelRows), from the repacked matrix; X_b is prepared
// for `wtype` (matmul.h; f32 rows for floats) at x_prepared + b *
// PreparedActivationBytes(wtype, cols). Single-threaded; allocates nothing
// but, as GemmRows, the thread-local copy of a float batch whose rows are a
// multiple of 4 KiB apart (grown once, never for one column).
void WeightPanelRows(DType wtype, const void* panels, int64_t cols, const void* x_prepared,
                     int64_t batch, float* y, int64_t ldy, int64_t r0, int64_t r1);

// From this batch on, GemmRows over the file's layout is the faster of the
// two and gives the same bits (the K formats, whose panel kernels have no
// wide variant yet: callers keep the file's layout mapped); other types:
// never.
int64_t WeightPanelsMaxBatch(DType wtype);

}  // namespace pi
