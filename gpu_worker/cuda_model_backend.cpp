#include "gpu_worker/cuda_model_backend.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <type_traits>

#include "common/base/progress.h"
#include "common/shard/shard.h"
#include "kernels/cpu/ops.h"
#include "kernels/cuda/layer_ops.h"
#include "kernels/cuda/matvec.h"
#include "kernels/cuda/packed_matrix.h"
#include "kernels/cuda/sparse_ffn.h"

namespace pi {

// Fills `dst` (bytes long) with what goes at `offset` of the weights.
struct CudaModelBackend::Upload {
  int64_t offset = 0, bytes = 0;
  std::function<void(uint8_t* dst)> fill;
};

namespace {

int64_t Align(int64_t n) {
  return (n + 255) / 256 * 256;
}

std::string Bytes(int64_t n) {
  char buf[64];
  snprintf(buf, sizeof(buf), "%.1f MiB (%" PRId64 " bytes)", n / 1048576.0, n);
  return buf;
}

bool Ok(cudaError_t e, const char* what, std::string* err) {
  if (e == cudaSuccess) return true;
  *err = std::string(what) + ": " + cudaGetErrorString(e);
  return false;
}

bool IsQuantized(DType t) {
  return t == DType::kQ8_0 || t == DType::kQ4_0;
}

std::string LayerTensor(int il, const char* name) {
  return "blk." + std::to_string(il) + "." + name;
}

// The hot-neuron kernels' form of the model's FFN activation.
cuda::HotActivation HotFormOf(FfnActivation a) {
  switch (a) {
    case FfnActivation::kRelu:
      return cuda::HotActivation::kRelu;
    case FfnActivation::kDRelu:
      return cuda::HotActivation::kDRelu;
    case FfnActivation::kReluUp:
      return cuda::HotActivation::kReluUp;
    case FfnActivation::kSilu:
      return cuda::HotActivation::kSilu;
    case FfnActivation::kGelu:
      return cuda::HotActivation::kGelu;
    case FfnActivation::kGeluUp:
      return cuda::HotActivation::kGeluUp;
  }
  return cuda::HotActivation::kRelu;
}

}  // namespace

CudaModelBackend::~CudaModelBackend() {
  Release();
}

void CudaModelBackend::Release() {
  // Teardown: errors here have nowhere to go. A backend that never loaded
  // makes no CUDA call.
  for (void* g : segment_graphs_) cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(g));
  segment_graphs_.clear();
  for (void** g : {&finish_logits_, &finish_plain_, &finish_h_, &head_only_}) {
    if (*g) cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(*g));
    *g = nullptr;
  }
  for (void* e : events_) {
    if (e) cudaEventDestroy(static_cast<cudaEvent_t>(e));
  }
  events_.clear();
  if (stream_) cudaStreamDestroy(static_cast<cudaStream_t>(stream_));
  stream_ = nullptr;
  for (void* p : allocations_) cudaFree(p);
  for (void* p : pinned_) cudaFreeHost(p);
  allocations_.clear();
  pinned_.clear();
  weights_ = kv_ = nullptr;
  kept_.Clear();
  layers_.clear();
  segments_.clear();
  resident_bytes_ = device_bytes_ = weight_bytes_ = 0;
  model_ = nullptr;
  fault_ = Status::Ok();
}

Status CudaModelBackend::Fault(const char* what, const std::string& error) {
  // A CUDA error leaves the context unusable (its errors are sticky): every
  // later call returns this one, and the engine's Recover() finds a device
  // it cannot bring back, so the request fails with it — never an abort.
  if (fault_.ok()) {
    fault_ = Status::Internal("CUDA model backend: layer %d: %s: %s", current_layer_, what,
                              error.c_str());
  }
  return fault_;
}

Status CudaModelBackend::Validate(const LlamaModel& model, const DevicePlan& plan) const {
  const LlamaConfig& c = model.config;
  PI_RETURN_IF_ERROR(CheckDevicePlan(model, plan, "CUDA model backend"));
  bool any_hot = false;
  for (const std::vector<int32_t>& h : plan.hot) any_hot = any_hot || !h.empty();
  const FfnActivation a = c.activation;
  if (any_hot && !FfnIsReluFamily(a) && !UsesGateThresholds(plan.mode)) {
    return Status::Unsupported(
        "CUDA model backend: the %s activation's hot neurons run with --sparse cats' gate "
        "thresholds only",
        FfnActivationName(a));
  }
  if (plan.n_layers == 0 && !plan.output) return Status::Ok();
  if (const char* feature = c.GemmaFeature()) {
    return Status::Unsupported(
        "CUDA model backend: no kernel does %s (%s) yet: run this model on the CPU (no "
        "--vram-budget)",
        feature, c.arch.c_str());
  }
  if (c.n_embd % 32 != 0) {
    return Status::Error("CUDA model backend: n_embd %d is not a multiple of 32", c.n_embd);
  }
  if (plan.n_layers > 0 &&
      !cuda::AttentionSupports(c.head_dim, plan.cache_type_k, plan.cache_type_v)) {
    return Status::Error(
        "CUDA model backend: attention takes head sizes that are multiples of 32 up to 256 and "
        "f16 or f32 KV caches; this model has head_dim %d and -ctk %s -ctv %s",
        c.head_dim, DTypeName(plan.cache_type_k), DTypeName(plan.cache_type_v));
  }
  auto check = [](const Tensor& t, const std::string& name) -> Status {
    if (!t.present()) return Status::Ok();
    if (!cuda::MatVecSupports(t.type, t.cols)) {
      return Status::Error("CUDA model backend: %s is %s with %" PRId64
                           " columns; the kernels read F32, F16, BF16, and Q8_0 or Q4_0 rows "
                           "of whole blocks",
                           name.c_str(), DTypeName(t.type), t.cols);
    }
    return Status::Ok();
  };
  for (int il = 0; il < plan.n_layers; ++il) {
    const LlamaLayer& l = model.layers[il];
    if (l.bq.present() || l.bk.present() || l.bv.present() || l.q_norm.present()) {
      return Status::Unsupported(
          "CUDA model backend: no kernel adds Q/K/V biases or norms Q/K heads (%s) yet: run "
          "this model's layers on the CPU (a --vram-budget below its first layer, or no "
          "--vram-budget)",
          c.arch.c_str());
    }
    PI_RETURN_IF_ERROR(check(l.wq, LayerTensor(il, "attn_q")));
    PI_RETURN_IF_ERROR(check(l.wk, LayerTensor(il, "attn_k")));
    PI_RETURN_IF_ERROR(check(l.wv, LayerTensor(il, "attn_v")));
    PI_RETURN_IF_ERROR(check(l.wo, LayerTensor(il, "attn_output")));
    if (!plan.hot[il].empty()) {
      PI_RETURN_IF_ERROR(check(l.ffn_gate, LayerTensor(il, "ffn_gate")));
      PI_RETURN_IF_ERROR(check(l.ffn_up, LayerTensor(il, "ffn_up")));
      PI_RETURN_IF_ERROR(check(l.ffn_down_t, LayerTensor(il, "ffn_down_t")));
      if (!cuda::HotFfnSupportsRows(static_cast<int64_t>(plan.hot[il].size()))) {
        return Status::Error("CUDA model backend: layer %d: too many hot neurons", il);
      }
    }
    if (plan.mode == SparseMode::kPredictor && static_cast<int>(plan.hot[il].size()) < c.n_ff) {
      if (!l.fc1.present() || !l.fc2.present()) {
        return Status::Error("CUDA model backend: layer %d has no predictor (fc1, fc2)", il);
      }
      PI_RETURN_IF_ERROR(check(l.fc1, LayerTensor(il, "fc1")));
      PI_RETURN_IF_ERROR(check(l.fc2, LayerTensor(il, "fc2")));
    }
  }
  if (plan.output) PI_RETURN_IF_ERROR(check(model.output, "output"));
  return Status::Ok();
}

Status CudaModelBackend::Load(const LlamaModel& model, const DevicePlan& plan) {
  PI_RETURN_IF_ERROR(Validate(model, plan));
  std::string why;
  if (!cuda::DeviceAvailable(&why)) return Status::Error("CUDA model backend: %s", why.c_str());
  Release();
  model_ = &model;
  plan_ = plan;
  c_ = model.config;
  hot_form_ = static_cast<int>(HotFormOf(c_.activation));
  // Enough KV splits that the heads fill the GPU at long contexts, each
  // split still a few dozen positions.
  n_splits_ = std::max(1, std::min(32, plan.n_ctx / 64));
  int dev = 0;
  cudaDeviceProp prop;
  std::string err;
  if (!Ok(cudaGetDevice(&dev), "cudaGetDevice", &err) ||
      !Ok(cudaGetDeviceProperties(&prop, dev), "cudaGetDeviceProperties", &err)) {
    Release();
    return Status::Error("CUDA model backend: %s", err.c_str());
  }
  device_name_ = prop.name;
  std::vector<Upload> uploads;
  Status s = PlanLayout(&uploads);
  if (s.ok()) s = AllocateBuffers();
  if (s.ok()) s = UploadWeights(uploads);
  if (s.ok()) s = CaptureGraphs();
  if (!s.ok()) Release();
  return s;
}

Status CudaModelBackend::PlanLayout(std::vector<Upload>* uploads) {
  const LlamaModel& m = *model_;
  int64_t at = 0;
  // A tensor's rows (or several tensors' rows, concatenated) as one packed
  // matrix; `parts` must share a type and a row length.
  auto matrix = [&](std::vector<const Tensor*> parts, const std::vector<int32_t>* ids) {
    Matrix mx;
    mx.type = parts[0]->type;
    mx.cols = parts[0]->cols;
    for (const Tensor* t : parts) mx.rows += t->rows;
    if (ids) mx.rows = static_cast<int64_t>(ids->size());
    mx.offset = at;
    const int64_t bytes = PackedMatrixBytes(mx.type, mx.rows, mx.cols);
    at += bytes;
    uploads->push_back({mx.offset, bytes, [parts, ids, mx](uint8_t* dst) {
                          if (parts.size() == 1) {
                            PackRows(mx.type, parts[0]->data, mx.cols, ids ? ids->data() : nullptr,
                                     mx.rows, dst);
                            return;
                          }
                          std::vector<uint8_t> rows;  // the parts' rows, one after another
                          for (const Tensor* t : parts) {
                            rows.insert(rows.end(), t->data, t->data + t->nbytes());
                          }
                          PackRows(mx.type, rows.data(), mx.cols, nullptr, mx.rows, dst);
                        }});
    return mx;
  };
  auto vec = [&](const Tensor& t) -> int64_t {
    if (!t.present()) return -1;
    const int64_t off = at, bytes = t.nbytes();
    at += Align(bytes);
    uploads->push_back(
        {off, bytes, [&t, bytes](uint8_t* dst) { std::memcpy(dst, t.data, bytes); }});
    return off;
  };

  layers_.assign(plan_.n_layers, Layer());
  const int64_t words = (c_.n_ff + 31) / 32;
  for (int il = 0; il < plan_.n_layers; ++il) {
    const LlamaLayer& src = m.layers[il];
    Layer& l = layers_[il];
    l.attn_norm = vec(src.attn_norm);
    l.attn_norm_b = vec(src.attn_norm_b);
    l.ffn_norm = src.ffn_norm.data == src.attn_norm.data ? l.attn_norm : vec(src.ffn_norm);
    l.ffn_norm_b =
        src.ffn_norm_b.data == src.attn_norm_b.data ? l.attn_norm_b : vec(src.ffn_norm_b);
    // Q, K and V read the same input: one product when they can be one
    // matrix (falcon's are one tensor already).
    const int64_t qd = c_.q_dim(), kvd = c_.kv_dim();
    if (src.wq.type == src.wk.type && src.wk.type == src.wv.type) {
      l.qkv[0] = matrix({&src.wq, &src.wk, &src.wv}, nullptr);
      l.n_qkv = 1;
    } else {
      l.qkv[0] = matrix({&src.wq}, nullptr);
      l.qkv[1] = matrix({&src.wk}, nullptr);
      l.qkv[2] = matrix({&src.wv}, nullptr);
      l.qkv_out[1] = qd;
      l.qkv_out[2] = qd + kvd;
      l.n_qkv = 3;
    }
    l.wo = matrix({&src.wo}, nullptr);
    const std::vector<int32_t>& hot = plan_.hot[il];
    l.n_hot = static_cast<int64_t>(hot.size());
    l.cold = l.n_hot < c_.n_ff;
    if (l.n_hot > 0) {
      if (src.ffn_gate.present()) l.gate = matrix({&src.ffn_gate}, &hot);
      l.up = matrix({&src.ffn_up}, &hot);
      l.down_t = matrix({&src.ffn_down_t}, &hot);
      hot_scratch_floats_ =
          std::max(hot_scratch_floats_, cuda::HotFfnScratchFloats(l.n_hot, c_.n_embd));
    }
    l.predictor = plan_.mode == SparseMode::kPredictor && l.cold;
    if (l.predictor) {
      l.fc1 = matrix({&src.fc1}, nullptr);
      l.fc2 = matrix({&src.fc2}, nullptr);
      max_rank_ = std::max(max_rank_, src.fc1.rows);
      l.hot_bits = at;
      at += Align(words * 4);
      uploads->push_back({l.hot_bits, words * 4, [&hot, words](uint8_t* dst) {
                            std::vector<uint32_t> bits(words, 0);
                            for (int32_t id : hot) bits[id / 32] |= 1u << (id % 32);
                            std::memcpy(dst, bits.data(), words * 4);
                          }});
    }
  }
  if (plan_.output) {
    output_norm_ = vec(m.output_norm);
    output_norm_b_ = vec(m.output_norm_b);
    output_ = matrix({&m.output}, nullptr);
  }
  weight_bytes_ = at;
  max_quant_cols_ = std::max<int64_t>({c_.n_embd, c_.q_dim(), max_rank_});
  return Status::Ok();
}

Status CudaModelBackend::AllocateBuffers() {
  std::string err;
  auto alloc = [&](int64_t bytes, const char* what, auto** out) -> Status {
    void* p = nullptr;
    const cudaError_t e = cudaMalloc(&p, static_cast<size_t>(std::max<int64_t>(bytes, 16)));
    if (e != cudaSuccess) {
      cudaGetLastError();  // an allocation failure is not sticky: clear it
      size_t free_b = 0, total_b = 0;
      cudaMemGetInfo(&free_b, &total_b);
      return Status::Error(
          "CUDA model backend: cudaMalloc of %s for %s on %s failed: %s (%s "
          "free of %s)",
          Bytes(bytes).c_str(), what, device_name_.c_str(), cudaGetErrorString(e),
          Bytes(static_cast<int64_t>(free_b)).c_str(),
          Bytes(static_cast<int64_t>(total_b)).c_str());
    }
    allocations_.push_back(p);
    device_bytes_ += bytes;
    *out = static_cast<std::remove_reference_t<decltype(**out)>*>(p);
    return Status::Ok();
  };
  auto pinned = [&](int64_t bytes, auto** out) -> Status {
    void* p = nullptr;
    if (!Ok(cudaMallocHost(&p, static_cast<size_t>(std::max<int64_t>(bytes, 16))),
            "cudaMallocHost (pinned buffers)", &err)) {
      return Status::Error("CUDA model backend: %s", err.c_str());
    }
    pinned_.push_back(p);
    *out = static_cast<std::remove_reference_t<decltype(**out)>*>(p);
    return Status::Ok();
  };
  const int64_t d = c_.n_embd, f = 4, words = (c_.n_ff + 31) / 32;
  PI_RETURN_IF_ERROR(alloc(weight_bytes_, "the weights", &weights_));
  // The KV caches: [n_layers][n_kv][n_seq * n_ctx][head_dim] for K, then for
  // V (sequence s's rows from s * n_ctx).
  const int64_t rows = static_cast<int64_t>(c_.n_head_kv) * plan_.n_seq * plan_.n_ctx;
  k_layer_bytes_ = rows * RowBytes(plan_.cache_type_k, c_.head_dim);
  v_layer_bytes_ = rows * RowBytes(plan_.cache_type_v, c_.head_dim);
  const int64_t kv_bytes = plan_.n_layers * (k_layer_bytes_ + v_layer_bytes_);
  if (kv_bytes > 0) PI_RETURN_IF_ERROR(alloc(kv_bytes, "the KV cache", &kv_));
  resident_bytes_ = weight_bytes_ + kv_bytes;

  PI_RETURN_IF_ERROR(alloc(d * f + 16, "h", &d_h_));
  d_pos_ = reinterpret_cast<int32_t*>(d_h_ + d);
  PI_RETURN_IF_ERROR(alloc(d * f, "x", &d_x_));
  PI_RETURN_IF_ERROR(alloc(d * f, "the layer input", &d_inp_));
  PI_RETURN_IF_ERROR(alloc((c_.q_dim() + 2 * c_.kv_dim()) * f, "q, k, v", &d_qkv_));
  PI_RETURN_IF_ERROR(alloc(c_.q_dim() * f, "the attention output", &d_attn_));
  PI_RETURN_IF_ERROR(alloc(max_quant_cols_, "Q8_0 quants", &d_q8_));
  PI_RETURN_IF_ERROR(alloc(max_quant_cols_ / 32 * f + 16, "Q8_0 scales", &d_q8_d_));
  PI_RETURN_IF_ERROR(alloc(max_quant_cols_ / 32 * 4 + 16, "Q8_0 sums", &d_q8_s_));
  PI_RETURN_IF_ERROR(alloc(max_rank_ * f, "the predictor's hidden layer", &d_hidden_));
  PI_RETURN_IF_ERROR(alloc(c_.n_ff * f, "the predictor's scores", &d_scores_));
  PI_RETURN_IF_ERROR(alloc(d * f + words * 4, "the cold step's x", &d_cold_));
  PI_RETURN_IF_ERROR(alloc(d * f, "the cold sum", &d_ycold_));
  PI_RETURN_IF_ERROR(alloc(c_.n_layer * 4, "fired counts", &d_fired_));
  // Gate thresholds [n_layer], then --sparse teal's per input [3][n_layer].
  const int64_t n_thresholds = int64_t{1 + kProjectionInputs} * c_.n_layer;
  PI_RETURN_IF_ERROR(alloc(n_thresholds * f, "thresholds", &d_thresholds_));
  PI_RETURN_IF_ERROR(alloc(d * f, "the gate's thresholded x", &d_xgate_));
  PI_RETURN_IF_ERROR(alloc(d, "its Q8_0 quants", &d_q8g_));
  PI_RETURN_IF_ERROR(alloc(d / 32 * f + 16, "its Q8_0 scales", &d_q8g_d_));
  PI_RETURN_IF_ERROR(alloc(d / 32 * 4 + 16, "its Q8_0 sums", &d_q8g_s_));
  PI_RETURN_IF_ERROR(alloc(c_.n_vocab * f, "logits", &d_logits_));
  PI_RETURN_IF_ERROR(alloc(hot_scratch_floats_ * f, "hot FFN scratch", &d_hot_scratch_));
  PI_RETURN_IF_ERROR(alloc(cuda::AttentionScratchFloats(c_.n_head, c_.head_dim, n_splits_) * f,
                           "attention scratch", &d_attn_scratch_));
  // RoPE's angles for every position, computed as the CPU computes them.
  const int64_t angles = static_cast<int64_t>(plan_.n_ctx) * std::max(c_.rope_dims, 1);
  PI_RETURN_IF_ERROR(alloc(angles * f, "RoPE angles", &d_angles_));
  std::vector<float> cs(static_cast<size_t>(angles));
  for (int p = 0; p < plan_.n_ctx; ++p) {
    RopeAnglesOf(c_, p, cs.data() + static_cast<int64_t>(p) * c_.rope_dims);
  }
  if (!Ok(cudaMemcpy(d_angles_, cs.data(), angles * f, cudaMemcpyHostToDevice), "RoPE angles",
          &err)) {
    return Status::Error("CUDA model backend: %s", err.c_str());
  }

  PI_RETURN_IF_ERROR(pinned(d * f + 16, &h_io_));
  PI_RETURN_IF_ERROR(pinned(d * f + words * 4, &h_cold_));
  PI_RETURN_IF_ERROR(pinned(d * f, &h_y_));
  PI_RETURN_IF_ERROR(pinned(c_.n_layer * 4, &h_fired_));
  PI_RETURN_IF_ERROR(pinned(n_thresholds * f, &h_thresholds_));
  std::memset(h_thresholds_, 0, sizeof(float) * n_thresholds);
  PI_RETURN_IF_ERROR(pinned(c_.n_vocab * f, &h_logits_));
  cudaStream_t stream = nullptr;
  if (!Ok(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate", &err)) {
    return Status::Error("CUDA model backend: %s", err.c_str());
  }
  stream_ = stream;
  events_.assign(c_.n_layer, nullptr);
  for (int il = 0; il < plan_.n_layers; ++il) {
    cudaEvent_t e = nullptr;
    if (!Ok(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate", &err)) {
      return Status::Error("CUDA model backend: %s", err.c_str());
    }
    events_[il] = e;
  }
  return Status::Ok();
}

Status CudaModelBackend::UploadWeights(const std::vector<Upload>& uploads) {
  // Packed one tensor at a time in host memory (the staging buffer holds
  // the largest), then copied in: host memory stays at one tensor's bytes.
  std::vector<uint8_t> staging;
  ProgressBar bar("loading to " + device_name_, weight_bytes_, "bytes");
  int64_t done = 0;
  std::string err;
  for (const Upload& u : uploads) {
    staging.resize(static_cast<size_t>(u.bytes));
    u.fill(staging.data());
    if (!Ok(cudaMemcpy(weights_ + u.offset, staging.data(), u.bytes, cudaMemcpyHostToDevice),
            "copying the weights to the device", &err)) {
      return Status::Error("CUDA model backend: %s", err.c_str());
    }
    done += u.bytes;
    bar.Update(done);
  }
  bar.Finish();
  if (kv_ && !Ok(cudaMemset(kv_, 0, plan_.n_layers * (k_layer_bytes_ + v_layer_bytes_)),
                 "clearing the KV cache", &err)) {
    return Status::Error("CUDA model backend: %s", err.c_str());
  }
  return Status::Ok();
}

// ---- what the graphs record ------------------------------------------------

bool CudaModelBackend::EnqueueQuantize(const float* x, int64_t n, std::string* err) {
  return cuda::EnqueueQuantizeQ8(x, n, d_q8_, d_q8_d_, d_q8_s_, stream_, err);
}

const float* CudaModelBackend::InputThreshold(int input, int il) const {
  return d_thresholds_ + (1 + input) * c_.n_layer + il;
}

bool CudaModelBackend::EnqueueProduct(const Matrix& m, const float* x, float* y, int epilogue,
                                      std::string* err) {
  cuda::DeviceMatrix w;
  w.type = m.type;
  w.rows = m.rows;
  w.cols = m.cols;
  w.data = weights_ + m.offset;
  cuda::DeviceVector v;
  v.x = x;
  v.n = m.cols;
  v.q = d_q8_;  // quantized weights read the Q8_0 copy made just before
  v.d = d_q8_d_;
  v.s = d_q8_s_;
  cuda::MatVecOut out;
  out.y = y;
  out.epilogue = static_cast<cuda::Epilogue>(epilogue);
  return cuda::EnqueueMatVec(w, v, out, stream_, err);
}

bool CudaModelBackend::EnqueueStart(std::string* err) {
  cudaStream_t s = static_cast<cudaStream_t>(stream_);
  const size_t bytes = sizeof(float) * c_.n_embd + 2 * sizeof(int32_t);  // h, pos, row0
  const int64_t n_thresholds = !UsesGateThresholds(plan_.mode) ? 0
                               : plan_.mode == SparseMode::kTeal
                                   ? (1 + kProjectionInputs) * c_.n_layer
                                   : c_.n_layer;
  return Ok(cudaMemcpyAsync(d_h_, h_io_, bytes, cudaMemcpyHostToDevice, s), "token input", err) &&
         (n_thresholds == 0 ||
          Ok(cudaMemcpyAsync(d_thresholds_, h_thresholds_, sizeof(float) * n_thresholds,
                             cudaMemcpyHostToDevice, s),
             "thresholds", err)) &&
         Ok(cudaMemsetAsync(d_fired_, 0, sizeof(int32_t) * c_.n_layer, s), "fired counts", err);
}

bool CudaModelBackend::EnqueueMerge(std::string* err) {
  cudaStream_t s = static_cast<cudaStream_t>(stream_);
  return Ok(cudaMemcpyAsync(d_ycold_, h_y_, sizeof(float) * c_.n_embd, cudaMemcpyHostToDevice, s),
            "the cold sum", err) &&
         cuda::EnqueueAdd(d_h_, d_ycold_, c_.n_embd, stream_, err);
}

bool CudaModelBackend::EnqueueAttention(int il, std::string* err) {
  const Layer& l = layers_[il];
  const LlamaConfig& c = c_;
  const bool layer_norm = c.norm == NormKind::kLayer;
  const float* w = reinterpret_cast<const float*>(weights_ + l.attn_norm);
  const float* b =
      l.attn_norm_b >= 0 ? reinterpret_cast<const float*>(weights_ + l.attn_norm_b) : nullptr;
  bool q8 = false;
  for (int j = 0; j < l.n_qkv; ++j) q8 = q8 || IsQuantized(l.qkv[j].type);
  // --sparse teal: q, k and v read the normed input's kept entries (its
  // Q8_0 copy made after the mask).
  const bool teal = plan_.mode == SparseMode::kTeal;
  if (!cuda::EnqueueNorm(d_h_, w, b, c.n_embd, c.norm_eps, layer_norm, d_x_,
                         c.parallel_residual ? d_inp_ : nullptr, stream_, err,
                         q8 && !teal ? d_q8_ : nullptr, d_q8_d_, d_q8_s_)) {
    return false;
  }
  if (teal &&
      (!cuda::EnqueueThresholdMask(d_x_, c.n_embd, InputThreshold(0, il), d_x_, stream_, err) ||
       (q8 && !EnqueueQuantize(d_x_, c.n_embd, err)))) {
    return false;
  }
  for (int j = 0; j < l.n_qkv; ++j) {
    if (!EnqueueProduct(l.qkv[j], d_x_, d_qkv_ + l.qkv_out[j],
                        static_cast<int>(cuda::Epilogue::kStore), err)) {
      return false;
    }
  }
  uint8_t* k_cache = kv_ + il * k_layer_bytes_;
  uint8_t* v_cache = kv_ + plan_.n_layers * k_layer_bytes_ + il * v_layer_bytes_;
  cuda::RopeCacheArgs r;
  r.q = d_qkv_;
  r.k = d_qkv_ + c.q_dim();
  r.v = d_qkv_ + c.q_dim() + c.kv_dim();
  r.angles = d_angles_;
  r.pos = d_pos_;
  r.row0 = d_pos_ + 1;
  r.n_head = c.n_head;
  r.n_kv = c.n_head_kv;
  r.head_dim = c.head_dim;
  r.rope_dims = c.rope_dims;
  r.n_ctx = plan_.n_seq * plan_.n_ctx;
  r.neox = c.rope == RopeKind::kNeox;
  r.k_cache = k_cache;
  r.v_cache = v_cache;
  r.k_type = plan_.cache_type_k;
  r.v_type = plan_.cache_type_v;
  if (!cuda::EnqueueRopeAndCache(r, stream_, err)) return false;
  cuda::AttentionArgs a;
  a.q = d_qkv_;
  a.k_cache = k_cache;
  a.v_cache = v_cache;
  a.k_type = plan_.cache_type_k;
  a.v_type = plan_.cache_type_v;
  a.pos = d_pos_;
  a.row0 = d_pos_ + 1;
  a.n_head = c.n_head;
  a.n_kv = c.n_head_kv;
  a.head_dim = c.head_dim;
  a.n_ctx = plan_.n_seq * plan_.n_ctx;
  a.n_splits = n_splits_;
  a.scratch = d_attn_scratch_;
  a.out = d_attn_;
  if (!cuda::EnqueueAttention(a, stream_, err)) return false;
  if (teal && !cuda::EnqueueThresholdMask(d_attn_, c.q_dim(), InputThreshold(1, il), d_attn_,
                                          stream_, err)) {
    return false;
  }
  if (IsQuantized(l.wo.type) && !EnqueueQuantize(d_attn_, c.q_dim(), err)) return false;
  return EnqueueProduct(l.wo, d_attn_, d_h_, static_cast<int>(cuda::Epilogue::kAccumulate), err);
}

bool CudaModelBackend::EnqueueFfn(int il, std::string* err) {
  const Layer& l = layers_[il];
  const LlamaConfig& c = c_;
  cudaStream_t s = static_cast<cudaStream_t>(stream_);
  // The FFN (and the predictor) read h after attention, or for a parallel
  // residual the layer input.
  const float* src = c.parallel_residual ? d_inp_ : d_h_;
  const int64_t words = (c.n_ff + 31) / 32;
  float* x = d_cold_;  // the normed FFN input, where the host's copy comes from
  uint32_t* mask = reinterpret_cast<uint32_t*>(d_cold_ + c.n_embd);
  if (l.predictor) {
    if (IsQuantized(l.fc1.type) && !EnqueueQuantize(src, c.n_embd, err)) return false;
    if (!EnqueueProduct(l.fc1, src, d_hidden_, static_cast<int>(cuda::Epilogue::kRelu), err)) {
      return false;
    }
    if (IsQuantized(l.fc2.type) && !EnqueueQuantize(d_hidden_, l.fc2.cols, err)) return false;
    if (!EnqueueProduct(l.fc2, d_hidden_, d_scores_, static_cast<int>(cuda::Epilogue::kStore),
                        err) ||
        !cuda::EnqueueColdMask(d_scores_, reinterpret_cast<const uint32_t*>(weights_ + l.hot_bits),
                               c.n_ff, plan_.threshold, mask, stream_, err)) {
      return false;
    }
  }
  const float* w = reinterpret_cast<const float*>(weights_ + l.ffn_norm);
  const float* b =
      l.ffn_norm_b >= 0 ? reinterpret_cast<const float*>(weights_ + l.ffn_norm_b) : nullptr;
  // x's Q8_0 copy for the hot rows comes with the norm.
  const bool q8 =
      l.n_hot > 0 && (IsQuantized(l.up.type) || (l.gate.offset >= 0 && IsQuantized(l.gate.type)));
  if (!cuda::EnqueueNorm(src, w, b, c.n_embd, c.norm_eps, c.norm == NormKind::kLayer, x, nullptr,
                         stream_, err, q8 ? d_q8_ : nullptr, d_q8_d_, d_q8_s_)) {
    return false;
  }
  if (l.cold) {
    // The host's half starts as soon as x is out; the hot half runs meanwhile.
    const size_t bytes = sizeof(float) * c.n_embd + (l.predictor ? words * 4 : 0);
    if (!Ok(cudaMemcpyAsync(h_cold_, d_cold_, bytes, cudaMemcpyDeviceToHost, s), "x to the host",
            err) ||
        !Ok(cudaEventRecordWithFlags(static_cast<cudaEvent_t>(events_[il]), s,
                                     cudaEventRecordExternal),
            "recording the x event", err)) {
      return false;
    }
  }
  if (l.n_hot == 0) return true;
  auto dev = [this](const Matrix& m) {
    cuda::DeviceMatrix d;
    d.type = m.type;
    d.rows = m.rows;
    d.cols = m.cols;
    d.data = m.offset >= 0 ? weights_ + m.offset : nullptr;
    return d;
  };
  cuda::HotLayer hot;
  hot.gate = dev(l.gate);
  hot.up = dev(l.up);
  hot.down_t = dev(l.down_t);
  cuda::DeviceVector v;
  v.x = x;
  v.q = d_q8_;
  v.d = d_q8_d_;
  v.s = d_q8_s_;
  v.n = c.n_embd;
  const float* threshold = UsesGateThresholds(plan_.mode) ? d_thresholds_ + il : nullptr;
  // --sparse teal: the gate reads the FFN input's kept entries, up all of it.
  cuda::DeviceVector gate_x = v;
  const bool teal = plan_.mode == SparseMode::kTeal && l.gate.offset >= 0;
  if (teal) {
    gate_x.x = d_xgate_;
    gate_x.q = d_q8g_;
    gate_x.d = d_q8g_d_;
    gate_x.s = d_q8g_s_;
    if (!cuda::EnqueueThresholdMask(x, c.n_embd, InputThreshold(2, il), d_xgate_, stream_, err) ||
        (IsQuantized(l.gate.type) &&
         !cuda::EnqueueQuantizeQ8(d_xgate_, c.n_embd, d_q8g_, d_q8g_d_, d_q8g_s_, stream_, err))) {
      return false;
    }
  }
  return cuda::EnqueueHotFfn(hot, static_cast<cuda::HotActivation>(hot_form_), threshold, v, d_h_,
                             /*accumulate=*/true, d_fired_ + il, d_hot_scratch_, stream_, err,
                             teal ? &gate_x : nullptr);
}

bool CudaModelBackend::EnqueueLayer(int il, std::string* err) {
  return EnqueueAttention(il, err) && EnqueueFfn(il, err);
}

bool CudaModelBackend::EnqueueHead(std::string* err) {
  const float* w = reinterpret_cast<const float*>(weights_ + output_norm_);
  const float* b =
      output_norm_b_ >= 0 ? reinterpret_cast<const float*>(weights_ + output_norm_b_) : nullptr;
  const bool q8 = IsQuantized(output_.type);
  if (!cuda::EnqueueNorm(d_h_, w, b, c_.n_embd, c_.norm_eps, c_.norm == NormKind::kLayer, d_x_,
                         nullptr, stream_, err, q8 ? d_q8_ : nullptr, d_q8_d_, d_q8_s_)) {
    return false;
  }
  return EnqueueProduct(output_, d_x_, d_logits_, static_cast<int>(cuda::Epilogue::kStore), err) &&
         Ok(cudaMemcpyAsync(h_logits_, d_logits_, sizeof(float) * c_.n_vocab,
                            cudaMemcpyDeviceToHost, static_cast<cudaStream_t>(stream_)),
            "logits to the host", err);
}

Status CudaModelBackend::CaptureGraphs() {
  cudaStream_t s = static_cast<cudaStream_t>(stream_);
  // Records what `enqueue` puts on the stream as one executable graph.
  auto capture = [&](const char* what, const std::function<bool(std::string*)>& enqueue,
                     void** out) -> Status {
    std::string err;
    if (!Ok(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), "starting a capture",
            &err)) {
      return Status::Error("CUDA model backend: %s: %s", what, err.c_str());
    }
    const bool ok = enqueue(&err);
    cudaGraph_t graph = nullptr;
    const cudaError_t e = cudaStreamEndCapture(s, &graph);
    if (ok && e != cudaSuccess) Ok(e, "ending the capture", &err);
    cudaGraphExec_t exec = nullptr;
    if (ok && e == cudaSuccess) {
      Ok(cudaGraphInstantiate(&exec, graph, 0), "instantiating the graph", &err);
    }
    if (graph) cudaGraphDestroy(graph);
    if (!exec) return Status::Error("CUDA model backend: %s: %s", what, err.c_str());
    *out = exec;
    return Status::Ok();
  };
  // Segments: cut after every layer with a cold part.
  segments_.clear();
  for (int il = 0; il < plan_.n_layers; ++il) {
    if (segments_.empty() || layers_[segments_.back().last].cold) {
      Segment seg;
      seg.first = il;
      seg.merge_first = !segments_.empty();
      segments_.push_back(seg);
    }
    segments_.back().last = il;
  }
  for (size_t i = 0; i < segments_.size(); ++i) {
    const Segment seg = segments_[i];
    void* g = nullptr;
    PI_RETURN_IF_ERROR(capture(
        "recording a segment",
        [&](std::string* err) {
          if (i == 0 && !EnqueueStart(err)) return false;
          if (seg.merge_first && !EnqueueMerge(err)) return false;
          for (int il = seg.first; il <= seg.last; ++il) {
            current_layer_ = il;
            if (!EnqueueLayer(il, err)) return false;
          }
          return true;
        },
        &g));
    segment_graphs_.push_back(g);
  }
  current_layer_ = -1;
  const bool last_cold = plan_.n_layers > 0 && layers_.back().cold;
  auto fired = [&](std::string* err) {
    return Ok(cudaMemcpyAsync(h_fired_, d_fired_, sizeof(int32_t) * c_.n_layer,
                              cudaMemcpyDeviceToHost, s),
              "fired counts to the host", err);
  };
  if (plan_.n_layers > 0) {
    PI_RETURN_IF_ERROR(capture(
        "recording the token's end",
        [&](std::string* err) { return (!last_cold || EnqueueMerge(err)) && fired(err); },
        &finish_plain_));
    PI_RETURN_IF_ERROR(capture(
        "recording the token's end",
        [&](std::string* err) {
          return (!last_cold || EnqueueMerge(err)) &&
                 Ok(cudaMemcpyAsync(h_io_, d_h_, sizeof(float) * c_.n_embd, cudaMemcpyDeviceToHost,
                                    s),
                    "h to the host", err) &&
                 fired(err);
        },
        &finish_h_));
    if (plan_.output) {
      PI_RETURN_IF_ERROR(capture(
          "recording the head",
          [&](std::string* err) {
            return (!last_cold || EnqueueMerge(err)) && EnqueueHead(err) && fired(err);
          },
          &finish_logits_));
    }
  }
  if (plan_.output) {
    PI_RETURN_IF_ERROR(capture(
        "recording the head",
        [&](std::string* err) {
          return Ok(cudaMemcpyAsync(d_h_, h_io_, sizeof(float) * c_.n_embd, cudaMemcpyHostToDevice,
                                    s),
                    "h to the device", err) &&
                 EnqueueHead(err);
        },
        &head_only_));
  }
  return Status::Ok();
}

// ---- a token -------------------------------------------------------------------

Status CudaModelBackend::Launch(void* graph, const char* what) {
  const cudaError_t e =
      cudaGraphLaunch(static_cast<cudaGraphExec_t>(graph), static_cast<cudaStream_t>(stream_));
  return e == cudaSuccess ? Status::Ok() : Fault(what, cudaGetErrorString(e));
}

Status CudaModelBackend::Sync(const char* what) {
  const cudaError_t e = cudaStreamSynchronize(static_cast<cudaStream_t>(stream_));
  return e == cudaSuccess ? Status::Ok() : Fault(what, cudaGetErrorString(e));
}

void CudaModelBackend::BeginToken(const float* h, int seq, int pos, bool dense) {
  current_layer_ = -1;
  next_layer_ = 0;
  next_segment_ = 0;
  // A bad call is the next RunLayer's error (this call returns nothing).
  if (!model_ || plan_.n_layers == 0) {
    Fault("BeginToken", "no device layers loaded");
  } else if (seq < 0 || seq >= plan_.n_seq) {
    Fault("BeginToken", "no such sequence");
  } else if (pos < 0 || pos >= plan_.n_ctx) {
    Fault("BeginToken", "position outside the KV cache");
  }
  if (!fault_.ok()) return;
  const int32_t row0 = seq * plan_.n_ctx;
  std::memcpy(h_io_, h, sizeof(float) * c_.n_embd);
  std::memcpy(h_io_ + c_.n_embd, &pos, sizeof(int32_t));
  std::memcpy(h_io_ + c_.n_embd + 1, &row0, sizeof(int32_t));
  if (UsesGateThresholds(plan_.mode)) {  // the first segment's graph copies them in
    for (int il = 0; il < plan_.n_layers; ++il) {
      h_thresholds_[il] = dense ? 0.0f : plan_.gate_thresholds[il];
    }
  }
  if (plan_.mode == SparseMode::kTeal) {  // a dense token's 0 keeps every nonzero entry
    for (int k = 0; k < kProjectionInputs; ++k) {
      for (int il = 0; il < plan_.n_layers; ++il) {
        h_thresholds_[(1 + k) * c_.n_layer + il] = dense ? 0.0f : plan_.input_thresholds[k][il];
      }
    }
  }
}

Status CudaModelBackend::RunLayer(int il, ColdStep* cold) {
  cold->x = nullptr;
  cold->mask = nullptr;
  cold->y = nullptr;
  if (!fault_.ok()) return fault_;
  current_layer_ = il;
  if (il != next_layer_ || il >= plan_.n_layers) return Fault("RunLayer", "layers out of order");
  ++next_layer_;
  if (il == segments_[next_segment_].last) {
    PI_RETURN_IF_ERROR(Launch(segment_graphs_[next_segment_], "launching a segment"));
    ++next_segment_;
  }
  const Layer& l = layers_[il];
  if (!l.cold) return Status::Ok();
  // Spin: the host's part is on the critical path, and an event query
  // costs well under the microseconds a sleeping wait would.
  cudaEvent_t e = static_cast<cudaEvent_t>(events_[il]);
  for (;;) {
    const cudaError_t r = cudaEventQuery(e);
    if (r == cudaSuccess) break;
    if (r != cudaErrorNotReady) return Fault("waiting for x", cudaGetErrorString(r));
    __builtin_ia32_pause();
  }
  cold->x = h_cold_;
  cold->mask = l.predictor ? reinterpret_cast<const uint32_t*>(h_cold_ + c_.n_embd) : nullptr;
  std::memset(h_y_, 0, sizeof(float) * c_.n_embd);
  cold->y = h_y_;
  return Status::Ok();
}

Status CudaModelBackend::FinishToken(float* h_out, float* logits, int64_t* hot_fired) {
  if (!fault_.ok()) return fault_;
  current_layer_ = -1;
  if (next_layer_ != plan_.n_layers) return Fault("FinishToken", "not every device layer ran");
  if (logits && !plan_.output) return Fault("FinishToken", "the head is not on the device");
  PI_RETURN_IF_ERROR(Launch(h_out    ? finish_h_
                            : logits ? finish_logits_
                                     : finish_plain_,
                            "launching the token's end"));
  PI_RETURN_IF_ERROR(Sync("finishing the token"));
  if (h_out) std::memcpy(h_out, h_io_, sizeof(float) * c_.n_embd);
  if (logits) std::memcpy(logits, h_logits_, sizeof(float) * c_.n_vocab);
  int64_t fired = 0;
  for (int il = 0; il < plan_.n_layers; ++il) fired += h_fired_[il];
  if (hot_fired) *hot_fired = fired;
  return Status::Ok();
}

Status CudaModelBackend::Head(const float* h, float* logits) {
  if (!fault_.ok()) return fault_;
  current_layer_ = -1;
  if (!head_only_) return Fault("Head", "the head is not on the device");
  std::memcpy(h_io_, h, sizeof(float) * c_.n_embd);
  PI_RETURN_IF_ERROR(Launch(head_only_, "launching the head"));
  PI_RETURN_IF_ERROR(Sync("running the head"));
  std::memcpy(logits, h_logits_, sizeof(float) * c_.n_vocab);
  return Status::Ok();
}

// The caches' rows of (layer, head) pairs lie one stride apart, the
// sequences' n_ctx rows side by side in each: a sequence's n positions are a
// 2-D region of n_layers * n_kv rows, for the keys and for the values.
Status CudaModelBackend::CopyRows(int dst_seq, int src_seq, int n, uint8_t* host_dst,
                                  const uint8_t* host_src, int host_n, int kind, const char* what) {
  if (!fault_.ok()) return fault_;
  current_layer_ = -1;
  if (n == 0 || !kv_) return Status::Ok();
  const size_t height = static_cast<size_t>(plan_.n_layers) * c_.n_head_kv;
  uint8_t* caches[2] = {kv_, kv_ + plan_.n_layers * k_layer_bytes_};
  const int64_t row_bytes[2] = {RowBytes(plan_.cache_type_k, c_.head_dim),
                                RowBytes(plan_.cache_type_v, c_.head_dim)};
  const cudaMemcpyKind k = static_cast<cudaMemcpyKind>(kind);
  for (int part = 0; part < 2; ++part) {
    const size_t rb = static_cast<size_t>(row_bytes[part]);
    const size_t pitch = static_cast<size_t>(plan_.n_seq) * plan_.n_ctx * rb;
    const size_t width = static_cast<size_t>(n) * rb;
    const size_t host_pitch = static_cast<size_t>(host_n) * rb;
    uint8_t* dst = k == cudaMemcpyDeviceToHost
                       ? host_dst
                       : caches[part] + static_cast<size_t>(dst_seq) * plan_.n_ctx * rb;
    const uint8_t* src = k == cudaMemcpyHostToDevice
                             ? host_src
                             : caches[part] + static_cast<size_t>(src_seq) * plan_.n_ctx * rb;
    const size_t dpitch = k == cudaMemcpyDeviceToHost ? host_pitch : pitch;
    const size_t spitch = k == cudaMemcpyHostToDevice ? host_pitch : pitch;
    const cudaError_t e = cudaMemcpy2DAsync(dst, dpitch, src, spitch, width, height, k,
                                            static_cast<cudaStream_t>(stream_));
    if (e != cudaSuccess) return Fault(what, cudaGetErrorString(e));
    if (host_dst) host_dst += height * host_pitch;
    if (host_src) host_src += height * host_pitch;
  }
  return Sync(what);
}

Status CudaModelBackend::CopySeq(int src, int dst, int n) {
  PI_RETURN_IF_ERROR(CheckDeviceSeq(plan_, src, n, name()));
  PI_RETURN_IF_ERROR(CheckDeviceSeq(plan_, dst, n, name()));
  if (src == dst) return Status::Ok();
  return CopyRows(dst, src, n, nullptr, nullptr, 0, cudaMemcpyDeviceToDevice, "copying a sequence");
}

Status CudaModelBackend::SaveSeq(int seq, int n, uint64_t key) {
  PI_RETURN_IF_ERROR(CheckDeviceSeq(plan_, seq, n, name()));
  if (!kv_) return Status::Ok();
  KeptKv::Entry* e = nullptr;
  PI_RETURN_IF_ERROR(kept_.Add(key, n, SavedSeqBytes(c_, plan_, n), &e));
  const Status s = CopyRows(0, seq, n, e->bytes.data(), nullptr, n, cudaMemcpyDeviceToHost,
                            "keeping a sequence");
  if (!s.ok()) kept_.Drop(key);
  return s;
}

Status CudaModelBackend::LoadSeq(uint64_t key, int seq, int n) {
  PI_RETURN_IF_ERROR(CheckDeviceSeq(plan_, seq, n, name()));
  if (!kv_) return Status::Ok();
  const KeptKv::Entry* e = nullptr;
  PI_RETURN_IF_ERROR(kept_.Find(key, n, &e));
  return CopyRows(seq, 0, n, nullptr, e->bytes.data(), e->n, cudaMemcpyHostToDevice,
                  "loading a kept sequence");
}

Status CudaModelBackend::ReadKept(uint64_t key, int n, int64_t offset, int64_t size, uint8_t* out) {
  PI_RETURN_IF_ERROR(CheckDeviceSeq(plan_, 0, n, name()));
  if (!kv_) return NothingKept(offset, size, name());
  return kept_.Read(key, n, offset, size, out);
}

Status CudaModelBackend::WriteKept(uint64_t key, int n, int64_t offset, const uint8_t* data,
                                   int64_t size) {
  PI_RETURN_IF_ERROR(CheckDeviceSeq(plan_, 0, n, name()));
  if (!kv_) return NothingKept(offset, size, name());
  return kept_.Write(key, n, SavedSeqBytes(c_, plan_, n), offset, data, size);
}

}  // namespace pi
