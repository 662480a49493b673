// ServeCoordinator: runs the Coordinator gRPC service (coordinator_service.h)
// on an address until SIGINT or SIGTERM, then stops taking requests, lets
// the running one end (cancelled after a grace period) and returns. pi-launch
// calls it; the caller then stops its workers.
#pragma once

#include <functional>
#include <string>

#include "common/status.h"
#include "coordinator/coordinator_service.h"

namespace pi {

struct CoordinatorServerOptions {
  std::string listen = "127.0.0.1:50051";  // host:port; port 0 picks a free one
  int max_queue = 8;
  int shutdown_grace_ms = 2000;  // how long running requests get to end at shutdown
  std::string log_prefix = "pi-launch";
};

// Blocks SIGINT and SIGTERM in the calling thread and the threads it starts
// later; call first thing in main, before any thread exists, so that only
// ServeCoordinator's waiter receives them.
void BlockTerminationSignals();

// Serves until SIGINT/SIGTERM (BlockTerminationSignals must have run).
// `on_listening` is told the address actually bound (the port filled in).
Status ServeCoordinator(const CoordinatorServerOptions& options, ServedModel served,
                        const std::function<void(const std::string& address)>& on_listening);

}  // namespace pi
