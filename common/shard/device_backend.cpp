#include "common/shard/device_backend.h"

#include <string>

#include "common/compute/sparse_mode.h"
#include "common/shard/shard.h"

namespace pi {

int64_t SavedSeqBytes(const LlamaConfig& c, const DevicePlan& plan, int n) {
  return static_cast<int64_t>(plan.n_layers - plan.first_layer) * c.n_head_kv * n *
         (RowBytes(plan.cache_type_k, c.head_dim) + RowBytes(plan.cache_type_v, c.head_dim));
}

std::string KeptLayoutName(const char* format, const DevicePlan& plan) {
  return std::string(format) + "[" + std::to_string(plan.first_layer) + "," +
         std::to_string(plan.n_layers) + ")";
}

Status CheckDeviceSeq(const DevicePlan& plan, int seq, int n, const char* backend) {
  if (seq < 0 || seq >= plan.n_seq) {
    return Status::Invalid("%s: sequence %d is out of range [0, %d)", backend, seq, plan.n_seq);
  }
  if (n < 0 || n > plan.n_ctx) {
    return Status::Invalid("%s: %d positions of a context of %d", backend, n, plan.n_ctx);
  }
  return Status::Ok();
}

Status NothingKept(int64_t offset, int64_t size, const char* backend) {
  if (offset == 0 && size == 0) return Status::Ok();
  return Status::Invalid("%s: no layers, so no kept bytes [%lld, +%lld)", backend,
                         static_cast<long long>(offset), static_cast<long long>(size));
}

Status CheckDevicePlan(const LlamaModel& model, const DevicePlan& plan, const char* backend) {
  const LlamaConfig& c = model.config;
  if (plan.first_layer != 0) {
    return Status::Invalid(
        "%s: it runs a prefix of the layers, not [%d, %d) "
        "(gpu_worker/layer_range_device.h runs a range)",
        backend, plan.first_layer, plan.n_layers);
  }
  if (plan.n_layers < 0 || plan.n_layers > c.n_layer ||
      plan.hot.size() != static_cast<size_t>(c.n_layer)) {
    return Status::Invalid(
        "%s: the plan's %d device layers or %zu hot sets do not fit a model of %d layers", backend,
        plan.n_layers, plan.hot.size(), c.n_layer);
  }
  bool any_hot = false;
  for (int il = 0; il < c.n_layer; ++il) {
    if (il >= plan.n_layers && !plan.hot[il].empty()) {
      return Status::Invalid("%s: layer %d has hot neurons but its attention is not on the device",
                             backend, il);
    }
    any_hot = any_hot || !plan.hot[il].empty();
  }
  const bool cats = UsesGateThresholds(plan.mode);
  if (cats != !plan.gate_thresholds.empty()) {
    return Status::Invalid(
        "%s: gate thresholds go with --sparse cats and teal, and only with them (mode %s, %zu "
        "thresholds)",
        backend, SparseModeName(plan.mode), plan.gate_thresholds.size());
  }
  if (cats)
    PI_RETURN_IF_ERROR(CheckGateThresholds(plan.gate_thresholds, c.n_layer, false, backend));
  const bool teal = plan.mode == SparseMode::kTeal;
  for (const std::vector<float>& t : plan.input_thresholds) {
    if (teal == t.empty()) {
      return Status::Invalid(
          "%s: input thresholds go with --sparse teal, and only with it "
          "(mode %s, %zu thresholds)",
          backend, SparseModeName(plan.mode), t.size());
    }
  }
  if (teal) PI_RETURN_IF_ERROR(CheckInputThresholds(plan.input_thresholds, c.n_layer, backend));
  if (any_hot) PI_RETURN_IF_ERROR(ValidateHotNeurons(model, plan.hot, cats));
  if (plan.n_layers == 0 && !plan.output) return Status::Ok();  // holds nothing
  if (plan.n_ctx < 1) return Status::Invalid("%s: a context of %d", backend, plan.n_ctx);
  if (plan.n_seq < 1 || plan.n_seq > 256) {
    return Status::Invalid("%s: %d sequences (1 to 256)", backend, plan.n_seq);
  }
  return Status::Ok();
}

}  // namespace pi
