#include <cuda_runtime.h>

#include <algorithm>

#include "kernels/cuda/bandwidth.h"

namespace pi {
namespace cuda {
namespace {

// Every thread sums 16-byte words grid-stride, four loads in flight; the sum
// is written only when it equals a value it cannot take, so the compiler
// keeps the loads and the kernel writes nothing.
__global__ void ReadKernel(const uint4* __restrict__ p, int64_t n, unsigned* sink) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  unsigned acc = 0;
  int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  for (; i + 3 * stride < n; i += 4 * stride) {
    const uint4 a = p[i], b = p[i + stride], c = p[i + 2 * stride], d = p[i + 3 * stride];
    acc ^= a.x ^ a.y ^ a.z ^ a.w ^ b.x ^ b.y ^ b.z ^ b.w ^ c.x ^ c.y ^ c.z ^ c.w ^ d.x ^ d.y ^ d.z ^
           d.w;
  }
  for (; i < n; i += stride) {
    const uint4 a = p[i];
    acc ^= a.x ^ a.y ^ a.z ^ a.w;
  }
  if (acc == 0x9e3779b9u) *sink = acc;
}

bool Check(cudaError_t e, const char* what, std::string* error) {
  if (e == cudaSuccess) return true;
  if (error) *error = std::string(what) + ": " + cudaGetErrorString(e);
  return false;
}

}  // namespace

double MeasureReadBandwidthGBs(int64_t bytes, int passes, std::string* error) {
  int sms = 0, dev = 0;
  if (!Check(cudaGetDevice(&dev), "cudaGetDevice", error) ||
      !Check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev),
             "cudaDeviceGetAttribute", error)) {
    return -1.0;
  }
  const int64_t n = std::max<int64_t>(bytes / 16, 1);
  uint4* buf = nullptr;
  unsigned* sink = nullptr;
  if (!Check(cudaMalloc(&buf, n * 16), "cudaMalloc (bandwidth probe buffer)", error)) return -1.0;
  double best_s = 0.0;
  cudaEvent_t start = nullptr, stop = nullptr;
  bool ok = Check(cudaMalloc(&sink, sizeof(unsigned)), "cudaMalloc", error) &&
            Check(cudaMemset(buf, 1, n * 16), "cudaMemset", error) &&
            Check(cudaEventCreate(&start), "cudaEventCreate", error) &&
            Check(cudaEventCreate(&stop), "cudaEventCreate", error);
  for (int pass = -1; ok && pass < passes; ++pass) {  // pass -1 warms up
    ok = Check(cudaEventRecord(start), "cudaEventRecord", error);
    ReadKernel<<<sms * 8, 512>>>(buf, n, sink);
    ok = ok && Check(cudaGetLastError(), "read kernel launch", error) &&
         Check(cudaEventRecord(stop), "cudaEventRecord", error) &&
         Check(cudaEventSynchronize(stop), "read kernel", error);
    float ms = 0.0f;
    ok = ok && Check(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime", error);
    if (ok && pass >= 0 && (best_s == 0.0 || ms * 1e-3 < best_s)) best_s = ms * 1e-3;
  }
  if (start) cudaEventDestroy(start);
  if (stop) cudaEventDestroy(stop);
  cudaFree(buf);
  if (sink) cudaFree(sink);
  if (!ok) return -1.0;
  return static_cast<double>(n) * 16 / best_s / 1e9;
}

}  // namespace cuda
}  // namespace pi
