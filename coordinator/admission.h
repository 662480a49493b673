// Admission: the requests a server takes share one engine, in arrival order:
// at most max_running at a time (1, or the -np sequences of continuous
// batching). At most max_queue wait behind the running ones; one more is
// refused at once (the caller answers RESOURCE_EXHAUSTED or 503), so a flood
// costs a refusal each, never memory or unbounded waiting.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>

namespace pi {

class Admission {
 public:
  explicit Admission(int max_queue, int max_running = 1)
      : max_queue_(max_queue), max_running_(max_running) {}

  // Takes a place in line (*ticket); false when max_queue already wait.
  bool Enter(uint64_t* ticket);
  // Waits until `ticket` is among the first max_running in line (true), or until `cancelled()`,
  // polled every `poll_ms`, says the caller gave up (false; the place is
  // left).
  bool WaitTurn(uint64_t ticket, const std::function<bool()>& cancelled, int poll_ms = 20);
  // Leaves the line (after running, or before its turn).
  void Leave(uint64_t ticket);

  int running() const;  // 0 .. max_running
  int queued() const;   // waiting behind the running one
  int max_queue() const { return max_queue_; }

 private:
  const int max_queue_, max_running_;
  // Whether `ticket` is among the first max_running_ in line (mu_ held).
  bool Admitted(uint64_t ticket) const;
  mutable std::mutex mu_;
  std::condition_variable turn_;
  std::deque<uint64_t> line_;  // the first max_running_ run once their WaitTurn returns
  uint64_t next_ticket_ = 1;
};

}  // namespace pi
