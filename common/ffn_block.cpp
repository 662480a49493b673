#include "common/ffn_block.h"

#include <algorithm>
#include <cstring>

#include "common/parallel_matmul.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/ops.h"

namespace pi {

void FfnBlock::Init(const LlamaConfig& config, int max_batch) {
  c_ = config;
  const size_t b = static_cast<size_t>(max_batch);
  x_.assign(b * c_.n_embd, 0.0f);
  gate_.assign(b * c_.n_ff, 0.0f);
  up_.assign(b * c_.n_ff, 0.0f);
  out_.assign(b * c_.n_embd, 0.0f);
  partial_.assign(static_cast<size_t>(kDownChunks) * b * c_.n_embd, 0.0f);
  const int64_t widest = std::max(c_.n_embd, c_.n_ff);
  q8_.assign(b * PreparedActivationBytes(DType::kQ8_0, widest), 0);
}

void FfnBlock::Forward(const LlamaLayer& layer, int batch, float* h, ThreadPool* pool) {
  const int64_t d = c_.n_embd, ff = c_.n_ff;
  for (int b = 0; b < batch; ++b) {
    RmsNorm(h + b * d, reinterpret_cast<const float*>(layer.ffn_norm.data), d, c_.norm_eps,
            x_.data() + b * d);
  }
  PreparedInput in = PrepareInput(x_.data(), d, batch, q8_.data(), pool);
  const MatMulJob gate_up[2] = {{&layer.ffn_gate, gate_.data(), ff},
                                {&layer.ffn_up, up_.data(), ff}};
  ParallelMatMul(pool, in, gate_up, 2);

  const int64_t n = batch * ff;
  switch (c_.activation) {
    case FfnActivation::kSilu:
      GatedSilu(gate_.data(), up_.data(), n);
      break;
    case FfnActivation::kRelu:
      GatedRelu(gate_.data(), up_.data(), n);
      break;
    case FfnActivation::kDRelu:
      GatedDRelu(gate_.data(), up_.data(), n);
      break;
  }

  if (layer.ffn_down.present()) {
    PreparedInput act = PrepareInput(gate_.data(), ff, batch, q8_.data(), pool);
    const MatMulJob down[1] = {{&layer.ffn_down, out_.data(), d}};
    ParallelMatMul(pool, act, down, 1);
    for (int64_t i = 0; i < batch * d; ++i) h[i] += out_[i];
    return;
  }

  // ffn_down_t: neurons are split into kDownChunks fixed ranges, each summed
  // into its own partial vectors, then reduced over disjoint column ranges
  // of h in chunk order. The split does not depend on the thread count, so
  // results are bit-identical for any -t.
  const Tensor& wt = layer.ffn_down_t;
  const bool small = wt.nbytes() < ThreadPool::kMinParallelBytes;
  pool->ParallelFor(
      kDownChunks,
      [&](int64_t k, int) {
        int64_t r0, r1;
        ThreadPool::Split(ff, k, kDownChunks, 16, &r0, &r1);
        float* part = partial_.data() + k * batch * d;
        std::memset(part, 0, sizeof(float) * batch * d);
        for (int b = 0; b < batch && r0 < r1; ++b) {
          AxpyRows(wt.type, wt.data, d, gate_.data() + b * ff, part + b * d, r0, r1);
        }
      },
      small);
  const int64_t col_chunks = small ? 1 : 4;
  pool->ParallelFor(col_chunks, [&](int64_t chunk, int) {
    int64_t c0, c1;
    ThreadPool::Split(d, chunk, col_chunks, 16, &c0, &c1);
    for (int b = 0; b < batch; ++b) {
      for (int k = 0; k < kDownChunks; ++k) {
        const float* part = partial_.data() + (static_cast<int64_t>(k) * batch + b) * d;
        for (int64_t c = c0; c < c1; ++c) h[b * d + c] += part[c];
      }
    }
  });
}

}  // namespace pi
