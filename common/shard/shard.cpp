#include "common/shard/shard.h"

#include <string>

namespace pi {

Status ValidateHotNeurons(const LlamaModel& model, const std::vector<std::vector<int32_t>>& hot_ids,
                          bool gate_thresholds) {
  std::string why;
  if (!SupportsNeuronSplit(model, gate_thresholds, &why)) {
    return Status::Error("the hot/cold FFN split needs a sparse-capable model: %s", why.c_str());
  }
  const LlamaConfig& c = model.config;
  if (static_cast<int>(hot_ids.size()) != c.n_layer) {
    return Status::Error("hot neuron sets for %zu layers, the model has %d", hot_ids.size(),
                         c.n_layer);
  }
  for (int l = 0; l < c.n_layer; ++l) {
    const std::vector<int32_t>& ids = hot_ids[l];
    for (size_t j = 0; j < ids.size(); ++j) {
      if (ids[j] < 0 || ids[j] >= c.n_ff || (j > 0 && ids[j] <= ids[j - 1])) {
        return Status::Error("layer %d: hot neuron ids must be sorted, unique and < %d", l, c.n_ff);
      }
    }
  }
  return Status::Ok();
}

}  // namespace pi
