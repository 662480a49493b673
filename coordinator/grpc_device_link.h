// The DeviceLink to a remote pi-gpu-worker --listen (gRPC builds): its Hello
// carries the DevicePlan, and each device message is one frame each way on
// the session's Steps stream (grpc_session.h). A worker that is gone when
// the device is recovered fails Open within `reconnect_timeout_ms`.
#pragma once

#include <memory>

#include "coordinator/device_link.h"
#include "coordinator/grpc_session.h"

namespace pi {

struct GrpcDeviceLinkOptions : GrpcEndpoint {
  int connect_timeout_ms = 10000;   // the first session (the worker may still be starting)
  int reconnect_timeout_ms = 2000;  // a session after a loss
};

std::unique_ptr<DeviceLink> NewGrpcDeviceLink(const GrpcDeviceLinkOptions& options);

}  // namespace pi
