// BatchScheduler: continuous batching on one engine of n_seq sequences
// (Engine::EvalBatch). Requests join at the next step and leave when done;
// each step evaluates every running request's next token together with at
// most one chunk (-b tokens) of a prompt being prefilled — the one with the
// least left — so a long prompt holds the others for a chunk at a time, and
// a short one joining meanwhile is prefilled first. EvalBatch evaluates
// every sequence as it would alone, so a request's tokens are those it gets
// running by itself.
//
// One thread of its own drives the engine; a request's tokens go to its
// stream, which never blocks, so a slow client never holds the step.
//
// Each sequence's cache keeps the last prompt run on it; a request takes
// the free sequence whose prompt shares the most with its own (then the one
// used longest ago) and starts after that prefix (prompt_cache.h).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "common/text/tokenizer.h"
#include "coordinator/engine/engine.h"
#include "coordinator/serve/scheduler.h"

namespace pi {

class BatchScheduler final : public Scheduler {
 public:
  // `engine` (with n_seq sequences; not used by anything else meanwhile)
  // and `tok` must outlive the scheduler. The caller admits at most n_seq
  // running jobs beyond those waiting; the scheduler starts them as
  // sequences free up.
  BatchScheduler(Engine* engine, const Tokenizer* tok, SchedulerHooks hooks);
  ~BatchScheduler() override;  // finishes the running and waiting jobs as cancelled

 private:
  struct Slot;
  void Loop() override;
  // One step: the rows of the running jobs, EvalBatch, then each job's Next.
  void Step(std::vector<Slot*>* running);
  void Leave(Slot* slot);
  // An embedding request's prefill rows from `row` (prompt position `from`
  // on) were evaluated: pooled; true when its last prompt is done (finished).
  bool EmbedStep(Slot* slot, size_t row, size_t from);
  // The free sequence for `job` (under mu_) and how much of its prompt that
  // sequence's cache holds.
  int PickSeq(const RequestJob& job, size_t* reuse);

  Engine* engine_;
  const Tokenizer* tok_;
  std::vector<Engine::BatchRow> rows_;  // a step's rows (reserved)
  std::vector<Slot*> row_slot_;         // the job of each row asking for logits
  std::vector<int> free_seqs_;
  std::vector<Slot*> done_;  // a step's finished jobs (reserved)
  int n_batch_;              // where a prompt is cut (-b), as Engine::Eval cuts it
  // Per sequence: the prompt its cache holds (prompt_cache.h), and when it
  // last ran one (a step count: the least recently used goes first).
  std::vector<std::vector<int32_t>> cached_;
  std::vector<uint64_t> last_used_;
  uint64_t uses_ = 0;
};

}  // namespace pi
