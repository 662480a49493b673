// The part of a worker's main() that serves its parent over shared memory
// (pi-cpu-worker and pi-gpu-worker started by pi-launch, pi-run, pi-bench):
// ignore the terminal's Ctrl-C (the parent stops its workers), die with the
// parent, attach the channel at `shm_fd`, load the model and serve `shard`.
#pragma once

#include <string>

#include "common/transport/shm_serve.h"
#include "common/transport/worker_shard.h"

namespace pi {

// Returns the exit status (0 after the parent's bye); errors are printed as
// "tool: message".
int ServeParentOverShm(const char* tool, const std::string& model_path, int shm_fd,
                       const ShmServeOptions& options, WorkerShard* shard);

}  // namespace pi
