#include "common/compute/column_sparse.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/cpu/matmul.h"

namespace pi {

void ColumnSparseProduct::Init(int64_t max_in, int64_t max_out) {
  ids_.assign(static_cast<size_t>(max_in), 0);
  vals_.assign(static_cast<size_t>(max_in), 0.0f);
  partial_.assign(static_cast<size_t>(kChunks * max_out), 0.0f);
  n_kept_ = 0;
}

int64_t ColumnSparseProduct::Keep(const float* x, int64_t n, float t) {
  int64_t m = 0;
  for (int64_t j = 0; j < n; ++j) {
    if (std::fabs(x[j]) > t) {
      ids_[m] = static_cast<int32_t>(j);
      vals_[m++] = x[j];
    }
  }
  n_kept_ = m;
  entries_kept_ += m;
  entries_seen_ += n;
  return m;
}

void ColumnSparseProduct::Run(const ColumnSparseJob* jobs, int n_jobs, ThreadPool* pool) {
  int64_t total = 0, bytes = 0;
  for (int i = 0; i < n_jobs; ++i) {
    total += jobs[i].wt->cols;
    bytes += n_kept_ * jobs[i].wt->row_bytes;
  }
  const bool small = bytes < ThreadPool::kMinParallelBytes;
  // Chunk k adds its share of the kept rows of every job into partial k:
  // whole rows read in order, and a fixed cut, so the sums below do not
  // depend on the thread count.
  pool->ParallelFor(
      kChunks,
      [&](int64_t k, int) {
        int64_t r0, r1;
        ThreadPool::Split(n_kept_, k, kChunks, 1, &r0, &r1);
        float* part = partial_.data() + k * total;
        std::memset(part, 0, sizeof(float) * total);
        if (r0 >= r1) return;
        for (int i = 0; i < n_jobs; ++i) {
          const Tensor& wt = *jobs[i].wt;
          AxpyRowsIndexed(wt.type, wt.data, wt.cols, ids_.data() + r0, vals_.data() + r0, r1 - r0,
                          part);
          part += wt.cols;
        }
      },
      small);
  // The partials added in chunk order, the outputs cut among the threads.
  const int64_t n_cuts = small ? 1 : std::min<int64_t>(pool->size(), (total + 1023) / 1024);
  pool->ParallelFor(
      n_cuts,
      [&](int64_t part, int) {
        int64_t c0, c1;
        ThreadPool::Split(total, part, n_cuts, 16, &c0, &c1);
        int64_t base = 0;
        for (int i = 0; i < n_jobs; ++i) {
          const int64_t cols = jobs[i].wt->cols;
          const int64_t lo = std::max(c0, base), hi = std::min(c1, base + cols);
          for (int64_t c = lo; c < hi; ++c) {
            float sum = partial_[c];
            for (int k = 1; k < kChunks; ++k) sum += partial_[k * total + c];
            jobs[i].y[c - base] = sum;
          }
          base += cols;
        }
      },
      small);
}

}  // namespace pi
