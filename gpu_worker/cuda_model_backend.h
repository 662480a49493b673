// CudaModelBackend: the DeviceBackend (common/shard/device_backend.h) of one CUDA
// GPU. Load packs and copies what the plan gives the device — each device
// layer's attention weights and KV cache, its predictor, its hot FFN rows
// (gathered), and the output head — and records the token's work as CUDA
// graphs, so a step is a few graph launches:
//
//   segment graphs  the device layers cut after every layer with a cold part
//                   (the first also takes the token's embedding row and
//                   position in; each later one first adds the host's cold
//                   partial sum into h); a layer with a cold part copies its
//                   normed FFN input (and predicted-cold mask) to pinned host
//                   memory and records an event the host spins on, then runs
//                   its hot neurons while the host runs the cold ones
//   finish graphs   the last cold sum added, then the head (logits) or h
//                   copied out, and the layers' fired counts
//
// Layers whose neurons are all on the device sit in one segment: nothing
// crosses PCIe between them. Kernels: kernels/cuda/{matvec,layer_ops,
// sparse_ffn}.h. Load reports errors as a Status; a CUDA failure after Load
// is the failing call's Status (kInternal) and every later call's: the
// engine never continues with garbage in the residual stream, and the
// request fails with the CUDA error instead of the process aborting.
//
// Plain C++ header (no CUDA headers); only built when CUDA is (PI_HAVE_CUDA).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/shard/device_backend.h"
#include "gpu_worker/kept_kv.h"

namespace pi {

class CudaModelBackend : public DeviceBackend {
 public:
  CudaModelBackend() = default;
  ~CudaModelBackend() override;
  CudaModelBackend(const CudaModelBackend&) = delete;
  CudaModelBackend& operator=(const CudaModelBackend&) = delete;

  const char* name() const override { return "cuda"; }
  // Errors: no CUDA device, a weight type, head size or cache type the
  // kernels do not take (naming the tensor), out of device memory (the bytes
  // asked for and free), any CUDA error string.
  Status Load(const LlamaModel& model, const DevicePlan& plan) override;
  const DevicePlan& plan() const override { return plan_; }

  void BeginToken(const float* h, int seq, int pos, bool dense) override;
  Status RunLayer(int il, ColdStep* cold) override;
  Status FinishToken(float* h_out, float* logits, int64_t* hot_fired) override;
  Status Head(const float* h, float* logits) override;
  // One 2-D copy each for the keys and the values: a sequence's rows of
  // every (layer, head) lie at one stride (the caches' layout, below).
  Status CopySeq(int src, int dst, int n) override;
  Status SaveSeq(int seq, int n, uint64_t key) override;
  Status LoadSeq(uint64_t key, int seq, int n) override;
  Status DropSeq(uint64_t key) override {
    kept_.Drop(key);
    return Status::Ok();
  }
  Status ReadKept(uint64_t key, int n, int64_t offset, int64_t size, uint8_t* out) override;
  Status WriteKept(uint64_t key, int n, int64_t offset, const uint8_t* data, int64_t size) override;
  std::string KeptLayout() const override { return KeptLayoutName("cuda", plan_); }

  int64_t resident_bytes() const override { return resident_bytes_; }
  int64_t device_bytes() const override { return device_bytes_; }
  // The device's name, e.g. "NVIDIA H200" (empty before Load).
  const std::string& device_name() const { return device_name_; }

 private:
  struct Matrix {  // a packed matrix at an offset of the weight allocation
    DType type = DType::kF32;
    int64_t rows = 0, cols = 0, offset = -1;
  };
  struct Layer {
    int64_t attn_norm = -1, attn_norm_b = -1, ffn_norm = -1, ffn_norm_b = -1;  // offsets
    Matrix qkv[3];
    int n_qkv = 0;
    int64_t qkv_out[3] = {0, 0, 0};  // where each writes in the q|k|v buffer (floats)
    Matrix wo, fc1, fc2, gate, up, down_t;
    int64_t hot_bits = -1;  // offset of the hot-neuron bitmask (predictor mode)
    int64_t n_hot = 0;
    bool cold = false;       // has neurons the host computes
    bool predictor = false;  // evaluates the predictor for the host
  };
  struct Segment {
    int first = 0, last = 0;
    bool merge_first = false;  // starts by adding the previous layer's cold sum
  };
  struct Upload;  // one tensor's bytes for the weight allocation (the .cpp)

  void Release();
  // Records the first fault (a CUDA error, a call out of order) and returns
  // it; every later call returns it too.
  Status Fault(const char* what, const std::string& error);
  Status Validate(const LlamaModel& model, const DevicePlan& plan) const;
  Status PlanLayout(std::vector<Upload>* uploads);
  Status AllocateBuffers();
  Status UploadWeights(const std::vector<Upload>& uploads);
  Status CaptureGraphs();

  // The enqueue steps the graphs record (on stream_); false with *err set.
  bool EnqueueStart(std::string* err);
  bool EnqueueMerge(std::string* err);
  bool EnqueueLayer(int il, std::string* err);
  bool EnqueueAttention(int il, std::string* err);
  bool EnqueueFfn(int il, std::string* err);
  bool EnqueueHead(std::string* err);
  bool EnqueueQuantize(const float* x, int64_t n, std::string* err);
  // --sparse teal: the device pointer to layer il's threshold of
  // ProjectionInput `input` (0 attention input, 1 its output, 2 FFN input).
  const float* InputThreshold(int input, int il) const;
  bool EnqueueProduct(const Matrix& m, const float* x, float* y, int epilogue, std::string* err);
  Status Launch(void* graph, const char* what);
  // Copies n positions of sequences between the caches and host memory
  // (kind: cudaMemcpyKind): keys, then values, each [n_layers * n_kv] rows
  // of n positions on the host side.
  Status CopyRows(int dst_seq, int src_seq, int n, uint8_t* host_dst, const uint8_t* host_src,
                  int host_n, int kind, const char* what);
  Status Sync(const char* what);

  const LlamaModel* model_ = nullptr;
  DevicePlan plan_;
  LlamaConfig c_;
  int hot_form_ = 0;  // cuda::HotActivation
  int n_splits_ = 1;  // attention's KV splits
  std::vector<Layer> layers_;
  Matrix output_;
  int64_t output_norm_ = -1, output_norm_b_ = -1;
  std::vector<Segment> segments_;
  int64_t resident_bytes_ = 0, device_bytes_ = 0, weight_bytes_ = 0;
  std::string device_name_;
  int64_t max_quant_cols_ = 0, max_rank_ = 0, hot_scratch_floats_ = 0;

  // Device memory; void*/float* so this header needs no CUDA headers.
  uint8_t* weights_ = nullptr;  // every packed matrix and norm vector
  uint8_t* kv_ = nullptr;       // the K caches of the device layers, then their V caches
  int64_t k_layer_bytes_ = 0, v_layer_bytes_ = 0;
  KeptKv kept_;                 // SaveSeq's: per entry, its keys' rows then its values'
  float* d_h_ = nullptr;        // [n_embd] residual stream, then the int32 position
  int32_t* d_pos_ = nullptr;    // right after d_h_'s floats, then the sequence's first cache row
  float* d_x_ = nullptr;        // [n_embd] normed input of the attention / head
  float* d_inp_ = nullptr;      // [n_embd] layer input (parallel residual)
  float* d_qkv_ = nullptr;      // [q_dim + 2 kv_dim]
  float* d_attn_ = nullptr;     // [q_dim]
  int8_t* d_q8_ = nullptr;      // the current input's Q8_0 quants
  float* d_q8_d_ = nullptr;     // and scales
  int32_t* d_q8_s_ = nullptr;   // and sums
  float* d_hidden_ = nullptr;   // [max rank] predictor hidden layer
  float* d_scores_ = nullptr;   // [n_ff]
  float* d_cold_ = nullptr;     // [n_embd] normed FFN input, then the cold mask words
  float* d_ycold_ = nullptr;    // [n_embd]
  int32_t* d_fired_ = nullptr;  // [n_layer]
  // --sparse cats and teal: this token's gate thresholds [n_layer], then
  // teal's input thresholds [ProjectionInput][n_layer] (InputThreshold).
  float* d_thresholds_ = nullptr;
  float* d_xgate_ = nullptr;  // [n_embd] --sparse teal: the FFN input's kept entries, for the gate
  int8_t* d_q8g_ = nullptr;   // and its Q8_0 quants, scales and sums
  float* d_q8g_d_ = nullptr;
  int32_t* d_q8g_s_ = nullptr;
  float* d_logits_ = nullptr;  // [n_vocab]
  float* d_hot_scratch_ = nullptr;
  float* d_attn_scratch_ = nullptr;
  float* d_angles_ = nullptr;  // [n_ctx][rope_dims]
  // Pinned host memory.
  float* h_io_ = nullptr;          // as d_h_: the token's h and position in, or h out
  float* h_cold_ = nullptr;        // as d_cold_
  float* h_y_ = nullptr;           // [n_embd] the host's cold sum
  int32_t* h_fired_ = nullptr;     // [n_layer]
  float* h_thresholds_ = nullptr;  // as d_thresholds_ (zeros for a dense token)
  float* h_logits_ = nullptr;      // [n_vocab]
  void* stream_ = nullptr;         // cudaStream_t
  std::vector<void*> events_;      // [n_layer] cudaEvent_t: x of a cold layer is on the host
  std::vector<void*> allocations_, pinned_;
  std::vector<void*> segment_graphs_;  // cudaGraphExec_t
  void* finish_logits_ = nullptr;      // merge, head, fired counts
  void* finish_plain_ = nullptr;       // merge, fired counts (a prompt's inner token)
  void* finish_h_ = nullptr;           // merge, h out, fired counts
  void* head_only_ = nullptr;          // h in, head

  // The token in flight.
  int next_layer_ = 0, next_segment_ = 0;
  int current_layer_ = -1;  // for error messages
  Status fault_;            // the first fault after Load (sticky)
};

}  // namespace pi
