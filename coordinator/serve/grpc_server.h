// CoordinatorServer: the Coordinator gRPC service (coordinator_service.h) on
// an address, for pi-launch. Start binds and returns; Shutdown stops taking
// requests and cancels the running ones after a grace period.
// WaitForTerminationSignal is pi-launch's main loop: it returns at the first
// SIGINT or SIGTERM, which BlockTerminationSignals kept from every thread.
#pragma once

#include <memory>
#include <string>

#include "common/base/status.h"
#include "common/transport/h2_guard.h"
#include "coordinator/serve/coordinator_service.h"

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
  // `runner` must outlive the server. The gRPC server listens on a private
  // Unix socket behind an H2Guard on `listen` (h2_guard.h: connection caps,
  // stream, reset and SETTINGS budgets per client). Its threads are capped
  // at `max_threads` (a call beyond them is refused with
  // RESOURCE_EXHAUSTED), its streams at 32 per connection, its messages at
  // 4 MiB; pings faster than one a second while idle end the connection
  // (GOAWAY), as does 15 minutes without a call or a minute's ping
  // unanswered for 20 s.
  Status Start(const std::string& listen, ServedModel served, RequestRunner* runner,
               CoordinatorServiceOptions options, int max_threads, std::string* address);
  void Shutdown(int grace_ms);

 private:
  std::unique_ptr<CoordinatorService> service_;
  std::unique_ptr<grpc::Server> server_;
  H2Guard guard_;
};

}  // namespace pi
