// HotShard: a gpu_worker's neurons — the hot ones of every layer, as the
// placement put them in VRAM — on its FfnBackend (CUDA, or host memory where
// there is no GPU; the hello's reply says which, never swapped silently).
// A step computes every hot neuron of the layer whose gate fires (requests
// carry n_ids = -1: ShardLayout::whole_layers), the in-process split's
// semantics, so the answer does not depend on where the hot neurons run.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common/ffn_backend.h"
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
  const char* backend() const override { return backend_ ? backend_->name() : "none"; }
  const char* what() const override { return "hot neurons"; }
  int64_t Run(const StepRequest& step, float* y) override;

 private:
  std::string kind_;
  ShardLayout layout_;
  std::unique_ptr<FfnBackend> backend_;
};

}  // namespace pi
