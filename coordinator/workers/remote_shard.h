// RemoteShard: the coordinator's handle on a worker process that holds a
// shard of FFN neurons — a cpu_worker's cold neurons, or a gpu_worker's hot
// ones — over any WorkerLink (worker_link.h: shared memory to a local
// process, gRPC to a remote one). It is a Shard (common/shard/shard.h), so
// the layer router drives it as it drives a shard in this process:
//
//   Start(step)   writes the kFfn step (x and each row's candidates) into
//                 the link's request and sends it; returns at once
//   Wait          the reply's partial sum, read in place (valid until the
//                 next Start), or the worker's loss: kLost (killed, its
//                 stream ended), kTimeout (stopped or wedged, past the step
//                 deadline), or its error reply's code
//   Recover       a new session with the same shard: a local process
//                 restarted at once; a remote worker reconnected in the
//                 background, so the decode loop never waits on a
//                 connection attempt (it computes the shard's neurons
//                 itself meanwhile, and a later Recover finds it back)
//
// Each step's round trip is recorded for pi-bench and /metrics.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/base/metrics.h"
#include "common/base/status.h"
#include "common/model/llama_model.h"
#include "common/shard/shard.h"
#include "coordinator/workers/worker_link.h"

namespace pi {

struct RemoteShardOptions {
  int max_batch = 1;  // the most rows a step carries
  // A step not answered within this is a lost worker (Wait fails): a
  // stopped (SIGSTOP) or wedged worker is noticed here; a dead one sooner.
  int step_timeout_ms = 1000;
};

class RemoteShard : public Shard {
 public:
  RemoteShard(std::unique_ptr<WorkerLink> link, const RemoteShardOptions& options);
  ~RemoteShard() override;  // waits for a reconnection under way; a local worker is killed
  RemoteShard(const RemoteShard&) = delete;
  RemoteShard& operator=(const RemoteShard&) = delete;

  // Opens the session: `model` is the coordinator's own mapping (its
  // fingerprint and sizes; it must outlive this); owned[l]: the sorted
  // neuron ids of layer l the worker takes; gate_thresholds (--sparse cats:
  // one per layer, or none) the level its neurons' activated gates must
  // pass; gate_dots (--sparse teal): every step sends its candidates' gate
  // dots (ShardStep::gate_dots, which each step must then carry). Fails with
  // the worker's reason (it could not start or be reached, a wrong token,
  // another model, ...).
  Status Open(const LlamaModel& model, const std::vector<std::vector<int32_t>>& owned,
              const std::vector<float>& gate_thresholds = {}, bool gate_dots = false);

  // Shard.
  const char* name() const override { return link_->name().c_str(); }
  const char* backend() const override { return backend_.c_str(); }
  const std::vector<std::vector<int32_t>>& owned() const override { return owned_; }
  int max_batch() const override { return options_.max_batch; }
  bool takes_gate_dots() const override { return gate_dots_; }
  int64_t resident_bytes() const override { return resident_bytes_; }
  void Start(const ShardStep& step) override;
  Status Wait(const float** y, int64_t* fired) override;
  Status Recover() override;

  // Ends the session (a local worker process exits; a remote one stays up
  // for the next coordinator).
  Status Stop(int timeout_ms = 5000);

  const char* transport() const { return link_->transport(); }
  pid_t pid() const { return link_->pid(); }  // a local worker's process
  int64_t neurons() const;
  // New sessions tried after losses (a process restarted, a reconnection started).
  int restarts() const { return restarts_; }
  void set_step_timeout_ms(int ms) { options_.step_timeout_ms = ms; }
  WorkerLink* link() { return link_.get(); }  // tests: malformed messages

  // Round trips (Start to Wait's return) of the steps since the last
  // ClearLatencies, in microseconds, and of each the part the worker did not
  // spend computing (the transport's cost); the first kMaxLatencies are kept
  // (no allocation on the step path).
  const std::vector<float>& latencies_us() const { return latencies_us_; }
  const std::vector<float>& overheads_us() const { return overheads_us_; }
  void ClearLatencies() {
    latencies_us_.clear();
    overheads_us_.clear();
  }
  // Every step's round trip, for /metrics (read from any thread).
  const Histogram& step_seconds() const { return step_seconds_; }

 private:
  static constexpr size_t kMaxLatencies = 1 << 16;
  // A session for the shard (the link's Open); what the worker loaded in
  // *resident_bytes and *backend.
  Status OpenSession(int64_t* resident_bytes, std::string* backend);
  // Recover for a link that reopens in the background.
  Status RecoverInBackground();
  void RecordStep(float round_trip_us, int64_t worker_ns);

  std::unique_ptr<WorkerLink> link_;
  RemoteShardOptions options_;
  const LlamaModel* model_ = nullptr;
  std::vector<std::vector<int32_t>> owned_;
  std::vector<float> gate_thresholds_;  // sent in every hello (a reconnection's too)
  bool gate_dots_ = false;              // so is this
  Status start_error_;                  // a step Start could not send: Wait's error
  std::string backend_;
  int64_t resident_bytes_ = 0;
  int n_embd_ = 0;
  uint64_t step_id_ = 0;
  int batch_ = 0;
  int64_t step_start_ns_ = 0;
  int restarts_ = 0;

  // A reconnection under way (RecoverInBackground): the thread owns the
  // link until it is done.
  std::thread reopen_;
  std::mutex reopen_mu_;
  bool reopen_done_ = false;
  Status reopen_status_;
  int64_t reopened_resident_bytes_ = 0;
  std::string reopened_backend_;

  std::vector<float> latencies_us_, overheads_us_;
  Histogram step_seconds_{Histogram::StepSeconds()};
};

}  // namespace pi
