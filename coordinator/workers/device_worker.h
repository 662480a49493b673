// DeviceWorker: the coordinator's handle on a gpu_worker process that holds
// whole layers — a DeviceBackend (common/shard/device_backend.h) whose calls
// are step messages of the device's kinds (common/transport/device_message.h)
// over any WorkerLink (worker_link.h: shared memory to a local process, gRPC
// to a remote one), answered by the worker's DeviceShard
// (gpu_worker/device_shard.h). The engine drives it as it drives a GPU in
// its own process:
//
//   BeginToken         writes kBegin (pos, dense, h) into the link's request
//   RunLayer(il)       a layer without a cold part: nothing (the worker runs
//                      on); with one: sends what is pending, returns x (and
//                      the mask) in place in the reply, and y in place in
//                      the next request's payload (kResume)
//   FinishToken        sends what is pending with the output asked for
//   Head               kHead (h) -> logits
//   CopySeq ... DropSeq  kSeq* -> kDone
//   ReadKept, WriteKept  kSeqRead -> kDone (bytes), kSeqWrite -> kDone, a
//                      chunk at a time
//
// So a token costs one round trip per layer with a cold part, plus one. A
// worker that dies or misses its deadline (--worker-timeout) is an error
// from the call waiting on it, naming it; Recover() opens a new session (a
// fresh process, or a new hello to a remote one) with the same plan (an
// empty KV cache: the engine replays the context), and waits for it.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>

#include "common/base/metrics.h"
#include "common/base/status.h"
#include "common/model/llama_model.h"
#include "common/shard/device_backend.h"
#include "common/transport/device_message.h"
#include "coordinator/workers/worker_link.h"

namespace pi {

// A local pi-gpu-worker's process and deadline.
struct DeviceWorkerOptions {
  WorkerProcessOptions process;  // binary pi-gpu-worker, --ffn-backend cuda|host in extra_args
  int step_timeout_ms = 1000;    // a message not answered by then: the worker is lost
};

class DeviceWorker : public DeviceBackend {
 public:
  // A local pi-gpu-worker (over shared memory).
  explicit DeviceWorker(const DeviceWorkerOptions& options)
      : DeviceWorker(NewShmLink(options.process), options.step_timeout_ms) {}
  // A pi-gpu-worker over any link (grpc_link.h: a remote one); a message
  // not answered within step_timeout_ms: the worker is lost.
  DeviceWorker(std::unique_ptr<WorkerLink> link, int step_timeout_ms)
      : link_(std::move(link)), step_timeout_ms_(step_timeout_ms) {}

  // "gpu worker 1234", "gpu worker host:port".
  const char* name() const override { return link_->name().c_str(); }
  // Starts the worker and sends it the plan; the model is the coordinator's
  // own mapping (for its fingerprint and sizes) and must outlive this.
  Status Load(const LlamaModel& model, const DevicePlan& plan) override;
  const DevicePlan& plan() const override { return plan_; }

  void BeginToken(const float* h, int seq, int pos, bool dense) override;
  Status RunLayer(int il, ColdStep* cold) override;
  Status FinishToken(float* h_out, float* logits, int64_t* hot_fired) override;
  Status Head(const float* h, float* logits) override;
  // kSeq* messages: the worker keeps what is saved, in its own memory.
  Status CopySeq(int src, int dst, int n) override;
  Status SaveSeq(int seq, int n, uint64_t key) override;
  Status LoadSeq(uint64_t key, int seq, int n) override;
  Status DropSeq(uint64_t key) override;
  // kSeqRead / kSeqWrite messages, a chunk each (DeviceKeptReadChunk,
  // DeviceKeptWriteChunk: a 7B's f16 KV is ~0.5 MB a position).
  Status ReadKept(uint64_t key, int n, int64_t offset, int64_t size, uint8_t* out) override;
  Status WriteKept(uint64_t key, int n, int64_t offset, const uint8_t* data, int64_t size) override;
  // The worker's backend and the plan's layers.
  std::string KeptLayout() const override { return KeptLayoutName(backend_.c_str(), plan_); }
  // Kills the worker if still there and starts a fresh one with the plan.
  Status Recover() override;

  int64_t resident_bytes() const override { return resident_bytes_; }
  int64_t device_bytes() const override { return resident_bytes_; }

  // The worker's backend ("cuda", "host"), transport, process (local) and restarts.
  const std::string& backend() const { return backend_; }
  const char* transport() const { return link_->transport(); }
  pid_t pid() const { return link_->pid(); }
  int restarts() const { return restarts_; }
  // Every message's round trip, for /metrics (read from any thread).
  const Histogram& step_seconds() const { return step_seconds_; }
  // Ends the session (a local process exits); later calls of the kSeq*
  // kind (a prompt store let go after its worker) fail at once.
  Status Stop(int timeout_ms = 5000) {
    stopped_ = true;
    return link_->Stop(timeout_ms);
  }
  WorkerLink* link() { return link_.get(); }  // tests: malformed messages

 private:
  Status Open();
  // Sends the request in the link's slot (it is no longer pending) and
  // waits for its reply, timed in step_seconds_.
  Status RoundTrip(const uint8_t** reply, size_t* size);
  // Sends the request (its output set to `out`) and checks the reply.
  Status Exchange(DeviceOut out, DeviceReply* reply);
  // Sends a kSeq* request and waits for its kDone.
  Status SeqStep(StepKind kind, int seq, int n, int dst, uint64_t key);

  std::unique_ptr<WorkerLink> link_;
  int step_timeout_ms_ = 1000;
  const LlamaModel* model_ = nullptr;
  DevicePlan plan_;
  DeviceLayout layout_;
  uint64_t step_id_ = 0;
  bool pending_ = false;  // the request slot holds a kBegin or kResume not yet sent
  bool stopped_ = false;  // Stop() called
  std::string backend_;
  int64_t resident_bytes_ = 0;
  int restarts_ = 0;
  Histogram step_seconds_{Histogram::StepSeconds()};
};

}  // namespace pi
