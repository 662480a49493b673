#include "common/memory_bandwidth.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <memory>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "common/progress.h"

namespace pi {
namespace {

// Sums n uint64 words. The AVX2 variant (chosen at run time) keeps eight
// 256-bit accumulators so the loads, not the adds, are the limit; the
// portable one eight scalar chains.
#if defined(__x86_64__)
__attribute__((target("avx2"))) uint64_t SumAvx2(const uint64_t* p, int64_t n) {
  __m256i acc[8];
  for (int k = 0; k < 8; ++k) acc[k] = _mm256_setzero_si256();
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    for (int k = 0; k < 8; ++k) {
      acc[k] = _mm256_add_epi64(
          acc[k], _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i + 4 * k)));
    }
  }
  alignas(32) uint64_t lanes[4];
  for (int k = 1; k < 8; ++k) acc[0] = _mm256_add_epi64(acc[0], acc[k]);
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), acc[0]);
  uint64_t s = lanes[0] + lanes[1] + lanes[2] + lanes[3];
  for (; i < n; ++i) s += p[i];
  return s;
}
#endif

uint64_t SumPortable(const uint64_t* p, int64_t n) {
  uint64_t s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int k = 0; k < 8; ++k) s[k] += p[i + k];
  }
  uint64_t total = 0;
  for (int k = 0; k < 8; ++k) total += s[k];
  for (; i < n; ++i) total += p[i];
  return total;
}

uint64_t Sum(const uint64_t* p, int64_t n) {
#if defined(__x86_64__)
  if (__builtin_cpu_supports("avx2")) return SumAvx2(p, n);
#endif
  return SumPortable(p, n);
}

}  // namespace

double MeasureReadBandwidthGBs(ThreadPool* pool, int64_t buffer_bytes, int passes) {
  const int64_t n = buffer_bytes / 8;
  std::unique_ptr<uint64_t[]> buf(new uint64_t[n]);
  // Touch every page (spread over the threads) so the passes measure reads,
  // not page faults.
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
      sink.fetch_add(Sum(buf.get() + b, e - b), std::memory_order_relaxed);
    });
    const double dt = NowSeconds() - t0;
    best = std::max(best, static_cast<double>(n) * 8 / dt / 1e9);
  }
  // The sums must be observable or the compiler may drop the reads.
  if (sink.load() == 42) best += 1e-12;
  return best;
}

}  // namespace pi
