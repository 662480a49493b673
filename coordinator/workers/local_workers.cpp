#include "coordinator/workers/local_workers.h"

namespace pi {

std::vector<std::vector<int32_t>> HotNeuronSets(const LlamaModel& model,
                                                const EngineOptions& options) {
  if (options.hot_shard) return options.hot_shard->owned();
  std::vector<std::vector<int32_t>> hot(model.config.n_layer);
  if (options.device) {
    const std::vector<std::vector<int32_t>>& plan = options.device->plan().hot;
    for (size_t l = 0; l < plan.size() && l < hot.size(); ++l) hot[l] = plan[l];
  }
  return hot;
}

std::vector<std::vector<std::vector<int32_t>>> SplitColdNeurons(const LlamaModel& model,
                                                                const EngineOptions& options, int n,
                                                                double coordinator_share) {
  const LlamaConfig& c = model.config;
  const std::vector<std::vector<int32_t>> hot = HotNeuronSets(model, options);
  std::vector<std::vector<std::vector<int32_t>>> owned(
      n, std::vector<std::vector<int32_t>>(c.n_layer));
  for (int l = 0; l < c.n_layer; ++l) {
    std::vector<uint8_t> is_hot(c.n_ff, 0);
    for (int32_t id : hot[l]) is_hot[id] = 1;
    int k = 0;
    double kept = 0;  // the coordinator's share so far, spread evenly (Bresenham)
    for (int32_t i = 0; i < c.n_ff; ++i) {
      if (is_hot[i]) continue;
      kept += coordinator_share;
      if (kept >= 1.0) {
        kept -= 1.0;
        continue;
      }
      owned[k++ % n][l].push_back(i);
    }
  }
  return owned;
}

Status CheckCpuWorkersPossible(const LlamaModel& model, bool gate_thresholds) {
  std::string why;
  if (!SupportsNeuronSplit(model, gate_thresholds, &why)) {
    return Status::Error("cpu workers compute cold neurons, which needs a sparse-capable model: %s",
                         why.c_str());
  }
  return Status::Ok();
}

}  // namespace pi
