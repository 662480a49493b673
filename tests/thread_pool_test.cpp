#include "common/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
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

TEST(ThreadPoolTest, RunCallsEveryThreadIndexOncePerRegion) {
  for (int threads : {1, 2, 4}) {
    ThreadPool pool(threads);
    EXPECT_EQ(pool.size(), threads);
    for (int round = 0; round < 2000; ++round) {
      std::vector<std::atomic<int>> hits(threads);
      for (auto& h : hits) h = 0;
      pool.Run([&](int ith, int nth) {
        ASSERT_EQ(nth, threads);
        hits[ith].fetch_add(1);
      });
      for (int i = 0; i < threads; ++i) ASSERT_EQ(hits[i].load(), 1) << "round " << round;
    }
  }
}

TEST(ThreadPoolTest, ParallelSumEqualsSerialSum) {
  ThreadPool pool(3);
  std::vector<int64_t> v(100003);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<int64_t>(i * 7 % 13);
  int64_t serial = 0;
  for (int64_t x : v) serial += x;
  std::vector<int64_t> partial(3, 0);
  pool.Run([&](int ith, int nth) {
    int64_t b, e;
    ThreadPool::Split(static_cast<int64_t>(v.size()), ith, nth, 64, &b, &e);
    for (int64_t i = b; i < e; ++i) partial[ith] += v[i];
  });
  EXPECT_EQ(partial[0] + partial[1] + partial[2], serial);
}

TEST(ThreadPoolTest, SurvivesIdleGapsLongerThanTheSpin) {
  // Workers fall asleep between regions; each region must still run fully.
  ThreadPool pool(2);
  for (int round = 0; round < 5; ++round) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    std::atomic<int> n{0};
    pool.Run([&](int, int) { n.fetch_add(1); });
    EXPECT_EQ(n.load(), 2);
  }
}

}  // namespace
}  // namespace pi
