// AttentionBlock: the attention half of a llama layer for a batch of B
// consecutive tokens, h[b] += Wo · attn(RoPE(Wq x_b), RoPE(Wk x_b), Wv x_b)
// with x_b = norm(h[b]) (RMSNorm, or falcon's LayerNorm; RoPE normal or
// NeoX per LlamaConfig) and causal grouped-query attention over the KV
// cache (kv_cache.h: one [n_ctx, head_dim] matrix per KV head, so a head's
// scores are a matvec and its output an axpy, on the weight kernels).
// Buffers are sized once for (max_batch, n_ctx, n_threads); Forward
// allocates nothing.
#pragma once

#include <cstdint>
#include <vector>

#include "common/base/thread_pool.h"
#include "common/compute/column_sparse.h"
#include "common/compute/ffn_observer.h"
#include "common/model/kv_cache.h"
#include "common/model/llama_model.h"

namespace pi {

class AttentionBlock {
 public:
  // `k_type`: the cache's key row type (KvCache::k_type()).
  void Init(const LlamaConfig& config, int max_batch, int n_ctx, int n_threads,
            DType k_type = DType::kF32);

  // h: [batch, n_embd], updated in place. Tokens sit at positions
  // n_past .. n_past + batch - 1; their K/V are written into `cache`.
  // `run_length`: ParallelMatMul's (parallel_matmul.h) for the rows, or null.
  void Forward(const LlamaLayer& layer, int layer_index, int n_past, int batch, float* h,
               KvCache* cache, ThreadPool* pool, const int32_t* run_length = nullptr);
  // The same for rows of several sequences: row b sits at position pos[b]
  // of its own cache caches[b] (its K/V written there, its attention over
  // that cache's positions 0 .. pos[b]). The projections read each weight
  // row once for all rows; every row's result equals Forward's for it.
  void ForwardRows(const LlamaLayer& layer, int layer_index, const int* pos, KvCache* const* caches,
                   int batch, float* h, ThreadPool* pool, const int32_t* run_length = nullptr);

  // --sparse teal, per layer: the |x| an entry of the attention's normed
  // input (what q, k and v read) and of its heads' output (what o reads)
  // must exceed to be read, by column-sparse products over the layer's
  // transposed copies (wq_t ... wo_t), for decode rows (runs of one row);
  // empty: dense. Init first.
  void SetInputThresholds(std::vector<float> in, std::vector<float> out);
  // Until cleared, single rows run dense too: a prompt's tokens, which a
  // device path runs one at a time (as FfnBlock::SetDense).
  void SetDense(bool dense) { dense_rows_ = dense; }
  // Entries of thresholded inputs kept and seen since the last reset.
  int64_t inputs_kept() const { return columns_.entries_kept(); }
  int64_t inputs_seen() const { return columns_.entries_seen(); }
  void ResetInputCounts() { columns_.ResetCounts(); }
  // Sees the inputs of the projections (OnProjectionInput), or null.
  void set_observer(FfnObserver* o) { observer_ = o; }

 private:
  bool SparseRows(const LlamaLayer& layer, int layer_index, int batch,
                  const int32_t* run_length) const;
  // attn_ = each query head's softmax(K q) V over its sequence's cache for
  // the batch's rows (q_ rotated, the rows' K and V stored).
  void Attend(int layer_index, const int* pos, KvCache* const* caches, int batch, ThreadPool* pool,
              const int32_t* run_length);
  // out_ = Wo · attn_ for the batch's rows (column-sparse when `sparse`).
  void OutputProjection(const LlamaLayer& layer, int layer_index, int batch, bool sparse,
                        ThreadPool* pool, const int32_t* run_length);

  std::vector<float> in_thresholds_, out_thresholds_;  // [n_layer] or empty
  bool dense_rows_ = false;                            // SetDense
  ColumnSparseProduct columns_;
  FfnObserver* observer_ = nullptr;
  LlamaConfig c_;
  int n_ctx_ = 0;
  std::vector<float> x_;     // [max_batch, n_embd]  normed input
  std::vector<float> q_;     // [max_batch, q_dim]
  std::vector<float> k_;     // [max_batch, kv_dim]
  std::vector<float> v_;     // [max_batch, kv_dim]
  std::vector<float> attn_;  // [max_batch, q_dim]   heads' outputs
  std::vector<float> out_;   // [max_batch, n_embd]  Wo · attn
  DType k_type_ = DType::kF32;
  std::vector<float> rope_cs_;        // [max_batch, rope_dims] RopeAngles of positions rope_pos_
  std::vector<float> rope_cs_local_;  // the same for gemma3's sliding layers (else empty)
  std::vector<int> rope_pos_;         // the positions rope_cs_ holds (the same in every layer)
  std::vector<int> pos_;              // [max_batch] Forward's positions
  std::vector<KvCache*> caches_;      // [max_batch] Forward's cache, per row
  // Attention's work items: a block of consecutive rows of one run (one
  // sequence's cache) and one KV head's query heads [head0, head0 + heads);
  // their queries (at most queries_per_item_) share each key row's read.
  struct AttentionItem {
    int row = 0, rows = 0, head0 = 0, heads = 0;
  };
  std::vector<AttentionItem> items_;  // (reserved: max_batch * n_head)
  int queries_per_item_ = 1;
  std::vector<float> scores_;  // [n_threads, queries_per_item_, n_ctx]
  std::vector<uint8_t> q_k_;   // [n_threads, queries_per_item_] the queries as the keys read them
  std::vector<uint8_t> q8_;    // prepared Q8_0 input, max(n_embd, q_dim) wide
};

}  // namespace pi
