#include "coordinator/grpc_server.h"

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <memory>
#include <thread>

#include "common/transport/listen_address.h"

namespace pi {

void BlockTerminationSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
}

Status ServeCoordinator(const CoordinatorServerOptions& options, ServedModel served,
                        const std::function<void(const std::string&)>& on_listening) {
  std::string host;
  int requested_port = 0;
  PI_RETURN_IF_ERROR(SplitHostPort(options.listen, "--listen", &host, &requested_port));
  CoordinatorService service(std::move(served), options.max_queue, options.log_prefix);
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(options.listen, grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&service);
  // gRPC sets SO_REUSEPORT by default: a second server on a taken port would
  // then share it silently instead of failing.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  // Clients may keep idle connections alive with pings (pi-client does not;
  // other clients may).
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 1000);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (!server || port == 0) {
    return Status::Error("cannot listen on %s (in use, or not an address of this host)",
                         options.listen.c_str());
  }
  if (on_listening) on_listening(host + ":" + std::to_string(port));

  // The waiter: the first SIGINT/SIGTERM shuts the server down; requests
  // still running after the grace period are cancelled.
  std::thread waiter([&server, &options] {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    int sig = 0;
    sigwait(&set, &sig);
    fprintf(stderr, "%s: %s: shutting down\n", options.log_prefix.c_str(),
            sig == SIGINT ? "SIGINT" : "SIGTERM");
    server->Shutdown(std::chrono::system_clock::now() +
                     std::chrono::milliseconds(options.shutdown_grace_ms));
  });
  server->Wait();
  waiter.join();
  return Status::Ok();
}

}  // namespace pi
