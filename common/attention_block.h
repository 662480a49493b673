// AttentionBlock: the attention half of a llama layer for a batch of B
// consecutive tokens, h[b] += Wo · attn(RoPE(Wq x_b), RoPE(Wk x_b), Wv x_b)
// with x_b = rmsnorm(h[b]) and causal grouped-query attention over the KV
// cache. Buffers are sized once for (max_batch, n_ctx, n_threads); Forward
// allocates nothing.
#pragma once

#include <cstdint>
#include <vector>

#include "common/kv_cache.h"
#include "common/llama_model.h"
#include "common/thread_pool.h"

namespace pi {

class AttentionBlock {
 public:
  void Init(const LlamaConfig& config, int max_batch, int n_ctx, int n_threads);

  // h: [batch, n_embd], updated in place. Tokens sit at positions
  // n_past .. n_past + batch - 1; their K/V are written into `cache`.
  void Forward(const LlamaLayer& layer, int layer_index, int n_past, int batch, float* h,
               KvCache* cache, ThreadPool* pool);

 private:
  LlamaConfig c_;
  int n_ctx_ = 0;
  std::vector<float> x_;       // [max_batch, n_embd]  normed input
  std::vector<float> q_;       // [max_batch, q_dim]
  std::vector<float> k_;       // [max_batch, kv_dim]
  std::vector<float> v_;       // [max_batch, kv_dim]
  std::vector<float> attn_;    // [max_batch, q_dim]   heads' outputs
  std::vector<float> out_;     // [max_batch, n_embd]  Wo · attn
  std::vector<float> scores_;  // [n_threads, n_ctx]
  std::vector<uint8_t> q8_;    // prepared Q8_0 input, max(n_embd, q_dim) wide
};

}  // namespace pi
