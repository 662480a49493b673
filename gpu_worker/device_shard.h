// DeviceShard: a gpu_worker holding whole layers — the DeviceBackend
// (common/shard/device_backend.h: attention and its KV cache, the predictor, the
// hot neurons, maybe the head) for the plan the coordinator's device hello
// names — answering the device's kinds of step (common/transport/device_message.h):
// a token's layers run here until one with a cold part, whose normed input
// goes to the coordinator and whose cold sum comes back with the next
// message. The backend is CUDA, or the host backend where there is no GPU
// (or --ffn-backend host); the hello's reply names it.
//
// Every message is checked against the session's state before the backend
// sees it (a kResume for the layer waiting for its cold sum, a position
// inside the context), so a bad or out-of-order message is an error reply,
// never a backend abort.
#pragma once

#include <memory>
#include <string>

#include "common/shard/device_backend.h"
#include "common/transport/device_message.h"
#include "common/transport/worker_shard.h"

namespace pi {

class DeviceShard : public WorkerShard {
 public:
  // kind: --ffn-backend (auto | cuda | host).
  explicit DeviceShard(std::string kind) : kind_(std::move(kind)) {}

  Status InitFromHello(const uint8_t* hello, size_t size, const LlamaModel& model,
                       int n_threads) override;
  int64_t resident_bytes() const override { return device_ ? device_->resident_bytes() : 0; }
  const char* backend() const override { return device_ ? device_->name() : "none"; }
  const char* what() const override { return "layers (attention, KV cache, hot neurons)"; }
  size_t reply_capacity() const override { return DeviceReplyCapacity(layout_); }
  size_t Handle(const uint8_t* request, size_t size, uint8_t* reply, size_t capacity) override;

 private:
  // Runs the token's layers from next_layer_ until one with a cold part
  // (a kCold reply) or the end (FinishToken: a kDone reply with `out`).
  Status RunLayers(uint64_t step_id, DeviceOut out, uint8_t* reply, size_t* reply_size);
  Status Answer(const DeviceRequest& request, uint8_t* reply, size_t* reply_size);
  // A kSeq* request but kSeqRead: the backend's CopySeq, SaveSeq, LoadSeq,
  // DropSeq or WriteKept.
  Status SeqStep(const DeviceRequest& request);

  std::string kind_;
  std::unique_ptr<DeviceBackend> device_;
  DeviceLayout layout_;
  bool in_token_ = false;  // a kBegin's layers are under way
  int next_layer_ = 0;
  int waiting_layer_ = -1;  // the layer whose cold sum is due (kResume), or -1
  ColdStep cold_;
};

}  // namespace pi
