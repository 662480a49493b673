#include "common/memory_bandwidth.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <memory>
#include <vector>

#include "common/progress.h"

namespace pi {

double MeasureReadBandwidthGBs(ThreadPool* pool, int64_t buffer_bytes, int passes) {
  const int64_t n = buffer_bytes / 8;
  std::unique_ptr<uint64_t[]> buf(new uint64_t[n]);
  // Touch every page (from each thread's own range) so the passes measure
  // reads, not page faults.
  constexpr int64_t kChunks = 64;
  pool->ParallelFor(kChunks, [&](int64_t chunk, int) {
    int64_t b, e;
    ThreadPool::Split(n, chunk, kChunks, 4096, &b, &e);
    for (int64_t i = b; i < e; ++i) buf[i] = static_cast<uint64_t>(i);
  });
  std::atomic<uint64_t> sink{0};
  double best = 0.0;
  for (int p = 0; p < passes; ++p) {
    const double t0 = NowSeconds();
    pool->ParallelFor(kChunks, [&](int64_t chunk, int) {
      int64_t b, e;
      ThreadPool::Split(n, chunk, kChunks, 4096, &b, &e);
      // Eight independent integer sums: integer adds vectorize without
      // reassociation concerns, and eight chains hide the add latency.
      uint64_t s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
      for (int64_t i = b; i + 8 <= e; i += 8) {
        for (int k = 0; k < 8; ++k) s[k] += buf[i + k];
      }
      uint64_t total = 0;
      for (int k = 0; k < 8; ++k) total += s[k];
      sink.fetch_add(total, std::memory_order_relaxed);
    });
    const double dt = NowSeconds() - t0;
    best = std::max(best, static_cast<double>(n) * 8 / dt / 1e9);
  }
  if (sink.load() == 42) best += 0.0;  // keeps the sums observable
  return best;
}

}  // namespace pi
