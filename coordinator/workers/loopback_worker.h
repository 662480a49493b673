// LoopbackWorker: a pi-cpu-worker --listen started as a child on 127.0.0.1
// with a fresh random token (handed over in a memfd, never on the command
// line), for measuring the gRPC transport on one machine (pi-bench
// --transport grpc). Start waits for the worker's "on 127.0.0.1:PORT" line;
// its later stderr is copied to ours. The destructor stops it (SIGTERM,
// then SIGKILL).
#pragma once

#include <sys/types.h>

#include <string>
#include <thread>

#include "common/base/status.h"

namespace pi {

class LoopbackWorker {
 public:
  LoopbackWorker() = default;
  ~LoopbackWorker();
  LoopbackWorker(const LoopbackWorker&) = delete;
  LoopbackWorker& operator=(const LoopbackWorker&) = delete;

  Status Start(const std::string& binary, const std::string& model_path, int n_threads,
               int timeout_ms = 60000);
  const std::string& address() const { return address_; }  // 127.0.0.1:PORT
  const std::string& token() const { return token_; }

 private:
  pid_t pid_ = -1;
  int stderr_fd_ = -1;
  std::string address_, token_;
  std::thread drain_;  // copies the worker's stderr to ours
};

}  // namespace pi
