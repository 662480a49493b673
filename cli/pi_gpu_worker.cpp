// pi-gpu-worker: holds what the placement put in VRAM and computes it for
// the coordinator: whole layers (attention, KV cache, predictor, hot
// neurons, maybe the head) on its DeviceBackend, or only the hot FFN
// neurons of every layer on its FfnBackend, as the coordinator's hello asks
// (gpu_worker/gpu_worker_shard.h). CUDA, or host memory where there is no
// GPU (reported in its hello reply, never swapped silently). pi-launch
// starts it with a shared-memory channel at a known fd.
//
//   pi-gpu-worker -m model.gguf --shm-fd 3 --ffn-backend auto -t 1 --parent-pid 1234
#include <cstdio>
#include <string>

#include "cli/args.h"
#include "cli/child_worker.h"
#include "cli/tool_main.h"
#include "gpu_worker/gpu_worker_shard.h"

namespace {

void Usage() {
  fprintf(stderr,
          "usage: pi-gpu-worker -m MODEL --shm-fd N [options]   (started by pi-launch)\n"
          "  -m, --model FILE        the same GGUF the coordinator runs (checked at hello)\n"
          "  --shm-fd N              the step channel's shared memory\n"
          "  --ffn-backend KIND      auto (CUDA when a GPU is present, else host), cuda, host\n"
          "  -t, --threads N         the host backend's threads (default 1)\n"
          "  --parent-pid PID        exit when this process is no longer the parent\n");
}

}  // namespace

static int Run(int argc, char** argv) {
  pi::ArgReader args("pi-gpu-worker", argc, argv);
  std::string model_path, backend = "auto";
  int shm_fd = -1;
  pi::ShmServeOptions opt;
  while (!args.Done() && !args.failed()) {
    const std::string f = args.Next();
    if (f == "-m" || f == "--model")
      model_path = args.String(f);
    else if (f == "--shm-fd")
      shm_fd = args.Int(f);
    else if (f == "--ffn-backend")
      backend = args.String(f);
    else if (f == "-t" || f == "--threads")
      opt.n_threads = args.Int(f);
    else if (f == "--parent-pid")
      opt.parent_pid = args.Int(f);
    else if (f == "-h" || f == "--help") {
      Usage();
      return 0;
    } else
      args.Fail("unknown flag '" + f + "' (see --help)");
  }
  if (args.failed()) return 2;
  if (model_path.empty() || shm_fd < 0 || opt.n_threads < 1 || opt.n_threads > 512 ||
      (backend != "auto" && backend != "cuda" && backend != "host")) {
    fprintf(stderr,
            "pi-gpu-worker: -m MODEL and --shm-fd N are required, -t 1..512, --ffn-backend "
            "auto|cuda|host (see --help)\n");
    return 2;
  }
  pi::GpuWorkerShard shard(backend);
  return pi::ServeParentOverShm("pi-gpu-worker", model_path, shm_fd, opt, &shard);
}

int main(int argc, char** argv) {
  return pi::RunTool("pi-gpu-worker", Run, argc, argv);
}
