// FfnBlock: the dense FFN half of a llama layer for a batch of B tokens,
// h[b] += down(act(gate x_b, up x_b)) with x_b = rmsnorm(h[b]) and act one of
// the gated forms of FfnActivation. The down projection is either ffn_down
// (a product over output features) or PowerInfer's transposed ffn_down_t (an
// axpy over neurons, each fixed range of neurons into its own partial sum,
// then reduced — never two threads adding into one vector). Forward
// allocates nothing.
#pragma once

#include <cstdint>
#include <vector>

#include "common/llama_model.h"
#include "common/thread_pool.h"

namespace pi {

class FfnBlock {
 public:
  void Init(const LlamaConfig& config, int max_batch);

  // h: [batch, n_embd], updated in place.
  void Forward(const LlamaLayer& layer, int batch, float* h, ThreadPool* pool);

  // The activations of the last Forward: [batch, n_ff] (zero where a ReLU
  // form did not fire). Profiling reads these.
  const float* activations() const { return gate_.data(); }

 private:
  LlamaConfig c_;
  std::vector<float> x_;     // [max_batch, n_embd]
  std::vector<float> gate_;  // [max_batch, n_ff]   gate, then act(gate, up)
  std::vector<float> up_;    // [max_batch, n_ff]
  std::vector<float> out_;   // [max_batch, n_embd]
  static constexpr int kDownChunks = 8;
  std::vector<float> partial_;  // [kDownChunks, max_batch, n_embd]  ffn_down_t partial sums
  std::vector<uint8_t> q8_;     // prepared Q8_0 input, max(n_embd, n_ff) wide
};

}  // namespace pi
