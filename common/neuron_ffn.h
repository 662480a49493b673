// NeuronFfn: the FFN restricted to a set of neurons, computed neuron by
// neuron — the unit the hot/cold split works in. For neurons `ids` of a
// layer whose rows are gate [n, n_embd], up [n, n_embd] and down_t
// [n, n_embd] (PowerInfer's transposed down: row i = neuron i's outputs):
//
//   y += sum_{i in ids} act_i * down_t[i],   act_i = relu(gate_i·x) * up_i·x
//                                            (drelu: relu(up_i·x) too;
//                                            ungated relu: act_i = relu(up_i·x),
//                                            and `gate` is not read)
//
// Silent neurons (relu(gate) = 0) cost one gate row and nothing else: over
// all neurons this is the oracle form of sparsity (exact); over a predictor's
// ids, the predicted neurons that really fire. Every sparse FFN step runs
// through here: FfnBlock's oracle and predictor steps, the cold part of the
// hot/cold split, and HostFfnBackend's hot part. The gate products are cut
// as finely as the pool is wide (each lands in its own slot); the neurons
// that passed are cut into a fixed number of chunks, each summed into its
// own partial vector and reduced in order, so the result does not depend on
// the thread count. Allocation-free once Init has sized the scratch.
#pragma once

#include <cstdint>
#include <vector>

#include "common/llama_model.h"
#include "common/thread_pool.h"

namespace pi {

// The three row sets of a neuron subset, possibly gathered into compact
// matrices (then ids index the compact rows). Ids must be unique and below
// n_ff (the scratch is indexed by id).
struct NeuronRows {
  const Tensor* gate;    // rows = neurons, cols = n_embd (ungated: an absent tensor)
  const Tensor* up;      // rows = neurons, cols = n_embd
  const Tensor* down_t;  // rows = neurons, cols = n_embd
};

class NeuronFfn {
 public:
  void Init(const LlamaConfig& config);

  // y[0..n_embd) += the FFN partial of neurons ids[0..n) for the normed input
  // x (f32, n_embd), using `pool`. Returns the number of neurons that fired.
  // If `act` is given ([n_ff], by id), act[i] is set for every computed
  // neuron i that passed the gate (the caller zeroes the rest).
  int64_t Accumulate(const NeuronRows& rows, const int32_t* ids, int64_t n, const float* x,
                     float* y, ThreadPool* pool, float* act = nullptr);

 private:
  // Chunks of the up/down phase: enough for a 16-core host's threads; their
  // partial vectors are added at the end (kChunks x n_embd adds, cheap).
  static constexpr int kChunks = 16;
  LlamaConfig c_;
  std::vector<uint8_t> q8_;       // x prepared as Q8_0
  std::vector<float> gate_dots_;  // [n_ff] by row id
  std::vector<float> up_dots_;    // [n_ff] by row id
  std::vector<int32_t> active_;   // [n_ff] ids whose gate fired, in candidate order
  std::vector<float> act_;        // [n_ff] their activations
  std::vector<float> partial_;    // [kChunks][n_embd]
  std::vector<int64_t> fired_;    // [kChunks]
};

}  // namespace pi
