#include "gpu_worker/layer_range_device.h"

namespace pi {

Status LayerRangeDevice::Load(const LlamaModel& model, const DevicePlan& plan) {
  const int n_layer = model.config.n_layer;
  if (plan.first_layer < 0 || plan.first_layer > plan.n_layers || plan.n_layers > n_layer ||
      plan.hot.size() != static_cast<size_t>(n_layer)) {
    return Status::Error("a device plan for layers [%d, %d) of a model of %d (%zu hot lists)",
                         plan.first_layer, plan.n_layers, n_layer, plan.hot.size());
  }
  for (int il = 0; il < n_layer; ++il) {
    if ((il < plan.first_layer || il >= plan.n_layers) && !plan.hot[il].empty()) {
      return Status::Error("the device plan gives layer %d hot neurons outside its layers [%d, %d)",
                           il, plan.first_layer, plan.n_layers);
    }
  }
  plan_ = plan;
  if (plan.first_layer == 0) return inner_->Load(model, plan);
  range_.config = model.config;
  range_.config.n_layer = plan.n_layers - plan.first_layer;
  range_.token_embd = model.token_embd;
  range_.output_norm = model.output_norm;
  range_.output_norm_b = model.output_norm_b;
  range_.output = model.output;
  range_.tied_output = model.tied_output;
  range_.layers.assign(model.layers.begin() + plan.first_layer,
                       model.layers.begin() + plan.n_layers);
  DevicePlan local = plan;
  local.first_layer = 0;
  local.n_layers = range_.config.n_layer;
  local.hot.assign(plan.hot.begin() + plan.first_layer, plan.hot.begin() + plan.n_layers);
  if (!plan.gate_thresholds.empty()) {
    if (plan.gate_thresholds.size() != static_cast<size_t>(n_layer)) {
      return Status::Error("a device plan with %zu gate thresholds for a model of %d layers",
                           plan.gate_thresholds.size(), n_layer);
    }
    local.gate_thresholds.assign(plan.gate_thresholds.begin() + plan.first_layer,
                                 plan.gate_thresholds.begin() + plan.n_layers);
  }
  return inner_->Load(range_, local)
      .WithContext("layers " + std::to_string(plan.first_layer) + ".." +
                   std::to_string(plan.n_layers - 1));
}

std::string LayerRangeDevice::KeptLayout() const {
  const std::string inner = inner_->KeptLayout();  // "format[0,k)": the renumbered range
  return KeptLayoutName(inner.substr(0, inner.find('[')).c_str(), plan_);
}

}  // namespace pi
