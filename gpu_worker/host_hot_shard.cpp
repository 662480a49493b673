#include "gpu_worker/host_hot_shard.h"

#include <cstring>

#include "common/compute/sparse_mode.h"

namespace pi {

HostHotShard::HostHotShard(int n_threads)
    : pool_(std::make_unique<ThreadPool>(n_threads)), thread_([this] { Loop(); }) {}

HostHotShard::~HostHotShard() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

Status HostHotShard::Load(const LlamaModel& model, const std::vector<std::vector<int32_t>>& hot_ids,
                          const std::vector<float>& gate_thresholds) {
  PI_RETURN_IF_ERROR(ValidateHotNeurons(model, hot_ids, !gate_thresholds.empty()));
  const LlamaConfig& c = model.config;
  PI_RETURN_IF_ERROR(CheckGateThresholds(gate_thresholds, c.n_layer, true, name()));
  gate_thresholds_ = gate_thresholds;
  layers_.assign(c.n_layer, LayerRows());
  resident_bytes_ = 0;
  for (int l = 0; l < c.n_layer; ++l) {
    const std::vector<int32_t>& ids = hot_ids[l];
    LayerRows& dst = layers_[l];
    GatherHotRows(model.layers[l], ids, &dst.rows);
    dst.ids.resize(ids.size());
    for (size_t j = 0; j < ids.size(); ++j) dst.ids[j] = static_cast<int32_t>(j);
    resident_bytes_ += dst.rows.bytes();
  }
  owned_ = hot_ids;
  n_embd_ = c.n_embd;
  n_ff_ = c.n_ff;
  gate_dots_.assign(c.n_ff, 0.0f);
  ffn_.Init(c);
  y_.assign(static_cast<size_t>(kMaxBatch) * c.n_embd, 0.0f);
  return Status::Ok();
}

void HostHotShard::Start(const ShardStep& step) {
  Status refused;
  if (layers_.empty()) {
    refused = Status::Error("%s: a step before Load", name());
  } else if (step.layer < 0 || step.layer >= static_cast<int>(layers_.size()) || step.batch < 1 ||
             step.batch > kMaxBatch) {
    refused = Status::Error("%s: layer %d, batch %d out of range", name(), step.layer, step.batch);
  } else if (step.ids || step.row_n) {
    refused = Status::Error("%s takes whole layers, not candidate ids", name());
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    step_ = step;
    out_ = step.out ? step.out : y_.data();
    refused_ = refused;
    has_work_ = refused.ok();
    done_ = !refused.ok();
  }
  cv_.notify_all();
}

Status HostHotShard::Wait(const float** y, int64_t* fired) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [this] { return done_; });
  if (!refused_.ok()) return refused_;
  *y = out_;
  *fired = fired_;
  return Status::Ok();
}

int64_t HostHotShard::Compute(const ShardStep& step, float* y) {
  // A row at a time: each row's sum is formed exactly as it is alone.
  const LayerRows& lr = layers_[step.layer];
  NeuronRows nr{&lr.rows.gate_t, &lr.rows.up_t, &lr.rows.down_t_t};
  if (!gate_thresholds_.empty() && !step.dense) nr.threshold = gate_thresholds_[step.layer];
  std::memset(y, 0, sizeof(float) * step.batch * n_embd_);
  if (lr.ids.empty()) return 0;
  int64_t fired = 0;
  const std::vector<int32_t>& hot = owned_[step.layer];
  for (int b = 0; b < step.batch; ++b) {
    if (step.gate_dots) {  // --sparse teal: the host's dots, by compact row
      const float* row = step.gate_dots + static_cast<size_t>(b) * n_ff_;
      for (size_t j = 0; j < hot.size(); ++j) gate_dots_[j] = row[hot[j]];
      nr.gate_dots = gate_dots_.data();
    }
    fired += ffn_.Accumulate(nr, lr.ids.data(), static_cast<int64_t>(lr.ids.size()),
                             step.x + b * n_embd_, y + b * n_embd_, pool_.get());
  }
  return fired;
}

void HostHotShard::Loop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [this] { return has_work_ || stop_; });
    if (stop_) return;
    has_work_ = false;
    const ShardStep step = step_;
    float* y = out_;
    lock.unlock();  // never hold the lock across the computation
    const int64_t fired = Compute(step, y);
    lock.lock();
    fired_ = fired;
    done_ = true;
    cv_.notify_all();
  }
}

}  // namespace pi
