// Multi-threaded weight products over a ThreadPool: the rows of each matrix
// are split across threads. Several matrices that read the same input (Q, K
// and V; gate and up) run in one parallel region, so a decode step pays one
// wake-up per stage instead of one per matrix.
#pragma once

#include <cstdint>

#include "common/base/thread_pool.h"
#include "common/model/llama_model.h"

namespace pi {

// An input batch prepared for one weight type family (kernels/cpu/matmul.h):
// float weights read `x` directly, quantized weights read its Q8_0 copy.
struct PreparedInput {
  const float* x = nullptr;     // [batch, cols] f32
  const uint8_t* q8 = nullptr;  // [batch] prepared Q8_0 rows, or null if not prepared
  int64_t cols = 0;
  int64_t batch = 0;
  // Prompt rows: run_length[b] is the length of the prompt run (one
  // sequence's rows evaluated together) that row b belongs to. Rows of long
  // enough runs take the matrix-matrix kernels (GemmRows; GemmMinRun says
  // how long), whose results equal the lone product within rounding and
  // depend only on the row and the run length, so a prompt chunk gives the
  // same bits however it is batched with others. Null: every row is
  // computed exactly as its lone product (MatMulRows).
  const int32_t* run_length = nullptr;

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

// The shortest prompt run whose rows take GemmRows for weights of `wtype`:
// below it, packing the weight panels costs more than the kernels save
// (bench-kernels' Batch rows; float weights need longer runs).
int32_t GemmMinRun(DType wtype);

struct MatMulJob {
  const Tensor* w;
  float* y;  // [batch, w->rows], row stride ldy
  int64_t ldy;
};

// Runs up to 4 jobs that share `in`; threads take row blocks of every job.
void ParallelMatMul(ThreadPool* pool, const PreparedInput& in, const MatMulJob* jobs, int n_jobs);

}  // namespace pi
