#include "common/split_ffn.h"

#include "kernels/cpu/ops.h"

namespace pi {

Status SplitFfn::Init(const LlamaModel& model, const std::vector<std::vector<int32_t>>& hot_ids,
                      FfnBackend* backend) {
  PI_RETURN_IF_ERROR(ValidateHotNeurons(model, hot_ids));
  const LlamaConfig& c = model.config;
  model_ = &model;
  backend_ = backend;
  cold_ids_.assign(c.n_layer, {});
  for (int l = 0; l < c.n_layer; ++l) {
    std::vector<bool> hot(c.n_ff, false);
    for (int32_t id : hot_ids[l]) hot[id] = true;
    for (int32_t i = 0; i < c.n_ff; ++i) {
      if (!hot[i]) cold_ids_[l].push_back(i);
    }
  }
  cpu_.Init(c);
  x_.assign(c.n_embd, 0.0f);
  y_hot_.assign(c.n_embd, 0.0f);
  y_cold_.assign(c.n_embd, 0.0f);
  return Status::Ok();
}

void SplitFfn::Forward(int layer, float* h, ThreadPool* pool) {
  const LlamaConfig& c = model_->config;
  const LlamaLayer& l = model_->layers[layer];
  RmsNorm(h, reinterpret_cast<const float*>(l.ffn_norm.data), c.n_embd, c.norm_eps, x_.data());
  backend_->Start(layer, x_.data(), y_hot_.data());
  std::fill(y_cold_.begin(), y_cold_.end(), 0.0f);
  const std::vector<int32_t>& cold = cold_ids_[layer];
  const NeuronRows rows{&l.ffn_gate, &l.ffn_up, &l.ffn_down_t};
  cold_fired_ = cold.empty() ? 0
                             : cpu_.Accumulate(rows, cold.data(), static_cast<int64_t>(cold.size()),
                                               x_.data(), y_cold_.data(), pool);
  hot_fired_ = backend_->Wait();
  for (int64_t i = 0; i < c.n_embd; ++i) h[i] += y_hot_[i] + y_cold_[i];
}

}  // namespace pi
