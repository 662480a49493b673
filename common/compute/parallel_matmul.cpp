#include "common/compute/parallel_matmul.h"

#include "kernels/cpu/kquant.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/weight_panels.h"

namespace pi {

const void* PreparedInput::For(DType wtype) const {
  return ReadsQ8(wtype) ? static_cast<const void*>(q8) : static_cast<const void*>(x);
}

bool ReadsQ8(DType wtype) {
  return wtype == DType::kQ8_0 || wtype == DType::kQ4_0 || IsBlockDequantDType(wtype);
}

PreparedInput PrepareInput(const float* x, int64_t cols, int64_t batch, uint8_t* q8_buf,
                           ThreadPool* pool, bool make_q8) {
  PreparedInput in;
  in.x = x;
  in.q8 = make_q8 ? q8_buf : nullptr;
  in.cols = cols;
  in.batch = batch;
  if (!make_q8) return in;
  const size_t row_bytes = PreparedActivationBytes(DType::kQ8_0, cols);
  // One row is a few microseconds of work: below 8 rows, not worth a wake-up.
  const int64_t chunks = batch >= 8 ? batch : 1;
  pool->ParallelFor(chunks, [&](int64_t chunk, int) {
    const int64_t b0 = chunks == 1 ? 0 : chunk, b1 = chunks == 1 ? batch : chunk + 1;
    for (int64_t b = b0; b < b1; ++b) {
      PrepareActivation(DType::kQ8_0, x + b * cols, cols, q8_buf + b * row_bytes);
    }
  });
  return in;
}

int32_t GemmMinRun(DType wtype) {
  return ReadsQ8(wtype) ? 16 : 64;
}

namespace {

bool UsePanels(const Tensor& w) {
  return w.panels != nullptr && WeightPanelsEnabled() && WeightPanelsFast(w.type);
}

// Rows [r0, r1) of one job for every batch row: runs of consecutive batch
// rows that take the same kernel go together.
void MatMulChunk(const PreparedInput& in, const MatMulJob& job, int64_t r0, int64_t r1) {
  const Tensor& w = *job.w;
  const uint8_t* x = static_cast<const uint8_t*>(in.For(w.type));
  if (UsePanels(w)) {
    // One kernel for every row, prompt or decode: a row's bits do not
    // depend on the batch (weight_panels.h); past WeightPanelsMaxBatch, the
    // file layout's GEMM, which gives the same bits.
    if (in.batch < WeightPanelsMaxBatch(w.type)) {
      WeightPanelRows(w.type, w.panels, w.cols, x, in.batch, job.y, job.ldy, r0, r1);
    } else {
      GemmRows(w.type, w.data, w.cols, x, in.batch, job.y, job.ldy, r0, r1);
    }
    return;
  }
  const size_t stride = PreparedActivationBytes(w.type, w.cols);
  const int32_t min_run = GemmMinRun(w.type);
  auto gemm_row = [&](int64_t b) { return in.run_length && in.run_length[b] >= min_run; };
  for (int64_t b0 = 0; b0 < in.batch;) {
    const bool gemm = gemm_row(b0);
    int64_t b1 = b0 + 1;
    while (b1 < in.batch && gemm_row(b1) == gemm) ++b1;
    const uint8_t* xb = x + b0 * stride;
    float* yb = job.y + b0 * job.ldy;
    if (gemm) {
      GemmRows(w.type, w.data, w.cols, xb, b1 - b0, yb, job.ldy, r0, r1);
    } else if (b1 - b0 == 1) {
      MatVecRows(w.type, w.data, w.cols, xb, yb, r0, r1);
    } else {
      MatMulRows(w.type, w.data, w.cols, xb, b1 - b0, yb, job.ldy, r0, r1);
    }
    b0 = b1;
  }
}

}  // namespace

void ParallelMatMul(ThreadPool* pool, const PreparedInput& in, const MatMulJob* jobs, int n_jobs) {
  // Chunks of whole 16-row groups (the kernels' multi-row tiles run full;
  // 32 for prompt rows, the matrix-matrix kernels' panels),
  // about 4 per thread per job so a slow thread's share can be picked up by
  // the others; small matrices stay in one chunk, since waking a thread
  // costs more than reading them.
  constexpr int kMaxJobs = 4;
  int64_t block_rows[kMaxJobs], first_chunk[kMaxJobs + 1];
  first_chunk[0] = 0;
  int64_t total_bytes = 0;
  for (int j = 0; j < n_jobs && j < kMaxJobs; ++j) {
    total_bytes += jobs[j].w->nbytes();
  }
  const bool small = total_bytes < ThreadPool::kMinParallelBytes;
  for (int j = 0; j < n_jobs && j < kMaxJobs; ++j) {
    const Tensor& w = *jobs[j].w;
    const int64_t bytes = w.nbytes() * in.batch;
    int64_t chunks =
        pool->size() == 1 || bytes < ThreadPool::kMinParallelBytes ? 1 : 4 * pool->size();
    int64_t rows = (w.rows + chunks - 1) / chunks;
    const int64_t group = in.run_length || UsePanels(w) ? 32 : 16;
    rows = (rows + group - 1) / group * group;
    block_rows[j] = rows;
    first_chunk[j + 1] = first_chunk[j] + (w.rows + rows - 1) / rows;
  }
  pool->ParallelFor(
      first_chunk[n_jobs],
      [&](int64_t chunk, int) {
        int j = 0;
        while (chunk >= first_chunk[j + 1]) ++j;
        const Tensor& w = *jobs[j].w;
        const int64_t r0 = (chunk - first_chunk[j]) * block_rows[j];
        const int64_t r1 = r0 + block_rows[j] < w.rows ? r0 + block_rows[j] : w.rows;
        MatMulChunk(in, jobs[j], r0, r1);
      },
      small);
}

}  // namespace pi
