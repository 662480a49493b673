#include "gpu_worker/cuda_hot_shard.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "kernels/cuda/matvec.h"
#include "kernels/cuda/packed_matrix.h"
#include "kernels/cuda/sparse_ffn.h"

namespace pi {
namespace {

std::string Bytes(int64_t n) {
  char buf[64];
  snprintf(buf, sizeof(buf), "%.1f MiB (%" PRId64 " bytes)", n / 1048576.0, n);
  return buf;
}

const char* TensorName(int which) {
  return which == 0 ? "ffn_gate" : which == 1 ? "ffn_up" : "ffn_down_t";
}

}  // namespace

CudaHotShard::~CudaHotShard() {
  Release();
}

void CudaHotShard::Release() {
  // Teardown: errors here have nowhere to go. Nothing allocated, no CUDA
  // call: a backend that never loaded does not touch the runtime.
  for (void* g : graphs_) {
    if (g) cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(g));
  }
  graphs_.clear();
  if (stream_) cudaStreamDestroy(static_cast<cudaStream_t>(stream_));
  for (void* p :
       {weights_, static_cast<void*>(d_x_), d_out_, static_cast<void*>(d_scratch_), d_q8_}) {
    if (p) cudaFree(p);
  }
  for (void* p : {static_cast<void*>(h_x_), h_out_}) {
    if (p) cudaFreeHost(p);
  }
  stream_ = nullptr;
  weights_ = d_out_ = h_out_ = d_q8_ = nullptr;
  d_x_ = d_scratch_ = h_x_ = nullptr;
  layers_.clear();
  resident_bytes_ = device_bytes_ = 0;
  n_embd_ = 0;
  owned_.clear();
  step_ = ShardStep();
  fault_.clear();
}

Status CudaHotShard::Load(const LlamaModel& model,
                          const std::vector<std::vector<int32_t>>& hot_ids) {
  PI_RETURN_IF_ERROR(ValidateHotNeurons(model, hot_ids));
  const LlamaConfig& c = model.config;
  cuda::HotActivation form;
  switch (c.activation) {
    case FfnActivation::kRelu:
      form = cuda::HotActivation::kRelu;
      break;
    case FfnActivation::kDRelu:
      form = cuda::HotActivation::kDRelu;
      break;
    case FfnActivation::kReluUp:
      form = cuda::HotActivation::kReluUp;
      break;
    default:
      return Status::Error("CUDA hot neurons: no kernel for the %s activation",
                           FfnActivationName(c.activation));
  }
  if (!cuda::HotFfnSupportsCols(c.n_embd)) {
    return Status::Error("CUDA hot neurons: n_embd %d is not a multiple of 32", c.n_embd);
  }
  for (int l = 0; l < c.n_layer; ++l) {
    if (!cuda::HotFfnSupportsRows(static_cast<int64_t>(hot_ids[l].size()))) {
      return Status::Error(
          "CUDA hot neurons: layer %d: %zu hot neurons, more than the kernels take", l,
          hot_ids[l].size());
    }
    const LlamaLayer& src = model.layers[l];
    const Tensor* t[3] = {&src.ffn_gate, &src.ffn_up, &src.ffn_down_t};
    for (int k = 0; k < 3; ++k) {
      if (k == 0 && !t[k]->present()) continue;  // ungated: no gate rows
      if (!cuda::HotFfnSupportsType(t[k]->type) || t[k]->cols != c.n_embd) {
        return Status::Error(
            "CUDA hot neurons: blk.%d.%s is %s with %" PRId64
            " columns; the kernels read F32, F16, BF16, Q8_0 or Q4_0 rows of n_embd = %d",
            l, TensorName(k), DTypeName(t[k]->type), t[k]->cols, c.n_embd);
      }
    }
  }
  std::string why;
  if (!cuda::DeviceAvailable(&why)) return Status::Error("CUDA hot neurons: %s", why.c_str());

  Release();
  auto fail = [this](const char* what, cudaError_t e) {
    const Status s = Status::Error("CUDA hot neurons: %s: %s", what, cudaGetErrorString(e));
    Release();
    return s;
  };
  int dev = 0;
  cudaError_t e = cudaGetDevice(&dev);
  if (e != cudaSuccess) return fail("cudaGetDevice", e);
  cudaDeviceProp prop;
  e = cudaGetDeviceProperties(&prop, dev);
  if (e != cudaSuccess) return fail("cudaGetDeviceProperties", e);
  device_name_ = prop.name;

  // Lay every layer's three row sets out in one allocation.
  n_embd_ = c.n_embd;
  act_form_ = static_cast<int>(form);
  layers_.assign(c.n_layer, Layer());
  int64_t total = 0, max_scratch = 0;
  for (int l = 0; l < c.n_layer; ++l) {
    const LlamaLayer& src = model.layers[l];
    Layer& dst = layers_[l];
    const int64_t n = static_cast<int64_t>(hot_ids[l].size());
    dst.rows = n;
    dst.gate_type = src.ffn_gate.type;
    dst.up_type = src.ffn_up.type;
    dst.down_type = src.ffn_down_t.type;
    // Packed (kernels/cuda/packed_matrix.h): PackedMatrixBytes is a
    // multiple of 256, so every row set starts on a fresh line.
    dst.gate_off = total;
    if (src.ffn_gate.present()) total += PackedMatrixBytes(dst.gate_type, n, c.n_embd);
    dst.up_off = total;
    total += PackedMatrixBytes(dst.up_type, n, c.n_embd);
    dst.down_off = total;
    total += PackedMatrixBytes(dst.down_type, n, c.n_embd);
    max_scratch = std::max(max_scratch, cuda::HotFfnScratchFloats(n, c.n_embd));
  }

  // Device memory: say how much was asked for and how much was free.
  auto alloc = [&](void** p, int64_t bytes, const char* what) -> Status {
    const cudaError_t err = cudaMalloc(p, static_cast<size_t>(bytes));
    if (err == cudaSuccess) {
      device_bytes_ += bytes;
      return Status::Ok();
    }
    cudaGetLastError();  // an allocation failure is not sticky: clear it
    size_t free_b = 0, total_b = 0;
    cudaMemGetInfo(&free_b, &total_b);
    const Status s = Status::Error(
        "CUDA hot neurons: cudaMalloc of %s for %s on %s failed: %s (%s free of %s)",
        Bytes(bytes).c_str(), what, device_name_.c_str(), cudaGetErrorString(err),
        Bytes(static_cast<int64_t>(free_b)).c_str(), Bytes(static_cast<int64_t>(total_b)).c_str());
    Release();
    return s;
  };
  if (total > 0) PI_RETURN_IF_ERROR(alloc(&weights_, total, "the hot rows of all layers"));
  // y and the fired count share one buffer ([n_embd] floats, then the
  // int32 count), so one copy brings both back.
  const int64_t vec = static_cast<int64_t>(sizeof(float)) * c.n_embd;
  const int64_t out = vec + static_cast<int64_t>(sizeof(int32_t));
  PI_RETURN_IF_ERROR(alloc(reinterpret_cast<void**>(&d_x_), vec, "x"));
  // x's Q8_0 copy for quantized rows: n_embd quants, then a scale and a sum per 32.
  PI_RETURN_IF_ERROR(alloc(&d_q8_, c.n_embd + 2 * (vec / 32) + 16, "x's Q8_0 copy"));
  PI_RETURN_IF_ERROR(alloc(&d_out_, out, "y"));
  PI_RETURN_IF_ERROR(alloc(reinterpret_cast<void**>(&d_scratch_),
                           static_cast<int64_t>(sizeof(float)) * max_scratch, "scratch"));
  e = cudaMallocHost(reinterpret_cast<void**>(&h_x_), vec);
  if (e == cudaSuccess) e = cudaMallocHost(&h_out_, out);
  if (e != cudaSuccess) return fail("cudaMallocHost (pinned x/y buffers)", e);
  cudaStream_t stream = nullptr;
  e = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
  if (e != cudaSuccess) return fail("cudaStreamCreate", e);
  stream_ = stream;

  // Gather one layer at a time (host memory stays at one layer's hot rows)
  // and copy it in.
  std::vector<uint8_t> packed;
  for (int l = 0; l < c.n_layer; ++l) {
    const Layer& dst = layers_[l];
    if (dst.rows == 0) continue;
    const LlamaLayer& src = model.layers[l];
    char* base = static_cast<char*>(weights_);
    const struct {
      const Tensor* t;
      int64_t off;
    } sets[3] = {
        {&src.ffn_gate, dst.gate_off}, {&src.ffn_up, dst.up_off}, {&src.ffn_down_t, dst.down_off}};
    for (const auto& set : sets) {
      if (!set.t->present() || e != cudaSuccess) continue;
      packed.resize(static_cast<size_t>(PackedMatrixBytes(set.t->type, dst.rows, c.n_embd)));
      PackRows(set.t->type, set.t->data, c.n_embd, hot_ids[l].data(), dst.rows, packed.data());
      e = cudaMemcpy(base + set.off, packed.data(), packed.size(), cudaMemcpyHostToDevice);
      resident_bytes_ += dst.rows * set.t->row_bytes;
    }
    if (e != cudaSuccess) return fail("copying the hot rows to the device", e);
  }
  const Status graphs = CaptureGraphs();
  if (!graphs.ok()) {
    Release();
    return graphs;
  }
  owned_ = hot_ids;
  y_.assign(static_cast<size_t>(kMaxBatch) * c.n_embd, 0.0f);
  return Status::Ok();
}

bool CudaHotShard::EnqueueStep(int layer, std::string* err) {
  const Layer& l = layers_[layer];
  cudaStream_t s = static_cast<cudaStream_t>(stream_);
  const size_t vec = sizeof(float) * static_cast<size_t>(n_embd_);
  cudaError_t e = cudaMemcpyAsync(d_x_, h_x_, vec, cudaMemcpyHostToDevice, s);
  if (e != cudaSuccess) {
    *err = std::string("copying x to the device: ") + cudaGetErrorString(e);
    return false;
  }
  const char* base = static_cast<const char*>(weights_);
  auto matrix = [&](DType type, int64_t off, bool present) {
    cuda::DeviceMatrix m;
    m.type = type;
    m.rows = l.rows;
    m.cols = n_embd_;
    m.data = present ? base + off : nullptr;
    return m;
  };
  const bool gated = act_form_ != static_cast<int>(cuda::HotActivation::kReluUp);
  cuda::HotLayer hl;
  hl.gate = matrix(l.gate_type, l.gate_off, gated);
  hl.up = matrix(l.up_type, l.up_off, true);
  hl.down_t = matrix(l.down_type, l.down_off, true);
  float* d_y = static_cast<float*>(d_out_);
  int32_t* d_fired = reinterpret_cast<int32_t*>(d_y + n_embd_);
  // Quantized rows dot x's Q8_0 copy, as the CPU kernels do.
  cuda::DeviceVector x;
  x.x = d_x_;
  x.n = n_embd_;
  x.q = static_cast<int8_t*>(d_q8_);
  x.d = reinterpret_cast<float*>(static_cast<int8_t*>(d_q8_) + n_embd_);
  x.s = reinterpret_cast<int32_t*>(const_cast<float*>(x.d) + n_embd_ / 32);
  const auto quantized = [](DType t) { return t == DType::kQ8_0 || t == DType::kQ4_0; };
  e = cudaMemsetAsync(d_fired, 0, sizeof(int32_t), s);
  if (e != cudaSuccess) {
    *err = std::string("clearing the fired count: ") + cudaGetErrorString(e);
    return false;
  }
  if (l.rows > 0 && (quantized(l.up_type) || (gated && quantized(l.gate_type))) &&
      !cuda::EnqueueQuantizeQ8(d_x_, n_embd_, const_cast<int8_t*>(x.q), const_cast<float*>(x.d),
                               const_cast<int32_t*>(x.s), s, err)) {
    return false;
  }
  if (!cuda::EnqueueHotFfn(hl, static_cast<cuda::HotActivation>(act_form_), x, d_y,
                           /*accumulate=*/false, d_fired, d_scratch_, s, err)) {
    return false;
  }
  e = cudaMemcpyAsync(h_out_, d_out_, vec + sizeof(int32_t), cudaMemcpyDeviceToHost, s);
  if (e != cudaSuccess) {
    *err = std::string("copying y to the host: ") + cudaGetErrorString(e);
    return false;
  }
  return true;
}

Status CudaHotShard::CaptureGraphs() {
  // Every step of a layer is the same sequence on the same buffers, so it is
  // recorded once as a CUDA graph: a step is then one launch instead of six
  // API calls (copies, memsets, three kernels).
  cudaStream_t s = static_cast<cudaStream_t>(stream_);
  graphs_.assign(layers_.size(), nullptr);
  for (size_t l = 0; l < layers_.size(); ++l) {
    cudaError_t e = cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal);
    if (e != cudaSuccess) {
      return Status::Error("CUDA hot neurons: layer %zu: starting a graph capture: %s", l,
                           cudaGetErrorString(e));
    }
    std::string err;
    const bool ok = EnqueueStep(static_cast<int>(l), &err);
    cudaGraph_t graph = nullptr;
    e = cudaStreamEndCapture(s, &graph);
    if (!ok || e != cudaSuccess) {
      if (graph) cudaGraphDestroy(graph);
      return Status::Error("CUDA hot neurons: layer %zu: recording the step: %s", l,
                           ok ? cudaGetErrorString(e) : err.c_str());
    }
    cudaGraphExec_t exec = nullptr;
    e = cudaGraphInstantiate(&exec, graph, 0);
    cudaGraphDestroy(graph);
    if (e != cudaSuccess) {
      return Status::Error("CUDA hot neurons: layer %zu: instantiating the step's graph: %s", l,
                           cudaGetErrorString(e));
    }
    graphs_[l] = exec;
  }
  return Status::Ok();
}

void CudaHotShard::LaunchRow(int b) {
  std::memcpy(h_x_, step_.x + b * n_embd_, sizeof(float) * static_cast<size_t>(n_embd_));
  const cudaError_t e = cudaGraphLaunch(static_cast<cudaGraphExec_t>(graphs_[step_.layer]),
                                        static_cast<cudaStream_t>(stream_));
  if (e != cudaSuccess) Fault(b, "launching the step", cudaGetErrorString(e));
}

void CudaHotShard::Fault(int row, const char* what, const char* error) {
  // The stream's state is unknown after a fault: every later step fails too,
  // and the router computes the hot neurons on the CPU from then on.
  char buf[512];
  snprintf(buf, sizeof(buf), "CUDA hot neurons: layer %d row %d: %s: %s", step_.layer, row, what,
           error);
  fault_ = buf;
}

void CudaHotShard::Start(const ShardStep& step) {
  step_ = step;
  refused_.clear();
  if (layers_.empty()) {
    refused_ = "CUDA hot neurons: a step before Load";
  } else if (step.layer < 0 || step.layer >= static_cast<int>(layers_.size()) || step.batch < 1 ||
             step.batch > kMaxBatch) {
    refused_ = "CUDA hot neurons: layer or batch out of range";
  } else if (step.ids || step.row_n) {
    refused_ = "CUDA hot neurons take whole layers, not candidate ids";
  }
  if (!refused_.empty() || !fault_.empty()) return;
  out_ = step.out ? step.out : y_.data();
  LaunchRow(0);
}

Status CudaHotShard::Wait(const float** y, int64_t* fired) {
  if (!refused_.empty()) return Status::Invalid("%s", refused_.c_str());
  // A row at a time (the graphs take one x): row b's sum is copied out while
  // nothing else is queued, then row b + 1 is launched.
  const size_t vec = sizeof(float) * static_cast<size_t>(n_embd_);
  int64_t total = 0;
  for (int b = 0; b < step_.batch && fault_.empty(); ++b) {
    const cudaError_t e = cudaStreamSynchronize(static_cast<cudaStream_t>(stream_));
    if (e != cudaSuccess) {
      Fault(b, "running the step", cudaGetErrorString(e));
      break;
    }
    std::memcpy(out_ + b * n_embd_, h_out_, vec);
    int32_t n = 0;
    std::memcpy(&n, static_cast<const char*>(h_out_) + vec, sizeof(n));
    total += n;
    if (b + 1 < step_.batch) LaunchRow(b + 1);
  }
  if (!fault_.empty()) return Status::Internal("%s", fault_.c_str());
  *y = out_;
  *fired = total;
  return Status::Ok();
}

}  // namespace pi
