#include "coordinator/serve/grpc_server.h"

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <csignal>

#include "common/transport/listen_address.h"

namespace pi {

void BlockTerminationSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
}

const char* WaitForTerminationSignal() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  int sig = 0;
  sigwait(&set, &sig);
  return sig == SIGINT ? "SIGINT" : "SIGTERM";
}

CoordinatorServer::CoordinatorServer() = default;
CoordinatorServer::~CoordinatorServer() {
  Shutdown(0);
}

Status CoordinatorServer::Start(const std::string& listen, ServedModel served,
                                RequestRunner* runner, CoordinatorServiceOptions options,
                                int max_threads, std::string* address) {
  std::string host;
  int requested_port = 0;
  PI_RETURN_IF_ERROR(SplitHostPort(listen, "--listen", &host, &requested_port));
  service_ = std::make_unique<CoordinatorService>(std::move(served), runner, std::move(options));
  std::string backend;
  PI_RETURN_IF_ERROR(guard_.MakeBackendAddress(&backend));
  grpc::ServerBuilder builder;
  // The synchronous server runs a call on a thread of its own: without a
  // cap, a flood of calls grows threads without bound (the guard bounds the
  // rate of calls a client can open, so the cap does not just queue them).
  grpc::ResourceQuota quota("pi-launch");
  quota.SetMaxThreads(max_threads);
  builder.SetResourceQuota(quota);
  builder.AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS, 32);
  builder.AddChannelArgument(GRPC_ARG_SERVER_HANDSHAKE_TIMEOUT_MS, 10000);
  builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_IDLE_MS, 15 * 60 * 1000);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PING_STRIKES, 2);
  // A client that went away without closing (a host gone) is found by
  // pings: its calls end and their requests are cancelled.
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, 60000);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 20000);
  builder.SetMaxReceiveMessageSize(4 << 20);
  int port = 0;
  builder.AddListeningPort(backend, grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(service_.get());
  // Clients may keep idle connections alive with pings (pi-client does not;
  // other clients may).
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 1000);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  server_ = builder.BuildAndStart();
  if (!server_ || port == 0) {
    server_.reset();
    return Status::Error("cannot serve gRPC on %s", backend.c_str());
  }
  H2GuardOptions guard;
  guard.log_prefix = "pi-launch";
  // Several calls' prompts may wait for an answer on one connection (a
  // Generate is answered when it starts: its headers go out then).
  guard.max_unanswered_bytes = 32 << 20;
  const Status s = guard_.Start(listen, guard, address);
  if (!s.ok()) {
    Shutdown(0);
    return Status::Error("cannot listen on %s (in use, or not an address of this host)",
                         listen.c_str());
  }
  return Status::Ok();
}

void CoordinatorServer::Shutdown(int grace_ms) {
  if (!server_) return guard_.Shutdown();
  server_->Shutdown(std::chrono::system_clock::now() + std::chrono::milliseconds(grace_ms));
  server_->Wait();
  server_.reset();
  guard_.Shutdown();  // last: running calls had their grace period through it
}

}  // namespace pi
