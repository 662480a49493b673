// The main() of a worker process (pi-cpu-worker, pi-gpu-worker): the flags
// they share and the two ways they serve a coordinator — a local child over
// a shared-memory channel (--shm-fd, started by pi-launch / pi-run), or a
// remote worker over gRPC (--listen HOST:PORT, with the shared token and
// optional TLS; by hand or systemd on another host).
#pragma once

#include <functional>
#include <string>

#include "cli/args.h"
#include "cli/worker_secrets.h"
#include "common/transport/shm_serve.h"
#include "common/transport/worker_shard.h"

namespace pi {

struct WorkerFlags {
  std::string model_path;
  int shm_fd = -1;
  ShmServeOptions shm;  // threads and parent
  std::string listen;
  WorkerSecretFiles secrets;
  std::string ffn_activation;  // --ffn-activation (cli/activation_flag.h)
};

// The usage lines of the shared flags.
extern const char kWorkerUsage[];

// Parses the shared flags; `own_flag` takes the tool's own (true when it
// consumed `flag`). Returns -1 to go on, else the exit status (0 after
// --help, which calls `usage`; 2 for a bad flag, saying which).
int ParseWorkerFlags(const char* tool, int argc, char** argv, const std::function<void()>& usage,
                     const std::function<bool(const std::string&, ArgReader*)>& own_flag,
                     WorkerFlags* flags);

// Serves over shared memory or gRPC as the flags say, a shard from
// `make_shard` per session; returns the exit status.
int RunWorker(const char* tool, const WorkerFlags& flags, const WorkerShardFactory& make_shard);

}  // namespace pi
