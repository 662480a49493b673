// Weight-by-activation products: the bulk of every token's time and bytes.
//
// A weight matrix W is ggml-shaped [cols, rows]: `rows` rows of `cols`
// elements each, row r at W + r * RowBytes(type, cols). For a linear layer,
// a row is one output feature (for gate/up, one FFN neuron).
//
// Activations are first *prepared* for the weight type, as ggml does with its
// vec_dot_type: quantized weights (Q8_0, Q4_0) take the activation quantized to
// Q8_0 blocks and use integer dot products; float weights (F32, F16, BF16)
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

// Transposed product ("axpy", PowerInfer's ffn_down_t form):
// y[c] += sum_{r in [r0, r1)} a[r] * W[r, c] for all c in [0, cols).
// Rows with a[r] == 0 are skipped (exact: they contribute nothing). Weight
// rows are dequantized on the fly; `a` stays f32.
void AxpyRows(DType wtype, const void* w, int64_t cols, const float* a, float* y, int64_t r0,
              int64_t r1);

}  // namespace pi
