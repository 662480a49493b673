// ColdShard: the neurons a cpu_worker owns, computed for the coordinator one
// step at a time. A step names a layer, B rows of the normed FFN input and
// each row's candidate neurons (or all the shard owns there); the shard
// returns each row's partial FFN output of its candidates that fire,
//
//   y[b] = sum over candidates i with act_i(x_b) != 0 of act_i(x_b) * down_t[i],
//
// with the same kernels the engine runs in one process (NeuronFfn), so a
// shard's sum equals the in-process cold part bit for bit, at any thread
// count. The model is the worker's own mapping of the file.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "common/base/status.h"
#include "common/base/thread_pool.h"
#include "common/compute/neuron_ffn.h"
#include "common/model/llama_model.h"
#include "common/transport/step_message.h"
#include "common/transport/step_shard.h"

namespace pi {

class ColdShard : public StepShard {
 public:
  // `model` must outlive the shard and support sparse FFNs (ffn_down_t, a
  // ReLU-family activation); `layout` lists the neurons owned per layer.
  Status Init(const LlamaModel& model, ShardLayout layout, int n_threads);
  // Init from a coordinator's hello message (hello_message.h), refusing
  // another protocol version, another model or a shard that does not fit,
  // with an error saying which. Every transport's session opens with it.
  Status InitFromHello(const uint8_t* hello, size_t size, const LlamaModel& model,
                       int n_threads) override;

  const ShardLayout& layout() const override { return layout_; }
  const char* backend() const override { return "cpu"; }
  const char* what() const override { return "cold neurons"; }
  // Bytes of the model this shard reads: its neurons' gate, up and down_t rows.
  int64_t resident_bytes() const override { return resident_bytes_; }

  // y [step.batch, n_embd] = the step's partial sum (overwritten); *fired:
  // the neurons that fired, over the batch. Allocates nothing.
  Status Run(const StepRequest& step, float* y, int64_t* fired) override;

 private:
  const LlamaModel* model_ = nullptr;
  ShardLayout layout_;
  int64_t resident_bytes_ = 0;
  NeuronFfn neurons_;
  std::vector<const int32_t*> row_ids_;  // [max_batch] a step's rows' candidates
  std::vector<int64_t> row_n_, row_fired_;
  std::unique_ptr<ThreadPool> pool_;
};

}  // namespace pi
