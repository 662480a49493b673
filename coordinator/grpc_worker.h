// GrpcWorker: the coordinator's handle on a remote cpu_worker (pi-cpu-worker
// --listen), reached over gRPC (proto/pi.proto's Worker service). Connect
// sends the Hello naming the shard, then opens the one long-lived Steps
// stream; each step is one frame each way carrying the same bytes as the
// shared-memory channel. A reader thread takes replies off the stream so
// Wait can bound its wait: a step not answered within the step timeout, a
// stream that ends (the worker killed, the host gone: keepalive pings every
// second notice a silent peer) or an error reply fails the step, and the
// engine computes the shard's neurons itself. Recover() reconnects in the
// background — a worker that comes back is used again at a later step,
// without the decode loop ever waiting on a connection attempt.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/base/status.h"
#include "common/model/llama_model.h"
#include "coordinator/grpc_session.h"
#include "coordinator/remote_shard.h"

namespace pi {

struct GrpcWorkerOptions : GrpcEndpoint {
  int max_batch = 1;
  int connect_timeout_ms = 10000;   // reaching the worker the first time (Connect)
  int reconnect_timeout_ms = 2000;  // reaching it while recovering (in the background)
  int hello_timeout_ms = 120000;    // its hello, once reached (it loads its shard first)
  int step_timeout_ms = 1000;       // a step's reply (Shard::Wait)
};

class GrpcWorker : public RemoteShard {
 public:
  GrpcWorker();
  ~GrpcWorker() override;
  GrpcWorker(const GrpcWorker&) = delete;
  GrpcWorker& operator=(const GrpcWorker&) = delete;

  // `model` is the coordinator's own mapping (its fingerprint and sizes);
  // owned[l]: the sorted neuron ids of layer l the worker takes. Fails with
  // the worker's reason (no such host, wrong token, another model, ...).
  Status Connect(const GrpcWorkerOptions& options, const LlamaModel& model,
                 const std::vector<std::vector<int32_t>>& owned);

  const char* name() const override { return name_.c_str(); }
  const std::vector<std::vector<int32_t>>& owned() const override { return owned_; }
  int max_batch() const override { return options_.max_batch; }
  void Start(const ShardStep& step) override;
  Status Wait(const float** y, int64_t* fired) override;
  Status Recover() override;
  const char* transport() const override { return "grpc"; }
  const char* backend() const override { return backend_.c_str(); }
  int64_t resident_bytes() const override { return resident_bytes_; }
  Status Stop(int timeout_ms = 5000) override;

  int reconnects() const { return reconnects_; }

 private:
  // Opens a session: Hello (within timeout_ms), then the Steps stream.
  Status Open(int timeout_ms, std::unique_ptr<GrpcSession>* out);

  GrpcWorkerOptions options_;
  const LlamaModel* model_ = nullptr;
  std::vector<std::vector<int32_t>> owned_;
  std::string name_, backend_;
  int64_t resident_bytes_ = 0;
  int n_embd_ = 0;

  std::unique_ptr<GrpcSession> session_;  // null while lost
  std::string reply_;                     // the step's reply, swapped out of the reader's slot
  uint64_t step_id_ = 0;
  int batch_ = 0;
  bool write_failed_ = false;
  int64_t step_start_ns_ = 0;

  // Background reconnection (Recover).
  std::thread reconnect_;
  std::mutex reconnect_mu_;
  bool reconnect_done_ = false;
  Status reconnect_status_;
  std::unique_ptr<GrpcSession> reconnected_;
  int reconnects_ = 0;
};

}  // namespace pi
