// StepShard: what a worker process computes for the coordinator's steps —
// the neurons it owns, behind the one step handler and the sessions of every
// transport (step_handler.h, shm_serve.h, grpc_serve.h). A cpu_worker's
// ColdShard computes them with the CPU kernels; a gpu_worker's HotShard with
// its FfnBackend (CUDA, or host memory where there is no GPU).
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/llama_model.h"
#include "common/status.h"
#include "common/transport/step_message.h"

namespace pi {

class StepShard {
 public:
  virtual ~StepShard() = default;

  // Takes the shard a coordinator's hello names (hello_message.h), refusing
  // another protocol version, another model or a shard this worker cannot
  // hold, with an error saying which. `model` must outlive the shard.
  virtual Status InitFromHello(const uint8_t* hello, size_t size, const LlamaModel& model,
                               int n_threads) = 0;
  virtual const ShardLayout& layout() const = 0;
  virtual int64_t resident_bytes() const = 0;  // the shard's bytes (host or device)
  virtual const char* backend() const = 0;     // what computes it: "cpu", "host", "cuda"

  // y [step.batch, n_embd] = the step's partial sum (overwritten), for a
  // request ParseStepRequest validated against layout(); returns the
  // neurons that fired, over the batch.
  virtual int64_t Run(const StepRequest& step, float* y) = 0;
};

}  // namespace pi
