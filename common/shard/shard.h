// Shard: a share of the FFN's neurons computed somewhere other than the
// caller's own threads — the one contract behind every place neurons run:
//
//   in process   HostHotShard (gpu_worker/host_hot_shard.h: hot rows in host
//                memory, its own threads), ColdShard (cpu_worker/cold_shard.h:
//                a worker's cold neurons)
//   elsewhere    RemoteShard (coordinator/workers/remote_shard.h: a worker
//                process, local over shared memory or remote over gRPC): the
//                same steps as messages (common/transport/step_message.h)
//
// The layer router (coordinator/route/ffn_block.h) hands each shard the step's
// candidates it owns, computes what no live shard owns meanwhile, and adds
// the shards' sums in a fixed shard order, so results never depend on
// timing or on where a shard runs.
//
// A step is asynchronous: Start() returns at once; Wait() gives the partial
// sum, or an error when the shard failed — a worker gone or late, a CUDA
// fault. The router then computes those neurons itself, from its own
// mapping of the model, until Recover() brings the shard back (tried with
// backoff): time is lost, never the answer.
#pragma once

#include <cstdint>
#include <vector>

#include "common/base/status.h"
#include "common/model/llama_model.h"

namespace pi {

struct ShardStep {
  int layer = 0;
  int batch = 1;             // rows of x and of the sum, at most max_batch()
  const float* x = nullptr;  // [batch, n_embd] the normed FFN input
  // Row b's candidates (sorted, all owned by the shard): the row_n[b] ids
  // after the earlier rows' in ids. row_n null: every neuron the shard owns
  // in the layer, for every row (the gate decides which fire).
  const int32_t* ids = nullptr;
  const int32_t* row_n = nullptr;
  // Where a shard that computes the sum itself writes it ([batch, n_embd]);
  // null: its own memory. A proxy returns its reply's memory either way.
  float* out = nullptr;
  // --sparse teal: every neuron's gate dot for each row, [batch][n_ff] (the
  // host's column-sparse product over the thresholded input), read instead
  // of the shard's gate rows; null: the shard computes its own.
  const float* gate_dots = nullptr;
  // Without the gate thresholds (--sparse cats): a prompt's token on the
  // device path (HostDeviceBackend's hot neurons). The host sends worker
  // shards no such step: a prompt's cold part runs in its own process.
  bool dense = false;
};

class Shard {
 public:
  virtual ~Shard() = default;
  virtual const char* name() const = 0;     // "host hot neurons", "cpu worker 1234", ...
  virtual const char* backend() const = 0;  // what computes it: "cpu", "host", "cuda"
  // The neurons the shard owns, per model layer (sorted, unique).
  virtual const std::vector<std::vector<int32_t>>& owned() const = 0;
  // The most rows one step may carry.
  virtual int max_batch() const { return 1; }
  // Whether steps may carry ShardStep::gate_dots (--sparse teal).
  virtual bool takes_gate_dots() const { return false; }
  // Bytes of the shard's rows where it keeps them (host or device memory).
  virtual int64_t resident_bytes() const = 0;

  // x and ids are consumed before Start returns (copied into the step's
  // buffer or message, or held until Wait by a shard that computes them).
  // One step at a time.
  virtual void Start(const ShardStep& step) = 0;
  // *y: [batch, n_embd] the sum (step.out where it was given to a shard that
  // computes it), valid until the next Start; *fired: neurons that fired,
  // over the batch.
  virtual Status Wait(const float** y, int64_t* fired) = 0;
  // After a failed Wait: tries to bring the shard back (a restarted worker
  // process); OK when it is ready for steps again. Blocks while it tries.
  virtual Status Recover() { return Status::Error("%s cannot be recovered", name()); }
};

// Checks hot neuron sets against a model: its FFN can be cut by neuron
// (SupportsNeuronSplit, with `gate_thresholds` for --sparse cats), one set
// per layer, ids sorted, unique and < n_ff.
Status ValidateHotNeurons(const LlamaModel& model, const std::vector<std::vector<int32_t>>& hot_ids,
                          bool gate_thresholds = false);

}  // namespace pi
