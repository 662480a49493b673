// ColdShard: the neurons a cpu_worker owns, computed for the coordinator one
// step at a time — a Shard (common/shard/shard.h). A step names a layer, B
// rows of the normed FFN input and each row's candidate neurons (or all the
// shard owns there); the shard returns each row's partial FFN output of its
// candidates that fire,
//
//   y[b] = sum over candidates i with act_i(x_b) != 0 of act_i(x_b) * down_t[i],
//
// with the same kernels the engine runs in one process (NeuronFfn), so a
// shard's sum equals the in-process cold part bit for bit, at any thread
// count. The model is the worker's own mapping of the file. The worker
// serves it through a ShardServer (NewColdShardServer).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "common/base/status.h"
#include "common/base/thread_pool.h"
#include "common/compute/neuron_ffn.h"
#include "common/model/llama_model.h"
#include "common/shard/shard.h"
#include "common/transport/step_message.h"
#include "common/transport/worker_shard.h"

namespace pi {

class ColdShard : public Shard {
 public:
  // `model` must outlive the shard and support sparse FFNs (ffn_down_t, a
  // ReLU-family activation); `layout` lists the neurons owned per layer.
  Status Init(const LlamaModel& model, ShardLayout layout, int n_threads);

  const char* name() const override { return "cold neurons"; }
  const char* backend() const override { return "cpu"; }
  const std::vector<std::vector<int32_t>>& owned() const override { return layout_.owned; }
  int max_batch() const override { return layout_.max_batch; }
  bool takes_gate_dots() const override { return true; }
  // Bytes of the model this shard reads: its neurons' gate, up and down_t rows.
  int64_t resident_bytes() const override { return resident_bytes_; }
  const ShardLayout& layout() const { return layout_; }

  // Computes the step at once (on the shard's threads), into step.out or
  // its own buffer; allocates nothing. Wait returns it.
  void Start(const ShardStep& step) override;
  Status Wait(const float** y, int64_t* fired) override;

 private:
  const LlamaModel* model_ = nullptr;
  ShardLayout layout_;
  int64_t resident_bytes_ = 0;
  NeuronFfn neurons_;
  std::vector<const int32_t*> row_ids_;  // [max_batch] a step's rows' candidates
  std::vector<int64_t> row_n_, row_fired_;
  std::vector<float> y_;  // [max_batch, n_embd] where a step without `out` sums
  const float* sum_ = nullptr;
  int64_t fired_ = 0;
  std::unique_ptr<ThreadPool> pool_;
};

// What pi-cpu-worker serves each session: a ColdShard made from the hello.
std::unique_ptr<WorkerShard> NewColdShardServer();

}  // namespace pi
