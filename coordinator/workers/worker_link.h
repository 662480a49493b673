// WorkerLink: how the coordinator's step messages (common/transport/
// step_message.h) reach one worker process and its replies come back — a
// local process over shared memory (NewShmLink), or a remote one over gRPC
// (NewGrpcLink, gRPC builds). The two handles on workers are written once,
// over any link: RemoteShard (a shard of FFN neurons: remote_shard.h) and
// DeviceWorker (whole layers: device_worker.h). One message in flight at a
// time.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/base/status.h"
#include "common/shard/device_backend.h"
#include "coordinator/workers/worker_process.h"

namespace pi {

// What a session asks the worker to hold (common/transport/hello_message.h).
struct WorkerHello {
  uint64_t model_fingerprint = 0;
  int max_batch = 1;
  // A shard's neurons per layer; with `device`, unused (the plan's hot ids).
  const std::vector<std::vector<int32_t>>* owned = nullptr;
  const DevicePlan* device = nullptr;  // set: whole layers (a device session)
  // A shard's gate thresholds per layer (--sparse cats), or null.
  const std::vector<float>* gate_thresholds = nullptr;
  // A shard's steps carry their candidates' gate dots (--sparse teal).
  bool gate_dots = false;
};

class WorkerLink {
 public:
  virtual ~WorkerLink() = default;
  virtual const std::string& name() const = 0;  // "cpu worker 1234", "gpu worker host:port"
  virtual const char* transport() const = 0;    // "shm" | "grpc"
  virtual pid_t pid() const { return -1; }      // a local worker's process
  // A remote link reconnects after a loss in the background (RemoteShard
  // never waits on a connection attempt); a local one restarts its process
  // at once.
  virtual bool reopens_in_background() const { return false; }

  // Opens a session holding `hello` — a local process started (a previous
  // one killed), a remote one said hello to — with room for requests of
  // request_bytes and replies of reply_bytes; *resident_bytes and *backend:
  // what the worker loaded. The error says why (unreachable, refused, ...).
  virtual Status Open(const WorkerHello& hello, size_t request_bytes, size_t reply_bytes,
                      int64_t* resident_bytes, std::string* backend) = 0;
  // Ends a lost session before another Open (a local process killed:
  // stopped or wedged, it would not come back by itself).
  virtual void Drop() = 0;

  // Where the next request of `bytes` (at most request_bytes) is written,
  // valid until Send.
  virtual uint8_t* request(size_t bytes) = 0;
  // Sends the request just written; a failure shows at Await.
  virtual void Send(size_t bytes) = 0;
  // Waits at most timeout_ms for the reply (*reply valid until the next
  // Send); `what` and `id` name the message in the errors ("step 12"). A
  // worker gone is kLost, one that did not answer kTimeout, both naming it.
  virtual Status Await(int timeout_ms, const char* what, uint64_t id, const uint8_t** reply,
                       size_t* reply_size) = 0;

  // Ends the session (a local process exits; a remote one waits for the
  // next coordinator).
  virtual Status Stop(int timeout_ms) = 0;
};

// A local worker process started with these options, over shared memory.
std::unique_ptr<WorkerLink> NewShmLink(const WorkerProcessOptions& options);

}  // namespace pi
