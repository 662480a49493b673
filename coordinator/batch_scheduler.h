// BatchScheduler: continuous batching on one engine of n_seq sequences
// (Engine::EvalBatch). Requests join at the next step and leave when done;
// each step evaluates every running request's next token together with at
// most one chunk (-b tokens) of a prompt being prefilled — the one with the
// least left — so a long prompt holds the others for a chunk at a time, and
// a short one joining meanwhile is prefilled first. EvalBatch evaluates
// every sequence as it would alone, so a request's tokens are those it gets
// running by itself.
//
// One thread of its own drives the engine; a request's tokens reach its
// caller's thread through a queue, so a slow client never holds the step.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/sampler.h"
#include "common/tokenizer.h"
#include "coordinator/engine.h"
#include "coordinator/generation.h"

namespace pi {

class BatchScheduler {
 public:
  // `engine` (with n_seq sequences; not used by anything else meanwhile)
  // and `tok` must outlive the scheduler.
  BatchScheduler(Engine* engine, const Tokenizer* tok);
  ~BatchScheduler();  // finishes the running requests as cancelled, stops the thread
  BatchScheduler(const BatchScheduler&) = delete;
  BatchScheduler& operator=(const BatchScheduler&) = delete;

  // Runs one request (checked already) once a sequence is free — the caller
  // admits at most n_seq at a time — calling on_token on this thread for
  // each token; returns when it is done, or soon after cancelled() (polled)
  // or on_token says stop (stop reason "cancelled").
  void Run(const GenerationRequest& request, Sampler* sampler,
           const std::function<bool()>& cancelled, const TokenCallback& on_token,
           GenerationResult* out);

  // The engine's cold-shard failures and recoveries, and the last failure's
  // message, as of the last step (the engine itself is the loop's alone).
  struct WorkerHealth {
    int64_t failures = 0, recoveries = 0;
    std::string error;
  };
  WorkerHealth worker_health() const;

 private:
  struct Job;
  void Loop();
  // One step: the rows of the running jobs, EvalBatch, then each job's Next.
  void Step(std::vector<Job*>* running);

  Engine* engine_;
  const Tokenizer* tok_;
  std::mutex mu_;
  std::condition_variable wake_;
  std::deque<Job*> pending_;  // submitted, waiting for the loop to take them
  bool stopping_ = false;
  std::thread thread_;
  std::vector<Engine::BatchRow> rows_;  // a step's rows (reserved)
  std::vector<Job*> row_job_;           // the job of each row asking for logits
  std::vector<int> free_seqs_;
  std::vector<Job*> done_;  // a step's finished jobs (reserved)
  mutable std::mutex health_mu_;
  WorkerHealth health_;
};

}  // namespace pi
