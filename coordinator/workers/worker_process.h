// WorkerProcess: a local worker process and the shared-memory channel to it
// (common/transport/shm_channel.h), behind the shared-memory WorkerLink
// (worker_link.h's NewShmLink). Spawn starts the binary with a fresh channel at fd 3,
// sends the hello and waits for the worker's answer; AwaitReply waits for
// the answer to a request in short slices, so a worker that died is named
// at once ("killed by signal 9") and a stopped one is a timeout.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "common/base/status.h"
#include "common/transport/shm_channel.h"

namespace pi {

struct WorkerProcessOptions {
  std::string binary;                   // pi-cpu-worker, pi-gpu-worker
  std::string role = "cpu worker";      // names it: "cpu worker 1234"
  std::vector<std::string> extra_args;  // after the common ones (e.g. --ffn-backend host)
  // "NAME=value" entries set in the worker's environment on top of this
  // process's (CUDA_VISIBLE_DEVICES=1: the GPU a gpu worker sees).
  std::vector<std::string> env;
  std::string model_path;
  int n_threads = 1;
  int start_timeout_ms = 60000;  // spawn, model load and hello
};

class WorkerProcess {
 public:
  WorkerProcess() = default;
  ~WorkerProcess();  // a worker still running is killed
  WorkerProcess(const WorkerProcess&) = delete;
  WorkerProcess& operator=(const WorkerProcess&) = delete;

  // Kills a process still held, creates a fresh channel with these slot
  // sizes, spawns the worker with it and sends `hello`; then waits for the
  // hello's reply: what the worker holds, or why it refused.
  Status Spawn(const WorkerProcessOptions& options, const std::vector<uint8_t>& hello,
               size_t request_capacity, size_t reply_capacity, int64_t* resident_bytes,
               std::string* backend);

  // Waits for the reply to the request just published, at most
  // `timeout_ms`, spinning `spin_us` first; *n = its size. The errors name
  // what was awaited: `what` and, when not 0, `id` ("step 12"); nothing is
  // formatted (or allocated) unless it fails.
  Status AwaitReply(int timeout_ms, int spin_us, const char* what, uint64_t id, size_t* n);

  // Kills and reaps the process (a stopped or wedged worker does not come back by itself).
  void Kill();
  // Sends bye and reaps the process (SIGKILL after `timeout_ms`).
  Status Stop(int timeout_ms);

  ShmChannel* channel() { return &channel_; }
  pid_t pid() const { return pid_; }
  const std::string& name() const { return name_; }

 private:
  // "exited with status 3" / "killed by signal 9", reaping it; "" while alive.
  std::string ExitReason();

  ShmChannel channel_;
  pid_t pid_ = -1;
  std::string role_ = "worker";
  std::string name_ = "worker";
};

}  // namespace pi
