#include "common/ffn_block.h"

#include <algorithm>
#include <cstring>

#include "common/parallel_matmul.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/ops.h"

namespace pi {

const char* SparseModeName(SparseMode m) {
  switch (m) {
    case SparseMode::kOff:
      return "off";
    case SparseMode::kOracle:
      return "oracle";
  }
  return "?";
}

bool ParseSparseMode(const std::string& s, SparseMode* out) {
  if (s == "off") {
    *out = SparseMode::kOff;
  } else if (s == "oracle") {
    *out = SparseMode::kOracle;
  } else {
    return false;
  }
  return true;
}

void FfnBlock::Init(const LlamaConfig& config, int max_batch, SparseMode mode) {
  c_ = config;
  mode_ = mode;
  ids_.assign(c_.n_ff, 0);
  act_.assign(c_.n_ff, 0.0f);
  const size_t b = static_cast<size_t>(max_batch);
  x_.assign(b * c_.n_embd, 0.0f);
  gate_.assign(b * c_.n_ff, 0.0f);
  up_.assign(b * c_.n_ff, 0.0f);
  out_.assign(b * c_.n_embd, 0.0f);
  partial_.assign(static_cast<size_t>(kDownChunks) * b * c_.n_embd, 0.0f);
  const int64_t widest = std::max(c_.n_embd, c_.n_ff);
  q8_.assign(b * PreparedActivationBytes(DType::kQ8_0, widest), 0);
}

bool FfnBlock::SparseStepApplies(const LlamaLayer& layer, int batch) const {
  return mode_ == SparseMode::kOracle && batch == 1 && layer.ffn_down_t.present() &&
         c_.activation != FfnActivation::kSilu;
}

void FfnBlock::Forward(const LlamaLayer& layer, int batch, float* h, ThreadPool* pool) {
  if (SparseStepApplies(layer, batch)) {
    ForwardOracle(layer, h, pool);
    return;
  }
  const int64_t d = c_.n_embd, ff = c_.n_ff;
  last_computed_ = batch * ff;
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
  ReduceDownPartials(batch, h, small, pool);
}

void FfnBlock::ReduceDownPartials(int batch, float* h, bool small, ThreadPool* pool) {
  const int64_t d = c_.n_embd;
  const int64_t col_chunks = small ? 1 : 4;
  pool->ParallelFor(
      col_chunks,
      [&](int64_t chunk, int) {
        int64_t c0, c1;
        ThreadPool::Split(d, chunk, col_chunks, 16, &c0, &c1);
        for (int b = 0; b < batch; ++b) {
          for (int k = 0; k < kDownChunks; ++k) {
            const float* part = partial_.data() + (static_cast<int64_t>(k) * batch + b) * d;
            for (int64_t c = c0; c < c1; ++c) h[b * d + c] += part[c];
          }
        }
      },
      small);
}

void FfnBlock::ForwardOracle(const LlamaLayer& layer, float* h, ThreadPool* pool) {
  const int64_t d = c_.n_embd, ff = c_.n_ff;
  RmsNorm(h, reinterpret_cast<const float*>(layer.ffn_norm.data), d, c_.norm_eps, x_.data());
  PreparedInput in = PrepareInput(x_.data(), d, 1, q8_.data(), pool);

  // 1. The gate, densely: it decides which neurons fire.
  const MatMulJob gate[1] = {{&layer.ffn_gate, gate_.data(), ff}};
  ParallelMatMul(pool, in, gate, 1);
  int64_t n = 0;
  for (int64_t i = 0; i < ff; ++i) {
    if (gate_[i] > 0.0f) ids_[n++] = static_cast<int32_t>(i);
  }

  // 2. up for the firing rows only, in chunks of the id list.
  const Tensor& up = layer.ffn_up;
  const bool up_small = n * up.row_bytes < ThreadPool::kMinParallelBytes;
  const int64_t up_chunks = up_small ? 1 : 4 * pool->size();
  const void* x_up = in.For(up.type);
  pool->ParallelFor(
      up_chunks,
      [&](int64_t chunk, int) {
        int64_t k0, k1;
        ThreadPool::Split(n, chunk, up_chunks, 8, &k0, &k1);
        if (k0 < k1)
          MatVecRowsIndexed(up.type, up.data, up.cols, x_up, ids_.data() + k0, k1 - k0, up_.data());
      },
      up_small);

  // 3. The activations: zero everywhere but the firing neurons (what the
  // observer and a dense step would see), and a compact copy for the axpy.
  int64_t m = 0;
  for (int64_t k = 0, i = 0; i < ff; ++i) {
    float a = 0.0f;
    if (k < n && ids_[k] == i) {
      ++k;
      const float u = up_[i];
      if (c_.activation == FfnActivation::kRelu || u > 0.0f) a = gate_[i] * u;
    }
    gate_[i] = a;
    if (a != 0.0f) {
      ids_[m] = static_cast<int32_t>(i);
      act_[m++] = a;
    }
  }
  last_computed_ = n;

  // 4. down over the active rows of ffn_down_t: kDownChunks fixed ranges of
  // the id list, each into its own partial vector, reduced in order.
  const Tensor& wt = layer.ffn_down_t;
  const bool small = m * wt.row_bytes < ThreadPool::kMinParallelBytes;
  pool->ParallelFor(
      kDownChunks,
      [&](int64_t k, int) {
        int64_t k0, k1;
        ThreadPool::Split(m, k, kDownChunks, 1, &k0, &k1);
        float* part = partial_.data() + k * d;
        std::memset(part, 0, sizeof(float) * d);
        if (k0 < k1)
          AxpyRowsIndexed(wt.type, wt.data, d, ids_.data() + k0, act_.data() + k0, k1 - k0, part);
      },
      small);
  ReduceDownPartials(1, h, small, pool);
}

}  // namespace pi
