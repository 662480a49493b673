// FfnShard: a share of the FFN's neurons that lives elsewhere — today a
// cpu_worker process reached over shared memory (coordinator/shm_worker.h),
// later a remote one over gRPC. The layer sequencer hands each shard the
// step's candidates it owns and sums what comes back, in a fixed shard
// order, so results never depend on timing.
//
// A step is asynchronous: Start() returns at once (the coordinator computes
// its own part meanwhile); Wait() returns the shard's partial sum, or an
// error when the shard is gone or late — then the sequencer computes those
// neurons itself from its own mapping of the model until Recover() brings
// the shard back (tried with backoff): time is lost, never the answer.
#pragma once

#include <cstdint>
#include <vector>

#include "common/status.h"

namespace pi {

struct ShardStep {
  int layer = 0;
  int batch = 1;             // rows of x and y
  const float* x = nullptr;  // [batch, n_embd] the normed FFN input
  // Row b's candidates (sorted, all owned by the shard): the row_n[b] ids
  // after the earlier rows' in ids. row_n null: every neuron the shard owns
  // in the layer, for every row.
  const int32_t* ids = nullptr;
  const int32_t* row_n = nullptr;
};

class FfnShard {
 public:
  virtual ~FfnShard() = default;
  virtual const char* name() const = 0;
  // The neurons the shard owns, per layer (sorted, unique).
  virtual const std::vector<std::vector<int32_t>>& owned() const = 0;
  // The most rows one step may carry (the worker was told at its hello).
  virtual int max_batch() const { return 1; }
  // x and ids are consumed before Start returns (written to the transport).
  virtual void Start(const ShardStep& step) = 0;
  // *y: [batch, n_embd], valid until the next Start; *fired: neurons that fired.
  virtual Status Wait(const float** y, int64_t* fired) = 0;
  // After a failed Wait: tries to bring the shard back (a restarted worker
  // process); OK when it is ready for steps again. Blocks while it tries.
  virtual Status Recover() { return Status::Error("%s cannot be recovered", name()); }
};

}  // namespace pi
