// SplitFfn: a single-token FFN step computed in two parts at the same time,
// the placement's hot neurons on an FfnBackend (the GPU's share) and the cold
// rest on the CPU, then added:
//
//   x = ffn_norm(h);  backend.Start(x -> y_hot);  y_cold = NeuronFfn(cold, x);
//   backend.Wait();   h += y_hot + y_cold
//
// Both parts skip their silent neurons exactly (oracle sparsity), so the
// result equals the dense FFN up to float rounding. This is the interface the
// CUDA backend and the worker processes implement later.
#pragma once

#include <cstdint>
#include <vector>

#include "common/ffn_backend.h"
#include "common/llama_model.h"
#include "common/neuron_ffn.h"
#include "common/thread_pool.h"

namespace pi {

class SplitFfn {
 public:
  // hot_ids[l]: layer l's hot neurons (sorted, unique); the backend must
  // already hold them (FfnBackend::Load with the same sets).
  Status Init(const LlamaModel& model, const std::vector<std::vector<int32_t>>& hot_ids,
              FfnBackend* backend);

  // h: [n_embd], updated in place.
  void Forward(int layer, float* h, ThreadPool* pool);

  int64_t last_hot_fired() const { return hot_fired_; }
  int64_t last_cold_fired() const { return cold_fired_; }

 private:
  const LlamaModel* model_ = nullptr;
  FfnBackend* backend_ = nullptr;
  std::vector<std::vector<int32_t>> cold_ids_;  // per layer: the complement of the hot set
  NeuronFfn cpu_;
  std::vector<float> x_, y_hot_, y_cold_;  // [n_embd]
  int64_t hot_fired_ = 0, cold_fired_ = 0;
};

}  // namespace pi
