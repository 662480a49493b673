// The DeviceLink to a remote pi-gpu-worker --listen (gRPC builds): its Hello
// carries the DevicePlan, and each device message is one frame each way on
// the session's Steps stream (grpc_session.h). A worker that cannot be
// reached when the device is recovered fails Open within
// `reconnect_timeout_ms`; one that is reached is given its hello's time.
#pragma once

#include <memory>

#include "coordinator/device_link.h"
#include "coordinator/grpc_session.h"

namespace pi {

struct GrpcDeviceLinkOptions : GrpcEndpoint {
  int connect_timeout_ms = 10000;   // reaching the worker the first time (it may be starting)
  int reconnect_timeout_ms = 2000;  // reaching it after a loss (a stopped host: an error then)
  // Its hello once reached: it loads the plan onto the GPU first (a
  // restarted worker's weights may take a while; the request waits).
  int hello_timeout_ms = 600000;
};

std::unique_ptr<DeviceLink> NewGrpcDeviceLink(const GrpcDeviceLinkOptions& options);

}  // namespace pi
