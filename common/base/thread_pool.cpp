#include "common/base/thread_pool.h"

#include <chrono>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define PI_CPU_RELAX() _mm_pause()
#else
#define PI_CPU_RELAX() std::this_thread::yield()
#endif

namespace pi {
namespace {

constexpr auto kSpinTime = std::chrono::microseconds(50);

uint64_t Generation(uint64_t state) {
  return state >> 32;
}

}  // namespace

ThreadPool::ThreadPool(int n_threads) : n_threads_(n_threads < 1 ? 1 : n_threads) {
  workers_.reserve(n_threads_ - 1);
  for (int i = 1; i < n_threads_; ++i) workers_.emplace_back([this, i] { WorkerLoop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_.store(true);
    // A new (closed) generation wakes every worker; none can enter it.
    state_.store(((Generation(state_.load()) + 1) << 32) | kClosed);
  }
  work_cv_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::Split(int64_t n, int64_t part, int64_t n_parts, int64_t grain, int64_t* begin,
                       int64_t* end) {
  if (grain < 1) grain = 1;
  const int64_t units = (n + grain - 1) / grain;
  const int64_t per = units / n_parts, extra = units % n_parts;
  const int64_t ub = part * per + (part < extra ? part : extra);
  const int64_t ue = ub + per + (part < extra ? 1 : 0);
  *begin = ub * grain < n ? ub * grain : n;
  *end = ue * grain < n ? ue * grain : n;
}

void ThreadPool::RunChunks(int slot) {
  for (;;) {
    const int64_t c = next_chunk_.fetch_add(1, std::memory_order_relaxed);
    if (c >= n_chunks_) return;
    task_fn_(task_ctx_, c, slot);
  }
}

void ThreadPool::RunImpl(int64_t n_chunks, TaskFn fn, void* ctx) {
  if (n_chunks <= 0) return;
  if (n_threads_ == 1 || n_chunks == 1) {
    for (int64_t c = 0; c < n_chunks; ++c) fn(ctx, c, 0);
    return;
  }
  // No worker is inside (the last loop was closed), so the task can change.
  task_fn_ = fn;
  task_ctx_ = ctx;
  n_chunks_ = n_chunks;
  next_chunk_.store(0, std::memory_order_relaxed);
  const uint64_t gen = Generation(state_.load(std::memory_order_relaxed)) + 1;
  state_.store(gen << 32, std::memory_order_seq_cst);  // open, nobody inside
  if (sleepers_.load(std::memory_order_seq_cst) > 0) {
    std::lock_guard<std::mutex> lock(mu_);
    work_cv_.notify_all();
  }

  RunChunks(0);

  // Close the loop: succeeds at once unless a worker is still in a chunk.
  uint64_t s = state_.load(std::memory_order_acquire);
  const auto spin_until = std::chrono::steady_clock::now() + kSpinTime;
  for (int i = 0;; ++i) {
    if ((s & kActiveMask) == 0) {
      if (state_.compare_exchange_weak(s, s | kClosed, std::memory_order_acq_rel)) return;
      continue;
    }
    PI_CPU_RELAX();
    s = state_.load(std::memory_order_acquire);
    if ((i & 63) == 63 && std::chrono::steady_clock::now() > spin_until) break;
  }
  // A worker is descheduled mid-chunk: sleep until it leaves.
  std::unique_lock<std::mutex> lock(mu_);
  caller_waiting_.store(true, std::memory_order_seq_cst);
  for (;;) {
    s = state_.load(std::memory_order_seq_cst);
    if ((s & kActiveMask) == 0 &&
        state_.compare_exchange_strong(s, s | kClosed, std::memory_order_acq_rel)) {
      break;
    }
    if ((s & kActiveMask) != 0) done_cv_.wait(lock);
  }
  caller_waiting_.store(false, std::memory_order_relaxed);
}

void ThreadPool::WorkerLoop(int slot) {
  uint64_t seen = 0;
  for (;;) {
    // Wait for a generation we have not seen: spin briefly, then sleep.
    uint64_t s = state_.load(std::memory_order_acquire);
    const auto spin_until = std::chrono::steady_clock::now() + kSpinTime;
    for (int i = 0; Generation(s) == seen; ++i) {
      PI_CPU_RELAX();
      s = state_.load(std::memory_order_acquire);
      if ((i & 63) == 63) {
        if (std::chrono::steady_clock::now() > spin_until) break;
        std::this_thread::yield();  // see the header: a busy machine's core goes to work
      }
    }
    if (Generation(s) == seen) {
      std::unique_lock<std::mutex> lock(mu_);
      sleepers_.fetch_add(1, std::memory_order_seq_cst);
      while (Generation(s = state_.load(std::memory_order_seq_cst)) == seen) work_cv_.wait(lock);
      sleepers_.fetch_sub(1, std::memory_order_relaxed);
    }
    if (stop_.load(std::memory_order_acquire)) return;
    seen = Generation(s);

    // Enter the loop if it is still open (a late worker finds it closed).
    bool entered = false;
    while (Generation(s) == seen && !(s & kClosed)) {
      if (state_.compare_exchange_weak(s, s + 1, std::memory_order_acq_rel)) {
        entered = true;
        break;
      }
    }
    if (!entered) continue;
    RunChunks(slot);
    state_.fetch_sub(1, std::memory_order_seq_cst);
    if (caller_waiting_.load(std::memory_order_seq_cst)) {
      std::lock_guard<std::mutex> lock(mu_);
      done_cv_.notify_one();
    }
  }
}

}  // namespace pi
