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

namespace {

// Copies rows `ids` of `src` into `buf` and points `view` at them.
void Gather(const Tensor& src, const std::vector<int32_t>& ids, std::vector<uint8_t>* buf,
            Tensor* view) {
  buf->resize(ids.size() * static_cast<size_t>(src.row_bytes));
  for (size_t j = 0; j < ids.size(); ++j) {
    std::memcpy(buf->data() + j * src.row_bytes, src.row(ids[j]), src.row_bytes);
  }
  *view = src;
  view->info = nullptr;
  view->data = buf->data();
  view->rows = static_cast<int64_t>(ids.size());
}

}  // namespace

Status HostFfnBackend::Load(const LlamaModel& model,
                            const std::vector<std::vector<int32_t>>& hot_ids) {
  PI_RETURN_IF_ERROR(ValidateHotNeurons(model, hot_ids));
  const LlamaConfig& c = model.config;
  layers_.assign(c.n_layer, LayerRows());
  resident_bytes_ = 0;
  for (int l = 0; l < c.n_layer; ++l) {
    const std::vector<int32_t>& ids = hot_ids[l];
    const LlamaLayer& src = model.layers[l];
    LayerRows& dst = layers_[l];
    Gather(src.ffn_gate, ids, &dst.gate, &dst.gate_t);
    Gather(src.ffn_up, ids, &dst.up, &dst.up_t);
    Gather(src.ffn_down_t, ids, &dst.down_t, &dst.down_t_t);
    dst.ids.resize(ids.size());
    for (size_t j = 0; j < ids.size(); ++j) dst.ids[j] = static_cast<int32_t>(j);
    resident_bytes_ += static_cast<int64_t>(dst.gate.size() + dst.up.size() + dst.down_t.size());
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

    const LayerRows& rows = layers_[layer];
    const int64_t d = rows.gate_t.cols;
    std::memset(y, 0, sizeof(float) * d);
    const NeuronRows nr{&rows.gate_t, &rows.up_t, &rows.down_t_t};
    const int64_t fired = rows.ids.empty() ? 0
                                           : ffn_.Accumulate(nr, rows.ids.data(),
                                                             static_cast<int64_t>(rows.ids.size()),
                                                             x, y, pool_.get());
    lock.lock();
    fired_ = fired;
    done_ = true;
    cv_.notify_all();
  }
}

}  // namespace pi
