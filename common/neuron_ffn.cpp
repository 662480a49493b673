#include "common/neuron_ffn.h"

#include <cstring>

#include "common/parallel_matmul.h"
#include "kernels/cpu/matmul.h"

namespace pi {

void NeuronFfn::Init(const LlamaConfig& config) {
  c_ = config;
  q8_.assign(PreparedActivationBytes(DType::kQ8_0, c_.n_embd), 0);
  // A chunk holds at most ceil(n_ff / kChunks) + a few ids (Split's grain
  // rounding), so n_ff per chunk is a safe bound.
  const size_t per_chunk = static_cast<size_t>(c_.n_ff);
  gate_dots_.assign(c_.n_ff, 0.0f);
  up_dots_.assign(c_.n_ff, 0.0f);
  active_.assign(kChunks * per_chunk, 0);
  act_.assign(kChunks * per_chunk, 0.0f);
  partial_.assign(static_cast<size_t>(kChunks) * c_.n_embd, 0.0f);
  fired_.assign(kChunks, 0);
}

int64_t NeuronFfn::Accumulate(const NeuronRows& rows, const int32_t* ids, int64_t n, const float* x,
                              float* y, ThreadPool* pool, float* act_out) {
  const int64_t d = c_.n_embd;
  // Quantized rows dot a Q8_0 copy of x; float rows read x itself.
  const PreparedInput in =
      PrepareInput(x, d, 1, q8_.data(), pool, ReadsQ8(rows.gate->type) || ReadsQ8(rows.up->type));
  // Worth a second thread at an eighth of the pool's usual threshold: rows
  // picked by id stream at about a third of a dense matrix's speed, so the
  // same wake-up is repaid by less data. (Demo model at -t 2, predictor
  // decode: +5 to +25 % over repeated runs, and no loss with the other
  // core busy.)
  const bool small =
      n * (rows.gate->row_bytes + rows.up->row_bytes) < ThreadPool::kMinParallelBytes / 8;
  const int64_t per_chunk = c_.n_ff;
  const bool drelu = c_.activation == FfnActivation::kDRelu;
  // Ungated (falcon's relu(up x)): the up rows play the gate's role, one dot
  // per candidate, and the activation is that dot itself.
  const bool gated = FfnIsGated(c_.activation);
  const Tensor* first = gated ? rows.gate : rows.up;
  pool->ParallelFor(
      kChunks,
      [&](int64_t k, int) {
        int64_t k0, k1;
        ThreadPool::Split(n, k, kChunks, 8, &k0, &k1);
        float* part = partial_.data() + k * d;
        std::memset(part, 0, sizeof(float) * d);
        fired_[k] = 0;
        if (k0 >= k1) return;
        // gate_dots_/up_dots_ are indexed by row id; chunks hold disjoint ids, so
        // no two threads write one entry.
        MatVecRowsIndexed(first->type, first->data, d, in.For(first->type), ids + k0, k1 - k0,
                          gate_dots_.data());
        int32_t* active = active_.data() + k * per_chunk;
        float* act = act_.data() + k * per_chunk;
        int64_t m = 0;
        for (int64_t j = k0; j < k1; ++j) {
          if (gate_dots_[ids[j]] > 0.0f) active[m++] = ids[j];
        }
        if (gated) {
          MatVecRowsIndexed(rows.up->type, rows.up->data, d, in.For(rows.up->type), active, m,
                            up_dots_.data());
        }
        int64_t fired = 0;
        for (int64_t j = 0; j < m; ++j) {
          const float g = gate_dots_[active[j]];
          const float u = gated ? up_dots_[active[j]] : 1.0f;
          act[j] = (drelu && u <= 0.0f) ? 0.0f : g * u;
          fired += act[j] != 0.0f;
          if (act_out) act_out[active[j]] = act[j];  // ids are disjoint across chunks
        }
        AxpyRowsIndexed(rows.down_t->type, rows.down_t->data, d, active, act, m, part);
        fired_[k] = fired;
      },
      small);
  int64_t fired = 0;
  for (int k = 0; k < kChunks; ++k) {
    fired += fired_[k];
    const float* part = partial_.data() + static_cast<int64_t>(k) * d;
    for (int64_t c = 0; c < d; ++c) y[c] += part[c];
  }
  return fired;
}

}  // namespace pi
