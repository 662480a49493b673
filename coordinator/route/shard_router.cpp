#include "coordinator/route/shard_router.h"

#include <algorithm>

namespace pi {

Status ShardRouter::Init(const LlamaModel& model, const std::vector<Shard*>& shards,
                         const std::vector<std::vector<uint8_t>>& is_hot, int max_rows,
                         ShardEvents* events, const std::vector<float>& gate_thresholds) {
  if (shards.empty()) return Status::Ok();
  if (shards.size() > 1024) return Status::Error("%zu shards: at most 1024", shards.size());
  std::string why;
  if (!SupportsNeuronSplit(model, !gate_thresholds.empty(), &why)) {
    return Status::Error("cold neurons on workers need a sparse-capable model: %s", why.c_str());
  }
  const LlamaConfig& c = model.config;
  owner_.assign(c.n_layer, std::vector<int16_t>(c.n_ff, -1));
  for (size_t k = 0; k < shards.size(); ++k) {
    const std::vector<std::vector<int32_t>>& owned = shards[k]->owned();
    if (owned.size() != static_cast<size_t>(c.n_layer)) {
      return Status::Error("shard %s lists %zu layers, the model has %d", shards[k]->name(),
                           owned.size(), c.n_layer);
    }
    for (int l = 0; l < c.n_layer; ++l) {
      for (int32_t id : owned[l]) {
        if (id < 0 || id >= c.n_ff || owner_[l][id] >= 0 || (!is_hot.empty() && is_hot[l][id])) {
          return Status::Error("shard %s: layer %d neuron %d is out of range, hot, or owned twice",
                               shards[k]->name(), l, id);
        }
        owner_[l][id] = static_cast<int16_t>(k);
      }
    }
  }
  model_ = &model;
  gate_thresholds_ = gate_thresholds;
  n_ff_ = c.n_ff;
  n_embd_ = c.n_embd;
  shards_ = shards;
  events_ = events;
  health_.assign(shards.size(), ShardHealth());
  // Rows per step: as many as every shard's messages carry.
  max_rows_ = max_rows;
  for (Shard* shard : shards) max_rows_ = std::min(max_rows_, std::max(1, shard->max_batch()));
  const size_t rows = static_cast<size_t>(max_rows_);
  shard_ids_.assign(shards.size(), std::vector<int32_t>(rows * c.n_ff));
  shard_row_n_.assign(shards.size(), std::vector<int32_t>(rows, 0));
  shard_n_.assign(shards.size(), 0);
  local_ids_.assign(rows * c.n_ff, 0);
  local_rows_.assign(rows, nullptr);
  local_n_.assign(rows, 0);
  fallback_ids_.assign(rows, nullptr);
  fallback_n_.assign(rows, 0);
  fired_rows_.assign(rows, 0);
  return Status::Ok();
}

int64_t ShardRouter::Start(int il, int n, const int32_t* const* ids, const int64_t* n_ids,
                           const float* x, const float* gate_dots, const int32_t* const** local,
                           const int64_t** local_n) {
  gate_dots_ = gate_dots;
  for (size_t k = 0; k < shards_.size(); ++k) health_[k].TryRecover(shards_[k], events_);
  const int16_t* owner = owner_[il].data();
  const size_t n_shards = shards_.size();
  for (size_t k = 0; k < n_shards; ++k) shard_n_[k] = 0;
  int64_t routed = 0;
  for (int b = 0; b < n; ++b) {
    for (size_t k = 0; k < n_shards; ++k) shard_row_n_[k][b] = 0;
    int32_t* mine = local_ids_.data() + b * n_ff_;
    int64_t m = 0;
    for (int64_t j = 0; j < n_ids[b]; ++j) {  // ids are sorted: so is every share
      const int32_t id = ids[b][j];
      const int16_t o = owner[id];
      if (o >= 0 && !health_[o].down()) {
        shard_ids_[o][shard_n_[o]++] = id;
        ++shard_row_n_[o][b];
      } else {
        mine[m++] = id;
      }
    }
    local_rows_[b] = mine;
    local_n_[b] = m;
    routed += n_ids[b] - m;
  }
  for (size_t k = 0; k < n_shards; ++k) {
    if (!health_[k].down()) {
      ShardStep step{il, n, x, shard_ids_[k].data(), shard_row_n_[k].data()};
      step.gate_dots = gate_dots;
      shards_[k]->Start(step);
    }
  }
  *local = local_rows_.data();
  *local_n = local_n_.data();
  return routed;
}

int64_t ShardRouter::Finish(int il, int n, const float* x, float* y, NeuronFfn* neurons,
                            ThreadPool* pool) {
  const LlamaLayer& layer = model_->layers[il];
  NeuronRows rows{&layer.ffn_gate, &layer.ffn_up, &layer.ffn_down_t};
  if (!gate_thresholds_.empty()) rows.threshold = gate_thresholds_[il];
  rows.gate_dots = gate_dots_;
  int64_t fired_total = 0;
  for (size_t k = 0; k < shards_.size(); ++k) {  // in shard order: sums do not depend on timing
    if (health_[k].down()) continue;
    const float* ys = nullptr;
    int64_t fired = 0;
    const Status s = shards_[k]->Wait(&ys, &fired);
    if (s.ok()) {
      for (int64_t i = 0; i < n * n_embd_; ++i) y[i] += ys[i];
      fired_total += fired;
      continue;
    }
    // The shard is gone or late: its neurons run here until it recovers.
    health_[k].Failed(*shards_[k], s, events_);
    const int32_t* share = shard_ids_[k].data();
    for (int b = 0; b < n; ++b) {
      fallback_ids_[b] = share;
      fallback_n_[b] = shard_row_n_[k][b];
      share += shard_row_n_[k][b];
    }
    neurons->AccumulateRows(rows, n, fallback_ids_.data(), fallback_n_.data(), x, y, pool,
                            fired_rows_.data());
    for (int b = 0; b < n; ++b) fired_total += fired_rows_[b];
  }
  return fired_total;
}

}  // namespace pi
