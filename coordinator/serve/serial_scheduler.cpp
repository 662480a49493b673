#include "coordinator/serve/serial_scheduler.h"

#include <utility>

#include "common/base/progress.h"
#include "coordinator/engine/prompt_cache.h"

namespace pi {

SerialScheduler::SerialScheduler(Engine* engine, const Tokenizer* tok, SchedulerHooks hooks,
                                 PromptStore* store, Drafter* drafter)
    : Scheduler(std::move(hooks), 1), engine_(engine), tok_(tok), store_(store), drafter_(drafter) {
  StartLoop();
}

SerialScheduler::~SerialScheduler() {
  StopLoop();
}

void SerialScheduler::Loop() {
  while (true) {
    std::shared_ptr<RequestJob> job;
    {
      std::unique_lock<std::mutex> lock(mu_);
      wake_.wait(lock, [&] { return stopping_ || !pending_.empty(); });
      if (stopping_) break;
      job = std::move(pending_.front());
      pending_.pop_front();
    }
    if (!job->Start()) continue;  // its client left while it waited
    SetBusy(0, true);
    if (job->request.seq > 0) {
      RefuseSeq(job.get(), 1);
    } else if (job->request.slot_op != SlotOp::kNone) {
      RunSlotOp(engine_, store_, job.get(), &cached_, &prompt_logits_);
    } else {
      RunJob(job.get());
    }
    SetBusy(0, false);
  }
  std::lock_guard<std::mutex> lock(mu_);
  CancelPending();
}

void SerialScheduler::RunJob(RequestJob* job) {
  hooks_.started(job);
  if (job->request.pooling != Pooling::kNone) {
    RunEmbedding(job);
    return;
  }
  const std::vector<int32_t>& prompt = job->request.prompt;
  const size_t reuse = job->request.cache_prompt ? Reuse(prompt) : 0;
  Generate(
      engine_, *tok_, &job->sampler, job->request,
      [&](int32_t id, const std::string& text) {
        if (stopping_) return false;
        return hooks_.token(job, id, text);
      },
      &job->result, reuse, &prompt_logits_, drafter_);
  if (HoldsPrompt(job->result, engine_->n_past(), prompt.size())) {
    cached_ = prompt;
  } else {
    cached_.clear();
    prompt_logits_.clear();
  }
  SetHealth(ReadWorkerHealth(*engine_));
  hooks_.finished(job);
}

size_t SerialScheduler::Reuse(const std::vector<int32_t>& prompt) {
  // The same prompt again (the next of n choices): none of it evaluated.
  if (cached_ == prompt && !prompt_logits_.empty()) return prompt.size();
  size_t reuse = ReusablePrefix(cached_, prompt, engine_->n_batch());
  if (!store_) return reuse;
  PromptStore::Hit hit;
  const bool found = store_->Find(prompt, engine_->n_batch(), reuse, &hit);
  // What the sequence holds is overwritten unless this prompt goes on from
  // it: kept in the store first.
  if (!cached_.empty() && !GoesOnFrom(cached_, prompt)) {
    (void)store_->Save(engine_, 0, cached_,
                       prompt_logits_.empty() ? nullptr : prompt_logits_.data(),
                       found ? &hit : nullptr);
  }
  if (found && store_->Load(hit, engine_, 0, &prompt_logits_).ok()) {
    cached_.assign(prompt.begin(), prompt.begin() + static_cast<long>(hit.reuse));
    if (!hit.whole) prompt_logits_.clear();
    reuse = hit.reuse;
  }
  return reuse;
}

void SerialScheduler::RunEmbedding(RequestJob* job) {
  if (store_ && !cached_.empty()) {  // (the embedding overwrites what the sequence holds)
    (void)store_->Save(engine_, 0, cached_,
                       prompt_logits_.empty() ? nullptr : prompt_logits_.data());
  }
  const double start = NowSeconds();
  GenerationResult& g = job->result;
  const Status s = EmbedPrompts(
      engine_, job->request.pooling, job->request.embed_prompts,
      [&] { return stopping_ || job->stream.cancelled(); }, &g.embeddings);
  g.prompt_s = NowSeconds() - start;
  if (!s.ok()) {
    const bool cancelled = stopping_ || job->stream.cancelled();
    g.stop_reason = cancelled ? "cancelled" : "error";
    if (!cancelled) g.error = s.message();
  }
  cached_.clear();  // the engine's sequence holds the last prompt, not a generation's
  prompt_logits_.clear();
  SetHealth(ReadWorkerHealth(*engine_));
  hooks_.finished(job);
}

}  // namespace pi
