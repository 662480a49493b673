// HostDeviceBackend: the DeviceBackend (common/shard/device_backend.h) in host
// memory, on its own threads — what a GPU does with a plan, done by the CPU
// blocks (attention_block.h with its own KV cache, the predictor, the hot
// neurons on a HostHotShard, with --sparse cats' thresholds; teal's
// thresholded inputs through column-sparse products, as in one process). It is how the device step
// — layers run elsewhere, the residual stream kept there, only x, the cold mask and the cold sum
// crossing — runs and is tested on machines without a GPU, and the reference the CUDA backend is
// checked against.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/base/thread_pool.h"
#include "common/compute/attention_block.h"
#include "common/compute/column_sparse.h"
#include "common/compute/predictor.h"
#include "common/model/kv_cache.h"
#include "common/shard/device_backend.h"
#include "gpu_worker/host_hot_shard.h"
#include "gpu_worker/kept_kv.h"

namespace pi {

class HostDeviceBackend : public DeviceBackend {
 public:
  explicit HostDeviceBackend(int n_threads = 1) : n_threads_(n_threads) {}

  const char* name() const override { return "host"; }
  Status Load(const LlamaModel& model, const DevicePlan& plan) override;
  const DevicePlan& plan() const override { return plan_; }

  void BeginToken(const float* h, int seq, int pos, bool dense) override;
  Status RunLayer(int il, ColdStep* cold) override;
  Status FinishToken(float* h_out, float* logits, int64_t* hot_fired) override;
  Status Head(const float* h, float* logits) override;
  Status CopySeq(int src, int dst, int n) override;
  Status SaveSeq(int seq, int n, uint64_t key) override;
  Status LoadSeq(uint64_t key, int seq, int n) override;
  Status DropSeq(uint64_t key) override {
    kept_.Drop(key);
    return Status::Ok();
  }
  Status ReadKept(uint64_t key, int n, int64_t offset, int64_t size, uint8_t* out) override;
  Status WriteKept(uint64_t key, int n, int64_t offset, const uint8_t* data, int64_t size) override;
  std::string KeptLayout() const override { return KeptLayoutName("host", plan_); }

  int64_t resident_bytes() const override { return resident_bytes_; }
  int64_t device_bytes() const override { return resident_bytes_; }

 private:
  // Adds the last cold layer's two partial sums into h (hot, then cold).
  void Merge();
  Status Misuse(const char* what);
  // --sparse teal, a token not begun dense: layer il's gate dots for the
  // hot shard from x_'s kept entries; else null (the shard reads its rows).
  const float* TealGateDots(int il);

  int n_threads_;
  const LlamaModel* model_ = nullptr;
  DevicePlan plan_;
  std::unique_ptr<ThreadPool> pool_;
  std::vector<KvCache> caches_;  // [n_seq]
  KeptKv kept_;                  // SaveSeq's: KvCache::SavePrefix's bytes
  AttentionBlock attention_;
  Predictor predictor_;
  HostHotShard hot_;
  ColumnSparseProduct gate_columns_;  // --sparse teal's gate dots
  std::vector<float> gate_dots_;      // [n_ff]
  int64_t resident_bytes_ = 0;
  std::vector<float> h_, inp_, x_, y_hot_, y_cold_, scores_;
  std::vector<uint8_t> head_q8_;
  std::vector<uint32_t> mask_;
  std::vector<std::vector<uint8_t>> is_hot_;
  int seq_ = 0, pos_ = 0, next_layer_ = 0;
  bool dense_ = false;     // this token's BeginToken
  Status misuse_;          // the first call out of contract (sticky)
  bool pending_ = false;   // a cold layer's sums wait for Merge
  int pending_layer_ = 0;  // the layer they are from
  int64_t fired_ = 0;
};

}  // namespace pi
