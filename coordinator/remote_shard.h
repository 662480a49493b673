// RemoteShard: the coordinator's handle on a worker process — a Shard
// (common/shard/shard.h: a cpu_worker's cold neurons, or a gpu_worker's hot
// ones) that also says how it is reached, can be stopped and records its
// steps' round trips. ShmWorker (local, shared memory) and GrpcWorker
// (remote, gRPC) implement it; the engine sees only the Shard.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/base/status.h"
#include "common/shard/shard.h"
#include "coordinator/metrics.h"

namespace pi {

class RemoteShard : public Shard {
 public:
  virtual const char* transport() const = 0;  // "shm" | "grpc"
  // Ends the session (a local worker process exits; a remote one stays up
  // for the next coordinator).
  virtual Status Stop(int timeout_ms = 5000) = 0;

  int64_t neurons() const {
    int64_t n = 0;
    for (const auto& layer : owned()) n += static_cast<int64_t>(layer.size());
    return n;
  }

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

 protected:
  static constexpr size_t kMaxLatencies = 1 << 16;
  RemoteShard() {
    latencies_us_.reserve(kMaxLatencies);
    overheads_us_.reserve(kMaxLatencies);
  }
  void RecordStep(float round_trip_us, int64_t worker_ns) {
    step_seconds_.Observe(round_trip_us * 1e-6);
    if (latencies_us_.size() == kMaxLatencies) return;
    latencies_us_.push_back(round_trip_us);
    overheads_us_.push_back(round_trip_us - static_cast<float>(worker_ns) * 1e-3f);
  }

 private:
  std::vector<float> latencies_us_, overheads_us_;
  Histogram step_seconds_{Histogram::StepSeconds()};
};

}  // namespace pi
