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
#include <string>
#include <thread>
#include <vector>

#include "coordinator/engine/engine.h"
#include "coordinator/engine/prompt_store.h"
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
  // Whether sequence `seq` runs a job now (GET /slots' is_processing).
  bool seq_busy(int seq) const {
    return seq >= 0 && seq < n_seq_ && busy_[seq].load(std::memory_order_relaxed);
  }

 protected:
  Scheduler(SchedulerHooks hooks, int n_seq)
      : hooks_(std::move(hooks)), n_seq_(n_seq), busy_(new std::atomic<bool>[n_seq]()) {}
  // The thread runs Loop(): a derived class starts it last in its
  // constructor and stops it first in its destructor.
  void StartLoop();
  void StopLoop();
  virtual void Loop() = 0;
  // The loop's copy of the health: it alone writes it (here) and reads it.
  void SetHealth(const WorkerHealth& h);
  void SetBusy(int seq, bool busy) { busy_[seq].store(busy, std::memory_order_relaxed); }
  const WorkerHealth& loop_health() const { return health_; }
  // Stopping: the jobs still waiting end as cancelled (mu_ held).
  void CancelPending();
  // A started job that cannot run, by the request's fault: it ends with
  // that error.
  void Refuse(RequestJob* job, std::string why);
  // A started job asking for a sequence the engine (of n_seq) does not
  // have: it ends with the request's error.
  void RefuseSeq(RequestJob* job, int n_seq);
  // A started job tuning drafting (AsksDraft) where nothing drafts: it ends
  // with the request's error (NoDraftModel).
  void RefuseDraft(RequestJob* job);
  // A started slot action (GenerationRequest::slot_op) on its sequence,
  // whose cache holds *cached (the prompt it last ran) with *logits after
  // it (empty: none kept): done and timed; a restore or an erase rewrites
  // both. A restore keeps what the sequence held in the store first; an
  // erase forgets it.
  void RunSlotOp(Engine* engine, PromptStore* store, RequestJob* job, std::vector<int32_t>* cached,
                 std::vector<float>* logits);

  const SchedulerHooks hooks_;
  std::mutex mu_;
  std::condition_variable wake_;
  std::deque<std::shared_ptr<RequestJob>> pending_;  // submitted, not yet taken
  std::atomic<bool> stopping_{false};

 private:
  const int n_seq_;
  std::unique_ptr<std::atomic<bool>[]> busy_;
  mutable std::mutex health_mu_;
  WorkerHealth health_;
  std::thread thread_;
};

// The engine's failure counters now (its own thread's view).
WorkerHealth ReadWorkerHealth(const Engine& engine);

}  // namespace pi
