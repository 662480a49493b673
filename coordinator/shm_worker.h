// ShmWorker: the coordinator's handle on a local cpu_worker process. Start
// spawns pi-cpu-worker with a fresh shared-memory channel at fd 3, sends the
// hello naming the shard, and waits for the worker's answer (what it holds,
// or why it refused). A step is asynchronous: StartStep writes the request
// in place and returns, so the coordinator computes meanwhile; WaitStep
// returns the partial sum in place in the reply slot (valid until the next
// StartStep). A worker that dies or stops answering is an error from
// WaitStep within its timeout, naming what happened.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "common/base/status.h"
#include "common/model/llama_model.h"
#include "common/transport/shm_channel.h"
#include "coordinator/remote_shard.h"
#include "coordinator/worker_process.h"

namespace pi {

// The process's options (binary, role, model, threads, start timeout), and
// the step's.
struct ShmWorkerOptions : WorkerProcessOptions {
  int max_batch = 1;
  // A step not answered within this is a lost worker (Shard::Wait fails):
  // a stopped (SIGSTOP) or wedged worker is noticed here; a dead one within
  // the 100 ms the waits are cut into.
  int step_timeout_ms = 1000;
};

class ShmWorker : public RemoteShard {
 public:
  ShmWorker() = default;
  ~ShmWorker() override = default;  // a worker still running is killed
  ShmWorker(const ShmWorker&) = delete;
  ShmWorker& operator=(const ShmWorker&) = delete;

  // `model` is the coordinator's own mapping (for its fingerprint and sizes);
  // owned[l]: the sorted neuron ids of layer l the worker takes.
  Status Start(const ShmWorkerOptions& options, const LlamaModel& model,
               const std::vector<std::vector<int32_t>>& owned);

  // x: [batch, n_embd]; row b's candidates (sorted, within the worker's
  // shard of `layer`) are the row_n[b] ids after the earlier rows' in ids,
  // or with row_n null all of them. x and the ids are written into the
  // request slot (the one copy).
  void StartStep(int layer, int batch, const float* x, const int32_t* ids, const int32_t* row_n);
  // *y: [batch, n_embd] in the reply slot; *fired: neurons that fired.
  Status WaitStep(int timeout_ms, const float** y, int64_t* fired, int64_t* worker_ns = nullptr);

  // Shard: a step of batch rows with the step timeout of the options.
  const char* name() const override { return process_.name().c_str(); }
  const std::vector<std::vector<int32_t>>& owned() const override { return owned_; }
  int max_batch() const override { return options_.max_batch; }
  void Start(const ShardStep& step) override {
    StartStep(step.layer, step.batch, step.x, step.ids, step.row_n);
  }
  Status Wait(const float** y, int64_t* fired) override {
    return WaitStep(step_timeout_ms_, y, fired);
  }
  // A lost worker (dead, or stopped and past its deadline) is killed and a
  // new process started with a fresh channel and the same shard.
  Status Recover() override;
  int restarts() const { return restarts_; }

  // Sends bye and reaps the process (SIGKILL after `timeout_ms`).
  Status Stop(int timeout_ms = 5000) override;

  pid_t pid() const { return process_.pid(); }
  void set_step_timeout_ms(int ms) { step_timeout_ms_ = ms; }
  const char* transport() const override { return "shm"; }
  const char* backend() const override { return backend_.c_str(); }
  int64_t resident_bytes() const override { return resident_bytes_; }
  ShmChannel* channel() { return process_.channel(); }  // tests: malformed messages

 private:
  // Spawns the worker with a fresh channel and waits for its hello reply.
  Status Spawn();

  WorkerProcess process_;
  int n_embd_ = 0;
  uint64_t step_id_ = 0;
  int batch_ = 0;
  std::string backend_;
  int64_t resident_bytes_ = 0;
  std::vector<std::vector<int32_t>> owned_;
  ShmWorkerOptions options_;
  const LlamaModel* model_ = nullptr;
  int restarts_ = 0;
  std::chrono::steady_clock::time_point step_start_;
  int step_timeout_ms_ = 1000;
};

}  // namespace pi
