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
#include <immintrin.h>

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
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * RowBytes(t, kCols) *
                          (r1 - r0));
}

// Prompt-style batch of 16 activations; weights read once per batch.
void BM_MatMul16(benchmark::State& state, DType t, CpuIsa isa) {
  SetCpuIsa(isa);
  const size_t matrix_bytes = static_cast<size_t>(RowBytes(t, kCols)) * kRows;
  const size_t copies = kArenaBytes / matrix_bytes;
  std::vector<float> y(kRows * 16);
  size_t copy = 0;
  for (auto _ : state) {
    MatMulRows(t, Arena() + copy * matrix_bytes, kCols, Prepared(t).data(), 16, y.data(), kRows, 0,
               kRows);
    benchmark::ClobberMemory();
    copy = (copy + 1) % copies;
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * matrix_bytes);
  state.counters["GFLOP/s"] =
      benchmark::Counter(2.0 * kRows * kCols * 16 * static_cast<double>(state.iterations()),
                         benchmark::Counter::kIsRate);
}

// ffn_down_t form: rows of 4096 accumulated into one y, for rows with
// a != 0. density_pct of the 11008 rows are active, scattered (a ReLU FFN's
// activations are ~10% dense); bytes counted are the active rows'.
void BM_Axpy(benchmark::State& state, DType t, CpuIsa isa, int density_pct) {
  SetCpuIsa(isa);
  const size_t matrix_bytes = static_cast<size_t>(RowBytes(t, kCols)) * kRows;
  const size_t copies = kArenaBytes / matrix_bytes;
  std::vector<float> a(kRows, 0.0f), y(kCols, 0.0f);
  int64_t active = 0;
  uint32_t h = 12345;
  for (int64_t r = 0; r < kRows; ++r) {
    h = h * 1664525u + 1013904223u;
    if ((h >> 8) % 100 < static_cast<uint32_t>(density_pct)) {
      a[r] = 0.5f;
      ++active;
    }
  }
  size_t copy = 0;
  for (auto _ : state) {
    AxpyRows(t, Arena() + copy * matrix_bytes, kCols, a.data(), y.data(), 0, kRows);
    benchmark::ClobberMemory();
    copy = (copy + 1) % copies;
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * RowBytes(t, kCols) * active);
}

// Sums n bytes (a multiple of 128) with four independent 256-bit adds: the
// best streaming read rate one core gets, used as the bandwidth reference.
__attribute__((target("avx2"))) uint64_t SumAvx2(const uint8_t* p, size_t n) {
  __m256i s0 = _mm256_setzero_si256(), s1 = s0, s2 = s0, s3 = s0;
  for (size_t i = 0; i < n; i += 128) {
    s0 = _mm256_add_epi64(s0, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i)));
    s1 = _mm256_add_epi64(s1, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i + 32)));
    s2 = _mm256_add_epi64(s2, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i + 64)));
    s3 = _mm256_add_epi64(s3, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i + 96)));
  }
  const __m256i s = _mm256_add_epi64(_mm256_add_epi64(s0, s1), _mm256_add_epi64(s2, s3));
  return static_cast<uint64_t>(_mm256_extract_epi64(s, 0) + _mm256_extract_epi64(s, 1) +
                               _mm256_extract_epi64(s, 2) + _mm256_extract_epi64(s, 3));
}

uint64_t SumScalar(const uint8_t* p, size_t n) {
  const uint64_t* w = reinterpret_cast<const uint64_t*>(p);
  uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  for (size_t i = 0; i < n / 8; i += 4) {
    s0 += w[i];
    s1 += w[i + 1];
    s2 += w[i + 2];
    s3 += w[i + 3];
  }
  return s0 + s1 + s2 + s3;
}

// Memory bandwidth probe: each thread sums its share of the 512 MiB arena.
void BM_MemoryProbe(benchmark::State& state) {
  const size_t chunks = kArenaBytes / 128;
  const size_t b0 = chunks * state.thread_index() / state.threads() * 128;
  const size_t b1 = chunks * (state.thread_index() + 1) / state.threads() * 128;
  const bool avx2 = __builtin_cpu_supports("avx2");
  for (auto _ : state) {
    const uint64_t s = avx2 ? SumAvx2(Arena() + b0, b1 - b0) : SumScalar(Arena() + b0, b1 - b0);
    benchmark::DoNotOptimize(s);
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * (b1 - b0));
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
    for (int density : {100, 10}) {
      benchmark::RegisterBenchmark((std::string("Axpy/") + pi::DTypeName(t) + "/" +
                                    pi::CpuIsaName(best) + "/density:" + std::to_string(density))
                                       .c_str(),
                                   pi::BM_Axpy, t, best, density)
          ->UseRealTime();
    }
  }
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
