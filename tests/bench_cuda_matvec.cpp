// bench-cuda-matvec: GB/s of the CUDA matvec kernels on a 4096 x 11008 matrix
// (one FFN projection of a 7B model) for each weight type, against the
// device's peak memory bandwidth (from its clock and bus width).
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include <cuda_runtime.h>

#include "kernels/cpu/quant.h"
#include "kernels/cuda/matvec.h"

int main(int argc, char** argv) {
  std::string why;
  if (!pi::cuda::DeviceAvailable(&why)) {
    fprintf(stderr, "bench-cuda-matvec: %s\n", why.c_str());
    return 1;
  }
  cudaDeviceProp prop;
  cudaGetDeviceProperties(&prop, 0);
  int mem_clock_khz = 0, bus_bits = 0;
  cudaDeviceGetAttribute(&mem_clock_khz, cudaDevAttrMemoryClockRate, 0);
  cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, 0);
  const double peak_gbs = 2.0 * mem_clock_khz * 1e3 * (bus_bits / 8) / 1e9;
  printf("device: %s, %d SMs, peak memory bandwidth %.0f GB/s (from clock x bus)\n", prop.name,
         prop.multiProcessorCount, peak_gbs);
  const int64_t rows = argc > 1 ? atoll(argv[1]) : 11008, cols = argc > 2 ? atoll(argv[2]) : 4096;
  printf(
      "| type | rows x cols | bytes | us/launch | GB/s | of peak "
      "|\n|---|---|---:|---:|---:|---:|\n");
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> row(cols), x(cols);
  for (float& v : x) v = u(rng);
  for (pi::DType t :
       {pi::DType::kF32, pi::DType::kF16, pi::DType::kBF16, pi::DType::kQ8_0, pi::DType::kQ4_0}) {
    const int64_t rb = pi::RowBytes(t, cols);
    std::vector<uint8_t> w(rows * rb);
    for (int64_t r = 0; r < rows; ++r) {
      for (float& v : row) v = u(rng);
      pi::QuantizeRow(t, row.data(), w.data() + r * rb, cols);
    }
    void *dw, *dx, *dy;
    std::string err;
    if (!pi::cuda::Malloc(&dw, w.size(), &err) || !pi::cuda::Malloc(&dx, cols * 4, &err) ||
        !pi::cuda::Malloc(&dy, rows * 4, &err) ||
        !pi::cuda::CopyToDevice(dw, w.data(), w.size(), &err) ||
        !pi::cuda::CopyToDevice(dx, x.data(), cols * 4, &err)) {
      fprintf(stderr, "bench-cuda-matvec: %s\n", err.c_str());
      return 1;
    }
    const double ms = pi::cuda::TimeMatVec(t, dw, rows, cols, static_cast<float*>(dx),
                                           static_cast<float*>(dy), 200);
    const double gbs = w.size() / (ms * 1e-3) / 1e9;
    printf("| %s | %lld x %lld | %zu | %.2f | %.0f | %.0f%% |\n", pi::DTypeName(t),
           static_cast<long long>(rows), static_cast<long long>(cols), w.size(), ms * 1e3, gbs,
           100 * gbs / peak_gbs);
    pi::cuda::Free(dw);
    pi::cuda::Free(dx);
    pi::cuda::Free(dy);
  }
  return 0;
}
