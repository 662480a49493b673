// DeviceWorker: the coordinator's handle on a gpu_worker process that holds
// whole layers — a DeviceBackend (common/device_backend.h) whose calls are
// messages over shared memory (common/transport/device_message.h), answered
// by the worker's DeviceShard (gpu_worker/device_shard.h). The engine drives
// it as it drives a GPU in its own process:
//
//   BeginToken         writes kBegin (pos, h) into the request slot
//   RunLayer(il)       a layer without a cold part: nothing (the worker runs
//                      on); with one: sends what is pending, returns x (and
//                      the mask) in place in the reply slot, and y in place
//                      in the next request's payload (kResume)
//   FinishToken        sends what is pending with the output asked for
//   Head               kHead (h) -> logits
//
// So a token costs one round trip per layer with a cold part, plus one. A
// worker that dies or misses its deadline (--worker-timeout) is an error
// from the call waiting on it, naming it; Recover() starts a fresh process
// with the same plan (an empty KV cache: the engine replays the context).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>

#include "common/device_backend.h"
#include "common/llama_model.h"
#include "common/status.h"
#include "common/transport/device_message.h"
#include "coordinator/worker_process.h"

namespace pi {

struct DeviceWorkerOptions {
  WorkerProcessOptions process;  // binary pi-gpu-worker, --ffn-backend cuda|host in extra_args
  int step_timeout_ms = 1000;    // a message not answered by then: the worker is lost
};

class DeviceWorker : public DeviceBackend {
 public:
  explicit DeviceWorker(DeviceWorkerOptions options) : options_(std::move(options)) {}

  // "gpu worker 1234".
  const char* name() const override { return process_.name().c_str(); }
  // Starts the worker and sends it the plan; the model is the coordinator's
  // own mapping (for its fingerprint and sizes) and must outlive this.
  Status Load(const LlamaModel& model, const DevicePlan& plan) override;
  const DevicePlan& plan() const override { return plan_; }

  void BeginToken(const float* h, int pos) override;
  Status RunLayer(int il, ColdStep* cold) override;
  Status FinishToken(float* h_out, float* logits, int64_t* hot_fired) override;
  Status Head(const float* h, float* logits) override;
  // Kills the worker if still there and starts a fresh one with the plan.
  Status Recover() override;

  int64_t resident_bytes() const override { return resident_bytes_; }
  int64_t device_bytes() const override { return resident_bytes_; }

  // The worker's backend ("cuda", "host"), its process and restarts.
  const std::string& backend() const { return backend_; }
  pid_t pid() const { return process_.pid(); }
  int restarts() const { return restarts_; }
  // Sends bye and reaps the process.
  Status Stop(int timeout_ms = 5000) { return process_.Stop(timeout_ms); }
  ShmChannel* channel() { return process_.channel(); }  // tests: malformed messages

 private:
  Status Spawn();
  // Sends the request in the slot (its output set to `out`) and checks the reply.
  Status Exchange(DeviceOut out, DeviceReply* reply);

  DeviceWorkerOptions options_;
  WorkerProcess process_;
  const LlamaModel* model_ = nullptr;
  DevicePlan plan_;
  DeviceLayout layout_;
  uint64_t step_id_ = 0;
  bool pending_ = false;  // the request slot holds a kBegin or kResume not yet sent
  std::string backend_;
  int64_t resident_bytes_ = 0;
  int restarts_ = 0;
};

}  // namespace pi
