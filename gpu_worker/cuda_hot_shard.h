// CudaHotShard: the Shard (common/shard/shard.h) that keeps every layer's hot
// rows in VRAM and computes them with the kernels of kernels/cuda/sparse_ffn.h.
// The device path (cuda_model_backend.h) holds whole layers; this holds only
// hot rows, for a gpu_worker asked for hot neurons alone and the benchmarks. Load
// gathers and packs the hot rows (kernels/cuda/packed_matrix.h) and copies
// them to the device once; a step then moves only x in and y out:
//
//   Start: row 0's x -> pinned buffer; one launch of the layer's CUDA graph
//          (x to the device, its Q8_0 copy, gate/up, down, reduce kernels, y
//          and the fired count to a pinned buffer), recorded once at Load
//   Wait:  per row, stream sync, y copied out of the pinned buffer, the next
//          row launched
//
// all on the shard's own stream, so the CPU computes the cold neurons
// meanwhile. A CUDA failure, at Load or in a step, is a Status naming the
// layer and the call; after a step's fault every later step fails as well
// (the stream's state is unknown), so the router computes the hot neurons
// on the CPU from then on: never garbage in the residual stream.
//
// Plain C++ header (no CUDA headers); only built when CUDA is (PI_HAVE_CUDA).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/shard/shard.h"

namespace pi {

class CudaHotShard : public Shard {
 public:
  static constexpr int kMaxBatch = 64;  // rows a step takes

  CudaHotShard() = default;
  ~CudaHotShard() override;
  CudaHotShard(const CudaHotShard&) = delete;
  CudaHotShard& operator=(const CudaHotShard&) = delete;

  // Takes the hot neurons of every layer (sorted, unique ids < n_ff).
  // Errors: no CUDA device, an unsupported weight type or an n_embd that is
  // not a multiple of 32, out of device memory (with the bytes asked for and
  // free), any other CUDA error string.
  Status Load(const LlamaModel& model, const std::vector<std::vector<int32_t>>& hot_ids);

  const char* name() const override { return "CUDA hot neurons"; }
  const char* backend() const override { return "cuda"; }
  const std::vector<std::vector<int32_t>>& owned() const override { return owned_; }
  int max_batch() const override { return kMaxBatch; }
  // Whole layers only (ShardStep::ids null: the gate decides).
  void Start(const ShardStep& step) override;
  Status Wait(const float** y, int64_t* fired) override;

  // Bytes of gathered rows held in VRAM (scratch and x/y buffers excluded).
  int64_t resident_bytes() const override { return resident_bytes_; }
  // Every device allocation: the rows plus scratch and x/y buffers.
  int64_t device_bytes() const { return device_bytes_; }
  // The device's name, e.g. "NVIDIA H200" (empty before Load).
  const std::string& device_name() const { return device_name_; }

 private:
  struct Layer {
    int64_t rows = 0;                                // hot neurons
    int64_t gate_off = 0, up_off = 0, down_off = 0;  // byte offsets into weights_
    DType gate_type = DType::kF32, up_type = DType::kF32, down_type = DType::kF32;
  };
  void Release();
  void LaunchRow(int b);  // row b of the step in flight
  void Fault(int row, const char* what, const char* error);
  // Enqueues layer's step on stream_ (what each graph records).
  bool EnqueueStep(int layer, std::string* err);
  // Records every layer's step as a graph (graphs_).
  Status CaptureGraphs();

  int64_t n_embd_ = 0;
  int act_form_ = 0;  // cuda::HotActivation
  std::vector<Layer> layers_;
  int64_t resident_bytes_ = 0, device_bytes_ = 0;
  std::string device_name_;

  // Device memory (one allocation for all layers' rows) and the step's
  // buffers; void* so this header needs no CUDA headers.
  void* weights_ = nullptr;  // device
  float* d_x_ = nullptr;     // device [n_embd]
  void* d_out_ = nullptr;    // device: y [n_embd] floats, then the int32 fired count
  float* d_scratch_ = nullptr;
  void* d_q8_ = nullptr;    // device: x's Q8_0 quants [n_embd], a float scale and an int sum per 32
  float* h_x_ = nullptr;    // pinned host [n_embd]
  void* h_out_ = nullptr;   // pinned host, as d_out_
  void* stream_ = nullptr;  // cudaStream_t
  std::vector<void*> graphs_;  // [n_layer] cudaGraphExec_t: one step each

  std::vector<std::vector<int32_t>> owned_;
  std::vector<float> y_;  // [kMaxBatch, n_embd] the sums of steps without `out`
  // The step in flight (Start .. Wait); a refusal of it, and the first fault.
  ShardStep step_;
  float* out_ = nullptr;
  std::string refused_, fault_;
};

}  // namespace pi
