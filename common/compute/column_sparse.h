// TEAL's column-sparse product: y = W x where only x's entries with |x_j|
// above a threshold count, read as y = sum over kept j of x_j * Wt[j, :]
// from W's transposed copy (weight_transpose.h) — one row per kept input,
// so the bytes read fall with the share of inputs dropped.
//
// Several matrices sharing the input (q, k and v) go in one pass. The kept
// rows are cut into a fixed number of chunks, each summed whole-row by
// whole-row into a partial vector of its own (rows read start to end, as
// the prefetchers like), then the partials are added in chunk order with the
// outputs cut among the threads: every output gets the same additions in
// the same order whatever the thread count.
#pragma once

#include <cstdint>
#include <vector>

#include "common/base/thread_pool.h"
#include "common/model/llama_model.h"

namespace pi {

// y[0, wt->cols) = the product; wt: a transposed copy (rows = inputs).
struct ColumnSparseJob {
  const Tensor* wt;
  float* y;
};

class ColumnSparseProduct {
 public:
  // Inputs of up to max_in entries, jobs of up to max_out outputs in all.
  void Init(int64_t max_in, int64_t max_out);
  // Keeps x's entries with |x[j]| > t, in order; returns how many.
  int64_t Keep(const float* x, int64_t n, float t);
  int64_t kept() const { return n_kept_; }
  // Entries Keep kept and saw since the last ResetCounts (--sparse teal's
  // achieved share).
  int64_t entries_kept() const { return entries_kept_; }
  int64_t entries_seen() const { return entries_seen_; }
  void ResetCounts() { entries_kept_ = entries_seen_ = 0; }
  // The jobs' products over the kept entries (Keep first). Allocates nothing.
  void Run(const ColumnSparseJob* jobs, int n_jobs, ThreadPool* pool);

 private:
  static constexpr int kChunks = 8;
  std::vector<int32_t> ids_;
  std::vector<float> vals_;
  std::vector<float> partial_;  // [kChunks][the jobs' outputs]
  int64_t n_kept_ = 0;
  int64_t entries_kept_ = 0, entries_seen_ = 0;
};

}  // namespace pi
