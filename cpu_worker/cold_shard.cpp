#include "cpu_worker/cold_shard.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "common/transport/shard_server.h"

namespace pi {

Status ColdShard::Init(const LlamaModel& model, ShardLayout layout, int n_threads) {
  std::string why;
  if (!SupportsNeuronSplit(model, !layout.gate_thresholds.empty(), &why)) {
    return Status::Unsupported("a cold shard needs a sparse-capable model: %s", why.c_str());
  }
  const LlamaConfig& c = model.config;
  if (layout.n_layer != c.n_layer || layout.n_embd != c.n_embd || layout.n_ff != c.n_ff) {
    return Status::Invalid("shard of %d layers, n_embd %d, n_ff %d for a model of %d, %d, %d",
                           layout.n_layer, layout.n_embd, layout.n_ff, c.n_layer, c.n_embd, c.n_ff);
  }
  PI_RETURN_IF_ERROR(layout.Finish());
  if (n_threads < 1 || n_threads > 512) {
    return Status::Invalid("invalid thread count %d", n_threads);
  }
  model_ = &model;
  layout_ = std::move(layout);
  resident_bytes_ = 0;
  for (int l = 0; l < c.n_layer; ++l) {
    const LlamaLayer& L = model.layers[l];
    const int64_t per_neuron = L.ffn_up.row_bytes + L.ffn_down_t.row_bytes +
                               (L.ffn_gate.present() ? L.ffn_gate.row_bytes : 0);
    resident_bytes_ += per_neuron * static_cast<int64_t>(layout_.owned[l].size());
  }
  neurons_.Init(c, std::min(layout_.max_batch, NeuronFfn::kMaxRows));
  row_ids_.assign(layout_.max_batch, nullptr);
  row_n_.assign(layout_.max_batch, 0);
  row_fired_.assign(layout_.max_batch, 0);
  y_.assign(static_cast<size_t>(layout_.max_batch) * c.n_embd, 0.0f);
  pool_ = std::make_unique<ThreadPool>(n_threads);
  return Status::Ok();
}

void ColdShard::Start(const ShardStep& step) {
  const LlamaLayer& layer = model_->layers[step.layer];
  const std::vector<int32_t>& owned = layout_.owned[step.layer];
  NeuronRows rows{&layer.ffn_gate, &layer.ffn_up, &layer.ffn_down_t};
  if (!layout_.gate_thresholds.empty()) rows.threshold = layout_.gate_thresholds[step.layer];
  rows.gate_dots = step.gate_dots;
  const int32_t* ids = step.ids;
  for (int b = 0; b < step.batch; ++b) {
    if (step.row_n) {
      row_ids_[b] = ids;
      row_n_[b] = step.row_n[b];
      ids += step.row_n[b];
    } else {
      row_ids_[b] = owned.data();
      row_n_[b] = static_cast<int64_t>(owned.size());
    }
  }
  float* y = step.out ? step.out : y_.data();
  std::memset(y, 0, sizeof(float) * step.batch * layout_.n_embd);
  neurons_.AccumulateRows(rows, step.batch, row_ids_.data(), row_n_.data(), step.x, y, pool_.get(),
                          row_fired_.data());
  fired_ = 0;
  for (int b = 0; b < step.batch; ++b) fired_ += row_fired_[b];
  sum_ = y;
}

Status ColdShard::Wait(const float** y, int64_t* fired) {
  *y = sum_;
  *fired = fired_;
  return Status::Ok();
}

std::unique_ptr<WorkerShard> NewColdShardServer() {
  return std::make_unique<ShardServer>("cold neurons", false,
                                       [](const LlamaModel& model, const ShardLayout& layout,
                                          int n_threads, std::unique_ptr<Shard>* out) {
                                         auto shard = std::make_unique<ColdShard>();
                                         PI_RETURN_IF_ERROR(shard->Init(model, layout, n_threads));
                                         *out = std::move(shard);
                                         return Status::Ok();
                                       });
}

}  // namespace pi
