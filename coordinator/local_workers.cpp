#include "coordinator/local_workers.h"

namespace pi {

std::vector<std::vector<int32_t>> HotNeuronSets(const LlamaModel& model,
                                                const EngineOptions& options) {
  if (options.hot_neurons) return *options.hot_neurons;
  std::vector<std::vector<int32_t>> hot(model.config.n_layer);
  if (options.device) {
    const std::vector<std::vector<int32_t>>& plan = options.device->plan().hot;
    for (size_t l = 0; l < plan.size() && l < hot.size(); ++l) hot[l] = plan[l];
  }
  return hot;
}

std::vector<std::vector<std::vector<int32_t>>> SplitColdNeurons(const LlamaModel& model,
                                                                const EngineOptions& options,
                                                                int n) {
  const LlamaConfig& c = model.config;
  const std::vector<std::vector<int32_t>> hot = HotNeuronSets(model, options);
  std::vector<std::vector<std::vector<int32_t>>> owned(
      n, std::vector<std::vector<int32_t>>(c.n_layer));
  for (int l = 0; l < c.n_layer; ++l) {
    std::vector<uint8_t> is_hot(c.n_ff, 0);
    for (int32_t id : hot[l]) is_hot[id] = 1;
    int k = 0;
    for (int32_t i = 0; i < c.n_ff; ++i) {
      if (!is_hot[i]) owned[k++ % n][l].push_back(i);
    }
  }
  return owned;
}

Status CheckCpuWorkersPossible(const LlamaModel& model) {
  std::string why;
  if (!SupportsSparseFfn(model, &why)) {
    return Status::Error("cpu workers compute cold neurons, which needs a sparse-capable model: %s",
                         why.c_str());
  }
  return Status::Ok();
}

Status StartLocalCpuWorkers(const std::string& binary, const std::string& model_path,
                            const LlamaModel& model, int n, int threads, EngineOptions* options,
                            std::vector<std::unique_ptr<ShmWorker>>* workers) {
  if (n < 1 || n > 64) return Status::Error("%d cpu workers: expected 1 to 64", n);
  PI_RETURN_IF_ERROR(CheckCpuWorkersPossible(model));
  const std::vector<std::vector<std::vector<int32_t>>> owned = SplitColdNeurons(model, *options, n);
  ShmWorkerOptions o;
  o.binary = binary;
  o.model_path = model_path;
  o.n_threads = threads;
  o.max_batch = 1;  // sparse steps are single tokens; prompt batches run dense here
  for (int k = 0; k < n; ++k) {
    workers->push_back(std::make_unique<ShmWorker>());
    PI_RETURN_IF_ERROR(workers->back()->Start(o, model, owned[k]));
    options->cold_shards.push_back(workers->back().get());
  }
  return Status::Ok();
}

}  // namespace pi
