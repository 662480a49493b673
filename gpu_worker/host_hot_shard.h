// HostHotShard: the hot neurons of every layer in host memory, computed on
// the shard's own threads — how the hot/cold split runs and is tested on
// machines without a GPU, with the data layout the CUDA shard uses: each
// layer's hot rows of gate, up and down_t gathered into compact matrices
// (gpu_worker/hot_rows.h). A step takes whole layers (ShardStep::ids null:
// every hot neuron, the gate deciding), its rows one after another, each
// row's sum as it is alone.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "common/base/thread_pool.h"
#include "common/compute/neuron_ffn.h"
#include "common/shard/shard.h"
#include "gpu_worker/hot_rows.h"

namespace pi {

class HostHotShard : public Shard {
 public:
  // The most rows a step takes.
  static constexpr int kMaxBatch = 64;

  // `n_threads` threads compute the hot part (its own pool: the caller's
  // threads are busy with the cold part at the same time).
  explicit HostHotShard(int n_threads = 1);
  ~HostHotShard() override;

  // Takes the hot neurons of every layer (sorted, unique ids < n_ff; a layer
  // may have none) and gathers their gate, up and down_t rows. The model's
  // FFN must be cut by neuron (SupportsNeuronSplit); gate_thresholds (one
  // per layer, or none) are --sparse cats' levels.
  Status Load(const LlamaModel& model, const std::vector<std::vector<int32_t>>& hot_ids,
              const std::vector<float>& gate_thresholds = {});

  const char* name() const override { return "host hot neurons"; }
  const char* backend() const override { return "host"; }
  const std::vector<std::vector<int32_t>>& owned() const override { return owned_; }
  int max_batch() const override { return kMaxBatch; }
  bool takes_gate_dots() const override { return true; }
  // Bytes of gathered rows held (what the CUDA shard puts in VRAM).
  int64_t resident_bytes() const override { return resident_bytes_; }
  void Start(const ShardStep& step) override;
  // Errors: a step with candidate ids (this shard takes whole layers), a
  // layer or batch out of range.
  Status Wait(const float** y, int64_t* fired) override;

 private:
  struct LayerRows {
    HotRows rows;              // compact: row j = hot neuron j
    std::vector<int32_t> ids;  // 0 .. hot - 1
  };
  void Loop();
  int64_t Compute(const ShardStep& step, float* y);

  std::vector<LayerRows> layers_;
  std::vector<std::vector<int32_t>> owned_;
  std::vector<float> gate_thresholds_;  // [n_layer] or empty
  int64_t n_embd_ = 0, n_ff_ = 0;
  std::vector<float> gate_dots_;  // [n_ff] a row's given dots by compact row (--sparse teal)
  NeuronFfn ffn_;
  std::unique_ptr<ThreadPool> pool_;
  int64_t resident_bytes_ = 0;
  std::vector<float> y_;  // [kMaxBatch, n_embd] the sums of steps without `out`

  std::mutex mu_;
  std::condition_variable cv_;
  bool has_work_ = false, done_ = true, stop_ = false;
  ShardStep step_;
  float* out_ = nullptr;
  Status refused_;
  int64_t fired_ = 0;
  std::thread thread_;
};

}  // namespace pi
