// LayerRangeDevice: a DeviceBackend for layers [first_layer, n_layers) made
// of one that runs a prefix (HostDeviceBackend, CudaModelBackend): it hands
// the inner backend a view of the model holding only the range's layers
// (the same tensors, nothing copied — but --sparse teal's transposed copies
// for the host backend where the model has none, as a gpu worker's has
// not) and a plan renumbered from 0, and maps the layer numbers of every
// call. So a second
// GPU holds layers 16..31 with the code that holds 0..15 on the first
// (coordinator/route/device_chain.h chains them); a plan starting at layer 0
// passes through unchanged (when the model has the copies it needs).
#pragma once

#include <memory>
#include <string>

#include "common/model/llama_model.h"
#include "common/shard/device_backend.h"

namespace pi {

class LayerRangeDevice : public DeviceBackend {
 public:
  // copy_threads > 0: the inner backend reads --sparse teal's transposed
  // copies (the host backend; CUDA does not), made on that many threads
  // where the model lacks them.
  explicit LayerRangeDevice(std::unique_ptr<DeviceBackend> inner, int copy_threads = 0)
      : inner_(std::move(inner)), copy_threads_(copy_threads) {}

  const char* name() const override { return inner_->name(); }
  Status Load(const LlamaModel& model, const DevicePlan& plan) override;
  const DevicePlan& plan() const override { return plan_; }

  void BeginToken(const float* h, int seq, int pos, bool dense) override {
    inner_->BeginToken(h, seq, pos, dense);
  }
  Status RunLayer(int il, ColdStep* cold) override {
    return inner_->RunLayer(il - plan_.first_layer, cold);
  }
  Status FinishToken(float* h_out, float* logits, int64_t* hot_fired) override {
    return inner_->FinishToken(h_out, logits, hot_fired);
  }
  Status Head(const float* h, float* logits) override { return inner_->Head(h, logits); }
  Status CopySeq(int src, int dst, int n) override { return inner_->CopySeq(src, dst, n); }
  Status SaveSeq(int seq, int n, uint64_t key) override { return inner_->SaveSeq(seq, n, key); }
  Status LoadSeq(uint64_t key, int seq, int n) override { return inner_->LoadSeq(key, seq, n); }
  Status DropSeq(uint64_t key) override { return inner_->DropSeq(key); }
  Status ReadKept(uint64_t key, int n, int64_t offset, int64_t size, uint8_t* out) override {
    return inner_->ReadKept(key, n, offset, size, out);
  }
  Status WriteKept(uint64_t key, int n, int64_t offset, const uint8_t* data,
                   int64_t size) override {
    return inner_->WriteKept(key, n, offset, data, size);
  }
  // The inner backend's format, the range's layers.
  std::string KeptLayout() const override;
  Status Recover() override { return inner_->Recover(); }

  int64_t resident_bytes() const override { return inner_->resident_bytes(); }
  int64_t device_bytes() const override { return inner_->device_bytes(); }

 private:
  std::unique_ptr<DeviceBackend> inner_;
  int copy_threads_;
  DevicePlan plan_;   // as given (model layer numbers)
  LlamaModel range_;  // the view: config.n_layer = the range's layers, no file
};

}  // namespace pi
