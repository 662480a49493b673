// DeviceLink: how a DeviceWorker's messages (common/transport/device_message.h)
// reach its gpu_worker — a local process over shared memory (the request and
// reply slots of its channel), or a remote one over gRPC (frames on the
// Steps stream; grpc_device_link.h). One message in flight at a time.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "common/base/status.h"
#include "common/shard/device_backend.h"
#include "coordinator/worker_process.h"

namespace pi {

class DeviceLink {
 public:
  virtual ~DeviceLink() = default;
  virtual const std::string& name() const = 0;  // "gpu worker 1234", "gpu worker host:port"
  virtual const char* transport() const = 0;    // "shm" | "grpc"

  // Opens a session holding `plan` (a local process started, a remote one
  // said hello to), with room for requests of request_bytes and replies of
  // reply_bytes; *backend and *resident_bytes: what the worker loaded.
  virtual Status Open(uint64_t model_fingerprint, const DevicePlan& plan, size_t request_bytes,
                      size_t reply_bytes, int64_t* resident_bytes, std::string* backend) = 0;
  // Ends the session before another Open (a local process killed: stopped
  // or wedged, it would not come back by itself).
  virtual void Drop() = 0;

  // The request being written (request_bytes), valid until Exchange.
  virtual uint8_t* request() = 0;
  // Sends the first `n` bytes of request() and waits at most timeout_ms for
  // the reply (*reply valid until the next Exchange); `what` and `id` name
  // the message in the errors ("device step 12"). A worker gone or late is
  // an error naming it.
  virtual Status Exchange(size_t n, int timeout_ms, const char* what, uint64_t id,
                          const uint8_t** reply, size_t* reply_size) = 0;
  // Ends the session (a local process exits; a remote one waits for the next
  // coordinator).
  virtual Status Stop(int timeout_ms) = 0;
  virtual pid_t pid() const { return -1; }  // a local worker's process
};

// A local pi-gpu-worker started with these options.
std::unique_ptr<DeviceLink> NewShmDeviceLink(const WorkerProcessOptions& options);

}  // namespace pi
