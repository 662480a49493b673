// Admission: the requests a server takes share one engine: at most
// max_running run at a time (1, or the -np sequences of continuous
// batching) and at most max_queue wait behind them; one more is refused at
// once (the caller answers RESOURCE_EXHAUSTED or 503), so a flood costs a
// refusal each, never memory or unbounded waiting. A place is held from
// Enter until Leave: a request that waited and left, or one that ran.
#pragma once

#include <mutex>

namespace pi {

class Admission {
 public:
  explicit Admission(int max_queue, int max_running = 1)
      : max_queue_(max_queue), max_running_(max_running) {}

  // Takes a place in line; false when max_queue already wait.
  bool Enter();
  // A request in line starts running.
  void Started();
  // Leaves the line: after running (`ran`), or before its turn.
  void Leave(bool ran);

  int running() const;  // 0 .. max_running
  int queued() const;   // waiting behind the running ones
  int max_queue() const { return max_queue_; }

 private:
  const int max_queue_, max_running_;
  mutable std::mutex mu_;
  int in_line_ = 0;  // running or waiting
  int running_ = 0;
};

}  // namespace pi
