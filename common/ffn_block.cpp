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
    case SparseMode::kPredictor:
      return "predictor";
  }
  return "?";
}

bool ParseSparseMode(const std::string& s, SparseMode* out) {
  if (s == "off") {
    *out = SparseMode::kOff;
  } else if (s == "oracle") {
    *out = SparseMode::kOracle;
  } else if (s == "predictor") {
    *out = SparseMode::kPredictor;
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

void FfnBlock::InitPredictor(const LlamaModel& model, float threshold) {
  predictor_.Init(c_.n_embd, c_.n_ff, MaxPredictorRank(model));
  predictor_.PrepareLayers(model);
  threshold_ = threshold;
}

bool FfnBlock::SparseStepApplies(const LlamaLayer& layer, int batch) const {
  if (mode_ == SparseMode::kOff || batch != 1 || !layer.ffn_down_t.present() ||
      c_.activation == FfnActivation::kSilu) {
    return false;
  }
  return mode_ == SparseMode::kOracle || (layer.fc1.present() && layer.fc2.present());
}

void FfnBlock::Forward(const LlamaLayer& layer, int batch, float* h, ThreadPool* pool) {
  if (SparseStepApplies(layer, batch)) {
    if (mode_ == SparseMode::kPredictor) {
      ForwardPredictor(layer, h, pool);
    } else {
      ForwardOracle(layer, h, pool);
    }
    return;
  }
  const int64_t d = c_.n_embd, ff = c_.n_ff;
  last_computed_ = batch * ff;
  for (int b = 0; b < batch; ++b) {
    RmsNorm(h + b * d, reinterpret_cast<const float*>(layer.ffn_norm.data), d, c_.norm_eps,
            x_.data() + b * d);
  }
  PreparedInput in = PrepareInput(x_.data(), d, batch, q8_.data(), pool,
                                  ReadsQ8(layer.ffn_gate.type) || ReadsQ8(layer.ffn_up.type));
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
    PreparedInput act =
        PrepareInput(gate_.data(), ff, batch, q8_.data(), pool, ReadsQ8(layer.ffn_down.type));
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
  PreparedInput in = PrepareInput(x_.data(), d, 1, q8_.data(), pool,
                                  ReadsQ8(layer.ffn_gate.type) || ReadsQ8(layer.ffn_up.type));

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

  last_computed_ = n;
  SparseActAndDown(layer, n, h, pool);
}

void FfnBlock::ForwardPredictor(const LlamaLayer& layer, float* h, ThreadPool* pool) {
  const int64_t d = c_.n_embd;
  // 1. The predicted rows, from h as it is (before the norm: PowerInfer's input).
  const int64_t n = predictor_.Predict(layer, h, threshold_, ids_.data(), pool);
  RmsNorm(h, reinterpret_cast<const float*>(layer.ffn_norm.data), d, c_.norm_eps, x_.data());
  PreparedInput in = PrepareInput(x_.data(), d, 1, q8_.data(), pool,
                                  ReadsQ8(layer.ffn_gate.type) || ReadsQ8(layer.ffn_up.type));

  // 2. gate and up for those rows only, in chunks of the id list.
  const Tensor& gate = layer.ffn_gate;
  const Tensor& up = layer.ffn_up;
  const bool small = n * (gate.row_bytes + up.row_bytes) < ThreadPool::kMinParallelBytes;
  const int64_t chunks = small ? 1 : 4 * pool->size();
  const void* x_gate = in.For(gate.type);
  const void* x_up = in.For(up.type);
  pool->ParallelFor(
      chunks,
      [&](int64_t chunk, int) {
        int64_t k0, k1;
        ThreadPool::Split(n, chunk, chunks, 8, &k0, &k1);
        if (k0 >= k1) return;
        MatVecRowsIndexed(gate.type, gate.data, gate.cols, x_gate, ids_.data() + k0, k1 - k0,
                          gate_.data());
        MatVecRowsIndexed(up.type, up.data, up.cols, x_up, ids_.data() + k0, k1 - k0, up_.data());
      },
      small);
  last_computed_ = n;
  SparseActAndDown(layer, n, h, pool);
}

void FfnBlock::SparseActAndDown(const LlamaLayer& layer, int64_t n, float* h, ThreadPool* pool) {
  const int64_t d = c_.n_embd, ff = c_.n_ff;
  // 3. The activations: zero everywhere but the computed neurons that fire
  // (what the observer and a dense step would see), and a compact copy for
  // the axpy. A predicted neuron may still not fire (gate <= 0).
  // O(n), not O(n_ff): compact the firing ones first (m <= k, so ids_ can
  // be overwritten in place), then clear gate_ and scatter them back.
  const bool relu = c_.activation == FfnActivation::kRelu;
  int64_t m = 0;
  for (int64_t k = 0; k < n; ++k) {
    const int32_t i = ids_[k];
    const float g = gate_[i], u = up_[i];
    if (g > 0.0f && (relu || u > 0.0f)) {
      const float a = g * u;
      if (a != 0.0f) {
        ids_[m] = i;
        act_[m++] = a;
      }
    }
  }
  std::memset(gate_.data(), 0, sizeof(float) * ff);
  for (int64_t k = 0; k < m; ++k) gate_[ids_[k]] = act_[k];

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
