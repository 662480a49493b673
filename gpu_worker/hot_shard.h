// HotShard: a gpu_worker's neurons — the hot ones of every layer, as the
// placement put them in VRAM — served on its hot Shard (CudaHotShard, or
// HostHotShard where there is no GPU; the hello's reply says which, never
// swapped silently).
// A step computes every hot neuron of the layer whose gate fires (requests
// carry n_ids = -1: ShardLayout::whole_layers), the in-process split's
// semantics, so the answer does not depend on where the hot neurons run.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common/shard/shard.h"
#include "common/transport/step_shard.h"

namespace pi {

class HotShard : public StepShard {
 public:
  // kind: --ffn-backend (auto | cuda | host; gpu_worker/ffn_backend_factory.h).
  explicit HotShard(std::string kind) : kind_(std::move(kind)) {}

  Status InitFromHello(const uint8_t* hello, size_t size, const LlamaModel& model,
                       int n_threads) override;
  const ShardLayout& layout() const override { return layout_; }
  int64_t resident_bytes() const override { return backend_ ? backend_->resident_bytes() : 0; }
  const char* backend() const override { return backend_ ? backend_->backend() : "none"; }
  const char* what() const override { return "hot neurons"; }
  Status Run(const StepRequest& step, float* y, int64_t* fired) override;

 private:
  std::string kind_;
  ShardLayout layout_;
  std::unique_ptr<Shard> backend_;
};

}  // namespace pi
