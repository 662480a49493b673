// Scheduler: runs submitted jobs on an engine, on a thread of its own: one
// at a time (SerialScheduler) or many batched step by step (BatchScheduler).
// This base holds what both share: the jobs submitted and not yet taken,
// the thread and its stop, the worker health its loop last saw.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>

#include "coordinator/engine/engine.h"
#include "coordinator/serve/request_job.h"

namespace pi {

class Scheduler {
 public:
  virtual ~Scheduler() = default;
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // Queues a job (its admission already decided); the hooks follow.
  void Submit(std::shared_ptr<RequestJob> job);
  // The engine's worker failures as the loop last saw them.
  WorkerHealth worker_health() const;

 protected:
  explicit Scheduler(SchedulerHooks hooks) : hooks_(std::move(hooks)) {}
  // The thread runs Loop(): a derived class starts it last in its
  // constructor and stops it first in its destructor.
  void StartLoop();
  void StopLoop();
  virtual void Loop() = 0;
  // The loop's copy of the health: it alone writes it (here) and reads it.
  void SetHealth(const WorkerHealth& h);
  const WorkerHealth& loop_health() const { return health_; }
  // Stopping: the jobs still waiting end as cancelled (mu_ held).
  void CancelPending();

  const SchedulerHooks hooks_;
  std::mutex mu_;
  std::condition_variable wake_;
  std::deque<std::shared_ptr<RequestJob>> pending_;  // submitted, not yet taken
  std::atomic<bool> stopping_{false};

 private:
  mutable std::mutex health_mu_;
  WorkerHealth health_;
  std::thread thread_;
};

// The engine's failure counters now (its own thread's view).
WorkerHealth ReadWorkerHealth(const Engine& engine);

}  // namespace pi
