// DenseFfn: every neuron of a layer's FFN for a batch of rows already normed,
// h[b] += down(act(gate x_b, up x_b)), or for an ungated (falcon) layer
// h[b] += down(act(up x_b)). The down projection is either ffn_down (a
// product over output features) or PowerInfer's transposed ffn_down_t (an
// axpy over neurons, each fixed range of neurons into its own partial sum,
// then reduced over disjoint columns in range order — never two threads
// adding into one vector, and the same bits at any thread count). A batch
// reads each weight row once for all its rows: prompt batches run here.
// Forward allocates nothing.
#pragma once

#include <cstdint>
#include <vector>

#include "common/base/thread_pool.h"
#include "common/model/llama_model.h"

namespace pi {

class DenseFfn {
 public:
  void Init(const LlamaConfig& c, int max_batch);
  // h: [batch, n_embd] += the FFN of x ([batch, n_embd], normed), batch at
  // most max_batch. `run_length`: ParallelMatMul's (parallel_matmul.h) for
  // the rows, or null.
  void Forward(const LlamaLayer& layer, int batch, const float* x, float* h, ThreadPool* pool,
               const int32_t* run_length = nullptr);
  // The last Forward's activations, [batch, n_ff]: act(gate, up), or act(up).
  const float* activations() const { return gate_.data(); }
  // Whether Forward also keeps act(gate x) alone (an observer's OnGate; it
  // costs a pass over the gate dots), and the last Forward's, [batch, n_ff]
  // (null when not kept).
  void KeepGateActivations(bool on);
  const float* gate_activations() const { return keep_gate_ ? gate_act_.data() : nullptr; }

 private:
  // gate_act_[0..n) = act(gate_[0..n)).
  void KeepGate(int64_t n);
  // h[c] += sum of the kDownChunks partial vectors (first `batch` rows each).
  void ReduceDownPartials(int batch, float* h, bool small, ThreadPool* pool);

  LlamaConfig c_;
  int max_batch_ = 0;
  bool keep_gate_ = false;
  std::vector<float> gate_act_;  // [max_batch, n_ff] act(gate) when kept
  std::vector<float> gate_;      // [max_batch, n_ff]   gate, then act(gate, up) (ungated: act(up))
  std::vector<float> up_;        // [max_batch, n_ff]   (unused without a gate)
  std::vector<float> out_;       // [max_batch, n_embd]
  static constexpr int kDownChunks = 8;
  std::vector<float> partial_;  // [kDownChunks, max_batch, n_embd]  ffn_down_t partial sums
  std::vector<uint8_t> q8_;     // prepared Q8_0 input, max(n_embd, n_ff) wide
};

}  // namespace pi
