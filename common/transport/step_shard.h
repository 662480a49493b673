// StepShard: a worker's share of the FFN's neurons — what answers the
// coordinator's FFN steps (step_message.h) behind the one step handler
// (step_handler.h). A cpu_worker's ColdShard computes them with the CPU
// kernels; a gpu_worker's HotShard on its hot Shard (CUDA, or host memory
// where there is no GPU).
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/transport/step_message.h"
#include "common/transport/worker_shard.h"

namespace pi {

class StepShard : public WorkerShard {
 public:
  virtual const ShardLayout& layout() const = 0;

  // y [step.batch, n_embd] = the step's partial sum (overwritten), for a
  // request ParseStepRequest validated against layout(); *fired: the
  // neurons that fired, over the batch. An error (a CUDA fault) is the
  // step's error reply.
  virtual Status Run(const StepRequest& step, float* y, int64_t* fired) = 0;

  // WorkerShard: step messages through HandleStepMessage.
  size_t reply_capacity() const override;
  size_t Handle(const uint8_t* request, size_t size, uint8_t* reply, size_t capacity) override;
};

}  // namespace pi
