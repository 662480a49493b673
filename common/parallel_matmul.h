// Multi-threaded weight products over a ThreadPool: the rows of each matrix
// are split across threads. Several matrices that read the same input (Q, K
// and V; gate and up) run in one parallel region, so a decode step pays one
// wake-up per stage instead of one per matrix.
#pragma once

#include <cstdint>

#include "common/llama_model.h"
#include "common/thread_pool.h"

namespace pi {

// An input batch prepared for one weight type family (kernels/cpu/matmul.h):
// float weights read `x` directly, quantized weights read its Q8_0 copy.
struct PreparedInput {
  const float* x = nullptr;     // [batch, cols] f32
  const uint8_t* q8 = nullptr;  // [batch] prepared Q8_0 rows, or null if not prepared
  int64_t cols = 0;
  int64_t batch = 0;

  const void* For(DType wtype) const;
};

// True for the weight types that read the Q8_0 copy of an input (Q8_0, Q4_0
// and kquant.h's block formats).
bool ReadsQ8(DType wtype);

// Prepares `batch` rows of `x` ([batch, cols]) for the weights that will read
// it: the Q8_0 copy is made only when `make_q8` (some weight is quantized);
// `q8_buf` must hold batch * PreparedActivationBytes(kQ8_0, cols) bytes.
PreparedInput PrepareInput(const float* x, int64_t cols, int64_t batch, uint8_t* q8_buf,
                           ThreadPool* pool, bool make_q8);

struct MatMulJob {
  const Tensor* w;
  float* y;  // [batch, w->rows], row stride ldy
  int64_t ldy;
};

// Runs up to 4 jobs that share `in`; threads take row blocks of every job.
void ParallelMatMul(ThreadPool* pool, const PreparedInput& in, const MatMulJob* jobs, int n_jobs);

}  // namespace pi
