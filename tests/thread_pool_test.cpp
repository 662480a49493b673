#include "common/base/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <vector>

namespace pi {
namespace {

TEST(ThreadPoolTest, SplitCoversTheRangeExactlyOnceOnGrainBoundaries) {
  for (int64_t n : {0, 1, 15, 16, 17, 1000, 11008}) {
    for (int parts : {1, 2, 3, 7}) {
      for (int64_t grain : {1, 16, 32}) {
        int64_t expect_begin = 0;
        for (int p = 0; p < parts; ++p) {
          int64_t b, e;
          ThreadPool::Split(n, p, parts, grain, &b, &e);
          EXPECT_EQ(b, expect_begin);
          EXPECT_LE(b, e);
          if (e < n) {
            EXPECT_EQ(e % grain, 0);
          }
          expect_begin = e;
        }
        EXPECT_EQ(expect_begin, n) << n << " " << parts << " " << grain;
      }
    }
  }
}

TEST(ThreadPoolTest, EveryChunkRunsExactlyOnceWithAValidSlot) {
  for (int threads : {1, 2, 4}) {
    ThreadPool pool(threads);
    EXPECT_EQ(pool.size(), threads);
    for (int64_t chunks : {0, 1, 2, 3, 17, 64}) {
      for (int round = 0; round < 300; ++round) {
        std::vector<std::atomic<int>> hits(chunks);
        for (auto& h : hits) h = 0;
        std::atomic<int> bad_slot{0};
        pool.ParallelFor(chunks, [&](int64_t c, int slot) {
          if (slot < 0 || slot >= threads) bad_slot.fetch_add(1);
          hits[c].fetch_add(1);
        });
        ASSERT_EQ(bad_slot.load(), 0);
        for (int64_t c = 0; c < chunks; ++c) ASSERT_EQ(hits[c].load(), 1) << c;
      }
    }
  }
}

TEST(ThreadPoolTest, SlotsAreExclusiveWhileAChunkRuns) {
  // Per-slot scratch is only safe if two chunks never run on one slot at once.
  ThreadPool pool(3);
  std::vector<std::atomic<int>> in_use(3);
  for (auto& u : in_use) u = 0;
  std::atomic<int> overlaps{0};
  for (int round = 0; round < 200; ++round) {
    pool.ParallelFor(32, [&](int64_t, int slot) {
      if (in_use[slot].fetch_add(1) != 0) overlaps.fetch_add(1);
      volatile int spin = 0;
      for (int i = 0; i < 200; ++i) spin = spin + i;
      in_use[slot].fetch_sub(1);
    });
  }
  EXPECT_EQ(overlaps.load(), 0);
}

TEST(ThreadPoolTest, ParallelSumEqualsSerialSum) {
  ThreadPool pool(3);
  std::vector<int64_t> v(100003);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<int64_t>(i * 7 % 13);
  int64_t serial = 0;
  for (int64_t x : v) serial += x;
  const int64_t chunks = 37;
  std::vector<int64_t> partial(chunks, 0);
  pool.ParallelFor(chunks, [&](int64_t c, int) {
    int64_t b, e;
    ThreadPool::Split(static_cast<int64_t>(v.size()), c, chunks, 64, &b, &e);
    for (int64_t i = b; i < e; ++i) partial[c] += v[i];
  });
  int64_t total = 0;
  for (int64_t p : partial) total += p;
  EXPECT_EQ(total, serial);
}

TEST(ThreadPoolTest, SurvivesIdleGapsLongerThanTheSpin) {
  // Workers fall asleep between loops; each loop must still run fully.
  ThreadPool pool(2);
  for (int round = 0; round < 5; ++round) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    std::atomic<int> n{0};
    pool.ParallelFor(8, [&](int64_t, int) { n.fetch_add(1); });
    EXPECT_EQ(n.load(), 8);
  }
}

TEST(ThreadPoolTest, WaitsForAWorkerStillInsideAChunk) {
  // A chunk that outlasts the caller's share must finish before ParallelFor
  // returns (its captures live on the caller's stack).
  ThreadPool pool(2);
  for (int round = 0; round < 20; ++round) {
    std::atomic<int> done{0};
    pool.ParallelFor(2, [&](int64_t c, int) {
      if (c == 1) std::this_thread::sleep_for(std::chrono::milliseconds(2));
      done.fetch_add(1);
    });
    EXPECT_EQ(done.load(), 2);
  }
}

}  // namespace
}  // namespace pi
