// CudaFfnBackend: the FfnBackend that keeps every layer's hot rows in VRAM
// and computes them with the kernels of kernels/cuda/sparse_ffn.h. Load
// gathers and packs the hot rows (kernels/cuda/packed_matrix.h) and copies
// them to the device once; a step then moves only x in and y out:
//
//   Start: x -> pinned buffer; one launch of the layer's CUDA graph (x to
//          the device, its Q8_0 copy, gate/up, down, reduce kernels, y and
//          the fired count to a pinned buffer), recorded once at Load
//   Wait:  stream sync, y copied out of the pinned buffer
//
// all on the backend's own stream, so the CPU computes the cold neurons
// meanwhile. Load reports CUDA failures as a Status; a CUDA failure after
// Load (a step) prints the error with the layer and aborts, as llama.cpp
// does: the engine never continues with garbage in the residual stream.
//
// Plain C++ header (no CUDA headers); only built when CUDA is (PI_HAVE_CUDA).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/ffn_backend.h"

namespace pi {

class CudaFfnBackend : public FfnBackend {
 public:
  CudaFfnBackend() = default;
  ~CudaFfnBackend() override;
  CudaFfnBackend(const CudaFfnBackend&) = delete;
  CudaFfnBackend& operator=(const CudaFfnBackend&) = delete;

  const char* name() const override { return "cuda"; }
  // Errors: no CUDA device, an unsupported weight type or an n_embd that is
  // not a multiple of 32, out of device memory (with the bytes asked for and
  // free), any other CUDA error string.
  Status Load(const LlamaModel& model, const std::vector<std::vector<int32_t>>& hot_ids) override;
  void Start(int layer, const float* x, float* y) override;
  int64_t Wait() override;

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
  [[noreturn]] void Die(const char* what, const std::string& error) const;
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

  // The step in flight (Start .. Wait).
  int layer_ = -1;
  float* y_ = nullptr;
};

}  // namespace pi
