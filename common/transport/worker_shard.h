// WorkerShard: what a worker process serves — loaded from the coordinator's
// hello, then answering step messages (step_message.h) with replies. The
// sessions of every transport (shm_serve.h, grpc_serve.h) serve one. An FFN
// shard (step_shard.h: a cpu_worker's cold neurons, a gpu_worker's hot ones)
// answers kFfn steps through the one step handler; a gpu_worker's device
// (gpu_worker/device_shard.h: whole layers with their KV cache) the
// device's kinds (device_message.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

#include "common/base/status.h"
#include "common/model/llama_model.h"

namespace pi {

class WorkerShard {
 public:
  virtual ~WorkerShard() = default;

  // Takes what the coordinator's hello names (hello_message.h), refusing
  // another protocol version, another model or a shard this worker cannot
  // hold, with an error saying which. `model` must outlive the shard.
  virtual Status InitFromHello(const uint8_t* hello, size_t size, const LlamaModel& model,
                               int n_threads) = 0;
  virtual int64_t resident_bytes() const = 0;  // the shard's bytes (host or device)
  virtual const char* backend() const = 0;     // what computes it: "cpu", "host", "cuda"
  // What it holds, for the worker's log: "cold neurons", "hot neurons", ...
  virtual const char* what() const = 0;

  // The largest reply Handle writes (after a successful hello).
  virtual size_t reply_capacity() const = 0;
  // Answers one request message (`request`, 4-byte aligned, validated here
  // before anything is read from it) into `reply` (`capacity` >=
  // reply_capacity() bytes); returns the reply's size. A bad message gets
  // an error reply, never a crash or a read outside it.
  virtual size_t Handle(const uint8_t* request, size_t size, uint8_t* reply, size_t capacity) = 0;
};

// A fresh shard for each session (a ColdShard; a GpuWorkerShard: hot
// neurons, or whole layers for a device hello).
using WorkerShardFactory = std::function<std::unique_ptr<WorkerShard>()>;

}  // namespace pi
