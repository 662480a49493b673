// bench-cuda-ffn: one 7B-shaped FFN layer (n_embd 4096, n_ff 11008, ReLU) on
// CudaHotShard, per weight type and hot share (10 / 50 / 100 % of the
// neurons in VRAM): time per Start+Wait (x in, kernels, y out), the bytes the
// step reads (every hot gate row, up and down_t rows of the neurons that
// fired), GB/s and its share of the device's peak memory bandwidth (memory
// clock x bus width, printed). Random weights and x: about half the neurons
// fire. Each row also checks y against a double-precision evaluation
// ("rel err"; WRONG and exit status 1 above 1e-4).
// Markdown table on stdout.
//
//   bench-cuda-ffn [REPS [TYPE...]]     (TYPE: f32 f16 bf16 q8_0 q4_0; default all)
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include <cuda_runtime.h>

#include "common/model/llama_model.h"
#include "gpu_worker/cuda_hot_shard.h"
#include "kernels/cpu/quant.h"
#include "kernels/cuda/matvec.h"

namespace {

constexpr int kEmbd = 4096, kFf = 11008;

// A row of uniform(-a, a) weights, converted to `type`, from a cheap
// generator (the bench fills 135M weights per type).
void FillRows(pi::DType type, int64_t rows, int64_t cols, uint64_t seed, float a,
              std::vector<uint8_t>* out) {
  const int64_t rb = pi::RowBytes(type, cols);
  out->resize(static_cast<size_t>(rows * rb));
  std::vector<float> row(cols);
  uint64_t s = seed * 0x9e3779b97f4a7c15ull + 1;
  for (int64_t r = 0; r < rows; ++r) {
    for (float& v : row) {
      s ^= s << 13;
      s ^= s >> 7;
      s ^= s << 17;
      v = a * (static_cast<float>(s >> 40) / 8388608.0f - 1.0f);
    }
    pi::QuantizeRow(type, row.data(), out->data() + r * rb, cols);
  }
}

pi::Tensor View(pi::DType type, const std::vector<uint8_t>& bytes, int64_t rows, int64_t cols) {
  pi::Tensor t;
  t.data = bytes.data();
  t.type = type;
  t.rows = rows;
  t.cols = cols;
  t.row_bytes = pi::RowBytes(type, cols);
  return t;
}

// max |y - reference| / max |reference| for the hot set `ids`; quantized
// rows dot x's Q8_0 copy (as the kernels do), so the reference does too.
double RelError(const pi::LlamaLayer& l, const std::vector<int32_t>& ids, const float* x_in,
                const float* y) {
  std::vector<float> x(x_in, x_in + kEmbd);
  if (l.ffn_up.type == pi::DType::kQ8_0 || l.ffn_up.type == pi::DType::kQ4_0) {
    std::vector<pi::BlockQ8_0> q(kEmbd / 32);
    pi::QuantizeRowQ8_0(x_in, q.data(), kEmbd);
    pi::DequantizeRow(pi::DType::kQ8_0, q.data(), x.data(), kEmbd);
  }
  std::vector<double> ref(kEmbd, 0.0);
  std::vector<float> g(kEmbd), u(kEmbd), d(kEmbd);
  for (int32_t id : ids) {
    pi::DequantizeRow(l.ffn_gate.type, l.ffn_gate.row(id), g.data(), kEmbd);
    double gd = 0;
    for (int c = 0; c < kEmbd; ++c) gd += static_cast<double>(g[c]) * x[c];
    if (gd <= 0) continue;
    pi::DequantizeRow(l.ffn_up.type, l.ffn_up.row(id), u.data(), kEmbd);
    double ud = 0;
    for (int c = 0; c < kEmbd; ++c) ud += static_cast<double>(u[c]) * x[c];
    pi::DequantizeRow(l.ffn_down_t.type, l.ffn_down_t.row(id), d.data(), kEmbd);
    for (int c = 0; c < kEmbd; ++c) ref[c] += gd * ud * d[c];
  }
  double err = 0, mag = 0;
  for (int c = 0; c < kEmbd; ++c) {
    err = std::max(err, std::fabs(y[c] - ref[c]));
    mag = std::max(mag, std::fabs(ref[c]));
  }
  return mag > 0 ? err / mag : err;
}

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

int main(int argc, char** argv) {
  const int reps = argc > 1 ? std::max(1, atoi(argv[1])) : 200;
  std::string why;
  if (!pi::cuda::DeviceAvailable(&why)) {
    fprintf(stderr, "bench-cuda-ffn: %s\n", why.c_str());
    return 1;
  }
  cudaDeviceProp prop;
  int mem_clock_khz = 0, bus_bits = 0;
  if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess ||
      cudaDeviceGetAttribute(&mem_clock_khz, cudaDevAttrMemoryClockRate, 0) != cudaSuccess ||
      cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, 0) != cudaSuccess) {
    fprintf(stderr, "bench-cuda-ffn: cannot query the device\n");
    return 1;
  }
  // DDR: two transfers per clock.
  const double peak_gbs = 2.0 * mem_clock_khz * 1e3 * (bus_bits / 8) / 1e9;
  printf(
      "device: %s, %d SMs; peak memory bandwidth %.0f GB/s = 2 x memory clock %d MHz x bus "
      "%d bits / 8 (cudaDevAttrMemoryClockRate, cudaDevAttrGlobalMemoryBusWidth)\n",
      prop.name, prop.multiProcessorCount, peak_gbs, mem_clock_khz / 1000, bus_bits);
  printf("layer: n_embd %d, n_ff %d, relu; %d timed Start+Wait per row (steady_clock)\n\n", kEmbd,
         kFf, reps);
  printf(
      "| type | hot | hot rows | fired | bytes read | us/step | GB/s | of peak | rel err "
      "|\n|---|---:|---:|---:|---:|---:|---:|---:|---:|\n");

  std::mt19937 rng(1);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> x(kEmbd), y(kEmbd);
  for (float& v : x) v = nd(rng);

  const float a = std::sqrt(3.0f / kEmbd);  // unit-variance dot products
  double floor_us = -1;
  int failures = 0;
  for (pi::DType t :
       {pi::DType::kF32, pi::DType::kF16, pi::DType::kBF16, pi::DType::kQ8_0, pi::DType::kQ4_0}) {
    bool wanted = argc <= 2;
    for (int i = 2; i < argc; ++i) wanted |= std::string(argv[i]) == pi::DTypeName(t);
    if (!wanted) continue;
    std::vector<uint8_t> gate, up, down;
    FillRows(t, kFf, kEmbd, 1, a, &gate);
    FillRows(t, kFf, kEmbd, 2, a, &up);
    FillRows(t, kFf, kEmbd, 3, a, &down);
    pi::LlamaModel m;
    m.config.n_layer = 1;
    m.config.n_embd = kEmbd;
    m.config.n_ff = kFf;
    m.config.activation = pi::FfnActivation::kRelu;
    m.layers.resize(1);
    m.layers[0].ffn_gate = View(t, gate, kFf, kEmbd);
    m.layers[0].ffn_up = View(t, up, kFf, kEmbd);
    m.layers[0].ffn_down_t = View(t, down, kFf, kEmbd);
    const int64_t rb = pi::RowBytes(t, kEmbd);

    for (int pct : {0, 10, 50, 100}) {
      if (pct == 0 && floor_us >= 0) continue;  // the empty step's cost, measured once
      std::vector<int32_t> ids(kFf);
      std::iota(ids.begin(), ids.end(), 0);
      std::shuffle(ids.begin(), ids.end(), rng);
      ids.resize(static_cast<size_t>(kFf) * pct / 100);
      std::sort(ids.begin(), ids.end());
      pi::CudaHotShard backend;
      pi::Status s = backend.Load(m, {ids});
      pi::ShardStep step;
      step.x = x.data();
      step.out = y.data();
      const float* sum = nullptr;
      int64_t fired = 0;
      for (int i = 0; i < 10 && s.ok(); ++i) {  // warmup
        backend.Start(step);
        s = backend.Wait(&sum, &fired);
      }
      if (!s.ok()) {
        fprintf(stderr, "bench-cuda-ffn: %s\n", s.message().c_str());
        return 1;
      }
      const double err = RelError(m.layers[0], ids, x.data(), y.data());
      const double t0 = Now();
      int64_t n = 0;
      for (int i = 0; i < reps && s.ok(); ++i) {
        backend.Start(step);
        s = backend.Wait(&sum, &n);
      }
      if (!s.ok()) {
        fprintf(stderr, "bench-cuda-ffn: %s\n", s.message().c_str());
        return 1;
      }
      const double us = (Now() - t0) / reps * 1e6;
      if (pct == 0) {
        floor_us = us;
        printf("| (empty step: x in, y out, sync) | 0%% | 0 | 0 | 0 | %.1f | | | |\n", us);
        continue;
      }
      const double bytes =
          static_cast<double>(ids.size()) * rb + static_cast<double>(fired) * 2 * rb;
      const double gbs = bytes / (us * 1e-6) / 1e9;
      // Float rounding of 4096-term sums is ~1e-6 of the largest output.
      const bool bad = !(err < 1e-4);
      failures += bad;
      printf("| %s | %d%% | %zu | %.0f%% | %.1f MB | %.1f | %.0f | %.0f%% | %.1e%s |\n",
             pi::DTypeName(t), pct, ids.size(), 100.0 * fired / std::max<size_t>(1, ids.size()),
             bytes / 1e6, us, gbs, 100 * gbs / peak_gbs, err, bad ? " WRONG" : "");
      fflush(stdout);
    }
  }
  printf(
      "\nbytes read = hot rows x gate row + fired x (up row + down_t row); the time includes "
      "the x/y copies and the stream sync (the empty step above).\n");
  if (failures > 0) fprintf(stderr, "bench-cuda-ffn: %d rows with a WRONG y\n", failures);
  return failures > 0 ? 1 : 0;
}
