#include "cli/device_workers.h"

namespace pi {

Status StartDeviceWorkers(const LlamaModel& model, const GpuSplit& split,
                          const WorkerProcessOptions& process, int step_timeout_ms,
                          DeviceWorkers* out) {
  std::vector<DeviceBackend*> members;
  for (size_t k = 0; k < split.device_plans.size(); ++k) {
    DeviceWorkerOptions o;
    o.process = process;
    o.process.extra_args.insert(o.process.extra_args.begin(),
                                {"--ffn-backend", split.device_kinds[k]});
    if (!split.cuda_devices[k].empty()) {
      o.process.env.push_back("CUDA_VISIBLE_DEVICES=" + split.cuda_devices[k]);
    }
    o.step_timeout_ms = step_timeout_ms;
    auto w = std::make_unique<DeviceWorker>(o);
    PI_RETURN_IF_ERROR(w->Load(model, split.device_plans[k]));
    members.push_back(w.get());
    out->workers.push_back(std::move(w));
  }
  if (members.size() < 2) return Status::Ok();
  out->chain = std::make_unique<DeviceChain>();
  return out->chain->Init(model, members);
}

}  // namespace pi
