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
// used longest ago) and starts after that prefix (prompt_cache.h). On the
// host path a request also takes a longer prefix from another sequence
// (Engine::CopySeq): a running request's prompt, or a free sequence's. The
// same prompt whole (the n choices of one request, a request asked again)
// is not evaluated at all: its positions are copied and its first token
// drawn from the logits kept when that prompt was evaluated; a request
// whose prompt another is evaluating meanwhile waits for it. A prompt a
// sequence lets go (a request that does not go on from it takes the
// sequence) goes to the PromptStore, and a request takes a longer prefix
// from there too. A request may ask for a sequence (llama-server's id_slot):
// it waits for that one, and slot actions (save, restore, erase: slot_file.h)
// run on theirs between steps.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "common/text/tokenizer.h"
#include "coordinator/engine/engine.h"
#include "coordinator/engine/prompt_store.h"
#include "coordinator/serve/scheduler.h"

namespace pi {

class BatchScheduler final : public Scheduler {
 public:
  // `engine` (with n_seq sequences; not used by anything else meanwhile)
  // and `tok` must outlive the scheduler. The caller admits at most n_seq
  // running jobs beyond those waiting; the scheduler starts them as
  // sequences free up.
  // `store` (may be null) keeps the prompts the sequences let go.
  BatchScheduler(Engine* engine, const Tokenizer* tok, SchedulerHooks hooks, PromptStore* store);
  ~BatchScheduler() override;  // finishes the running and waiting jobs as cancelled

 private:
  struct Slot;
  void Loop() override;
  // One step: the rows of the running jobs, EvalBatch, then each job's Next.
  void Step(std::vector<Slot*>* running);
  void Leave(Slot* slot);
  // Under mu_: the waiting jobs that can start take their sequences
  // (`running`); slot actions and jobs for a sequence the engine does not
  // have go `aside`, their sequences taken.
  void Join(std::vector<Slot*>* running, std::vector<std::shared_ptr<RequestJob>>* aside);
  // An aside job, on its sequence, which is then free again.
  void RunAside(RequestJob* job);
  // An embedding request's prefill rows from `row` (prompt position `from`
  // on) were evaluated: pooled; true when its last prompt is done (finished).
  bool EmbedStep(Slot* slot, size_t row, size_t from);
  // The free sequence for `job` (under mu_) and how much of its prompt that
  // sequence's cache holds.
  int PickSeq(const RequestJob& job, size_t* reuse);
  // Before `slot` evaluates its prompt: what other sequences hold of it
  // taken (see above), or slot->waits for a request evaluating the same.
  void Share(Slot* slot, const std::vector<Slot*>& running);
  // What sequence `seq` holds goes to the store (never `keep`'s entry),
  // unless `prompt` goes on from it.
  void SaveHeld(int seq, const std::vector<int32_t>& prompt, const PromptStore::Hit* keep);
  // Whether sequence `seq` holds `prompt` whole with its last token's logits.
  bool HoldsWhole(int seq, const std::vector<int32_t>& prompt) const;
  // Keeps `logits` (n_vocab) as those after seq's first `size` prompt tokens.
  void KeepLogits(int seq, const float* logits, size_t size);
  // The slots whose prompts were taken whole: their first tokens, from the
  // kept logits (the finished ones leave).
  void StartFromLogits(std::vector<Slot*>* running);

  Engine* engine_;
  const Tokenizer* tok_;
  PromptStore* store_;
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
  // Per sequence: the logits after its cached (or running) prompt's last
  // token, and that prompt's length (0: none kept).
  std::vector<float> prompt_logits_;
  std::vector<size_t> logits_of_;
  std::vector<float> store_logits_;  // a whole prompt's from the store (reserved)
};

}  // namespace pi
