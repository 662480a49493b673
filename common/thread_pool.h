// ThreadPool: a fixed set of threads that run one parallel region at a time,
// in the style of ggml's compute threads: Run(fn) calls fn(i, n) on every
// thread (the caller is thread 0) and returns when all have finished.
//
// Why not a pure spin pool: this machine is shared, and a worker whose core is
// taken by another process makes spinning siblings burn their whole time
// slice (pools that only spin were seen 10-100x slower at -t 2 than -t 1).
// So waiting spins only briefly (a few microseconds of `pause`, enough to
// catch the next op of a decode step), then blocks on a condition variable.
// Run() allocates nothing.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
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

  // Runs fn(thread_index, n_threads) on all threads and waits for all.
  template <class Fn>
  void Run(Fn&& fn) {
    RunImpl(&Trampoline<std::remove_reference_t<Fn>>, &fn);
  }

  // Splits [0, n) into n_parts nearly equal ranges whose boundaries are
  // multiples of `grain` (except the end); writes part `part`'s [begin, end).
  static void Split(int64_t n, int part, int n_parts, int64_t grain, int64_t* begin, int64_t* end);

 private:
  using TaskFn = void (*)(void* ctx, int ith, int nth);
  template <class Fn>
  static void Trampoline(void* ctx, int ith, int nth) {
    (*static_cast<Fn*>(ctx))(ith, nth);
  }
  void RunImpl(TaskFn fn, void* ctx);
  void WorkerLoop(int index);

  const int n_threads_;
  std::vector<std::thread> workers_;

  // Current task; published by bumping generation_.
  TaskFn task_fn_ = nullptr;
  void* task_ctx_ = nullptr;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};  // workers still running the current task
  std::atomic<bool> stop_{false};

  std::mutex mu_;
  std::condition_variable work_cv_;  // workers sleep here
  std::condition_variable done_cv_;  // the caller sleeps here
};

}  // namespace pi
