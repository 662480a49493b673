// WorkerLink over gRPC (gRPC builds): a remote pi-cpu-worker or
// pi-gpu-worker --listen (proto/pi.proto's Worker service). Open sends the
// Hello naming what the worker must hold, then opens the session's one
// long-lived Steps stream (grpc_session.h); each step is one frame each way
// carrying the same bytes as the shared-memory slots. A stream that ends
// (the worker killed; keepalive pings every second notice a host that died
// silently) is kLost, a reply not in time kTimeout.
#pragma once

#include <memory>
#include <string>

#include "coordinator/workers/grpc_session.h"
#include "coordinator/workers/worker_link.h"

namespace pi {

struct GrpcLinkOptions : GrpcEndpoint {
  std::string role = "cpu worker";  // names it: "cpu worker host:port"
  int connect_timeout_ms = 10000;   // reaching the worker the first time (it may be starting)
  int reconnect_timeout_ms = 2000;  // reaching it again after a loss
  // Its hello once reached: the worker loads what the hello names first (a
  // GPU worker's weights may take a while).
  int hello_timeout_ms = 120000;
};

std::unique_ptr<WorkerLink> NewGrpcLink(const GrpcLinkOptions& options);

}  // namespace pi
