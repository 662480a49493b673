// HostFfnBackend: the FfnBackend that keeps the hot rows in host memory and
// computes them on its own threads. It is how the hot/cold split runs and is
// tested on machines without a GPU, with the same data layout a GPU backend
// uses: each layer's hot rows of gate, up and down_t gathered into compact
// matrices (gpu_worker/hot_rows.h).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "common/ffn_backend.h"
#include "common/neuron_ffn.h"
#include "common/thread_pool.h"
#include "gpu_worker/hot_rows.h"

namespace pi {

class HostFfnBackend : public FfnBackend {
 public:
  // `n_threads` threads compute the hot part (its own pool: the caller's
  // threads are busy with the cold part at the same time).
  explicit HostFfnBackend(int n_threads = 1);
  ~HostFfnBackend() override;

  const char* name() const override { return "host"; }
  Status Load(const LlamaModel& model, const std::vector<std::vector<int32_t>>& hot_ids) override;
  void Start(int layer, const float* x, float* y) override;
  int64_t Wait() override;

  // Bytes of gathered rows held (what a GPU backend would put in VRAM).
  int64_t resident_bytes() const override { return resident_bytes_; }

 private:
  struct LayerRows {
    HotRows rows;              // compact: row j = hot neuron j
    std::vector<int32_t> ids;  // 0 .. hot - 1
  };
  void Loop();

  std::vector<LayerRows> layers_;
  NeuronFfn ffn_;
  std::unique_ptr<ThreadPool> pool_;
  int64_t resident_bytes_ = 0;

  std::mutex mu_;
  std::condition_variable cv_;
  bool has_work_ = false, done_ = true, stop_ = false;
  int layer_ = 0;
  const float* x_ = nullptr;
  float* y_ = nullptr;
  int64_t fired_ = 0;
  std::thread thread_;
};

}  // namespace pi
