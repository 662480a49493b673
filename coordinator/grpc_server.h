// CoordinatorServer: the Coordinator gRPC service (coordinator_service.h) on
// an address, for pi-launch. Start binds and returns; Shutdown stops taking
// requests and cancels the running ones after a grace period.
// WaitForTerminationSignal is pi-launch's main loop: it returns at the first
// SIGINT or SIGTERM, which BlockTerminationSignals kept from every thread.
#pragma once

#include <memory>
#include <string>

#include "common/status.h"
#include "coordinator/coordinator_service.h"

namespace grpc {
class Server;
}

namespace pi {

// Blocks SIGINT and SIGTERM in the calling thread and the threads it starts
// later; call first thing in main, before any thread exists.
void BlockTerminationSignals();
// Waits for SIGINT or SIGTERM (blocked); returns its name.
const char* WaitForTerminationSignal();

class CoordinatorServer {
 public:
  CoordinatorServer();
  ~CoordinatorServer();
  // listen: host:port (port 0 picks a free one); *address: what was bound.
  // `runner` must outlive the server. Streams are capped at 32 per
  // connection, messages at 4 MiB; pings faster than one a second while
  // idle end the connection (GOAWAY), as does 15 minutes without a call or
  // a minute's ping unanswered for 20 s.
  Status Start(const std::string& listen, ServedModel served, RequestRunner* runner,
               CoordinatorServiceOptions options, std::string* address);
  void Shutdown(int grace_ms);

 private:
  std::unique_ptr<CoordinatorService> service_;
  std::unique_ptr<grpc::Server> server_;
};

}  // namespace pi
