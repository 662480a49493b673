// ShardServer: what a worker session serves for a shard of FFN neurons — any
// Shard (common/shard/shard.h: a cpu_worker's ColdShard, a gpu_worker's hot
// neurons on CUDA or in host memory), made from the coordinator's hello and
// answering its kFfn steps (step_message.h). The one FFN step handler behind
// every transport (shared memory, gRPC, the tests and the fuzzer): it
// validates a request in place against the shard's layout, runs the step on
// the shard with the sum written straight into the reply's payload, and
// writes the reply — or an error reply with the failure's code and a
// message naming the bad field. A bad message never crashes the worker or
// reads outside the message.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "common/base/status.h"
#include "common/model/llama_model.h"
#include "common/shard/shard.h"
#include "common/transport/step_message.h"
#include "common/transport/worker_shard.h"

namespace pi {

class ShardServer : public WorkerShard {
 public:
  // Makes the shard a hello names: `layout` (the owned ids per layer, the
  // largest batch) is checked against the model's sizes; the shard must
  // take batches of layout.max_batch rows.
  using MakeShard = std::function<Status(const LlamaModel& model, const ShardLayout& layout,
                                         int n_threads, std::unique_ptr<Shard>* out)>;
  // what: for the worker's log ("cold neurons"). whole_layers: every step
  // computes every owned neuron of its layer (n_ids -1; the gate decides) —
  // a gpu_worker's hot neurons, the in-process split's semantics.
  ShardServer(const char* what, bool whole_layers, MakeShard make)
      : what_(what), whole_layers_(whole_layers), make_(std::move(make)) {}

  Status InitFromHello(const uint8_t* hello, size_t size, const LlamaModel& model,
                       int n_threads) override;
  // The shard for a layout given directly (tests, the fuzzer).
  Status Init(const LlamaModel& model, ShardLayout layout, int n_threads);
  int64_t resident_bytes() const override { return shard_ ? shard_->resident_bytes() : 0; }
  const char* backend() const override { return shard_ ? shard_->backend() : "none"; }
  const char* what() const override { return what_; }
  size_t reply_capacity() const override { return StepReplyCapacity(layout_); }
  size_t Handle(const uint8_t* request, size_t size, uint8_t* reply, size_t capacity) override;

  const ShardLayout& layout() const { return layout_; }

 private:
  const char* what_;
  bool whole_layers_;
  MakeShard make_;
  ShardLayout layout_;
  std::unique_ptr<Shard> shard_;
  std::vector<float> gate_dots_;  // [max_batch][n_ff] a request's gate dots by neuron id
};

}  // namespace pi
