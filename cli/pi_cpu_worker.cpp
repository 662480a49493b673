// pi-cpu-worker: owns a shard of cold FFN neurons and computes it for a
// coordinator. pi-launch starts it with the shared-memory channel at a
// known fd; the shard itself arrives in the coordinator's hello.
//
//   pi-cpu-worker -m model.gguf --shm-fd 3 -t 2 --parent-pid 1234
#include <sys/prctl.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <string>

#include "cli/args.h"
#include "cli/tool_main.h"
#include "common/llama_model.h"
#include "common/transport/shm_channel.h"
#include "cpu_worker/shm_serve.h"

namespace {

void Usage() {
  fprintf(stderr,
          "usage: pi-cpu-worker -m MODEL --shm-fd N [options]\n"
          "  -m, --model FILE     the same GGUF the coordinator runs (checked at hello)\n"
          "  --shm-fd N           the step channel's shared memory (from pi-launch)\n"
          "  -t, --threads N      threads for the shard's neurons (default 1)\n"
          "  --parent-pid PID     exit when this process is no longer the parent\n");
}

}  // namespace

static int Run(int argc, char** argv) {
  pi::ArgReader args("pi-cpu-worker", argc, argv);
  std::string model_path;
  int shm_fd = -1;
  pi::ShmServeOptions opt;
  while (!args.Done() && !args.failed()) {
    const std::string f = args.Next();
    if (f == "-m" || f == "--model")
      model_path = args.String(f);
    else if (f == "--shm-fd")
      shm_fd = args.Int(f);
    else if (f == "-t" || f == "--threads")
      opt.n_threads = args.Int(f);
    else if (f == "--parent-pid")
      opt.parent_pid = static_cast<pid_t>(args.Int(f));
    else if (f == "-h" || f == "--help") {
      Usage();
      return 0;
    } else
      args.Fail("unknown flag '" + f + "' (see --help)");
  }
  if (args.failed()) return 2;
  if (model_path.empty() || shm_fd < 0 || opt.n_threads < 1 || opt.n_threads > 512) {
    fprintf(stderr,
            "pi-cpu-worker: -m MODEL and --shm-fd N are required, -t 1..512 (see --help)\n");
    return 2;
  }
  // Die with the parent; the check closes the race with a parent that died
  // before the prctl.
  // Ctrl-C in a terminal reaches the whole process group: the parent stops
  // its workers itself, after the request in hand.
  if (opt.parent_pid != 0) {
    signal(SIGINT, SIG_IGN);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != opt.parent_pid) return 1;
  }
  pi::ShmChannel channel;
  pi::Status s = channel.Attach(shm_fd);
  pi::LlamaModel model;
  if (s.ok()) s = pi::ServeShm(&channel, model, pi::LoadLlamaModel(model_path, &model), opt);
  if (!s.ok()) {
    fprintf(stderr, "pi-cpu-worker: %s\n", s.message().c_str());
    return 1;
  }
  return 0;
}

int main(int argc, char** argv) {
  return pi::RunTool("pi-cpu-worker", Run, argc, argv);
}
