// ShardRouter: a sparse FFN step's candidates split among the shards that
// own them (common/shard/shard.h: cold neurons in worker processes, here or
// on other hosts). Every live shard's share of all the step's rows goes out
// in one Start; the neurons no live shard owns come back to the caller to
// compute meanwhile; then each shard's sum is added in shard order — never
// in arrival order — so the result does not depend on timing. A shard whose
// Wait fails has its share computed here for that step and stays down (its
// neurons routed to the caller) until ShardHealth brings it back.
//
//   Split(ids) ─▶ local ids      ─▶ caller computes them into y
//              └▶ Start shard k  ─▶ Finish: y += Wait(k), k = 0, 1, ...
#pragma once

#include <cstdint>
#include <vector>

#include "common/base/status.h"
#include "common/base/thread_pool.h"
#include "common/compute/neuron_ffn.h"
#include "common/model/llama_model.h"
#include "common/shard/shard.h"
#include "coordinator/route/shard_health.h"

namespace pi {

class ShardRouter {
 public:
  // The shards must own disjoint neuron sets, none of them hot (is_hot[l][i]:
  // layer l's neuron i is on the hot shard; empty: none are), and outlive the
  // router; the model must support sparse FFNs. Steps carry at most
  // max_rows rows (and no more than any shard's max_batch: max_rows()).
  // gate_thresholds (--sparse cats: one per layer, or empty) are the levels
  // the shards were opened with, for a lost shard's neurons computed here.
  Status Init(const LlamaModel& model, const std::vector<Shard*>& shards,
              const std::vector<std::vector<uint8_t>>& is_hot, int max_rows, ShardEvents* events,
              const std::vector<float>& gate_thresholds = {});
  bool empty() const { return shards_.empty(); }
  int max_rows() const { return max_rows_; }

  // Tries to bring back lost shards whose time has come, splits row b's
  // candidates ids[b][0..n_ids[b]) (sorted) by owner, starts each live
  // shard's share of the n rows of x (normed, [n, n_embd]), and sets
  // *local / *local_n to what the caller computes (valid until the next
  // Start). gate_dots ([n, n_ff], --sparse teal; null: none): every neuron's
  // gate dot, sent with the shards' shares and read by Finish's fallback
  // (it must stay valid until then). Returns the candidates sent to shards.
  int64_t Start(int il, int n, const int32_t* const* ids, const int64_t* n_ids, const float* x,
                const float* gate_dots, const int32_t* const** local, const int64_t** local_n);
  // y ([n, n_embd]) += every started shard's sum, in shard order; a shard
  // that fails has its share computed here with `neurons`. Returns the
  // neurons that fired over the shards' shares.
  int64_t Finish(int il, int n, const float* x, float* y, NeuronFfn* neurons, ThreadPool* pool);

 private:
  const LlamaModel* model_ = nullptr;
  std::vector<float> gate_thresholds_;  // [n_layer] or empty
  const float* gate_dots_ = nullptr;    // the started step's (Start)
  int64_t n_ff_ = 0, n_embd_ = 0;
  int max_rows_ = 1;
  std::vector<Shard*> shards_;
  std::vector<std::vector<int16_t>> owner_;        // [n_layer][n_ff] the owning shard, -1 none
  std::vector<ShardHealth> health_;                // [shards]
  std::vector<std::vector<int32_t>> shard_ids_;    // [shards][max_rows * n_ff] rows' shares
  std::vector<std::vector<int32_t>> shard_row_n_;  // [shards][max_rows]
  std::vector<int64_t> shard_n_;                   // [shards] ids over the rows
  std::vector<int32_t> local_ids_;                 // [max_rows, n_ff] the caller's candidates
  std::vector<const int32_t*> local_rows_;
  std::vector<int64_t> local_n_;
  std::vector<const int32_t*> fallback_ids_;  // [max_rows] a lost shard's rows, run here
  std::vector<int64_t> fallback_n_, fired_rows_;
  ShardEvents* events_ = nullptr;
};

}  // namespace pi
