#include "common/base/memory_bandwidth.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <memory>
#include <thread>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "common/base/progress.h"

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

// The last-level cache's size in bytes (0 when the system does not say).
int64_t LastLevelCacheBytes() {
  for (int name : {_SC_LEVEL4_CACHE_SIZE, _SC_LEVEL3_CACHE_SIZE, _SC_LEVEL2_CACHE_SIZE}) {
    const long bytes = sysconf(name);
    if (bytes > 0) return bytes;
  }
  return 0;
}

// One reader's part of the probe: its own slice of memory and, per pass, when
// it started and finished reading it.
struct Reader {
  std::unique_ptr<uint64_t[]> slice;
  std::vector<double> start, end;
};

// Runs in thread `slot` of n: allocates and fills its slice (so its pages are
// first touched, and on a NUMA machine placed, by the thread that reads
// them), then per pass waits for all n threads at a barrier and sums the
// slice once.
void ReadSlice(int slot, int n, int64_t words, int passes, std::atomic<int>* arrived,
               std::atomic<uint64_t>* sink, Reader* r) {
  r->slice.reset(new uint64_t[words]);
  for (int64_t i = 0; i < words; ++i) r->slice[i] = static_cast<uint64_t>(i) ^ slot;
  r->start.resize(passes);
  r->end.resize(passes);
  for (int p = 0; p < passes; ++p) {
    // A counting barrier that never resets: pass p starts once all n threads
    // have arrived p + 1 times. Yielding while waiting gives the core to a
    // reader that still has work when the machine has no core to spare.
    arrived->fetch_add(1, std::memory_order_acq_rel);
    while (arrived->load(std::memory_order_acquire) < n * (p + 1)) std::this_thread::yield();
    r->start[p] = NowSeconds();
    sink->fetch_add(Sum(r->slice.get(), words), std::memory_order_relaxed);
    r->end[p] = NowSeconds();
  }
}

}  // namespace

double MeasureReadBandwidthGBs(ThreadPool* pool, int64_t buffer_bytes, int passes) {
  // What decode with N threads can stream is what N threads reading disjoint
  // memory at the same time get, so each thread reads its own slice, all of
  // them at once, and a pass lasts from the first start to the last finish.
  // The pool's dynamic chunks are not used: there a thread that wakes late
  // reads fewer chunks, so a pass could measure fewer threads than asked and
  // the probe fall below what decode later reaches (reports once showed 145 %
  // "of BW" at -t 2). The buffer is at least 64 MiB per thread and twice the
  // last-level cache (some are hundreds of MiB), so every pass streams from
  // DRAM: an adaptive replacement policy can keep part of a buffer only a
  // little larger than the cache. The best pass counts: a busy shared machine
  // only ever makes a pass slower.
  const int n = std::max(1, pool->size());
  constexpr int64_t kMinPerThread = int64_t{64} << 20;
  const int64_t total = std::max({buffer_bytes, n * kMinPerThread, 2 * LastLevelCacheBytes()});
  const int64_t words = (total / n / 8 + 31) / 32 * 32;  // whole AVX2 iterations
  passes = std::max(1, passes);

  std::vector<Reader> readers(n);
  std::atomic<int> arrived{0};
  std::atomic<uint64_t> sink{0};
  std::vector<std::thread> threads;
  for (int slot = 1; slot < n; ++slot) {
    threads.emplace_back(ReadSlice, slot, n, words, passes, &arrived, &sink, &readers[slot]);
  }
  ReadSlice(0, n, words, passes, &arrived, &sink, &readers[0]);
  for (std::thread& t : threads) t.join();

  double best = 0.0;
  for (int p = 0; p < passes; ++p) {
    double t0 = readers[0].start[p], t1 = readers[0].end[p];
    for (const Reader& r : readers) {
      t0 = std::min(t0, r.start[p]);
      t1 = std::max(t1, r.end[p]);
    }
    if (t1 > t0) best = std::max(best, static_cast<double>(words) * 8 * n / (t1 - t0) / 1e9);
  }
  // The sums must be observable or the compiler may drop the reads.
  if (sink.load() == 42) best += 1e-12;
  return best;
}

}  // namespace pi
