#include "common/compute/dense_ffn.h"

#include <algorithm>
#include <cstring>

#include "common/compute/gate_activation.h"
#include "common/compute/parallel_matmul.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/ops.h"

namespace pi {

void DenseFfn::Init(const LlamaConfig& c, int max_batch) {
  c_ = c;
  max_batch_ = max_batch;
  keep_gate_ = false;
  gate_act_.clear();
  const size_t b = static_cast<size_t>(max_batch);
  gate_.assign(b * c.n_ff, 0.0f);
  up_.assign(b * c.n_ff, 0.0f);
  out_.assign(b * c.n_embd, 0.0f);
  partial_.assign(static_cast<size_t>(kDownChunks) * b * c.n_embd, 0.0f);
  const int64_t widest = std::max(c.n_embd, c.n_ff);
  q8_.assign(b * PreparedActivationBytes(DType::kQ8_0, widest), 0);
}

void DenseFfn::Forward(const LlamaLayer& layer, int batch, const float* x, float* h,
                       ThreadPool* pool, const int32_t* run_length) {
  const int64_t d = c_.n_embd, ff = c_.n_ff;
  PreparedInput xin = PrepareInput(x, d, batch, q8_.data(), pool,
                                   ReadsQ8(layer.ffn_gate.type) || ReadsQ8(layer.ffn_up.type));
  xin.run_length = run_length;
  // Ungated (falcon): up goes straight into gate_, the activations' buffer.
  const bool gated = FfnIsGated(c_.activation);
  const MatMulJob gate_up[2] = {{gated ? &layer.ffn_gate : &layer.ffn_up, gate_.data(), ff},
                                {&layer.ffn_up, up_.data(), ff}};
  ParallelMatMul(pool, xin, gate_up, gated ? 2 : 1);

  const int64_t n = batch * ff;
  if (keep_gate_) KeepGate(n);
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
    case FfnActivation::kReluUp:
      Relu(gate_.data(), n);
      break;
    case FfnActivation::kGeluUp:
      Gelu(gate_.data(), n);
      break;
    case FfnActivation::kGelu:
      GatedGelu(gate_.data(), up_.data(), n);
      break;
  }

  if (layer.ffn_down.present()) {
    PreparedInput act =
        PrepareInput(gate_.data(), ff, batch, q8_.data(), pool, ReadsQ8(layer.ffn_down.type));
    act.run_length = run_length;
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

void DenseFfn::KeepGateActivations(bool on) {
  keep_gate_ = on;
  gate_act_.assign(on ? static_cast<size_t>(max_batch_) * c_.n_ff : 0, 0.0f);
}

void DenseFfn::KeepGate(int64_t n) {
  for (int64_t i = 0; i < n; ++i) gate_act_[i] = ActivatedGate(c_.activation, gate_[i]);
}

void DenseFfn::ReduceDownPartials(int batch, float* h, bool small, ThreadPool* pool) {
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

}  // namespace pi
