// SerialScheduler: the requests of a one-sequence engine, one after another
// in arrival order, on a thread of its own (Generate: the prompt, then a
// token at a time, with llama-cli's context shift when a request asks for
// it). The thread never writes to a client: each token goes to the job's
// stream, which never blocks (request_stream.h).
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>

#include "common/tokenizer.h"
#include "coordinator/engine.h"
#include "coordinator/request_job.h"

namespace pi {

class SerialScheduler final : public Scheduler {
 public:
  // `engine` (used by nothing else meanwhile) and `tok` must outlive it.
  SerialScheduler(Engine* engine, const Tokenizer* tok, SchedulerHooks hooks);
  // Finishes the waiting jobs as cancelled (the running one at its next
  // token) and stops the thread.
  ~SerialScheduler() override;

  void Submit(std::shared_ptr<RequestJob> job) override;
  WorkerHealth worker_health() const override;

 private:
  void Loop();
  void RunJob(RequestJob* job);

  Engine* engine_;
  const Tokenizer* tok_;
  const SchedulerHooks hooks_;
  std::mutex mu_;
  std::condition_variable wake_;
  std::deque<std::shared_ptr<RequestJob>> pending_;
  std::atomic<bool> stopping_{false};
  mutable std::mutex health_mu_;
  WorkerHealth health_;
  std::thread thread_;  // last: starts once the rest is built
};

// The engine's failure counters now (its own thread's view).
WorkerHealth ReadWorkerHealth(const Engine& engine);

}  // namespace pi
