#include "cli/worker_main.h"

#include <csignal>
#include <cstdio>

#include "cli/activation_flag.h"
#include "cli/child_worker.h"
#include "common/model/llama_model.h"
#ifdef PI_HAVE_GRPC
#include "common/transport/grpc_serve.h"
#include "common/transport/listen_address.h"
#endif

namespace pi {

const char kWorkerUsage[] =
    "  -m, --model FILE        the same GGUF the coordinator runs (checked at hello)\n"
    "  -t, --threads N         threads (default 1)\n"
    "local, started by pi-launch / pi-run:\n"
    "  --shm-fd N              the step channel's shared memory\n"
    "  --parent-pid PID        exit when this process is no longer the parent\n"
    "  --ffn-activation A      run the FFN with relu | silu | drelu | gelu (as the\n"
    "                          coordinator that started it)\n"
    "remote, reached over gRPC:\n"
    "  --listen HOST:PORT      where to listen (e.g. 127.0.0.1:50061; binding beyond\n"
    "                          loopback without TLS is warned about)\n"
    "  --auth-token-file F     the shared token (first line, 16+ printable characters);\n"
    "                          calls without it are refused (required)\n"
    "  --tls-cert F --tls-key F  serve TLS with this certificate and key (PEM)\n"
    "  --tls-ca F              also require a client certificate signed by this CA\n";

int ParseWorkerFlags(const char* tool, int argc, char** argv, const std::function<void()>& usage,
                     const std::function<bool(const std::string&, ArgReader*)>& own_flag,
                     WorkerFlags* w) {
  ArgReader args(tool, argc, argv);
  const int flags_rc = args.ReadFlags(
      [&](const std::string& f) {
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
        else if (ParseFfnActivationFlag(f, &args, &w->ffn_activation)) {
        } else {
          return own_flag(f, &args);
        }
        return true;
      },
      usage);
  if (flags_rc >= 0) return flags_rc;
  Status s;
  if (w->model_path.empty())
    s = Status::Error("-m MODEL is required");
  else if ((w->shm_fd >= 0) == !w->listen.empty())
    s = Status::Error("give one of --shm-fd N and --listen HOST:PORT");
  else if (w->shm.n_threads < 1 || w->shm.n_threads > 512)
    s = Status::Error("-t must be 1 to 512");
#ifdef PI_HAVE_GRPC
  else if (!w->listen.empty())
    s = CheckWorkerSecretFiles(w->secrets, true);
  if (s.ok() && !w->secrets.tls_ca.empty() && w->secrets.tls_cert.empty()) {
    s = Status::Error("--tls-ca needs --tls-cert and --tls-key");
  }
#else
  else if (!w->listen.empty())
    s = Status::Error("--listen needs a build with gRPC (PI_GRPC)");
#endif
  if (!s.ok()) {
    fprintf(stderr, "%s: %s (see --help)\n", tool, s.message().c_str());
    return 2;
  }
  return -1;
}

namespace {

#ifdef PI_HAVE_GRPC
int ServeRemote(const char* tool, const WorkerFlags& w, const WorkerShardFactory& make_shard) {
  GrpcServeOptions o;
  o.listen = w.listen;
  o.n_threads = w.shm.n_threads;
  o.log_prefix = tool;
  WorkerSecrets secrets;
  Status s = ReadWorkerSecrets(w.secrets, &secrets);
  o.auth_token = secrets.token;
  o.tls_cert = secrets.tls_cert;
  o.tls_key = secrets.tls_key;
  o.tls_ca = secrets.tls_ca;
  LlamaModel model;
  if (s.ok()) s = LoadLlamaModel(w.model_path, &model);
  if (s.ok()) s = ApplyFfnActivationFlag(tool, w.ffn_activation, &model);
  if (s.ok() && !IsLoopbackHost(w.listen) && o.tls_cert.empty()) {
    fprintf(stderr,
            "%s: warning: --listen %s is beyond loopback without TLS: the token and the "
            "activations cross the network in clear (--tls-cert/--tls-key)\n",
            tool, w.listen.c_str());
  }
  if (s.ok()) {
    s = ServeGrpc(o, model, make_shard, [&](const std::string& address) {
      fprintf(stderr, "%s: %s on %s%s, %d threads\n", tool, w.model_path.c_str(), address.c_str(),
              o.tls_cert.empty() ? "" : " (TLS)", o.n_threads);
    });
  }
  if (!s.ok()) {
    fprintf(stderr, "%s: %s\n", tool, s.message().c_str());
    return 1;
  }
  fprintf(stderr, "%s: stopped\n", tool);
  return 0;
}
#else
int ServeRemote(const char* tool, const WorkerFlags&, const WorkerShardFactory&) {
  fprintf(stderr, "%s: --listen needs a build with gRPC (PI_GRPC)\n", tool);
  return 1;
}
#endif

}  // namespace

int RunWorker(const char* tool, const WorkerFlags& w, const WorkerShardFactory& make_shard) {
  if (w.shm_fd >= 0) {
    std::unique_ptr<WorkerShard> shard = make_shard();
    return ServeParentOverShm(tool, w.model_path, w.ffn_activation, w.shm_fd, w.shm, shard.get());
  }
  // Before any thread exists: the server's loop alone takes SIGINT/SIGTERM.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  return ServeRemote(tool, w, make_shard);
}

}  // namespace pi
