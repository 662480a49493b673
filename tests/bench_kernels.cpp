// Micro-benchmarks for the CPU weight kernels, next to a memory-bandwidth
// probe: decode-time MatVecRows is bandwidth-bound, so its bytes/s should
// come close to the probe's.
//
//   bench-kernels --benchmark_min_time=0.2
//
// The weight matrix is 4096 x 11008 (a 7B FFN gate/up). To measure DRAM
// rather than the 32 MiB L3, every iteration reads the next of several copies
// laid out in one 512 MiB arena, which the probe also sums.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/cpu/isa.h"
#include "kernels/cpu/matmul.h"
#include "kernels/dtype.h"

namespace pi {
namespace {

constexpr int64_t kCols = 4096;
constexpr int64_t kRows = 11008;
constexpr size_t kArenaBytes = size_t{512} << 20;

uint8_t* Arena() {
  static uint8_t* arena = [] {
    auto* p = static_cast<uint8_t*>(std::aligned_alloc(64, kArenaBytes));
    // 0x3C in every byte is a valid, finite weight in all five types
    // (f32 0.0115, f16 1.06, bf16 0.0115, q8 scale 1.06 / q 60, q4 nibbles 3 and 12).
    std::memset(p, 0x3C, kArenaBytes);
    return p;
  }();
  return arena;
}

// Prepared activations, one per type, built before any benchmark runs.
std::vector<uint8_t>& Prepared(DType t) {
  static std::vector<uint8_t> bufs[40];
  return bufs[static_cast<int>(t)];
}

void Prepare(DType t) {
  std::vector<float> x(kCols);
  for (int64_t i = 0; i < kCols; ++i) x[i] = 0.001f * static_cast<float>((i * 37) % 101 - 50);
  Prepared(t).resize(PreparedActivationBytes(t, kCols) * 16);
  for (int b = 0; b < 16; ++b) {
    PrepareActivation(t, x.data(), kCols,
                      Prepared(t).data() + b * PreparedActivationBytes(t, kCols));
  }
}

// Each thread computes its share of the rows, as the engine's thread pool does.
void BM_MatVec(benchmark::State& state, DType t, CpuIsa isa) {
  SetCpuIsa(isa);
  const size_t matrix_bytes = static_cast<size_t>(RowBytes(t, kCols)) * kRows;
  const size_t copies = kArenaBytes / matrix_bytes;
  const int64_t r0 = kRows * state.thread_index() / state.threads();
  const int64_t r1 = kRows * (state.thread_index() + 1) / state.threads();
  static std::vector<float> y(kRows);
  size_t copy = 0;
  for (auto _ : state) {
    MatVecRows(t, Arena() + copy * matrix_bytes, kCols, Prepared(t).data(), y.data(), r0, r1);
    benchmark::ClobberMemory();
    copy = (copy + 1) % copies;
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) *
                          RowBytes(t, kCols) * (r1 - r0));
}

// Prompt-style batch of 16 activations; weights read once per batch.
void BM_MatMul16(benchmark::State& state, DType t, CpuIsa isa) {
  SetCpuIsa(isa);
  const size_t matrix_bytes = static_cast<size_t>(RowBytes(t, kCols)) * kRows;
  const size_t copies = kArenaBytes / matrix_bytes;
  std::vector<float> y(kRows * 16);
  size_t copy = 0;
  for (auto _ : state) {
    MatMulRows(t, Arena() + copy * matrix_bytes, kCols, Prepared(t).data(), 16, y.data(), kRows,
               0, kRows);
    benchmark::ClobberMemory();
    copy = (copy + 1) % copies;
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * matrix_bytes);
  state.counters["GFLOP/s"] = benchmark::Counter(
      2.0 * kRows * kCols * 16 * static_cast<double>(state.iterations()),
      benchmark::Counter::kIsRate);
}

// ffn_down_t form: all 11008 rows of 4096 accumulated into one y (dense a).
void BM_Axpy(benchmark::State& state, DType t, CpuIsa isa) {
  SetCpuIsa(isa);
  const size_t matrix_bytes = static_cast<size_t>(RowBytes(t, kCols)) * kRows;
  const size_t copies = kArenaBytes / matrix_bytes;
  std::vector<float> a(kRows, 0.5f), y(kCols, 0.0f);
  size_t copy = 0;
  for (auto _ : state) {
    AxpyRows(t, Arena() + copy * matrix_bytes, kCols, a.data(), y.data(), 0, kRows);
    benchmark::ClobberMemory();
    copy = (copy + 1) % copies;
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * matrix_bytes);
}

// Memory bandwidth probe: each thread sums its share of the 512 MiB arena.
void BM_MemoryProbe(benchmark::State& state) {
  const size_t words = kArenaBytes / 8;
  const size_t w0 = words * state.thread_index() / state.threads();
  const size_t w1 = words * (state.thread_index() + 1) / state.threads();
  const uint64_t* p = reinterpret_cast<const uint64_t*>(Arena());
  for (auto _ : state) {
    uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    for (size_t i = w0; i + 4 <= w1; i += 4) {
      s0 += p[i];
      s1 += p[i + 1];
      s2 += p[i + 2];
      s3 += p[i + 3];
    }
    benchmark::DoNotOptimize(s0 + s1 + s2 + s3);
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * (w1 - w0) * 8);
}

}  // namespace
}  // namespace pi

int main(int argc, char** argv) {
  using pi::CpuIsa;
  using pi::DType;
  benchmark::Initialize(&argc, argv);
  pi::Arena();
  const DType types[] = {DType::kF32, DType::kF16, DType::kBF16, DType::kQ8_0, DType::kQ4_0};
  for (DType t : types) pi::Prepare(t);
  const CpuIsa best = pi::DetectCpuIsa();

  benchmark::RegisterBenchmark("MemoryProbe", pi::BM_MemoryProbe)
      ->Threads(1)
      ->Threads(2)
      ->UseRealTime();
  for (CpuIsa isa : {CpuIsa::kScalar, CpuIsa::kAvx2, CpuIsa::kAvx512}) {
    if (static_cast<int>(isa) > static_cast<int>(best)) continue;
    for (DType t : types) {
      const std::string name =
          std::string("MatVec/") + pi::DTypeName(t) + "/" + pi::CpuIsaName(isa);
      auto* b = benchmark::RegisterBenchmark(name.c_str(), pi::BM_MatVec, t, isa);
      b->UseRealTime()->Threads(1);
      if (isa != CpuIsa::kScalar) b->Threads(2);
    }
  }
  for (DType t : types) {
    benchmark::RegisterBenchmark(
        (std::string("MatMul16/") + pi::DTypeName(t) + "/" + pi::CpuIsaName(best)).c_str(),
        pi::BM_MatMul16, t, best)
        ->UseRealTime();
    benchmark::RegisterBenchmark(
        (std::string("Axpy/") + pi::DTypeName(t) + "/" + pi::CpuIsaName(best)).c_str(),
        pi::BM_Axpy, t, best)
        ->UseRealTime();
  }
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
