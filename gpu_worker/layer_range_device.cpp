#include "gpu_worker/layer_range_device.h"

#include "common/base/thread_pool.h"
#include "common/model/weight_transpose.h"

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
  // --sparse teal reads transposed copies a gpu worker's model (loaded
  // before its plan came) lacks: the view gets its own, of its layers only.
  bool copies =
      copy_threads_ > 0 && plan.mode == SparseMode::kTeal && plan.n_layers > plan.first_layer;
  for (int il = plan.first_layer; il < plan.n_layers && copies; ++il) {
    copies = !HasTransposedCopies(model.layers[il]);
  }
  if (plan.first_layer == 0 && !copies) return inner_->Load(model, plan);
  range_ = LlamaModel();
  range_.config = model.config;
  range_.config.n_layer = plan.n_layers - plan.first_layer;
  range_.token_embd = model.token_embd;
  range_.output_norm = model.output_norm;
  range_.output_norm_b = model.output_norm_b;
  range_.output = model.output;
  range_.tied_output = model.tied_output;
  range_.layers.assign(model.layers.begin() + plan.first_layer,
                       model.layers.begin() + plan.n_layers);
  if (copies) {
    ThreadPool pool(copy_threads_);
    int64_t bytes = 0;
    PI_RETURN_IF_ERROR(AddTransposedCopies(&range_, &pool, &bytes));
  }
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
  for (int k = 0; k < kProjectionInputs; ++k) {
    const std::vector<float>& t = plan.input_thresholds[k];
    if (t.empty()) continue;
    if (t.size() != static_cast<size_t>(n_layer)) {
      return Status::Error("a device plan with %zu input thresholds for a model of %d layers",
                           t.size(), n_layer);
    }
    local.input_thresholds[k].assign(t.begin() + plan.first_layer, t.begin() + plan.n_layers);
  }
  if (plan.n_layers == plan.first_layer && UsesGateThresholds(plan.mode)) {
    // The head alone: no neuron to threshold (plan() still says the mode).
    local.mode = SparseMode::kOff;
    local.gate_thresholds.clear();
    for (std::vector<float>& t : local.input_thresholds) t.clear();
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
