#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "kernels/cuda/matvec.h"
#include "kernels/cuda/q8_block.cuh"

namespace pi {
namespace cuda {
namespace {

constexpr int kWarp = 32;
constexpr int kRowsPerBlock = 4;  // warps per block, one row each

__device__ __forceinline__ float WarpSum(float v) {
#pragma unroll
  for (int off = kWarp / 2; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
  return v;
}

// Everything a product needs, by value (one struct argument per launch).
struct Args {
  const uint8_t* w;      // float rows, or the packed quants
  const __half* scales;  // packed quantized: [rows][cols / 32]
  int64_t rows, cols;
  int64_t row_bytes;  // float rows: bytes per row; packed: quant bytes per row
  const float* x;
  const int8_t* xq;
  const float* xd;
  const int32_t* xs;
  float* y;
  const float* gate;
  int32_t* fired;
  Epilogue epilogue;
  ActForm act_form;
  const float* threshold;
  bool drelu;
};

// Rows whose gate did not fire (or was not kept) are neither read nor
// computed: act = 0.
__device__ __forceinline__ bool SkipsRow(const Args& a, int64_t row) {
  if (a.epilogue == Epilogue::kGateUp) return a.gate[row] == 0.0f;
  return (a.epilogue == Epilogue::kReluGateUp || a.epilogue == Epilogue::kDReluGateUp) &&
         !(a.gate[row] > 0.0f);
}

// act(g) as the CPU's ActivatedGate computes it (gate_activation.h).
__device__ __forceinline__ float Activated(ActForm f, float g) {
  switch (f) {
    case ActForm::kSilu:
      return g / (1.0f + expf(-g));
    case ActForm::kGelu:
      return 0.5f * g * (1.0f + tanhf(0.7978845608028654f * g * (1.0f + 0.044715f * g * g)));
    default:
      return g > 0.0f ? g : 0.0f;
  }
}

// The row this warp computes: false when it has none, or when its gate did
// not fire (then lane 0 has written its act = 0).
__device__ __forceinline__ bool RowToCompute(const Args& a, int64_t* row) {
  *row = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / kWarp;
  if (*row >= a.rows) return false;
  if (SkipsRow(a, *row)) {
    if (threadIdx.x % kWarp == 0) a.y[*row] = 0.0f;
    return false;
  }
  return true;
}

// Lane 0 writes row's result.
__device__ __forceinline__ void Finish(const Args& a, int64_t row, float dot) {
  float act = 0.0f;
  switch (a.epilogue) {
    case Epilogue::kStore:
      a.y[row] = dot;
      return;
    case Epilogue::kAccumulate:
      a.y[row] += dot;
      return;
    case Epilogue::kRelu:
      a.y[row] = dot > 0.0f ? dot : 0.0f;
      return;
    case Epilogue::kReluGateUp:
      act = a.gate[row] * dot;
      break;
    case Epilogue::kDReluGateUp:
      act = dot > 0.0f ? a.gate[row] * dot : 0.0f;
      break;
    case Epilogue::kReluFired:
      act = dot > 0.0f ? dot : 0.0f;
      break;
    case Epilogue::kActThreshold: {
      const float g = Activated(a.act_form, dot);
      act = fabsf(g) > *a.threshold ? g : 0.0f;
      break;
    }
    case Epilogue::kGateUp:
      act = a.drelu && !(dot > 0.0f) ? 0.0f : a.gate[row] * dot;
      break;
  }
  a.y[row] = act;
  if (act != 0.0f && a.fired) atomicAdd(a.fired, 1);
}

// ---- float weights -------------------------------------------------------

__device__ __forceinline__ void Load8(const float* p, float* w) {
  const float4 a = __ldg(reinterpret_cast<const float4*>(p));
  const float4 b = __ldg(reinterpret_cast<const float4*>(p) + 1);
  w[0] = a.x, w[1] = a.y, w[2] = a.z, w[3] = a.w, w[4] = b.x, w[5] = b.y, w[6] = b.z, w[7] = b.w;
}
__device__ __forceinline__ void Load8(const __half* p, float* w) {
  const uint4 raw = __ldg(reinterpret_cast<const uint4*>(p));
  const __half2* h = reinterpret_cast<const __half2*>(&raw);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 f = __half22float2(h[i]);
    w[2 * i] = f.x, w[2 * i + 1] = f.y;
  }
}
__device__ __forceinline__ void Load8(const __nv_bfloat16* p, float* w) {
  const uint4 raw = __ldg(reinterpret_cast<const uint4*>(p));
  const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&raw);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 f = __bfloat1622float2(h[i]);
    w[2 * i] = f.x, w[2 * i + 1] = f.y;
  }
}
__device__ __forceinline__ float ToFloat(float v) {
  return v;
}
__device__ __forceinline__ float ToFloat(__half v) {
  return __half2float(v);
}
__device__ __forceinline__ float ToFloat(__nv_bfloat16 v) {
  return __bfloat162float(v);
}

// Rows of cols % 8 == 0: lane l takes 8-weight groups l, l + 32, ... (16 or
// 32 bytes of weights and 32 bytes of x each), four groups in flight.
template <typename T>
__global__ void MatVecFloat8Kernel(Args a) {
  int64_t row;
  if (!RowToCompute(a, &row)) return;
  const int lane = threadIdx.x % kWarp;
  const T* wr = reinterpret_cast<const T*>(a.w + row * a.row_bytes);
  const int64_t groups = a.cols / 8;
  float acc = 0.0f;
#pragma unroll 4
  for (int64_t g = lane; g < groups; g += kWarp) {
    float w[8], xv[8];
    Load8(wr + 8 * g, w);
    Load8(a.x + 8 * g, xv);
#pragma unroll
    for (int v = 0; v < 8; ++v) acc += w[v] * xv[v];
  }
  acc = WarpSum(acc);
  if (lane == 0) Finish(a, row, acc);
}

// Any row length (a predictor's fc2 of rank 50, say): lanes stride over
// single weights.
template <typename T>
__global__ void MatVecFloatAnyKernel(Args a) {
  int64_t row;
  if (!RowToCompute(a, &row)) return;
  const int lane = threadIdx.x % kWarp;
  const T* wr = reinterpret_cast<const T*>(a.w + row * a.row_bytes);
  float acc = 0.0f;
  for (int64_t c = lane; c < a.cols; c += kWarp) acc += ToFloat(wr[c]) * __ldg(a.x + c);
  acc = WarpSum(acc);
  if (lane == 0) Finish(a, row, acc);
}

// ---- quantized weights against x's Q8_0 copy -----------------------------

// Q4_0: lane l takes blocks l, l + 32, ...: 16 bytes of quants (byte j =
// weight j in the low nibble, j + 16 in the high), 32 bytes of x's quants.
// The nibbles are dotted as they are (0..15) and the block's -8 offset is
// applied once, with x's precomputed quant sum: sum (q - 8) x = sum q x - 8
// sum x, exact in integers, and two instructions per 8 weights fewer.
__global__ void MatVecQ4_0Kernel(Args a) {
  int64_t row;
  if (!RowToCompute(a, &row)) return;
  const int lane = threadIdx.x % kWarp;
  const int64_t nb = a.cols / 32;
  const uint4* q = reinterpret_cast<const uint4*>(a.w + row * a.row_bytes);
  const __half* s = a.scales + row * nb;
  const int4* xq = reinterpret_cast<const int4*>(a.xq);
  float acc = 0.0f;
#pragma unroll 4
  for (int64_t b = lane; b < nb; b += kWarp) {
    const uint4 w = __ldg(q + b);
    const int4 x0 = __ldg(xq + 2 * b), x1 = __ldg(xq + 2 * b + 1);
    constexpr unsigned kLow = 0x0F0F0F0Fu;
    int sum = __dp4a(static_cast<int>(w.x & kLow), x0.x, 0);
    sum = __dp4a(static_cast<int>(w.y & kLow), x0.y, sum);
    sum = __dp4a(static_cast<int>(w.z & kLow), x0.z, sum);
    sum = __dp4a(static_cast<int>(w.w & kLow), x0.w, sum);
    sum = __dp4a(static_cast<int>((w.x >> 4) & kLow), x1.x, sum);
    sum = __dp4a(static_cast<int>((w.y >> 4) & kLow), x1.y, sum);
    sum = __dp4a(static_cast<int>((w.z >> 4) & kLow), x1.z, sum);
    sum = __dp4a(static_cast<int>((w.w >> 4) & kLow), x1.w, sum);
    sum -= 8 * __ldg(a.xs + b);
    acc += static_cast<float>(sum) * (__half2float(__ldg(s + b)) * __ldg(a.xd + b));
  }
  acc = WarpSum(acc);
  if (lane == 0) Finish(a, row, acc);
}

// Q8_0: lane l takes half-blocks l, l + 32, ... (16 quants each), so one
// load instruction of the warp reads 512 contiguous bytes of a row. (Two
// rows per warp, sharing each x load, measured slower on an H200.)
__global__ void MatVecQ8_0Kernel(Args a) {
  int64_t row;
  if (!RowToCompute(a, &row)) return;
  const int lane = threadIdx.x % kWarp;
  const int64_t halves = a.cols / 16;
  const int4* q = reinterpret_cast<const int4*>(a.w + row * a.row_bytes);
  const __half* s = a.scales + row * (a.cols / 32);
  const int4* xq = reinterpret_cast<const int4*>(a.xq);
  float acc = 0.0f;
#pragma unroll 4
  for (int64_t h = lane; h < halves; h += kWarp) {
    const int4 w = __ldg(q + h);
    const int4 xv = __ldg(xq + h);
    int sum = __dp4a(w.x, xv.x, 0);
    sum = __dp4a(w.y, xv.y, sum);
    sum = __dp4a(w.z, xv.z, sum);
    sum = __dp4a(w.w, xv.w, sum);
    acc += static_cast<float>(sum) * (__half2float(__ldg(s + h / 2)) * __ldg(a.xd + h / 2));
  }
  acc = WarpSum(acc);
  if (lane == 0) Finish(a, row, acc);
}

// ---- x's Q8_0 copy -------------------------------------------------------

// One warp per 32-value block: lane j quantizes value j.
__global__ void QuantizeQ8Kernel(const float* __restrict__ x, int64_t n, int8_t* __restrict__ q,
                                 float* __restrict__ d, int32_t* __restrict__ sums) {
  const int64_t b = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / kWarp;
  if (b * 32 >= n) return;
  const int64_t i = b * 32 + threadIdx.x % kWarp;
  QuantizeQ8Block(x[i], q + i, d + b, sums + b);
}

bool Check(cudaError_t e, const char* what, std::string* error) {
  if (e == cudaSuccess) return true;
  if (error) *error = std::string(what) + ": " + cudaGetErrorString(e);
  return false;
}

bool Fail(const std::string& message, std::string* error) {
  if (error) *error = message;
  return false;
}

bool IsQuantized(DType t) {
  return t == DType::kQ8_0 || t == DType::kQ4_0;
}

}  // namespace

bool DeviceAvailable(std::string* why) {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    if (why) *why = std::string("no usable CUDA device: ") + cudaGetErrorString(e);
    return false;
  }
  if (n == 0) {
    if (why) *why = "no CUDA device";
    return false;
  }
  return true;
}

bool DeviceMemory(int64_t* free_bytes, int64_t* total_bytes, std::string* why) {
  size_t f = 0, t = 0;
  const cudaError_t e = cudaMemGetInfo(&f, &t);
  if (e != cudaSuccess) {
    if (why) *why = std::string("cudaMemGetInfo: ") + cudaGetErrorString(e);
    return false;
  }
  *free_bytes = static_cast<int64_t>(f);
  *total_bytes = static_cast<int64_t>(t);
  return true;
}

bool QuantizeQ8Supports(int64_t cols) {
  return cols > 0 && cols % 32 == 0;
}

bool EnqueueQuantizeQ8(const float* x, int64_t n, int8_t* q, float* d, int32_t* sums, void* stream,
                       std::string* error) {
  if (!QuantizeQ8Supports(n)) {
    return Fail("cuda::EnqueueQuantizeQ8: " + std::to_string(n) + " values: not whole blocks",
                error);
  }
  const int64_t blocks = n / 32;
  const int threads = 256;  // 8 warps, 8 blocks of x
  const unsigned grid = static_cast<unsigned>((blocks * 32 + threads - 1) / threads);
  QuantizeQ8Kernel<<<grid, threads, 0, static_cast<cudaStream_t>(stream)>>>(x, n, q, d, sums);
  return Check(cudaGetLastError(), "cuda::EnqueueQuantizeQ8 launch", error);
}

bool MatVecSupports(DType type, int64_t cols) {
  if (!PackedTypeSupported(type) || cols <= 0) return false;
  return !IsQuantized(type) || cols % 32 == 0;
}

bool EnqueueMatVec(const DeviceMatrix& w, const DeviceVector& x, const MatVecOut& out, void* stream,
                   std::string* error) {
  if (!MatVecSupports(w.type, w.cols)) {
    return Fail(std::string("cuda::EnqueueMatVec: no kernel for ") + DTypeName(w.type) +
                    " rows of " + std::to_string(w.cols),
                error);
  }
  if (x.n != w.cols || !x.x || !out.y || (IsQuantized(w.type) && (!x.q || !x.d || !x.s))) {
    return Fail("cuda::EnqueueMatVec: x does not fit the matrix (" + std::to_string(x.n) +
                    " values for " + std::to_string(w.cols) + " columns, or no Q8_0 copy)",
                error);
  }
  const bool gated = out.epilogue == Epilogue::kReluGateUp ||
                     out.epilogue == Epilogue::kDReluGateUp || out.epilogue == Epilogue::kGateUp;
  if (gated && !out.gate) return Fail("cuda::EnqueueMatVec: gated epilogue without a gate", error);
  if (out.epilogue == Epilogue::kActThreshold && !out.threshold) {
    return Fail("cuda::EnqueueMatVec: a threshold epilogue without its threshold", error);
  }
  if (w.rows == 0) return true;
  Args a;
  a.w = static_cast<const uint8_t*>(w.data);
  a.scales = nullptr;
  a.rows = w.rows;
  a.cols = w.cols;
  a.x = x.x;
  a.xq = x.q;
  a.xd = x.d;
  a.xs = x.s;
  a.y = out.y;
  a.gate = out.gate;
  a.fired = out.fired;
  a.epilogue = out.epilogue;
  a.act_form = out.act_form;
  a.threshold = out.threshold;
  a.drelu = out.drelu;
  if (IsQuantized(w.type)) {
    a.row_bytes = w.cols / 32 * PackedQuantBytes(w.type);
    a.scales = reinterpret_cast<const __half*>(a.w + PackedScalesOffset(w.type, w.rows, w.cols));
  } else {
    a.row_bytes = RowBytes(w.type, w.cols);
  }
  const unsigned grid = static_cast<unsigned>((w.rows + kRowsPerBlock - 1) / kRowsPerBlock);
  const int threads = kRowsPerBlock * kWarp;
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  const bool wide = w.cols % 8 == 0;
  switch (w.type) {
    case DType::kF32:
      if (wide) {
        MatVecFloat8Kernel<float><<<grid, threads, 0, s>>>(a);
      } else {
        MatVecFloatAnyKernel<float><<<grid, threads, 0, s>>>(a);
      }
      break;
    case DType::kF16:
      if (wide) {
        MatVecFloat8Kernel<__half><<<grid, threads, 0, s>>>(a);
      } else {
        MatVecFloatAnyKernel<__half><<<grid, threads, 0, s>>>(a);
      }
      break;
    case DType::kBF16:
      if (wide) {
        MatVecFloat8Kernel<__nv_bfloat16><<<grid, threads, 0, s>>>(a);
      } else {
        MatVecFloatAnyKernel<__nv_bfloat16><<<grid, threads, 0, s>>>(a);
      }
      break;
    case DType::kQ8_0:
      MatVecQ8_0Kernel<<<grid, threads, 0, s>>>(a);
      break;
    case DType::kQ4_0:
      MatVecQ4_0Kernel<<<grid, threads, 0, s>>>(a);
      break;
    default:
      return Fail("cuda::EnqueueMatVec: unsupported type", error);
  }
  return Check(cudaGetLastError(), "cuda::EnqueueMatVec launch", error);
}

bool Malloc(void** ptr, size_t bytes, std::string* error) {
  return Check(cudaMalloc(ptr, bytes), "cudaMalloc", error);
}
bool Free(void* ptr) {
  return cudaFree(ptr) == cudaSuccess;
}
bool CopyToDevice(void* dst, const void* src, size_t bytes, std::string* error) {
  return Check(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice), "cudaMemcpy", error);
}
bool CopyToHost(void* dst, const void* src, size_t bytes, std::string* error) {
  return Check(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy", error);
}
bool Synchronize(std::string* error) {
  return Check(cudaDeviceSynchronize(), "cudaDeviceSynchronize", error);
}

}  // namespace cuda
}  // namespace pi
