// GpuWorkerShard: what pi-gpu-worker serves, as the coordinator's hello
// asks: whole layers on its DeviceBackend (a device hello: the GPU running
// attention, KV cache, hot neurons and maybe the head — DeviceShard), or
// only the hot neurons of every layer on its hot Shard (an FFN shard's
// hello — HotShard).
#pragma once

#include <memory>
#include <string>

#include "common/transport/hello_message.h"
#include "common/transport/worker_shard.h"
#include "gpu_worker/device_shard.h"
#include "gpu_worker/hot_shard.h"

namespace pi {

class GpuWorkerShard : public WorkerShard {
 public:
  // kind: --ffn-backend (auto | cuda | host).
  explicit GpuWorkerShard(std::string kind) : device_(kind), hot_(kind) {}

  Status InitFromHello(const uint8_t* hello, size_t size, const LlamaModel& model,
                       int n_threads) override {
    served_ =
        HelloMagic(hello, size) == kDeviceHelloMagic ? static_cast<WorkerShard*>(&device_) : &hot_;
    return served_->InitFromHello(hello, size, model, n_threads);
  }
  int64_t resident_bytes() const override { return served_->resident_bytes(); }
  const char* backend() const override { return served_->backend(); }
  const char* what() const override { return served_->what(); }
  size_t reply_capacity() const override { return served_->reply_capacity(); }
  size_t Handle(const uint8_t* request, size_t size, uint8_t* reply, size_t capacity) override {
    return served_->Handle(request, size, reply, capacity);
  }

 private:
  DeviceShard device_;
  HotShard hot_;
  WorkerShard* served_ = &hot_;
};

}  // namespace pi
