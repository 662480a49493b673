// FfnBlock: the dense FFN half of a llama layer for a batch of B tokens,
// h[b] += down(act(gate x_b, up x_b)) with x_b = rmsnorm(h[b]) and act one of
// the gated forms of FfnActivation. The down projection is either ffn_down
// (a product over output features) or PowerInfer's transposed ffn_down_t (an
// axpy over neurons, each fixed range of neurons into its own partial sum,
// then reduced — never two threads adding into one vector). Forward
// allocates nothing.
//
// With SparseMode::kOracle, a single-token step of a ReLU-family layer that
// has ffn_down_t computes the gate densely, collects the neurons that fire,
// and computes up and down for those rows only (sparse_mode.h). With
// SparseMode::kPredictor, the layer's predictor (predictor.h) picks the rows
// from the un-normed input h, and gate, up and down run on those rows only.
#pragma once

#include <cstdint>
#include <vector>

#include "common/llama_model.h"
#include "common/predictor.h"
#include "common/sparse_mode.h"
#include "common/thread_pool.h"

namespace pi {

class FfnBlock {
 public:
  void Init(const LlamaConfig& config, int max_batch, SparseMode mode = SparseMode::kOff);
  // For SparseMode::kPredictor: readies the predictor for `model`'s layers
  // (scratch, transposed small fc2s; see predictor.h) and sets the score
  // threshold (ResolvePredictorThreshold).
  void InitPredictor(const LlamaModel& model, float threshold);

  // h: [batch, n_embd], updated in place.
  void Forward(const LlamaLayer& layer, int batch, float* h, ThreadPool* pool);

  // The activations of the last Forward: [batch, n_ff] (zero where a ReLU
  // form did not fire). Profiling reads these.
  const float* activations() const { return gate_.data(); }

  // Neurons computed by the last Forward (sparse steps: the active ones).
  int64_t last_computed_neurons() const { return last_computed_; }

 private:
  bool SparseStepApplies(const LlamaLayer& layer, int batch) const;
  void ForwardOracle(const LlamaLayer& layer, float* h, ThreadPool* pool);
  void ForwardPredictor(const LlamaLayer& layer, float* h, ThreadPool* pool);
  // Steps 3-4 of a sparse step: from gate_/up_ at the n rows ids_[0, n),
  // the activations (zero elsewhere in gate_), then down over the rows that
  // fired, added into h.
  void SparseActAndDown(const LlamaLayer& layer, int64_t n, float* h, ThreadPool* pool);
  // h[c] += sum of the kDownChunks partial vectors (first `batch` rows each).
  void ReduceDownPartials(int batch, float* h, bool small, ThreadPool* pool);

  LlamaConfig c_;
  SparseMode mode_ = SparseMode::kOff;
  int64_t last_computed_ = 0;
  Predictor predictor_;
  float threshold_ = 0.0f;
  std::vector<int32_t> ids_;  // [n_ff] active neuron ids (sparse steps)
  std::vector<float> act_;    // [n_ff] their activations, compact
  std::vector<float> x_;      // [max_batch, n_embd]
  std::vector<float> gate_;   // [max_batch, n_ff]   gate, then act(gate, up)
  std::vector<float> up_;     // [max_batch, n_ff]
  std::vector<float> out_;    // [max_batch, n_embd]
  static constexpr int kDownChunks = 8;
  std::vector<float> partial_;  // [kDownChunks, max_batch, n_embd]  ffn_down_t partial sums
  std::vector<uint8_t> q8_;     // prepared Q8_0 input, max(n_embd, n_ff) wide
};

}  // namespace pi
