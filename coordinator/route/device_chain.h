// DeviceChain: several devices — one GPU each, usually each in its own
// gpu_worker process (device_worker.h) — run as the one DeviceBackend the
// engine drives. Member k holds layers [first_layer, n_layers) of its plan;
// the ranges follow each other from layer 0 in member order (pipeline
// parallelism, as llama.cpp's -sm layer), each with its layers' KV cache,
// predictors and hot neurons. One member holds the head (a member without
// layers may hold just the head). A token runs
//
//   member 0: BeginToken(embedding) RunLayer... FinishToken(h) ─▶ h here
//   member 1: BeginToken(h)         RunLayer... FinishToken(h or logits)
//
// so between members one residual row crosses the host (4 n_embd bytes each
// way), on top of each layer's cold part, which the engine computes as
// with one device. At one token at a time the members run one after the
// other; what the chain buys is their VRAM together.
//
// A member that fails fails the call; Recover() brings that member back
// (the engine then replays the context through the whole chain: members
// that did not fail rewrite their caches with the same values).
#pragma once

#include <string>
#include <vector>

#include "common/base/status.h"
#include "common/model/llama_model.h"
#include "common/shard/device_backend.h"

namespace pi {

class DeviceChain : public DeviceBackend {
 public:
  // `members`: loaded, not owned, outliving the chain; their ranges must
  // cover [0, end) in order, their context, sequences, cache types and
  // predictor mode agree, and at most one hold the head.
  Status Init(const LlamaModel& model, std::vector<DeviceBackend*> members);

  // "gpu worker 12 + gpu worker 13".
  const char* name() const override { return name_.c_str(); }
  // A chain is made of loaded members (Init), not loaded itself.
  Status Load(const LlamaModel&, const DevicePlan&) override {
    return Status::Error("a device chain is made of loaded devices");
  }
  // The union: layers [0, end), every member's hot neurons.
  const DevicePlan& plan() const override { return plan_; }

  void BeginToken(const float* h, int seq, int pos, bool dense) override;
  Status RunLayer(int il, ColdStep* cold) override;
  Status FinishToken(float* h_out, float* logits, int64_t* hot_fired) override;
  Status Head(const float* h, float* logits) override;
  // Each member with layers does the same with its own; a save or load that
  // fails on one member is undone on those before it (what they kept is
  // dropped; a load leaves the sequence for the caller to reset).
  Status CopySeq(int src, int dst, int n) override;
  Status SaveSeq(int seq, int n, uint64_t key) override;
  Status LoadSeq(uint64_t key, int seq, int n) override;
  Status DropSeq(uint64_t key) override;
  // The members' kept bytes one after the other, in layer order (each
  // member's SavedSeqBytes(n) of them); the layout "cuda[0,12)+cuda[12,24)".
  Status ReadKept(uint64_t key, int n, int64_t offset, int64_t size, uint8_t* out) override;
  Status WriteKept(uint64_t key, int n, int64_t offset, const uint8_t* data, int64_t size) override;
  std::string KeptLayout() const override;
  Status Recover() override;

  int64_t resident_bytes() const override;
  int64_t device_bytes() const override;

  int size() const { return static_cast<int>(members_.size()); }
  DeviceBackend* member(int k) const { return members_[k]; }

 private:
  // Hands the token from the current member (its layers done) to the next:
  // h comes back here and goes on.
  Status NextMember();
  // Notes which member a failed call came from.
  Status Fail(int k, const Status& s);
  // The members' parts of kept bytes [offset, offset + size) of n
  // positions: fn(member, offset in its part, size, offset in the range).
  template <typename Fn>
  Status ForKeptParts(int n, int64_t offset, int64_t size, Fn fn);

  std::vector<DeviceBackend*> members_;
  const LlamaConfig* config_ = nullptr;
  std::vector<int> runs_;  // members with layers, in order
  int head_ = -1;          // the member holding the head, or -1
  DevicePlan plan_;
  std::string name_;
  std::vector<float> h_;  // [n_embd] the residual between members
  bool dense_ = false;
  int seq_ = 0, pos_ = 0;
  int current_ = 0;  // index into runs_ of the member running the token
  int64_t fired_ = 0;
  int failed_ = -1;  // the member whose call failed last, or -1
};

}  // namespace pi
