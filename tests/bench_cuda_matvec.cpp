// bench-cuda-matvec: GB/s of the CUDA matrix-vector kernels (matvec.h) on
// the shapes of a 7B decode step, for every packed weight type, against the
// device's measured read bandwidth (bandwidth.h) and its datasheet-style
// peak (memory clock x bus width). Each shape's launches are recorded in a
// CUDA graph of 20 products and replayed, so the time is the kernels' (with
// their tails), not the host's launch rate. Markdown table on stdout.
//
//   bench-cuda-matvec [REPS]
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/quant.h"
#include "kernels/cuda/bandwidth.h"
#include "kernels/cuda/matvec.h"
#include "kernels/cuda/packed_matrix.h"

namespace {

constexpr int kPerGraph = 20;

bool Ok(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return true;
  fprintf(stderr, "bench-cuda-matvec: %s: %s\n", what, cudaGetErrorString(e));
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  const int reps = argc > 1 ? std::max(1, atoi(argv[1])) : 50;
  std::string why;
  if (!pi::cuda::DeviceAvailable(&why)) {
    fprintf(stderr, "bench-cuda-matvec: %s\n", why.c_str());
    return 1;
  }
  cudaDeviceProp prop;
  int mem_clock_khz = 0, bus_bits = 0;
  cudaGetDeviceProperties(&prop, 0);
  cudaDeviceGetAttribute(&mem_clock_khz, cudaDevAttrMemoryClockRate, 0);
  cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, 0);
  const double peak_gbs = 2.0 * mem_clock_khz * 1e3 * (bus_bits / 8) / 1e9;
  const double read_gbs = pi::cuda::MeasureReadBandwidthGBs(int64_t{2} << 30, 5, &why);
  printf(
      "device: %s, %d SMs; peak %.0f GB/s (2 x memory clock x bus width); measured read %.0f "
      "GB/s (2 GiB, best of 5)\n\n",
      prop.name, prop.multiProcessorCount, peak_gbs, read_gbs);
  printf(
      "| type | rows x cols | MB | us/product | GB/s | of measured read | of peak |\n"
      "|---|---|---:|---:|---:|---:|---:|\n");
  const int64_t shapes[][2] = {{4096, 4096}, {11008, 4096}, {4096, 11008}, {32000, 4096}};
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  cudaStream_t s;
  if (!Ok(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "stream")) return 1;
  for (pi::DType t :
       {pi::DType::kF32, pi::DType::kF16, pi::DType::kBF16, pi::DType::kQ8_0, pi::DType::kQ4_0}) {
    for (const auto& shape : shapes) {
      const int64_t rows = shape[0], cols = shape[1];
      const int64_t rb = pi::RowBytes(t, cols);
      std::vector<uint8_t> w(rows * rb);
      std::vector<float> row(cols), x(cols);
      uint64_t state = 0x9e3779b97f4a7c15ull;  // xorshift: a GB of weights in seconds
      for (int64_t r = 0; r < rows; ++r) {
        for (float& v : row) {
          state ^= state << 13;
          state ^= state >> 7;
          state ^= state << 17;
          v = static_cast<float>(state >> 40) / 8388608.0f - 1.0f;
        }
        pi::QuantizeRow(t, row.data(), w.data() + r * rb, cols);
      }
      for (float& v : x) v = u(rng);
      std::vector<uint8_t> packed(pi::PackedMatrixBytes(t, rows, cols));
      pi::PackRows(t, w.data(), cols, nullptr, rows, packed.data());
      void *dw, *dx, *dy, *dq;
      if (!Ok(cudaMalloc(&dw, packed.size()), "malloc") ||
          !Ok(cudaMalloc(&dx, cols * 4), "malloc") || !Ok(cudaMalloc(&dy, rows * 4), "malloc") ||
          !Ok(cudaMalloc(&dq, cols * 3), "malloc") ||
          !Ok(cudaMemcpy(dw, packed.data(), packed.size(), cudaMemcpyHostToDevice), "copy") ||
          !Ok(cudaMemcpy(dx, x.data(), cols * 4, cudaMemcpyHostToDevice), "copy")) {
        return 1;
      }
      pi::cuda::DeviceVector v;
      v.x = static_cast<float*>(dx);
      v.n = cols;
      v.q = static_cast<int8_t*>(dq);
      v.d = reinterpret_cast<float*>(static_cast<int8_t*>(dq) + cols);
      v.s = reinterpret_cast<int32_t*>(static_cast<int8_t*>(dq) + 2 * cols);
      std::string err;
      if (!pi::cuda::EnqueueQuantizeQ8(v.x, cols, const_cast<int8_t*>(v.q), const_cast<float*>(v.d),
                                       const_cast<int32_t*>(v.s), s, &err)) {
        fprintf(stderr, "bench-cuda-matvec: %s\n", err.c_str());
        return 1;
      }
      const pi::cuda::DeviceMatrix m{t, rows, cols, dw};
      pi::cuda::MatVecOut out;
      out.y = static_cast<float*>(dy);
      cudaGraph_t graph;
      cudaGraphExec_t exec;
      bool ok = Ok(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), "capture");
      for (int i = 0; ok && i < kPerGraph; ++i) ok = pi::cuda::EnqueueMatVec(m, v, out, s, &err);
      ok = Ok(cudaStreamEndCapture(s, &graph), "capture") && ok &&
           Ok(cudaGraphInstantiate(&exec, graph, 0), "instantiate");
      if (!ok) {
        fprintf(stderr, "bench-cuda-matvec: %s\n", err.c_str());
        return 1;
      }
      cudaEvent_t e0, e1;
      cudaEventCreate(&e0);
      cudaEventCreate(&e1);
      cudaGraphLaunch(exec, s);  // warmup
      cudaEventRecord(e0, s);
      for (int r = 0; r < reps; ++r) cudaGraphLaunch(exec, s);
      cudaEventRecord(e1, s);
      if (!Ok(cudaEventSynchronize(e1), "run")) return 1;
      float ms = 0;
      cudaEventElapsedTime(&ms, e0, e1);
      const double us = ms * 1e3 / (reps * kPerGraph);
      // The bytes a product reads: the weights (quants and scales) once.
      const double bytes = static_cast<double>(rows) * rb;
      const double gbs = bytes / (us * 1e-6) / 1e9;
      printf("| %s | %lld x %lld | %.1f | %.2f | %.0f | %.0f%% | %.0f%% |\n", pi::DTypeName(t),
             static_cast<long long>(rows), static_cast<long long>(cols), bytes / 1e6, us, gbs,
             read_gbs > 0 ? 100 * gbs / read_gbs : 0.0, 100 * gbs / peak_gbs);
      fflush(stdout);
      cudaGraphExecDestroy(exec);
      cudaGraphDestroy(graph);
      cudaEventDestroy(e0);
      cudaEventDestroy(e1);
      for (void* p : {dw, dx, dy, dq}) cudaFree(p);
    }
  }
  return 0;
}
