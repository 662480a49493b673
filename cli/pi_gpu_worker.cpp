// pi-gpu-worker: holds what the placement put in VRAM and computes it for
// the coordinator: whole layers (attention, KV cache, predictor, hot
// neurons, maybe the head) on its DeviceBackend — CUDA, or host memory where
// there is no GPU — or only the hot FFN neurons of every layer in host memory
// (HostHotShard), as the coordinator's hello asks (gpu_worker/gpu_worker_shard.h).
// The backend is reported in its hello reply, never swapped silently. pi-launch
// starts it with a shared-memory channel at a known fd; on another host it
// listens for a coordinator over gRPC (pi-launch --remote-gpu-worker HOST:PORT).
//
//   pi-gpu-worker -m model.gguf --shm-fd 3 --ffn-backend auto -t 1 --parent-pid 1234
//   pi-gpu-worker -m model.gguf --listen 0.0.0.0:50071 --auth-token-file /etc/pi/token
#include <cstdio>
#include <memory>
#include <string>

#include "cli/tool_main.h"
#include "cli/worker_main.h"
#include "gpu_worker/gpu_worker_shard.h"

static int Run(int argc, char** argv) {
  pi::WorkerFlags w;
  std::string backend = "auto";
  const int flags_status = pi::ParseWorkerFlags(
      "pi-gpu-worker", argc, argv,
      [] {
        fprintf(stderr,
                "usage: pi-gpu-worker -m MODEL (--shm-fd N | --listen HOST:PORT "
                "--auth-token-file F) [--ffn-backend KIND]\n"
                "  --ffn-backend KIND      auto (CUDA when a GPU is present, else host), cuda,\n"
                "                          host (-t threads); the hot neurons alone: host\n%s",
                pi::kWorkerUsage);
      },
      [&](const std::string& f, pi::ArgReader* args) {
        if (f != "--ffn-backend") return false;
        backend = args->String(f);
        if (!args->failed() && backend != "auto" && backend != "cuda" && backend != "host") {
          args->Fail("--ffn-backend expects auto, cuda or host, got '" + backend + "'");
        }
        return true;
      },
      &w);
  if (flags_status >= 0) return flags_status;
  return pi::RunWorker("pi-gpu-worker", w,
                       [&] { return std::make_unique<pi::GpuWorkerShard>(backend); });
}

int main(int argc, char** argv) {
  return pi::RunTool("pi-gpu-worker", Run, argc, argv);
}
