#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>

#include "kernels/cuda/layer_ops.h"
#include "kernels/cuda/q8_block.cuh"

namespace pi {
namespace cuda {
namespace {

constexpr int kWarp = 32;
constexpr int kNormThreads = 1024;
constexpr int kNormPerThread = 8;  // a tile of 8192 values in registers
constexpr int kAttnWarps = 4;
constexpr int kMaxHeadChunks = 8;  // head_dim / 32 <= 8: head_dim <= 256

bool Check(cudaError_t e, const char* what, std::string* error) {
  if (e == cudaSuccess) return true;
  if (error) *error = std::string(what) + ": " + cudaGetErrorString(e);
  return false;
}

// ---- norms ------------------------------------------------------------------

// Block-wide sum of a double, every thread gets it. `s` holds one double per warp.
__device__ double BlockSum(double v, double* s) {
  for (int off = kWarp / 2; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  if (lane == 0) s[warp] = v;
  __syncthreads();
  double total = 0.0;
  for (int i = 0; i < static_cast<int>(blockDim.x) / kWarp; ++i) total += s[i];
  __syncthreads();
  return total;
}

// One block. As ops.cpp: RMSNorm scale = 1 / sqrt(mean(x^2) + eps); LayerNorm
// subtracts the mean first; out = (x - m) * scale * w (+ b). A block is one
// SM, so the values are read once into registers, a tile of kNormPerThread
// per thread at a time with all its loads in flight (a loop of dependent
// global loads made this the slowest kernel of a layer); rows longer than a
// tile are read again per pass.
__global__ void __launch_bounds__(kNormThreads)
    NormKernel(const float* __restrict__ in, const float* __restrict__ w,
               const float* __restrict__ b, int64_t n, float eps, bool layer_norm,
               float* __restrict__ out, float* __restrict__ copy, int8_t* __restrict__ q8,
               float* __restrict__ q8_d, int32_t* __restrict__ q8_s) {
  __shared__ double s[kNormThreads / kWarp];
  const int64_t tile = static_cast<int64_t>(kNormThreads) * kNormPerThread;
  float v[kNormPerThread];
  auto load = [&](int64_t t0) {
#pragma unroll
    for (int k = 0; k < kNormPerThread; ++k) {
      const int64_t i = t0 + threadIdx.x + static_cast<int64_t>(k) * kNormThreads;
      v[k] = i < n ? in[i] : 0.0f;
    }
  };
  double mean = 0.0;
  if (layer_norm) {
    double sum = 0.0;
    for (int64_t t0 = 0; t0 < n; t0 += tile) {
      load(t0);
#pragma unroll
      for (int k = 0; k < kNormPerThread; ++k) sum += v[k];
    }
    mean = BlockSum(sum, s) / static_cast<double>(n);
  }
  double ss = 0.0;
  for (int64_t t0 = 0; t0 < n; t0 += tile) {
    load(t0);
#pragma unroll
    for (int k = 0; k < kNormPerThread; ++k) {
      const int64_t i = t0 + threadIdx.x + static_cast<int64_t>(k) * kNormThreads;
      const double d = layer_norm ? v[k] - mean : v[k];
      if (i < n) ss += d * d;
    }
  }
  ss = BlockSum(ss, s);
  const float scale = static_cast<float>(1.0 / sqrt(ss / static_cast<double>(n) + eps));
  const float m = static_cast<float>(mean);
  for (int64_t t0 = 0; t0 < n; t0 += tile) {
    // With one tile the values are still in registers. A warp's 32 values of
    // one k are one Q8_0 block (kNormThreads is a multiple of 32, and so is n
    // when q8 is asked for).
    if (n > tile) load(t0);
#pragma unroll
    for (int k = 0; k < kNormPerThread; ++k) {
      const int64_t i = t0 + threadIdx.x + static_cast<int64_t>(k) * kNormThreads;
      if (i >= n) break;  // whole warps: n is a multiple of 32 with q8
      const float x = v[k];
      if (copy) copy[i] = x;
      float y = layer_norm ? (x - m) * scale * w[i] : x * scale * w[i];
      if (b) y += b[i];
      out[i] = y;
      if (q8) QuantizeQ8Block(y, q8 + i, q8_d + i / kWarp, q8_s + i / kWarp);
    }
  }
}

// ---- RoPE + KV cache write ----------------------------------------------------

__device__ void StoreRow(void* cache, DType t, int64_t index, float v) {
  if (t == DType::kF16) {
    static_cast<__half*>(cache)[index] = __float2half_rn(v);
  } else {
    static_cast<float*>(cache)[index] = v;
  }
}

// Element pair i of a head (i < head_dim / 2): the two elements RoPE
// rotates together, or for the dims past rope_dims two neighbours it leaves.
__device__ void PairOf(int i, int head_dim, int rope_dims, bool neox, int* e0, int* e1) {
  if (!neox) {
    *e0 = 2 * i;
    *e1 = 2 * i + 1;
    return;
  }
  const int half = rope_dims / 2;
  if (i < half) {
    *e0 = i;
    *e1 = i + half;
  } else {
    *e0 = rope_dims + 2 * (i - half);
    *e1 = *e0 + 1;
  }
}

// Threads [0, n_head * hd/2) rotate q pairs; the next n_kv * hd/2 rotate k
// pairs and store them; the next n_kv * hd store v.
__global__ void RopeCacheKernel(RopeCacheArgs a) {
  const int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int hd = a.head_dim, pairs = hd / 2;
  const int pos = *a.pos;
  const int64_t row0 = a.row0 ? *a.row0 : 0;
  const float* cs = a.angles + static_cast<int64_t>(pos) * a.rope_dims;
  const int64_t nq = static_cast<int64_t>(a.n_head) * pairs,
                nk = static_cast<int64_t>(a.n_kv) * pairs;
  if (t < nq + nk) {
    const bool is_q = t < nq;
    const int64_t u = is_q ? t : t - nq;
    const int head = static_cast<int>(u / pairs), i = static_cast<int>(u % pairs);
    int e0, e1;
    PairOf(i, hd, a.rope_dims, a.neox, &e0, &e1);
    float* p = (is_q ? a.q : a.k) + static_cast<int64_t>(head) * hd;
    float x0 = p[e0], x1 = p[e1];
    // Pair i rotates when it lies in the first rope_dims dims: in the normal
    // layout pair i covers dims 2i, 2i+1; in NeoX pair i < rope_dims / 2.
    const bool rotates = a.neox ? i < a.rope_dims / 2 : 2 * i < a.rope_dims;
    if (rotates) {
      const float c = cs[2 * i], s = cs[2 * i + 1];
      const float r0 = x0 * c - x1 * s, r1 = x0 * s + x1 * c;
      x0 = r0;
      x1 = r1;
      p[e0] = x0;
      p[e1] = x1;
    }
    if (!is_q) {
      const int64_t row = (static_cast<int64_t>(head) * a.n_ctx + row0 + pos) * hd;
      StoreRow(a.k_cache, a.k_type, row + e0, x0);
      StoreRow(a.k_cache, a.k_type, row + e1, x1);
    }
    return;
  }
  const int64_t u = t - nq - nk;
  if (u >= static_cast<int64_t>(a.n_kv) * hd) return;
  const int head = static_cast<int>(u / hd), e = static_cast<int>(u % hd);
  StoreRow(a.v_cache, a.v_type, (static_cast<int64_t>(head) * a.n_ctx + row0 + pos) * hd + e,
           a.v[u]);
}

// ---- attention ------------------------------------------------------------------

__device__ float LoadCache(const void* c, DType t, int64_t i) {
  return t == DType::kF16 ? __half2float(static_cast<const __half*>(c)[i])
                          : static_cast<const float*>(c)[i];
}

// Block (head, split): positions [p0, p1) of its share, warps taking every
// kAttnWarps-th one, each warp with its own online softmax (running max m,
// sum l, unnormalized output acc); the warps are merged at the end into
// scratch[head][split] = (acc[head_dim], m, l).
__global__ void AttentionSplitKernel(AttentionArgs a) {
  __shared__ float s_acc[kAttnWarps][kMaxHeadChunks * kWarp];
  __shared__ float s_m[kAttnWarps], s_l[kAttnWarps];
  const int head = blockIdx.x, split = blockIdx.y;
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int hd = a.head_dim, chunks = hd / kWarp;
  const int n_pos = *a.pos + 1;
  const int per = (n_pos + a.n_splits - 1) / a.n_splits;
  const int p0 = split * per, p1 = min(n_pos, p0 + per);
  const int kv_head = head / (a.n_head / a.n_kv);
  const float scale = 1.0f / sqrtf(static_cast<float>(hd));
  float q[kMaxHeadChunks], acc[kMaxHeadChunks];
#pragma unroll
  for (int i = 0; i < kMaxHeadChunks; ++i) {
    q[i] = i < chunks ? a.q[static_cast<int64_t>(head) * hd + lane + kWarp * i] : 0.0f;
    acc[i] = 0.0f;
  }
  float m = -INFINITY, l = 0.0f;
  const int64_t base = (static_cast<int64_t>(kv_head) * a.n_ctx + (a.row0 ? *a.row0 : 0)) * hd;
  for (int p = p0 + warp; p < p1; p += kAttnWarps) {
    const int64_t row = base + static_cast<int64_t>(p) * hd;
    float dot = 0.0f;
#pragma unroll
    for (int i = 0; i < kMaxHeadChunks; ++i) {
      if (i < chunks) dot += q[i] * LoadCache(a.k_cache, a.k_type, row + lane + kWarp * i);
    }
    for (int off = kWarp / 2; off > 0; off >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, off);
    const float s = dot * scale;
    const float m_new = fmaxf(m, s);
    const float corr = expf(m - m_new);  // 0 while m is -inf
    const float e = expf(s - m_new);
    l = l * corr + e;
#pragma unroll
    for (int i = 0; i < kMaxHeadChunks; ++i) {
      if (i < chunks) {
        acc[i] = acc[i] * corr + e * LoadCache(a.v_cache, a.v_type, row + lane + kWarp * i);
      }
    }
    m = m_new;
  }
  if (lane == 0) {
    s_m[warp] = m;
    s_l[warp] = l;
  }
#pragma unroll
  for (int i = 0; i < kMaxHeadChunks; ++i) {
    if (i < chunks) s_acc[warp][lane + kWarp * i] = acc[i];
  }
  __syncthreads();
  float* out = a.scratch + (static_cast<int64_t>(head) * a.n_splits + split) * (hd + 2);
  float big = -INFINITY;
  for (int w = 0; w < kAttnWarps; ++w) big = fmaxf(big, s_m[w]);
  for (int d = threadIdx.x; d < hd; d += blockDim.x) {
    float o = 0.0f;
    for (int w = 0; w < kAttnWarps; ++w) {
      if (s_l[w] > 0.0f) o += s_acc[w][d] * expf(s_m[w] - big);
    }
    out[d] = o;
  }
  if (threadIdx.x == 0) {
    float total = 0.0f;
    for (int w = 0; w < kAttnWarps; ++w) {
      if (s_l[w] > 0.0f) total += s_l[w] * expf(s_m[w] - big);
    }
    out[hd] = big;
    out[hd + 1] = total;
  }
}

// Block per head, thread per output element: the splits' partial outputs
// rescaled to a common max and divided by the total weight.
__global__ void AttentionMergeKernel(AttentionArgs a) {
  const int head = blockIdx.x, hd = a.head_dim;
  const float* part = a.scratch + static_cast<int64_t>(head) * a.n_splits * (hd + 2);
  float big = -INFINITY;
  for (int s = 0; s < a.n_splits; ++s) {
    if (part[s * (hd + 2) + hd + 1] > 0.0f) big = fmaxf(big, part[s * (hd + 2) + hd]);
  }
  for (int d = threadIdx.x; d < hd; d += blockDim.x) {
    float num = 0.0f, den = 0.0f;
    for (int s = 0; s < a.n_splits; ++s) {
      const float* p = part + s * (hd + 2);
      if (!(p[hd + 1] > 0.0f)) continue;
      const float f = expf(p[hd] - big);
      num += p[d] * f;
      den += p[hd + 1] * f;
    }
    a.out[static_cast<int64_t>(head) * hd + d] = num / den;
  }
}

// ---- small vector kernels ----------------------------------------------------

__global__ void AddKernel(float* __restrict__ y, const float* __restrict__ x, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) y[i] += x[i];
}

__global__ void ThresholdMaskKernel(const float* x, int64_t n, const float* __restrict__ threshold,
                                    float* out) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = fabsf(x[i]) > *threshold ? x[i] : 0.0f;
}

__global__ void ColdMaskKernel(const float* __restrict__ scores, const uint32_t* __restrict__ hot,
                               int64_t n, float threshold, uint32_t* __restrict__ mask) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t word = i / kWarp;
  if (word * kWarp >= n) return;  // whole warps: n's last word is partial at most
  bool on = false;
  if (i < n) on = scores[i] >= threshold && !((hot[word] >> (i % kWarp)) & 1u);
  const unsigned bits = __ballot_sync(0xffffffffu, on);
  if (i % kWarp == 0) mask[word] = bits;
}

}  // namespace

bool EnqueueNorm(const float* in, const float* w, const float* b, int64_t n, float eps,
                 bool layer_norm, float* out, float* copy, void* stream, std::string* error,
                 int8_t* q8, float* q8_d, int32_t* q8_s) {
  if (q8 && (n % kWarp != 0 || !q8_d || !q8_s)) {
    if (error) *error = "norm kernel: a Q8_0 copy needs whole blocks of 32";
    return false;
  }
  NormKernel<<<1, kNormThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      in, w, b, n, eps, layer_norm, out, copy, q8, q8_d, q8_s);
  return Check(cudaGetLastError(), "norm kernel launch", error);
}

bool EnqueueRopeAndCache(const RopeCacheArgs& a, void* stream, std::string* error) {
  if (a.head_dim % 2 != 0 || a.rope_dims % 2 != 0 || a.rope_dims > a.head_dim ||
      (a.k_type != DType::kF16 && a.k_type != DType::kF32) ||
      (a.v_type != DType::kF16 && a.v_type != DType::kF32)) {
    if (error) *error = "RoPE/cache kernel: unsupported head or cache row type";
    return false;
  }
  const int64_t threads = static_cast<int64_t>(a.n_head + a.n_kv) * (a.head_dim / 2) +
                          static_cast<int64_t>(a.n_kv) * a.head_dim;
  const int block = 256;
  RopeCacheKernel<<<static_cast<unsigned>((threads + block - 1) / block), block, 0,
                    static_cast<cudaStream_t>(stream)>>>(a);
  return Check(cudaGetLastError(), "RoPE/cache kernel launch", error);
}

bool AttentionSupports(int head_dim, DType k_type, DType v_type) {
  const auto ok = [](DType t) { return t == DType::kF16 || t == DType::kF32; };
  return head_dim > 0 && head_dim % kWarp == 0 && head_dim <= kMaxHeadChunks * kWarp &&
         ok(k_type) && ok(v_type);
}

int64_t AttentionScratchFloats(int n_head, int head_dim, int n_splits) {
  return static_cast<int64_t>(n_head) * n_splits * (head_dim + 2);
}

bool EnqueueAttention(const AttentionArgs& a, void* stream, std::string* error) {
  if (!AttentionSupports(a.head_dim, a.k_type, a.v_type) || a.n_kv <= 0 || a.n_head % a.n_kv != 0 ||
      a.n_splits < 1) {
    if (error) *error = "attention kernel: unsupported head size, cache type or head counts";
    return false;
  }
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  AttentionSplitKernel<<<dim3(a.n_head, a.n_splits), kAttnWarps * kWarp, 0, s>>>(a);
  if (!Check(cudaGetLastError(), "attention kernel launch", error)) return false;
  AttentionMergeKernel<<<a.n_head, a.head_dim, 0, s>>>(a);
  return Check(cudaGetLastError(), "attention merge kernel launch", error);
}

bool EnqueueAdd(float* y, const float* x, int64_t n, void* stream, std::string* error) {
  const int block = 256;
  AddKernel<<<static_cast<unsigned>((n + block - 1) / block), block, 0,
              static_cast<cudaStream_t>(stream)>>>(y, x, n);
  return Check(cudaGetLastError(), "add kernel launch", error);
}

bool EnqueueThresholdMask(const float* x, int64_t n, const float* threshold, float* out,
                          void* stream, std::string* error) {
  const int block = 256;
  ThresholdMaskKernel<<<static_cast<unsigned>((n + block - 1) / block), block, 0,
                        static_cast<cudaStream_t>(stream)>>>(x, n, threshold, out);
  return Check(cudaGetLastError(), "threshold mask kernel launch", error);
}

bool EnqueueColdMask(const float* scores, const uint32_t* hot, int64_t n, float threshold,
                     uint32_t* mask, void* stream, std::string* error) {
  const int block = 256;
  const int64_t threads = (n + kWarp - 1) / kWarp * kWarp;
  ColdMaskKernel<<<static_cast<unsigned>((threads + block - 1) / block), block, 0,
                   static_cast<cudaStream_t>(stream)>>>(scores, hot, n, threshold, mask);
  return Check(cudaGetLastError(), "cold mask kernel launch", error);
}

}  // namespace cuda
}  // namespace pi
