#include "common/parallel_matmul.h"

#include "kernels/cpu/matmul.h"

namespace pi {

const void* PreparedInput::For(DType wtype) const {
  if (wtype == DType::kQ8_0 || wtype == DType::kQ4_0) return q8;
  return x;
}

PreparedInput PrepareInput(const float* x, int64_t cols, int64_t batch, uint8_t* q8_buf,
                           ThreadPool* pool) {
  PreparedInput in;
  in.x = x;
  in.q8 = q8_buf;
  in.cols = cols;
  in.batch = batch;
  const size_t row_bytes = PreparedActivationBytes(DType::kQ8_0, cols);
  if (batch == 1) {
    // One row is a few microseconds of work: not worth waking the pool.
    PrepareActivation(DType::kQ8_0, x, cols, q8_buf);
    return in;
  }
  pool->Run([&](int ith, int nth) {
    int64_t b0, b1;
    ThreadPool::Split(batch, ith, nth, 1, &b0, &b1);
    for (int64_t b = b0; b < b1; ++b) {
      PrepareActivation(DType::kQ8_0, x + b * cols, cols, q8_buf + b * row_bytes);
    }
  });
  return in;
}

void ParallelMatMul(ThreadPool* pool, const PreparedInput& in, const MatMulJob* jobs, int n_jobs) {
  pool->Run([&](int ith, int nth) {
    for (int j = 0; j < n_jobs; ++j) {
      const Tensor& w = *jobs[j].w;
      int64_t r0, r1;
      // Grain 16 keeps each thread's range on whole cache lines of output
      // and lets the kernels' multi-row tiles run full.
      ThreadPool::Split(w.rows, ith, nth, 16, &r0, &r1);
      if (r0 >= r1) continue;
      if (in.batch == 1) {
        MatVecRows(w.type, w.data, w.cols, in.For(w.type), jobs[j].y, r0, r1);
      } else {
        MatMulRows(w.type, w.data, w.cols, in.For(w.type), in.batch, jobs[j].y, jobs[j].ldy, r0,
                   r1);
      }
    }
  });
}

}  // namespace pi
