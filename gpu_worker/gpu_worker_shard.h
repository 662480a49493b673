// GpuWorkerShard: what pi-gpu-worker serves, as the coordinator's hello
// asks: whole layers on its DeviceBackend (a device hello: the GPU running
// attention, KV cache, hot neurons and maybe the head — DeviceShard), or
// only the hot neurons of every layer on its hot Shard (an FFN shard's
// hello — a ShardServer over LoadHotShard's HostHotShard,
// whose steps carry whole layers: the gate decides, as in process).
#pragma once

#include <memory>
#include <string>

#include "common/shard/shard.h"
#include "common/transport/hello_message.h"
#include "common/transport/shard_server.h"
#include "common/transport/worker_shard.h"
#include "gpu_worker/backend_factory.h"
#include "gpu_worker/device_shard.h"

namespace pi {

class GpuWorkerShard : public WorkerShard {
 public:
  // kind: --ffn-backend (auto | cuda | host; the hot neurons alone: not cuda).
  explicit GpuWorkerShard(const std::string& kind)
      : device_(kind),
        hot_("hot neurons", true,
             [kind](const LlamaModel& model, const ShardLayout& layout, int n_threads,
                    std::unique_ptr<Shard>* out) {
               return LoadHotShard(kind, n_threads, model, layout.owned, layout.gate_thresholds,
                                   out);
             }) {}

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
  ShardServer hot_;
  WorkerShard* served_ = &hot_;
};

}  // namespace pi
