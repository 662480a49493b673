// The workers' part of /metrics: each worker's step round trips
// (pi_worker_step_seconds, a histogram labelled by the worker's role and
// index and its transport — labels that stay the same across restarts).
#pragma once

#include <string>
#include <vector>

#include "coordinator/workers/device_worker.h"
#include "coordinator/workers/remote_shard.h"

namespace pi {

// `gpu` (hot neurons) may be null; `devices` (whole layers: "gpu", or
// "gpu 0", "gpu 1", ... for a chain) empty.
void AppendWorkerMetrics(const std::vector<const RemoteShard*>& cpu_workers, const RemoteShard* gpu,
                         const std::vector<const DeviceWorker*>& devices, std::string* out);

}  // namespace pi
