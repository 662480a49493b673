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
// ffn_activation: --ffn-activation, applied to the model once loaded (as the
// coordinator that started the worker runs it).
int ServeParentOverShm(const char* tool, const std::string& model_path,
                       const std::string& ffn_activation, int shm_fd,
                       const ShmServeOptions& options, WorkerShard* shard);

}  // namespace pi
