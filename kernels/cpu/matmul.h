// Weight-by-activation products: the bulk of every token's time and bytes.
//
// A weight matrix W is ggml-shaped [cols, rows]: `rows` rows of `cols`
// elements each, row r at W + r * RowBytes(type, cols). For a linear layer,
// a row is one output feature (for gate/up, one FFN neuron).
//
// Activations are first *prepared* for the weight type, as ggml does with its
// vec_dot_type: quantized weights (Q8_0, Q4_0 and kquant.h's block formats)
// take the activation quantized to Q8_0 blocks and use integer dot products
// (a K-quant's 32-weight sub-blocks line up with those blocks, so each keeps
// its own activation scale); float weights (F32, F16, BF16)
// take it as f32. Prepare once per activation vector, reuse for every matrix
// of that type that reads the same input.
//
// Functions work on a row range [r0, r1) so a caller's thread pool can split
// the rows; they allocate nothing and are single-threaded.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/dtype.h"

namespace pi {

// Bytes needed to hold one prepared activation of `cols` elements for `wtype`.
size_t PreparedActivationBytes(DType wtype, int64_t cols);
// Writes x (cols f32) into `prepared` (PreparedActivationBytes bytes).
void PrepareActivation(DType wtype, const float* x, int64_t cols, void* prepared);

// y[r] = dot(W[r, :], x) for r in [r0, r1); y is indexed by absolute row.
void MatVecRows(DType wtype, const void* w, int64_t cols, const void* x_prepared, float* y,
                int64_t r0, int64_t r1);

// Batched: Y[b * ldy + r] = dot(W[r, :], X_b) for b in [0, batch), r in [r0, r1).
// X_b is at x_prepared + b * PreparedActivationBytes(wtype, cols). Each weight row
// is read once for the whole batch (the point of batching the prompt).
void MatMulRows(DType wtype, const void* w, int64_t cols, const void* x_prepared, int64_t batch,
                float* y, int64_t ldy, int64_t r0, int64_t r1);

// The same products for prompt batches, as a matrix-matrix product: weight
// rows are packed a panel at a time and reused across every batch column,
// with 32 rows x several columns in registers (kernels/cpu/gemm_avx512.cpp).
// Sums are ordered by k within each output, as no matrix-vector kernel
// orders them, so a column equals MatMulRows' within float rounding, not
// bit for bit; but a column's result depends only on that column and row
// (not on batch, its position in the batch or the row range), so a prompt
// row gives the same bits however the rows are batched. Where the CPU level
// or the weight type has no such kernel (below AVX-512; the block formats of
// kquant.h) this is MatMulRows.
void GemmRows(DType wtype, const void* w, int64_t cols, const void* x_prepared, int64_t batch,
              float* y, int64_t ldy, int64_t r0, int64_t r1);

// Transposed product ("axpy", PowerInfer's ffn_down_t form):
// y[c] += sum_{r in [r0, r1)} a[r] * W[r, c] for all c in [0, cols).
// Rows with a[r] == 0 are skipped (exact: they contribute nothing). Weight
// rows are dequantized on the fly; `a` stays f32.
void AxpyRows(DType wtype, const void* w, int64_t cols, const float* a, float* y, int64_t r0,
              int64_t r1);

// Indexed (activation-sparse) forms: only the rows named in an id list, e.g.
// the FFN neurons a predictor expects to fire. Ids must lie in [0, rows of W)
// (not checked: W's row count is not passed); they may come in any order and
// may repeat (callers usually pass them sorted, as a mask scan yields them).
// The next rows of the list are software-prefetched, since scattered rows
// defeat the hardware prefetchers. Like the dense forms, single-threaded
// and allocation-free: callers split the id list into sub-ranges per thread.

// y[rows[k]] = dot(W[rows[k], :], x) for k in [0, n); no other entry of y is
// written. A repeated id writes the same value again; across threads that is
// still a data race, so ids given to concurrent calls sharing y must differ.
void MatVecRowsIndexed(DType wtype, const void* w, int64_t cols, const void* x_prepared,
                       const int32_t* rows, int64_t n, float* y);

// y[c] += sum_{k in [0, n)} a[k] * W[rows[k], c] for all c in [0, cols).
// `a` is compact (a[k] goes with rows[k]); entries with a[k] == 0 are skipped
// and their rows not read. A repeated id is added once per occurrence.
void AxpyRowsIndexed(DType wtype, const void* w, int64_t cols, const int32_t* rows, const float* a,
                     int64_t n, float* y);

// The same over columns [c0, c1) of rows `row_cols` long: y[c - c0] += sum_k
// a[k] * W[rows[k], c] — one thread's share of the outputs of a
// column-sparse product. c0 and c1 are whole blocks of the type (c1 <=
// row_cols); each y element gets the additions AxpyRowsIndexed would make,
// in its order.
void AxpyRowsIndexedColumns(DType wtype, const void* w, int64_t row_cols, int64_t c0, int64_t c1,
                            const int32_t* rows, const float* a, int64_t n, float* y);

}  // namespace pi
