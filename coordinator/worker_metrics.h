// The workers' part of /metrics: each worker's step round trips
// (pi_worker_step_seconds, a histogram labelled by the worker's role and
// index and its transport — labels that stay the same across restarts).
#pragma once

#include <string>
#include <vector>

#include "coordinator/cpu_worker.h"
#include "coordinator/device_worker.h"

namespace pi {

// `gpu` (hot neurons) and `device` (whole layers) may be null.
void AppendWorkerMetrics(const std::vector<const CpuWorker*>& cpu_workers, const CpuWorker* gpu,
                         const DeviceWorker* device, std::string* out);

}  // namespace pi
