#include "cpu_worker/cold_shard.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "common/format/fingerprint.h"
#include "common/transport/hello_message.h"

namespace pi {

Status ColdShard::InitFromHello(const uint8_t* hello, size_t size, const LlamaModel& model,
                                int n_threads) {
  ShardLayout layout;
  PI_RETURN_IF_ERROR(ParseHello(hello, size, ModelFingerprint(*model.file), &layout));
  layout.n_embd = model.config.n_embd;
  layout.n_ff = model.config.n_ff;
  if (layout.n_layer != model.config.n_layer) {
    return Status::Error("hello: a shard of %d layers for a model of %d", layout.n_layer,
                         model.config.n_layer);
  }
  return Init(model, std::move(layout), n_threads);
}

Status ColdShard::Init(const LlamaModel& model, ShardLayout layout, int n_threads) {
  std::string why;
  if (!SupportsSparseFfn(model, &why)) {
    return Status::Error("a cold shard needs a sparse-capable model: %s", why.c_str());
  }
  const LlamaConfig& c = model.config;
  if (layout.n_layer != c.n_layer || layout.n_embd != c.n_embd || layout.n_ff != c.n_ff) {
    return Status::Error("shard of %d layers, n_embd %d, n_ff %d for a model of %d, %d, %d",
                         layout.n_layer, layout.n_embd, layout.n_ff, c.n_layer, c.n_embd, c.n_ff);
  }
  PI_RETURN_IF_ERROR(layout.Finish());
  if (n_threads < 1 || n_threads > 512) return Status::Error("invalid thread count %d", n_threads);
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
  pool_ = std::make_unique<ThreadPool>(n_threads);
  return Status::Ok();
}

Status ColdShard::Run(const StepRequest& step, float* y, int64_t* fired) {
  const LlamaLayer& layer = model_->layers[step.layer];
  const std::vector<int32_t>& owned = layout_.owned[step.layer];
  const NeuronRows rows{&layer.ffn_gate, &layer.ffn_up, &layer.ffn_down_t};
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
  std::memset(y, 0, sizeof(float) * step.batch * layout_.n_embd);
  neurons_.AccumulateRows(rows, step.batch, row_ids_.data(), row_n_.data(), step.x, y, pool_.get(),
                          row_fired_.data());
  *fired = 0;
  for (int b = 0; b < step.batch; ++b) *fired += row_fired_[b];
  return Status::Ok();
}

}  // namespace pi
