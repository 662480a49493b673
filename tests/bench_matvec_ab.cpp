// A decode mat-vec over the file's layout (MatVecRows) against the same
// product over the repacked panels (WeightPanelRows) and over every row
// picked by id in the file's layout (MatVecRowsIndexed, what the sparse FFN
// runs), interleaved in one process: on a shared machine whose
// memory speed swings from one minute to the next, benchmarks run one after
// the other compare moments, not kernels. Each repetition runs every variant,
// each over the next of several copies of the matrix (so DRAM, not the
// cache, unless --copies 1 with few --rows: then the kernels' arithmetic
// rate), on the engine's thread pool with the rows split evenly at panel
// bounds; the medians say which is faster.
//
//   bench-matvec-ab q8_0 -t 2 -r 300
//   bench-matvec-ab q6_K -t 1 -r 2000 --rows 256 --copies 1   (in L2)
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "common/base/memory_limits.h"
#include "common/base/thread_pool.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/quant.h"
#include "kernels/cpu/weight_panels.h"
#include "kernels/dtype.h"

namespace pi {
namespace {

constexpr int64_t kCols = 4096;

struct AlignedBuffer {
  explicit AlignedBuffer(size_t n)
      : p(static_cast<uint8_t*>(std::aligned_alloc(64, (n + 63) / 64 * 64))) {}
  ~AlignedBuffer() { std::free(p); }
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;
  uint8_t* p;
};

bool ParseType(const std::string& name, DType* out) {
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16, DType::kQ8_0, DType::kQ4_0, DType::kQ4_K,
                  DType::kQ5_K, DType::kQ6_K}) {
    if (name == DTypeName(t)) {
      *out = t;
      return true;
    }
  }
  return false;
}

struct Quartiles {
  double p25, median, p75;
};

Quartiles Summarize(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return {v[v.size() / 4], v[v.size() / 2], v[3 * v.size() / 4]};
}

int Run(DType t, int threads, int reps, int64_t rows, int copies) {
  if (!CanRepackWeights(t, rows, kCols) || !WeightPanelsFast(t)) {
    std::fprintf(stderr, "%s has no fast panel kernel on this CPU for %lld x %lld\n", DTypeName(t),
                 static_cast<long long>(rows), static_cast<long long>(kCols));
    return 1;
  }
  const size_t file_bytes = static_cast<size_t>(RowBytes(t, kCols)) * rows;
  const size_t panel_bytes = WeightPanelBytes(t, rows, kCols);
  const Status fits = CheckMemory("the matrix copies (--rows x --copies)",
                                  static_cast<int64_t>((file_bytes + panel_bytes) * copies));
  if (!fits.ok()) {
    std::fprintf(stderr, "%s\n", fits.message().c_str());
    return 1;
  }
  std::vector<std::unique_ptr<AlignedBuffer>> file, panels;
  std::vector<float> v(kCols);
  for (int c = 0; c < copies; ++c) {
    file.push_back(std::make_unique<AlignedBuffer>(file_bytes));
    panels.push_back(std::make_unique<AlignedBuffer>(panel_bytes));
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t i = 0; i < kCols; ++i) {
        v[i] = 0.01f * static_cast<float>(((r + c) * 131 + i * 7) % 23 - 11);
      }
      QuantizeRow(t, v.data(), file[c]->p + r * RowBytes(t, kCols), kCols);
    }
    RepackWeights(t, file[c]->p, kCols, 0, rows, panels[c]->p);
  }
  std::vector<uint8_t> x(PreparedActivationBytes(t, kCols));
  for (int64_t i = 0; i < kCols; ++i) v[i] = 0.001f * static_cast<float>((i * 37) % 101 - 50);
  PrepareActivation(t, v.data(), kCols, x.data());
  std::vector<float> y(rows);
  std::vector<int32_t> ids(rows);
  for (int64_t r = 0; r < rows; ++r) ids[r] = static_cast<int32_t>(r);

  ThreadPool pool(threads);
  const int64_t units = rows / kWeightPanelRows;
  const char* names[3] = {"file layout", "panels     ", "file by id "};
  constexpr int variants = 3;
  std::vector<double> gbs[variants];
  for (int rep = 0, copy = 0; rep < reps; ++rep) {
    for (int variant = 0; variant < variants; ++variant, copy = (copy + 1) % copies) {
      const auto t0 = std::chrono::steady_clock::now();
      pool.ParallelFor(threads, [&](int64_t chunk, int) {
        const int64_t r0 = units * chunk / threads * kWeightPanelRows;
        const int64_t r1 = units * (chunk + 1) / threads * kWeightPanelRows;
        switch (variant) {
          case 0:
            return MatVecRows(t, file[copy]->p, kCols, x.data(), y.data(), r0, r1);
          case 1:
            return WeightPanelRows(t, panels[copy]->p, kCols, x.data(), 1, y.data(), rows, r0, r1);
          default:
            return MatVecRowsIndexed(t, file[copy]->p, kCols, x.data(), ids.data() + r0, r1 - r0,
                                     y.data());
        }
      });
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      gbs[variant].push_back(static_cast<double>(variant == 1 ? panel_bytes : file_bytes) / s /
                             1e9);
    }
  }
  for (int variant = 0; variant < variants; ++variant) {
    const Quartiles q = Summarize(gbs[variant]);
    std::printf("%s %s -t %d: median %.1f GB/s (p25 %.1f, p75 %.1f)\n", DTypeName(t),
                names[variant], threads, q.median, q.p25, q.p75);
  }
  return 0;
}

}  // namespace
}  // namespace pi

int main(int argc, char** argv) {
  const char* usage =
      "usage: bench-matvec-ab TYPE [-t THREADS] [-r REPS] [--rows N] [--copies N]\n"
      "  TYPE: f32 f16 bf16 q8_0 q4_0 q4_K q5_K q6_K; a ROWS x 4096 matrix (default 11008\n"
      "  rows, 8 copies, 200 repetitions, 1 thread)\n";
  pi::DType t;
  if (argc < 2 || !pi::ParseType(argv[1], &t)) {
    std::fputs(usage, stderr);
    return 2;
  }
  int threads = 1, reps = 200, copies = 8;
  int64_t rows = 11008;
  for (int i = 2; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) {
      std::fprintf(stderr, "%s needs a value\n%s", a.c_str(), usage);
      return 2;
    }
    const long long n = std::atoll(argv[++i]);
    if (a == "-t")
      threads = static_cast<int>(n);
    else if (a == "-r")
      reps = static_cast<int>(n);
    else if (a == "--rows")
      rows = n;
    else if (a == "--copies")
      copies = static_cast<int>(n);
    else {
      std::fprintf(stderr, "unknown flag %s\n%s", a.c_str(), usage);
      return 2;
    }
  }
  if (threads < 1 || threads > 256 || reps < 4 || reps > 1000000 || copies < 1 || copies > 64 ||
      rows < pi::kWeightPanelRows || rows > (int64_t{1} << 20) || rows % pi::kWeightPanelRows) {
    std::fprintf(stderr,
                 "-t 1..256, -r 4.., --copies 1..64, --rows a multiple of %d up to 2^20\n%s",
                 pi::kWeightPanelRows, usage);
    return 2;
  }
  return pi::Run(t, threads, reps, rows, copies);
}
