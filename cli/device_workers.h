// DeviceWorkers: the local gpu worker processes of a split's devices
// (GpuSplit::device_plans, cli/gpu_split.h): a pi-gpu-worker each, on the
// backend and GPU the split names for it (CUDA_VISIBLE_DEVICES), chained
// (coordinator/route/device_chain.h) when there are several.
#pragma once

#include <memory>
#include <vector>

#include "cli/gpu_split.h"
#include "coordinator/route/device_chain.h"
#include "coordinator/workers/device_worker.h"

namespace pi {

struct DeviceWorkers {
  std::vector<std::unique_ptr<DeviceWorker>> workers;
  std::unique_ptr<DeviceChain> chain;  // several workers
  // What the engine drives: the chain, the one worker, or null.
  DeviceBackend* device() const {
    return chain             ? static_cast<DeviceBackend*>(chain.get())
           : workers.empty() ? nullptr
                             : workers[0].get();
  }
};
// `process`: the options every worker shares (binary, model path, threads,
// extra arguments); each gets its plan's --ffn-backend and GPU.
Status StartDeviceWorkers(const LlamaModel& model, const GpuSplit& split,
                          const WorkerProcessOptions& process, int step_timeout_ms,
                          DeviceWorkers* out);

}  // namespace pi
