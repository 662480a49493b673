// pi-cpu-worker: owns a shard of cold FFN neurons and computes it for a
// coordinator; the shard itself arrives in the coordinator's hello. Locally
// pi-launch starts it with a shared-memory channel at a known fd; on another
// host it listens for a coordinator over gRPC.
//
//   pi-cpu-worker -m model.gguf --shm-fd 3 -t 2 --parent-pid 1234      (local)
//   pi-cpu-worker -m model.gguf --listen 0.0.0.0:50061 --auth-token-file /etc/pi/token
#include <csignal>
#include <cstdio>
#include <string>

#include "cli/args.h"
#include "cli/child_worker.h"
#include "cli/tool_main.h"
#include "cli/worker_secrets.h"
#include "common/llama_model.h"
#include "cpu_worker/cold_shard.h"
#ifdef PI_HAVE_GRPC
#include "common/transport/grpc_serve.h"
#include "common/transport/listen_address.h"
#endif

namespace {

void Usage() {
  fprintf(stderr,
          "usage: pi-cpu-worker -m MODEL (--shm-fd N | --listen HOST:PORT --auth-token-file F)\n"
          "  -m, --model FILE        the same GGUF the coordinator runs (checked at hello)\n"
          "  -t, --threads N         threads for the shard's neurons (default 1)\n"
          "local, started by pi-launch / pi-run:\n"
          "  --shm-fd N              the step channel's shared memory\n"
          "  --parent-pid PID        exit when this process is no longer the parent\n"
          "remote, reached over gRPC (pi-launch --cpu-worker HOST:PORT):\n"
          "  --listen HOST:PORT      where to listen (e.g. 127.0.0.1:50061; binding beyond\n"
          "                          loopback without TLS is warned about)\n"
          "  --auth-token-file F     the shared token (first line, 16+ printable characters);\n"
          "                          calls without it are refused (required)\n"
          "  --tls-cert F --tls-key F  serve TLS with this certificate and key (PEM)\n"
          "  --tls-ca F              also require a client certificate signed by this CA\n");
}

struct WorkerFlags {
  std::string model_path;
  int shm_fd = -1;
  pi::ShmServeOptions shm;
  std::string listen;
  pi::WorkerSecretFiles secrets;
};

int ParseFlags(int argc, char** argv, WorkerFlags* w) {
  pi::ArgReader args("pi-cpu-worker", argc, argv);
  while (!args.Done() && !args.failed()) {
    const std::string f = args.Next();
    if (f == "-m" || f == "--model")
      w->model_path = args.String(f);
    else if (f == "--shm-fd")
      w->shm_fd = args.Int(f);
    else if (f == "-t" || f == "--threads")
      w->shm.n_threads = args.Int(f);
    else if (f == "--parent-pid")
      w->shm.parent_pid = static_cast<pid_t>(args.Int(f));
    else if (f == "--listen")
      w->listen = args.String(f);
    else if (f == "--auth-token-file")
      w->secrets.token = args.String(f);
    else if (f == "--tls-cert")
      w->secrets.tls_cert = args.String(f);
    else if (f == "--tls-key")
      w->secrets.tls_key = args.String(f);
    else if (f == "--tls-ca")
      w->secrets.tls_ca = args.String(f);
    else if (f == "-h" || f == "--help") {
      Usage();
      return 0;
    } else
      args.Fail("unknown flag '" + f + "' (see --help)");
  }
  if (args.failed()) return 2;
  pi::Status s;
  if (w->model_path.empty())
    s = pi::Status::Error("-m MODEL is required");
  else if ((w->shm_fd >= 0) == !w->listen.empty())
    s = pi::Status::Error("give one of --shm-fd N and --listen HOST:PORT");
  else if (w->shm.n_threads < 1 || w->shm.n_threads > 512)
    s = pi::Status::Error("-t must be 1 to 512");
  else if (!w->listen.empty())
    s = pi::CheckWorkerSecretFiles(w->secrets, true);
  if (s.ok() && !w->secrets.tls_ca.empty() && w->secrets.tls_cert.empty()) {
    s = pi::Status::Error("--tls-ca needs --tls-cert and --tls-key");
  }
  if (!s.ok()) {
    fprintf(stderr, "pi-cpu-worker: %s (see --help)\n", s.message().c_str());
    return 2;
  }
  return -1;
}

#ifdef PI_HAVE_GRPC
int ServeRemote(const WorkerFlags& w) {
  pi::GrpcServeOptions o;
  o.listen = w.listen;
  o.n_threads = w.shm.n_threads;
  pi::WorkerSecrets secrets;
  pi::Status s = pi::ReadWorkerSecrets(w.secrets, &secrets);
  o.auth_token = secrets.token;
  o.tls_cert = secrets.tls_cert;
  o.tls_key = secrets.tls_key;
  o.tls_ca = secrets.tls_ca;
  pi::LlamaModel model;
  if (s.ok()) s = pi::LoadLlamaModel(w.model_path, &model);
  if (s.ok() && !pi::IsLoopbackHost(w.listen) && o.tls_cert.empty()) {
    fprintf(stderr,
            "pi-cpu-worker: warning: --listen %s is beyond loopback without TLS: the token and "
            "the activations cross the network in clear (--tls-cert/--tls-key)\n",
            w.listen.c_str());
  }
  if (s.ok()) {
    s = pi::ServeGrpc(
        o, model, [] { return std::make_unique<pi::ColdShard>(); },
        [&](const std::string& address) {
          fprintf(stderr, "pi-cpu-worker: %s on %s%s, %d threads\n", w.model_path.c_str(),
                  address.c_str(), o.tls_cert.empty() ? "" : " (TLS)", o.n_threads);
        });
  }
  if (!s.ok()) {
    fprintf(stderr, "pi-cpu-worker: %s\n", s.message().c_str());
    return 1;
  }
  fprintf(stderr, "pi-cpu-worker: stopped\n");
  return 0;
}
#else
int ServeRemote(const WorkerFlags&) {
  fprintf(stderr, "pi-cpu-worker: --listen needs a build with gRPC (PI_GRPC)\n");
  return 1;
}
#endif

}  // namespace

static int Run(int argc, char** argv) {
  WorkerFlags w;
  const int flags_status = ParseFlags(argc, argv, &w);
  if (flags_status >= 0) return flags_status;
  if (w.shm_fd >= 0) {
    pi::ColdShard shard;
    return pi::ServeParentOverShm("pi-cpu-worker", w.model_path, w.shm_fd, w.shm, &shard);
  }
  // Before any thread exists: the server's loop alone takes SIGINT/SIGTERM.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  return ServeRemote(w);
}

int main(int argc, char** argv) {
  return pi::RunTool("pi-cpu-worker", Run, argc, argv);
}
