// Micro-benchmarks for the CPU weight kernels, next to a memory-bandwidth
// probe: decode-time MatVecRows is bandwidth-bound, so its bytes/s should
// come close to the probe's.
//
//   bench-kernels --benchmark_min_time=0.2
//   bench-kernels --benchmark_filter='Sparse|Ffn' --benchmark_min_time=0.1
//
// The weight matrix is 4096 x 11008 (a 7B FFN gate/up). To measure DRAM
// rather than the 32 MiB L3, every iteration reads the next of several copies
// laid out in one 512 MiB arena, which the probe also sums.
#include <benchmark/benchmark.h>
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/isa.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/weight_panels.h"
#include "kernels/dtype.h"

namespace pi {
namespace {

constexpr int64_t kCols = 4096;
constexpr int64_t kRows = 11008;
constexpr size_t kArenaBytes = size_t{512} << 20;

uint8_t* Arena() {
  static uint8_t* arena = [] {
    auto* p = static_cast<uint8_t*>(std::aligned_alloc(64, kArenaBytes));
    // 0x3C in every byte is a valid, finite weight in every type
    // (f32 0.0115, f16 1.06, bf16 0.0115, q8 scale 1.06 / q 60, q4 nibbles 3 and
    // 12; the K-quants' f16 scales 1.06, 6-bit scales and mins 60 or 51).
    std::memset(p, 0x3C, kArenaBytes);
    return p;
  }();
  return arena;
}

constexpr int kMaxBatch = 256;  // prepared activation columns

// Prepared activations, one per type, built before any benchmark runs.
std::vector<uint8_t>& Prepared(DType t) {
  static std::vector<uint8_t> bufs[40];
  return bufs[static_cast<int>(t)];
}

void Prepare(DType t) {
  std::vector<float> x(kCols);
  for (int64_t i = 0; i < kCols; ++i) x[i] = 0.001f * static_cast<float>((i * 37) % 101 - 50);
  Prepared(t).resize(PreparedActivationBytes(t, kCols) * kMaxBatch);
  for (int b = 0; b < kMaxBatch; ++b) {
    PrepareActivation(t, x.data(), kCols,
                      Prepared(t).data() + b * PreparedActivationBytes(t, kCols));
  }
}

// Each thread computes its share of the rows, as the engine's thread pool
// does. `panels`: the same product over repacked weights (weight_panels.h;
// repacked, the arena's uniform bytes are the same bytes; bytes counted are
// the repacked matrix's), rows split at panel bounds.
void BM_MatVec(benchmark::State& state, DType t, CpuIsa isa, bool panels) {
  SetCpuIsa(isa);
  const size_t matrix_bytes =
      panels ? WeightPanelBytes(t, kRows, kCols) : static_cast<size_t>(RowBytes(t, kCols)) * kRows;
  const size_t copies = kArenaBytes / matrix_bytes;
  const int64_t unit = panels ? kWeightPanelRows : 1, units = kRows / unit;
  const int64_t r0 = units * state.thread_index() / state.threads() * unit;
  const int64_t r1 = units * (state.thread_index() + 1) / state.threads() * unit;
  static std::vector<float> y(kRows);
  size_t copy = 0;
  for (auto _ : state) {
    const uint8_t* w = Arena() + copy * matrix_bytes;
    if (panels) {
      WeightPanelRows(t, w, kCols, Prepared(t).data(), 1, y.data(), kRows, r0, r1);
    } else {
      MatVecRows(t, w, kCols, Prepared(t).data(), y.data(), r0, r1);
    }
    benchmark::ClobberMemory();
    copy = (copy + 1) % copies;
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) *
                          static_cast<int64_t>(matrix_bytes / kRows) * (r1 - r0));
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

enum class BatchKernel { kMatMulRows, kGemm, kPanels };

// A prompt batch of `batch` columns (state.range(0)) through the batch-exact
// tiles (MatMulRows), the matrix-matrix kernels (GemmRows) or the same over
// repacked weights (WeightPanelRows), side by side: compute-bound, so the
// figure is GFLOP/s (2 x rows x cols x batch).
void BM_Batch(benchmark::State& state, DType t, BatchKernel kernel) {
  const int64_t batch = state.range(0);
  const size_t matrix_bytes = static_cast<size_t>(RowBytes(t, kCols)) * kRows;
  std::vector<float> y(kRows * batch);
  const uint8_t* x = Prepared(t).data();
  for (auto _ : state) {
    switch (kernel) {
      case BatchKernel::kMatMulRows:
        MatMulRows(t, Arena(), kCols, x, batch, y.data(), kRows, 0, kRows);
        break;
      case BatchKernel::kGemm:
        GemmRows(t, Arena(), kCols, x, batch, y.data(), kRows, 0, kRows);
        break;
      case BatchKernel::kPanels:
        WeightPanelRows(t, Arena(), kCols, x, batch, y.data(), kRows, 0, kRows);
        break;
    }
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * matrix_bytes);
  state.counters["GFLOP/s"] =
      benchmark::Counter(2.0 * kRows * kCols * batch * static_cast<double>(state.iterations()),
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

// The same two kernels over one small matrix read again every iteration
// (kCachedBytes: it stays in L2), so memory plays no part: each kernel's
// own ceiling, to set beside its DRAM rate above. Rows of state.range(0)
// weights: an axpy group's y (4 bytes a column) shares L1 with its 8 rows'
// bytes, so the row length is measured too (docs/performance.md).
constexpr size_t kCachedBytes = size_t{512} << 10;

void BM_Cached(benchmark::State& state, DType t, CpuIsa isa, bool axpy) {
  SetCpuIsa(isa);
  const int64_t cols = state.range(0);
  const int64_t rows = static_cast<int64_t>(kCachedBytes / RowBytes(t, cols));
  const uint8_t* w = Arena();
  std::vector<float> a(rows, 0.5f), y(std::max(rows, cols), 0.0f);
  std::vector<float> xf(cols, 0.5f);
  std::vector<uint8_t> x(PreparedActivationBytes(t, cols));
  PrepareActivation(t, xf.data(), cols, x.data());
  for (auto _ : state) {
    if (axpy) {
      AxpyRows(t, w, cols, a.data(), y.data(), 0, rows);
    } else {
      MatVecRows(t, w, cols, x.data(), y.data(), 0, rows);
    }
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * RowBytes(t, cols) * rows);
}

// ---- Activation-sparse (indexed) kernels ----------------------------------------
//
// Both FFN shapes are 11008 rows of 4096: gate/up ([4096, 11008], a row per
// neuron) and down_t ([11008, 4096] transposed to a row per neuron). Each
// iteration reads another matrix copy with another random set of active rows,
// so rows read in one iteration are rarely still in L3 in the next.

constexpr int kIdSets = 8;

// kIdSets random sets of density_permille/1000 of the rows, sorted as a mask
// scan yields them (in the engine they come from a predictor or the gate).
const std::vector<std::vector<int32_t>>& IdSets(int density_permille) {
  static std::vector<std::vector<int32_t>> sets[1001];
  std::vector<std::vector<int32_t>>& s = sets[density_permille];
  if (s.empty()) {
    std::mt19937 rng(static_cast<unsigned>(density_permille));
    std::vector<int32_t> all(kRows);
    for (int64_t r = 0; r < kRows; ++r) all[r] = static_cast<int32_t>(r);
    const int64_t n = (kRows * density_permille + 500) / 1000;
    for (int i = 0; i < kIdSets; ++i) {
      std::shuffle(all.begin(), all.end(), rng);
      std::vector<int32_t> ids(all.begin(), all.begin() + n);
      std::sort(ids.begin(), ids.end());
      s.push_back(ids);
    }
  }
  return s;
}

enum class SparseOp { kMatVec, kAxpy };

// One call of `op` on density_permille of the rows; 1000 means the dense
// kernel (MatVecRows / AxpyRows over all rows) as the baseline. Bytes counted
// are those of the rows actually read.
void BM_Sparse(benchmark::State& state, DType t, SparseOp op, int density_permille) {
  SetCpuIsa(DetectCpuIsa());
  const size_t row_bytes = static_cast<size_t>(RowBytes(t, kCols));
  const size_t matrix_bytes = row_bytes * kRows;
  const size_t copies = kArenaBytes / matrix_bytes;
  const bool dense = density_permille == 1000;
  const auto& sets = IdSets(dense ? 1 : density_permille);
  std::vector<float> a(kRows, 0.5f), y(kRows, 0.0f);
  size_t copy = 0, set = 0;
  int64_t rows_read = 0;
  for (auto _ : state) {
    const uint8_t* w = Arena() + copy * matrix_bytes;
    const std::vector<int32_t>& ids = sets[set];
    const int64_t n = static_cast<int64_t>(ids.size());
    if (op == SparseOp::kMatVec) {
      if (dense) {
        MatVecRows(t, w, kCols, Prepared(t).data(), y.data(), 0, kRows);
      } else {
        MatVecRowsIndexed(t, w, kCols, Prepared(t).data(), ids.data(), n, y.data());
      }
    } else {
      if (dense) {
        AxpyRows(t, w, kCols, a.data(), y.data(), 0, kRows);
      } else {
        AxpyRowsIndexed(t, w, kCols, ids.data(), a.data(), n, y.data());
      }
    }
    benchmark::ClobberMemory();
    rows_read += dense ? kRows : n;
    copy = (copy + 1) % copies;
    set = (set + 1) % kIdSets;
  }
  state.SetBytesProcessed(rows_read * static_cast<int64_t>(row_bytes));
}

enum class FfnMode {
  kDense,   // gate, up: MatVecRows; down_t: AxpyRows over all rows
  kSparse,  // predictor: gate, up and down_t on the predicted rows only
  kOracle,  // exact: dense gate (to find the active rows), then sparse up, down_t
};

// One FFN (gate + up + down_t, three matrices from three arena copies) with
// density_permille of the neurons active.
void BM_Ffn(benchmark::State& state, DType t, FfnMode mode, int density_permille) {
  SetCpuIsa(DetectCpuIsa());
  const size_t row_bytes = static_cast<size_t>(RowBytes(t, kCols));
  const size_t matrix_bytes = row_bytes * kRows;
  const size_t copies = kArenaBytes / matrix_bytes;
  const auto& sets = IdSets(density_permille);
  std::vector<float> a(kRows, 0.5f), h(kRows, 0.0f), y(kCols, 0.0f);
  size_t copy = 0, set = 0;
  for (auto _ : state) {
    const uint8_t* gate = Arena() + copy * matrix_bytes;
    const uint8_t* up = Arena() + ((copy + 1) % copies) * matrix_bytes;
    const uint8_t* down = Arena() + ((copy + 2) % copies) * matrix_bytes;
    const std::vector<int32_t>& ids = sets[set];
    const int64_t n = static_cast<int64_t>(ids.size());
    const void* x = Prepared(t).data();
    if (mode == FfnMode::kDense) {
      MatVecRows(t, gate, kCols, x, h.data(), 0, kRows);
      MatVecRows(t, up, kCols, x, h.data(), 0, kRows);
      AxpyRows(t, down, kCols, a.data(), y.data(), 0, kRows);
    } else {
      if (mode == FfnMode::kOracle) {
        MatVecRows(t, gate, kCols, x, h.data(), 0, kRows);
      } else {
        MatVecRowsIndexed(t, gate, kCols, x, ids.data(), n, h.data());
      }
      MatVecRowsIndexed(t, up, kCols, x, ids.data(), n, h.data());
      AxpyRowsIndexed(t, down, kCols, ids.data(), a.data(), n, y.data());
    }
    benchmark::ClobberMemory();
    copy = (copy + 3) % copies;
    set = (set + 1) % kIdSets;
  }
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
  const DType types[] = {DType::kF32,  DType::kF16,  DType::kBF16, DType::kQ8_0,
                         DType::kQ4_0, DType::kQ4_1, DType::kQ5_0, DType::kQ5_1,
                         DType::kQ4_K, DType::kQ5_K, DType::kQ6_K};
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
      auto* b = benchmark::RegisterBenchmark(name.c_str(), pi::BM_MatVec, t, isa, false);
      b->UseRealTime()->Threads(1);
      if (isa != CpuIsa::kScalar) b->Threads(2);
    }
  }
  {
    for (DType t :
         {DType::kF16, DType::kQ8_0, DType::kQ4_0, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K}) {
      if (!pi::WeightPanelsFast(t)) continue;
      benchmark::RegisterBenchmark((std::string("MatVec/") + pi::DTypeName(t) + "/panels").c_str(),
                                   pi::BM_MatVec, t, best, true)
          ->UseRealTime()
          ->Threads(1)
          ->Threads(2);
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
  //   bench-kernels --benchmark_filter='Cached|^Axpy|MatVec/.*/avx512/.*threads:1'
  for (DType t : {DType::kF16, DType::kQ8_0, DType::kQ4_0}) {
    for (bool axpy : {false, true}) {
      benchmark::RegisterBenchmark((std::string("Cached/") + (axpy ? "Axpy/" : "MatVec/") +
                                    pi::DTypeName(t) + "/" + pi::CpuIsaName(best))
                                       .c_str(),
                                   pi::BM_Cached, t, best, axpy)
          ->Arg(2048)
          ->Arg(4096)
          ->UseRealTime();
    }
  }
  //   bench-kernels --benchmark_filter='Batch' (one thread, best ISA)
  using pi::BatchKernel;
  for (DType t : types) {
    for (auto [kernel, name] :
         {std::pair<BatchKernel, const char*>{BatchKernel::kMatMulRows, "MatMulRows"},
          {BatchKernel::kGemm, "Gemm"},
          {BatchKernel::kPanels, "Panels"}}) {
      const bool panels = kernel == BatchKernel::kPanels;
      if (panels && !(pi::WeightPanelsFast(t) && pi::CanRepackWeights(t, pi::kRows, pi::kCols))) {
        continue;
      }
      auto* b = benchmark::RegisterBenchmark(
          (std::string("Batch/") + name + "/" + pi::DTypeName(t)).c_str(), pi::BM_Batch, t, kernel);
      // Batched decode's sizes, then prompts'.
      if (kernel != BatchKernel::kMatMulRows) b->Arg(1)->Arg(4)->Arg(8);
      b->Arg(16)->Arg(64)->Arg(256)->UseRealTime();
    }
  }
  // Sparse kernels (single thread, best ISA): sparsity 0 is the dense kernel.
  //   bench-kernels --benchmark_filter='Sparse|Ffn' --benchmark_min_time=0.1
  for (DType t : {DType::kF16, DType::kQ8_0, DType::kQ4_0, DType::kQ4_K}) {
    for (auto [op, op_name] :
         {std::pair<pi::SparseOp, const char*>{pi::SparseOp::kMatVec, "MatVec"},
          {pi::SparseOp::kAxpy, "Axpy"}}) {
      for (int sparsity_pct : {0, 50, 80, 90, 95, 99}) {
        benchmark::RegisterBenchmark(
            (std::string("Sparse") + op_name + "/" + pi::DTypeName(t) + "/" + pi::CpuIsaName(best) +
             "/sparsity:" + std::to_string(sparsity_pct))
                .c_str(),
            pi::BM_Sparse, t, op, 10 * (100 - sparsity_pct))
            ->UseRealTime();
      }
    }
    for (auto [mode, mode_name] :
         {std::pair<pi::FfnMode, const char*>{pi::FfnMode::kDense, "dense"},
          {pi::FfnMode::kSparse, "sparse90"},
          {pi::FfnMode::kOracle, "oracle90"}}) {
      benchmark::RegisterBenchmark(
          (std::string("Ffn/") + pi::DTypeName(t) + "/" + pi::CpuIsaName(best) + "/" + mode_name)
              .c_str(),
          pi::BM_Ffn, t, mode, 100)
          ->UseRealTime();
    }
  }
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
