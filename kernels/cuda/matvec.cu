#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "kernels/cuda/matvec.h"

namespace pi {
namespace cuda {
namespace {

constexpr int kWarp = 32;
constexpr int kRowsPerBlock = 4;  // 4 warps per block, one row each

// Block structs as in kernels/cpu/quant.h, repeated here because device code
// reads them with device loads; the static_asserts pin the same layout.
struct BlockQ8_0 {
  __half d;
  int8_t qs[32];
};
struct BlockQ4_0 {
  __half d;
  uint8_t qs[16];
};
static_assert(sizeof(BlockQ8_0) == 34, "ggml block_q8_0");
static_assert(sizeof(BlockQ4_0) == 18, "ggml block_q4_0");

__device__ float WarpSum(float v) {
  for (int off = kWarp / 2; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
  return v;
}

template <typename T>
__device__ float ToFloat(T v);
template <>
__device__ float ToFloat<float>(float v) {
  return v;
}
template <>
__device__ float ToFloat<__half>(__half v) {
  return __half2float(v);
}
template <>
__device__ float ToFloat<__nv_bfloat16>(__nv_bfloat16 v) {
  return __bfloat162float(v);
}

// Float weights: lanes stride over the row's elements.
template <typename T>
__global__ void MatVecFloat(const T* __restrict__ w, int64_t rows, int64_t cols,
                            const float* __restrict__ x, float* __restrict__ y) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.y;
  if (row >= rows) return;
  const T* wr = w + row * cols;
  float acc = 0.0f;
  for (int64_t c = threadIdx.x; c < cols; c += kWarp) acc += ToFloat(wr[c]) * x[c];
  acc = WarpSum(acc);
  if (threadIdx.x == 0) y[row] = acc;
}

// Q8_0: lanes take whole blocks; each lane's block is 34 contiguous bytes.
__global__ void MatVecQ8_0(const BlockQ8_0* __restrict__ w, int64_t rows, int64_t cols,
                           const float* __restrict__ x, float* __restrict__ y) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.y;
  if (row >= rows) return;
  const int64_t nb = cols / 32;
  const BlockQ8_0* wr = w + row * nb;
  float acc = 0.0f;
  for (int64_t b = threadIdx.x; b < nb; b += kWarp) {
    const float* xb = x + b * 32;
    float s = 0.0f;
#pragma unroll
    for (int j = 0; j < 32; ++j) s += static_cast<float>(wr[b].qs[j]) * xb[j];
    acc += __half2float(wr[b].d) * s;
  }
  acc = WarpSum(acc);
  if (threadIdx.x == 0) y[row] = acc;
}

// Q4_0: byte j holds weight j (low nibble) and j + 16 (high nibble).
__global__ void MatVecQ4_0(const BlockQ4_0* __restrict__ w, int64_t rows, int64_t cols,
                           const float* __restrict__ x, float* __restrict__ y) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.y;
  if (row >= rows) return;
  const int64_t nb = cols / 32;
  const BlockQ4_0* wr = w + row * nb;
  float acc = 0.0f;
  for (int64_t b = threadIdx.x; b < nb; b += kWarp) {
    const float* xb = x + b * 32;
    float s = 0.0f;
#pragma unroll
    for (int j = 0; j < 16; ++j) {
      const uint8_t q = wr[b].qs[j];
      s += static_cast<float>((q & 0x0F) - 8) * xb[j] +
           static_cast<float>((q >> 4) - 8) * xb[j + 16];
    }
    acc += __half2float(wr[b].d) * s;
  }
  acc = WarpSum(acc);
  if (threadIdx.x == 0) y[row] = acc;
}

bool Check(cudaError_t e, std::string* error) {
  if (e == cudaSuccess) return true;
  if (error) *error = cudaGetErrorString(e);
  return false;
}

bool Launch(DType type, const void* d_w, int64_t rows, int64_t cols, const float* d_x, float* d_y,
            std::string* error) {
  const dim3 block(kWarp, kRowsPerBlock);
  const dim3 grid(static_cast<unsigned>((rows + kRowsPerBlock - 1) / kRowsPerBlock));
  switch (type) {
    case DType::kF32:
      MatVecFloat<<<grid, block>>>(static_cast<const float*>(d_w), rows, cols, d_x, d_y);
      break;
    case DType::kF16:
      MatVecFloat<<<grid, block>>>(static_cast<const __half*>(d_w), rows, cols, d_x, d_y);
      break;
    case DType::kBF16:
      MatVecFloat<<<grid, block>>>(static_cast<const __nv_bfloat16*>(d_w), rows, cols, d_x, d_y);
      break;
    case DType::kQ8_0:
      MatVecQ8_0<<<grid, block>>>(static_cast<const BlockQ8_0*>(d_w), rows, cols, d_x, d_y);
      break;
    case DType::kQ4_0:
      MatVecQ4_0<<<grid, block>>>(static_cast<const BlockQ4_0*>(d_w), rows, cols, d_x, d_y);
      break;
    default:
      if (error) *error = std::string("cuda::MatVec: unsupported type ") + DTypeName(type);
      return false;
  }
  return Check(cudaGetLastError(), error);
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

bool MatVec(DType type, const void* d_w, int64_t rows, int64_t cols, const float* d_x, float* d_y,
            std::string* error) {
  if (!Launch(type, d_w, rows, cols, d_x, d_y, error)) return false;
  return Check(cudaDeviceSynchronize(), error);
}

bool Malloc(void** ptr, size_t bytes, std::string* error) {
  return Check(cudaMalloc(ptr, bytes), error);
}
bool Free(void* ptr) {
  return cudaFree(ptr) == cudaSuccess;
}
bool CopyToDevice(void* dst, const void* src, size_t bytes, std::string* error) {
  return Check(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice), error);
}
bool CopyToHost(void* dst, const void* src, size_t bytes, std::string* error) {
  return Check(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost), error);
}

double TimeMatVec(DType type, const void* d_w, int64_t rows, int64_t cols, const float* d_x,
                  float* d_y, int iters) {
  std::string err;
  if (!MatVec(type, d_w, rows, cols, d_x, d_y, &err)) return -1.0;
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  cudaEventRecord(start);
  for (int i = 0; i < iters; ++i) {
    if (!Launch(type, d_w, rows, cols, d_x, d_y, &err)) return -1.0;
  }
  cudaEventRecord(stop);
  cudaEventSynchronize(stop);
  float ms = 0.0f;
  cudaEventElapsedTime(&ms, start, stop);
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return ms / iters;
}

}  // namespace cuda
}  // namespace pi
