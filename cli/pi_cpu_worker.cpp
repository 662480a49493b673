// pi-cpu-worker: owns a shard of cold FFN neurons and computes it for a
// coordinator; the shard itself arrives in the coordinator's hello. Locally
// pi-launch starts it with a shared-memory channel at a known fd; on another
// host it listens for a coordinator over gRPC (pi-launch --cpu-worker HOST:PORT).
//
//   pi-cpu-worker -m model.gguf --shm-fd 3 -t 2 --parent-pid 1234      (local)
//   pi-cpu-worker -m model.gguf --listen 0.0.0.0:50061 --auth-token-file /etc/pi/token
#include <cstdio>
#include <memory>
#include <string>

#include "cli/tool_main.h"
#include "cli/worker_main.h"
#include "cpu_worker/cold_shard.h"

static int Run(int argc, char** argv) {
  pi::WorkerFlags w;
  const int flags_status = pi::ParseWorkerFlags(
      "pi-cpu-worker", argc, argv,
      [] {
        fprintf(stderr,
                "usage: pi-cpu-worker -m MODEL (--shm-fd N | --listen HOST:PORT "
                "--auth-token-file F)   (remote: pi-launch --cpu-worker HOST:PORT)\n%s",
                pi::kWorkerUsage);
      },
      [](const std::string&, pi::ArgReader*) { return false; }, &w);
  if (flags_status >= 0) return flags_status;
  return pi::RunWorker("pi-cpu-worker", w, pi::NewColdShardServer);
}

int main(int argc, char** argv) {
  return pi::RunTool("pi-cpu-worker", Run, argc, argv);
}
