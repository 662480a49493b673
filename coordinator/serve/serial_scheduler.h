// SerialScheduler: the requests of a one-sequence engine, one after another
// in arrival order, on a thread of its own (Generate: the prompt, then a
// token at a time, with llama-cli's context shift when a request asks for
// it). The thread never writes to a client: each token goes to the job's
// stream, which never blocks (request_stream.h). The engine's cache keeps
// the last prompt: a request starts from the prefix it shares with it
// (prompt_cache.h). With a drafter (--model-draft), decode runs
// speculatively (speculative.h).
#pragma once

#include <cstdint>
#include <vector>

#include "common/text/tokenizer.h"
#include "coordinator/engine/engine.h"
#include "coordinator/engine/prompt_store.h"
#include "coordinator/engine/speculative.h"
#include "coordinator/serve/scheduler.h"

namespace pi {

class SerialScheduler final : public Scheduler {
 public:
  // `engine` (used by nothing else meanwhile) and `tok` must outlive it.
  // `store` (may be null) keeps the prompts the sequence lets go; `drafter`
  // (may be null; used by nothing else meanwhile) drafts for every request.
  SerialScheduler(Engine* engine, const Tokenizer* tok, SchedulerHooks hooks, PromptStore* store,
                  Drafter* drafter = nullptr);
  // Finishes the waiting jobs as cancelled (the running one at its next
  // token) and stops the thread.
  ~SerialScheduler() override;

 private:
  void Loop() override;
  void RunJob(RequestJob* job);
  void RunEmbedding(RequestJob* job);  // an embedding request's prompts (embedding.h)

  // Where the request's prompt starts (a prefix the sequence or the store
  // holds; the prompt's size: all of it, from prompt_logits_).
  size_t Reuse(const std::vector<int32_t>& prompt);

  Engine* engine_;
  const Tokenizer* tok_;
  PromptStore* store_;
  Drafter* drafter_;
  // The prompt whose positions the engine's cache holds as a prompt wrote
  // them (empty: nothing reusable).
  std::vector<int32_t> cached_;
  // The logits after its last token (Generate's prompt_logits; empty: none).
  std::vector<float> prompt_logits_;
};

}  // namespace pi
