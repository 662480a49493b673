#include "gpu_worker/host_ffn_backend.h"

#include <cstring>

namespace pi {

HostFfnBackend::HostFfnBackend(int n_threads)
    : pool_(std::make_unique<ThreadPool>(n_threads)), thread_([this] { Loop(); }) {}

HostFfnBackend::~HostFfnBackend() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

Status HostFfnBackend::Load(const LlamaModel& model,
                            const std::vector<std::vector<int32_t>>& hot_ids) {
  PI_RETURN_IF_ERROR(ValidateHotNeurons(model, hot_ids));
  const LlamaConfig& c = model.config;
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
  ffn_.Init(c);
  return Status::Ok();
}

void HostFfnBackend::Start(int layer, const float* x, float* y) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    layer_ = layer;
    x_ = x;
    y_ = y;
    has_work_ = true;
    done_ = false;
  }
  cv_.notify_all();
}

int64_t HostFfnBackend::Wait() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [this] { return done_; });
  return fired_;
}

void HostFfnBackend::Loop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [this] { return has_work_ || stop_; });
    if (stop_) return;
    has_work_ = false;
    const int layer = layer_;
    const float* x = x_;
    float* y = y_;
    lock.unlock();  // never hold the lock across the computation

    const LayerRows& lr = layers_[layer];
    const int64_t d = lr.rows.up_t.cols;  // every form has up rows
    std::memset(y, 0, sizeof(float) * d);
    const NeuronRows nr{&lr.rows.gate_t, &lr.rows.up_t, &lr.rows.down_t_t};
    const int64_t fired =
        lr.ids.empty() ? 0
                       : ffn_.Accumulate(nr, lr.ids.data(), static_cast<int64_t>(lr.ids.size()), x,
                                         y, pool_.get());
    lock.lock();
    fired_ = fired;
    done_ = true;
    cv_.notify_all();
  }
}

}  // namespace pi
