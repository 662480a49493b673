// ThreadPool: a fixed set of threads that run one parallel loop at a time.
// ParallelFor(n, fn) calls fn(chunk, slot) for every chunk in [0, n); chunks
// are handed out one at a time from a shared counter, and `slot` (0 for the
// caller, 1.. for workers) names the calling thread for per-thread scratch.
//
// Why dynamic chunks and an opt-in join: this machine is shared. When another
// process takes a worker's core, a static split makes the caller wait a whole
// scheduler time slice for that worker's share (pools that do this were seen
// 10-100x slower at -t 2 than at -t 1). Here a worker that has not woken up
// yet claims nothing, the caller runs the remaining chunks itself, and the
// loop ends without waiting for it: a busy core costs at most the work of the
// chunk a worker is in the middle of. Idle workers spin ~50 us (the gap
// between two kernels of a decode step), then sleep on a condition variable.
// While spinning they yield the core every 64 polls: on an idle machine the
// yield returns at once, but when every core is taken it hands the core to
// the thread that has work — often our own caller — instead of burning its
// time slice. (Demo model, a busy loop on one of two cores: -t 2 decode
// 3100 t/s without the yield, 5250 with it, 5300 at -t 1; idle unchanged.)
//
// Results must not depend on which thread ran a chunk: callers write per-chunk
// outputs (or per-slot scratch that is reduced in a fixed order).
// ParallelFor allocates nothing.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <type_traits>
#include <vector>

namespace pi {

class ThreadPool {
 public:
  // n_threads counts the caller: ThreadPool(1) starts no thread.
  explicit ThreadPool(int n_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }

  // Calls fn(chunk, slot) for chunk in [0, n_chunks) and returns when all
  // chunks are done. With `inline_only` the caller runs every chunk itself:
  // for loops too small to repay waking a thread (a few microseconds), with
  // the same chunking and so the same results.
  template <class Fn>
  void ParallelFor(int64_t n_chunks, Fn&& fn, bool inline_only = false) {
    if (inline_only) {
      for (int64_t c = 0; c < n_chunks; ++c) fn(c, 0);
      return;
    }
    RunImpl(n_chunks, &Trampoline<std::remove_reference_t<Fn>>, &fn);
  }

  // Work below this many bytes touched is not worth waking a thread for.
  static constexpr int64_t kMinParallelBytes = 512 << 10;

  // Splits [0, n) into n_parts nearly equal ranges whose boundaries are
  // multiples of `grain` (except the end); writes part `part`'s [begin, end).
  static void Split(int64_t n, int64_t part, int64_t n_parts, int64_t grain, int64_t* begin,
                    int64_t* end);

 private:
  using TaskFn = void (*)(void* ctx, int64_t chunk, int slot);
  template <class Fn>
  static void Trampoline(void* ctx, int64_t chunk, int slot) {
    (*static_cast<Fn*>(ctx))(chunk, slot);
  }
  void RunImpl(int64_t n_chunks, TaskFn fn, void* ctx);
  void RunChunks(int slot);
  void WorkerLoop(int slot);

  // state_ = generation << 32 | kClosed? | active workers. A worker may enter
  // the loop of `generation` only while it is open; the caller closes it once
  // no worker is inside, so the task's stack frame is never used after return.
  static constexpr uint64_t kClosed = uint64_t{1} << 31;
  static constexpr uint64_t kActiveMask = kClosed - 1;

  const int n_threads_;
  std::vector<std::thread> workers_;

  TaskFn task_fn_ = nullptr;
  void* task_ctx_ = nullptr;
  int64_t n_chunks_ = 0;
  std::atomic<int64_t> next_chunk_{0};
  std::atomic<uint64_t> state_{kClosed};
  std::atomic<bool> stop_{false};

  std::mutex mu_;
  std::condition_variable work_cv_;  // idle workers sleep here
  std::condition_variable done_cv_;  // the caller waits here for workers to leave
  std::atomic<int> sleepers_{0};
  std::atomic<bool> caller_waiting_{false};
};

}  // namespace pi
