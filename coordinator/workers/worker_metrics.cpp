#include "coordinator/workers/worker_metrics.h"

namespace pi {

void AppendWorkerMetrics(const std::vector<const RemoteShard*>& cpu_workers, const RemoteShard* gpu,
                         const std::vector<const DeviceWorker*>& devices, std::string* out) {
  if (cpu_workers.empty() && !gpu && devices.empty()) return;
  const char* name = "pi_worker_step_seconds";
  AppendMetricHeader(name, "histogram",
                     "Round trips of the steps sent to each worker (a device's: per message).",
                     out);
  auto render = [&](const std::string& worker, const char* transport, const Histogram& h) {
    std::string l;
    AppendLabel("worker", worker, &l);
    AppendLabel("transport", transport, &l);
    h.Render(name, l, out);
  };
  for (size_t k = 0; k < devices.size(); ++k) {
    render(devices.size() == 1 ? "gpu" : "gpu " + std::to_string(k), devices[k]->transport(),
           devices[k]->step_seconds());
  }
  if (gpu) render("gpu", gpu->transport(), gpu->step_seconds());
  for (size_t k = 0; k < cpu_workers.size(); ++k) {
    render("cpu " + std::to_string(k), cpu_workers[k]->transport(), cpu_workers[k]->step_seconds());
  }
}

}  // namespace pi
