#include "cpu_worker/cold_shard.h"

#include <cstring>
#include <string>

#include "common/activation_stats.h"
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
  neurons_.Init(c);
  pool_ = std::make_unique<ThreadPool>(n_threads);
  return Status::Ok();
}

int64_t ColdShard::Run(const StepRequest& step, float* y) {
  const LlamaLayer& layer = model_->layers[step.layer];
  const int64_t d = layout_.n_embd;
  const int32_t* ids = step.ids ? step.ids : layout_.owned[step.layer].data();
  const NeuronRows rows{&layer.ffn_gate, &layer.ffn_up, &layer.ffn_down_t};
  int64_t fired = 0;
  for (int b = 0; b < step.batch; ++b) {
    float* yb = y + b * d;
    std::memset(yb, 0, sizeof(float) * d);
    if (step.n_ids > 0) {
      fired += neurons_.Accumulate(rows, ids, step.n_ids, step.x + b * d, yb, pool_.get());
    }
  }
  return fired;
}

}  // namespace pi
