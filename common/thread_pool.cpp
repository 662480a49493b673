#include "common/thread_pool.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define PI_CPU_RELAX() _mm_pause()
#else
#define PI_CPU_RELAX() std::this_thread::yield()
#endif

namespace pi {
namespace {
// ~2000 pauses is a few microseconds: long enough to cover the gap between
// two kernels of one decode step, short enough that a descheduled sibling
// costs little.
constexpr int kSpinIterations = 2000;
}  // namespace

ThreadPool::ThreadPool(int n_threads) : n_threads_(n_threads < 1 ? 1 : n_threads) {
  workers_.reserve(n_threads_ - 1);
  for (int i = 1; i < n_threads_; ++i) workers_.emplace_back([this, i] { WorkerLoop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_.store(true, std::memory_order_release);
    generation_.fetch_add(1, std::memory_order_acq_rel);
  }
  work_cv_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::Split(int64_t n, int part, int n_parts, int64_t grain, int64_t* begin,
                       int64_t* end) {
  if (grain < 1) grain = 1;
  const int64_t units = (n + grain - 1) / grain;
  const int64_t per = units / n_parts, extra = units % n_parts;
  const int64_t ub = part * per + (part < extra ? part : extra);
  const int64_t ue = ub + per + (part < extra ? 1 : 0);
  *begin = ub * grain < n ? ub * grain : n;
  *end = ue * grain < n ? ue * grain : n;
}

void ThreadPool::RunImpl(TaskFn fn, void* ctx) {
  if (n_threads_ == 1) {
    fn(ctx, 0, 1);
    return;
  }
  task_fn_ = fn;
  task_ctx_ = ctx;
  pending_.store(n_threads_ - 1, std::memory_order_relaxed);
  {
    // Publishing under the lock pairs with workers that check the generation
    // under the lock before sleeping, so no wake-up is lost.
    std::lock_guard<std::mutex> lock(mu_);
    generation_.fetch_add(1, std::memory_order_acq_rel);
  }
  work_cv_.notify_all();

  fn(ctx, 0, n_threads_);

  for (int i = 0; i < kSpinIterations; ++i) {
    if (pending_.load(std::memory_order_acquire) == 0) return;
    PI_CPU_RELAX();
  }
  std::unique_lock<std::mutex> lock(mu_);
  done_cv_.wait(lock, [this] { return pending_.load(std::memory_order_acquire) == 0; });
}

void ThreadPool::WorkerLoop(int index) {
  uint64_t seen = 0;
  for (;;) {
    uint64_t gen = generation_.load(std::memory_order_acquire);
    for (int i = 0; i < kSpinIterations && gen == seen; ++i) {
      PI_CPU_RELAX();
      gen = generation_.load(std::memory_order_acquire);
    }
    if (gen == seen) {
      std::unique_lock<std::mutex> lock(mu_);
      work_cv_.wait(lock, [&] { return generation_.load(std::memory_order_acquire) != seen; });
      gen = generation_.load(std::memory_order_acquire);
    }
    seen = gen;
    if (stop_.load(std::memory_order_acquire)) return;

    task_fn_(task_ctx_, index, n_threads_);

    if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      // Last one out wakes the caller, which may be asleep on done_cv_.
      std::lock_guard<std::mutex> lock(mu_);
      done_cv_.notify_one();
    }
  }
}

}  // namespace pi
