#include "coordinator/serve/batch_scheduler.h"

#include <algorithm>
#include <string>
#include <utility>

#include "common/base/progress.h"
#include "coordinator/engine/prompt_cache.h"

namespace pi {

// A running job and where it stands on its sequence.
struct BatchScheduler::Slot {
  std::shared_ptr<RequestJob> job;
  std::unique_ptr<Generation> gen;
  int seq = -1;
  size_t prefilled = 0;  // prompt tokens evaluated (from the cache at first)
  int32_t next = -1;     // the token to evaluate next (decoding), else -1
  double prompt_start = 0;
  bool waits = false;        // another request evaluates the same prompt: taken when it is done
  bool from_logits = false;  // its prompt taken whole: the first token from the kept logits
  size_t embed_at = 0;       // an embedding request: which of its prompts is evaluated
  EmbeddingPool pool;        // and its embedding so far

  bool embeds() const { return job->request.pooling != Pooling::kNone; }
  // The prompt being evaluated.
  const std::vector<int32_t>& prompt() const {
    return embeds() ? job->request.embed_prompts[embed_at] : job->request.prompt;
  }
};

BatchScheduler::BatchScheduler(Engine* engine, const Tokenizer* tok, SchedulerHooks hooks,
                               PromptStore* store)
    : Scheduler(std::move(hooks), engine->n_seq()),
      engine_(engine),
      tok_(tok),
      store_(store),
      n_batch_(engine->max_batch_rows() - engine->n_seq() + 1) {
  const int n_seq = engine->n_seq();
  cached_.resize(n_seq);
  last_used_.assign(n_seq, 0);
  prompt_logits_.assign(static_cast<size_t>(n_seq) * engine->n_vocab(), 0.0f);
  store_logits_.reserve(engine->n_vocab());
  logits_of_.assign(n_seq, 0);
  rows_.reserve(engine->max_batch_rows());
  row_slot_.reserve(n_seq);
  done_.reserve(n_seq);
  for (int s = n_seq - 1; s >= 0; --s) free_seqs_.push_back(s);
  StartLoop();
}

BatchScheduler::~BatchScheduler() {
  StopLoop();
}

void BatchScheduler::Loop() {
  std::vector<Slot*> running;
  while (true) {
    std::vector<std::shared_ptr<RequestJob>> aside;  // slot actions, bad sequences
    {
      std::unique_lock<std::mutex> lock(mu_);
      wake_.wait(lock, [&] { return stopping_ || !pending_.empty() || !running.empty(); });
      if (stopping_) break;
      Join(&running, &aside);
    }
    for (const std::shared_ptr<RequestJob>& job : aside) RunAside(job.get());
    for (Slot* slot : running) {
      if (slot->gen) continue;
      RequestJob* job = slot->job.get();
      if (slot->embeds()) {
        SaveHeld(slot->seq, {}, nullptr);  // (its prompts overwrite what the sequence holds)
      } else {
        Share(slot, running);
      }
      if (!slot->from_logits) logits_of_[slot->seq] = 0;  // what it held is overwritten
      engine_->KeepSeq(slot->seq, static_cast<int>(slot->prefilled));
      hooks_.started(job);
      slot->gen = std::make_unique<Generation>(*tok_, &job->sampler, job->request, engine_->n_ctx(),
                                               engine_->n_vocab(), &job->result);
      if (slot->embeds()) {
        slot->pool.Start(job->request.pooling, engine_->model().config.n_embd,
                         static_cast<int>(slot->prompt().size()));
      }
      job->result.n_cached = static_cast<int>(slot->prefilled);
      job->result.seq = slot->seq;
      slot->prompt_start = NowSeconds();
    }
    if (!running.empty()) Step(&running);
  }
  // Stopping: every job still here ends as cancelled.
  for (Slot* slot : running) {
    slot->job->result.stop_reason = "cancelled";
    Leave(slot);
  }
  std::lock_guard<std::mutex> lock(mu_);
  CancelPending();
}

void BatchScheduler::Join(std::vector<Slot*>* running,
                          std::vector<std::shared_ptr<RequestJob>>* aside) {
  // A free sequence each, in arrival order; a job whose client left while
  // it waited is dropped (its place in line was freed then). A job for a
  // sequence that is busy waits for it; those behind it go on.
  const int n_seq = engine_->n_seq();
  for (auto it = pending_.begin(); it != pending_.end() && !free_seqs_.empty();) {
    const int want = (*it)->request.seq;
    const bool busy = want >= 0 && want < n_seq &&
                      std::find(free_seqs_.begin(), free_seqs_.end(), want) == free_seqs_.end();
    if (busy) {
      ++it;
      continue;
    }
    std::shared_ptr<RequestJob> job = std::move(*it);
    it = pending_.erase(it);
    if (!job->Start()) continue;
    const bool drafts = AsksDraft(job->request);  // (refused aside: nothing drafts here)
    if (want >= n_seq || job->request.slot_op != SlotOp::kNone || drafts) {
      if (want >= 0 && want < n_seq && !drafts) {
        free_seqs_.erase(std::find(free_seqs_.begin(), free_seqs_.end(), want));
        SetBusy(want, true);
      }
      aside->push_back(std::move(job));  // (run once mu_ is let go)
      continue;
    }
    auto slot = std::make_unique<Slot>();
    slot->seq = PickSeq(*job, &slot->prefilled);
    SetBusy(slot->seq, true);
    slot->job = std::move(job);
    running->push_back(slot.release());  // owned by `running` until Leave
  }
}

void BatchScheduler::RunAside(RequestJob* job) {
  const int seq = job->request.seq;
  if (AsksDraft(job->request)) return RefuseDraft(job);  // (Join took no sequence for it)
  if (seq < 0 || seq >= engine_->n_seq()) return RefuseSeq(job, engine_->n_seq());
  // The sequence's kept logits as a vector, and back (a restore's, or none).
  const size_t n_vocab = static_cast<size_t>(engine_->n_vocab());
  std::vector<float> logits;
  if (HoldsWhole(seq, cached_[seq])) {
    const float* kept = prompt_logits_.data() + static_cast<size_t>(seq) * n_vocab;
    logits.assign(kept, kept + n_vocab);
  }
  RunSlotOp(engine_, store_, job, &cached_[seq], &logits);
  if (logits.size() == n_vocab) {
    KeepLogits(seq, logits.data(), cached_[seq].size());
  } else {
    logits_of_[seq] = 0;
  }
  last_used_[seq] = ++uses_;
  SetBusy(seq, false);
  std::lock_guard<std::mutex> lock(mu_);
  free_seqs_.push_back(seq);
}

int BatchScheduler::PickSeq(const RequestJob& job, size_t* reuse) {
  // (An embedding pools every position: nothing cached is reused.)
  const bool reuses = job.request.cache_prompt && job.request.pooling == Pooling::kNone;
  const int want = job.request.seq;  // (free: Join checked)
  size_t best = free_seqs_.size(), most = 0;
  bool whole = false;  // best holds the prompt whole (Share takes it)
  for (size_t i = 0; i < free_seqs_.size(); ++i) {
    const int s = free_seqs_[i];
    if (want >= 0 && s != want) continue;
    const size_t r = reuses ? ReusablePrefix(cached_[s], job.request.prompt, n_batch_) : 0;
    const bool w = reuses && cached_[s] == job.request.prompt && HoldsWhole(s, cached_[s]);
    if (best == free_seqs_.size() || (w && !whole) ||
        (w == whole && (r > most || (r == most && last_used_[s] < last_used_[free_seqs_[best]])))) {
      best = i;
      most = r;
      whole = w;
    }
  }
  const int seq = free_seqs_[best];
  free_seqs_.erase(free_seqs_.begin() + static_cast<long>(best));
  *reuse = most;
  return seq;
}

void BatchScheduler::Leave(Slot* slot) {
  const std::vector<int32_t>& prompt = slot->job->request.prompt;
  if (!slot->embeds() && slot->prefilled == prompt.size() &&
      HoldsPrompt(slot->job->result, engine_->seq_n_past(slot->seq), prompt.size())) {
    cached_[slot->seq] = prompt;
  } else {
    cached_[slot->seq].clear();
    logits_of_[slot->seq] = 0;
  }
  last_used_[slot->seq] = ++uses_;
  SetBusy(slot->seq, false);
  {
    std::lock_guard<std::mutex> lock(mu_);
    free_seqs_.push_back(slot->seq);
  }
  hooks_.finished(slot->job.get());
  std::unique_ptr<Slot> owned(slot);  // (running's own, released at the join)
}

void BatchScheduler::Step(std::vector<Slot*>* running) {
  // The jobs whose clients gave up leave; their sequences are free again.
  for (size_t i = 0; i < running->size();) {
    Slot* slot = (*running)[i];
    if (slot->job->stream.cancelled()) {
      slot->job->result.stop_reason = "cancelled";
      running->erase(running->begin() + i);
      Leave(slot);
    } else {
      ++i;
    }
  }
  // Requests that waited for a prompt being evaluated take it now (or, if
  // it went, evaluate theirs); those whose prompt was taken whole start.
  for (Slot* slot : *running) {
    if (slot->waits) Share(slot, *running);
  }
  StartFromLogits(running);
  if (running->empty()) return;
  // The decode rows, then one chunk of one prompt, cut where Eval cuts it
  // (every -b tokens from the prompt's start): the same runs as alone.
  rows_.clear();
  row_slot_.clear();
  for (Slot* slot : *running) {
    if (slot->next < 0) continue;
    rows_.push_back({slot->seq, slot->next, true});
    row_slot_.push_back(slot);
  }
  // The prompt with the least left goes first: a short request waits for at
  // most a chunk of a long one, not for all of it.
  Slot* prefill = nullptr;
  auto left = [](const Slot* s) { return s->prompt().size() - s->prefilled; };
  for (Slot* slot : *running) {
    if (slot->next >= 0 || left(slot) == 0 || slot->waits) continue;
    if (!prefill || left(slot) < left(prefill)) prefill = slot;
  }
  const size_t prefill_row = rows_.size();  // the prefill's first row
  size_t prefill_from = 0;                  // and its position in the prompt
  if (prefill) {
    // (A cached prefix ends on a multiple of -b: the chunks of an uncached run.)
    const std::vector<int32_t>& prompt = prefill->prompt();
    const size_t end = std::min(prompt.size(), prefill->prefilled + n_batch_);
    for (size_t i = prefill->prefilled; i < end; ++i) {
      if (prefill->embeds()) {  // hidden states, no logits
        rows_.push_back({prefill->seq, prompt[i], false, prefill->pool.Wants(static_cast<int>(i))});
        continue;
      }
      const bool last = i + 1 == prompt.size();
      rows_.push_back({prefill->seq, prompt[i], last});
      if (last) row_slot_.push_back(prefill);
    }
    prefill_from = prefill->prefilled;
    prefill->prefilled = end;
  }
  const Status s = engine_->EvalBatch(rows_.data(), static_cast<int>(rows_.size()));
  // The worker failures this step saw (copied only when they change).
  const WorkerHealth& seen = loop_health();
  if (engine_->shard_failures() != seen.failures ||
      engine_->shard_recoveries() != seen.recoveries ||
      engine_->device_failures() != seen.device_failures ||
      engine_->device_recoveries() != seen.device_recoveries) {
    SetHealth(ReadWorkerHealth(*engine_));
  }
  // Each job asking: its logits, in row order.
  std::vector<Slot*>& done = done_;
  done.clear();
  for (size_t k = 0; k < row_slot_.size(); ++k) {
    Slot* slot = row_slot_[k];
    RequestJob* job = slot->job.get();
    auto push = [this, job](int32_t id, const std::string& text) {
      return hooks_.token(job, id, text);
    };
    const bool prompt_done = slot->next < 0;
    if (!s.ok()) {
      slot->gen->Fail(s);
    } else {
      if (prompt_done) {
        // Kept for a request with the same prompt (n choices, one asked again).
        KeepLogits(slot->seq, engine_->batch_logits(static_cast<int>(k)), slot->prompt().size());
        slot->gen->PromptDone(NowSeconds() - slot->prompt_start);
      } else {
        slot->gen->Evaluated(0, 0);  // (the step's FFN counts are the batch's, not the job's)
      }
      int32_t next = -1;
      if (slot->gen->Next(engine_->batch_logits(static_cast<int>(k)),
                          engine_->seq_n_past(slot->seq), push, &next)) {
        slot->next = next;
        continue;
      }
    }
    slot->gen->Finish(push);
    done.push_back(slot);
  }
  if (s.ok() && prefill && prefill->embeds() && EmbedStep(prefill, prefill_row, prefill_from)) {
    done.push_back(prefill);
  }
  if (!s.ok()) {  // a failed step ends every job in it (a prefill without logits too)
    for (Slot* slot : *running) {
      if (std::find(done.begin(), done.end(), slot) == done.end()) {
        slot->gen->Fail(s);
        slot->gen->Finish(nullptr);
        done.push_back(slot);
      }
    }
  }
  for (Slot* slot : done) {
    running->erase(std::find(running->begin(), running->end(), slot));
    Leave(slot);
  }
}

bool BatchScheduler::HoldsWhole(int seq, const std::vector<int32_t>& prompt) const {
  return !prompt.empty() && logits_of_[seq] == prompt.size();
}

void BatchScheduler::KeepLogits(int seq, const float* logits, size_t size) {
  const size_t n_vocab = static_cast<size_t>(engine_->n_vocab());
  std::copy_n(logits, n_vocab, prompt_logits_.begin() + static_cast<size_t>(seq) * n_vocab);
  logits_of_[seq] = size;
}

void BatchScheduler::SaveHeld(int seq, const std::vector<int32_t>& prompt,
                              const PromptStore::Hit* keep) {
  const std::vector<int32_t>& held = cached_[seq];
  if (!store_ || held.empty() || (!prompt.empty() && GoesOnFrom(held, prompt))) return;
  const float* logits = HoldsWhole(seq, held)
                            ? prompt_logits_.data() + static_cast<size_t>(seq) * engine_->n_vocab()
                            : nullptr;
  (void)store_->Save(engine_, seq, held, logits, keep);
}

void BatchScheduler::Share(Slot* slot, const std::vector<Slot*>& running) {
  slot->waits = false;
  const std::vector<int32_t>& prompt = slot->prompt();
  const int seq = slot->seq;
  const size_t n_vocab = static_cast<size_t>(engine_->n_vocab());
  // Its own sequence's last prompt (PickSeq chose it for the most shared).
  if (slot->job->request.cache_prompt && cached_[seq] == prompt && HoldsWhole(seq, prompt)) {
    slot->prefilled = prompt.size();
    slot->from_logits = true;
    slot->job->result.n_cached = static_cast<int>(prompt.size());
    return;
  }
  // The most another sequence holds: whole (with its logits), or a prefix.
  int whole_from = -1, donor = -1;
  size_t most = slot->prefilled;
  if (slot->job->request.cache_prompt) {
    for (const Slot* s : running) {
      if (s == slot || !s->gen || s->embeds() || s->waits || s->job->result.context_shifts != 0) {
        continue;
      }
      // Its sequence holds its prompt's first `prefilled` positions.
      const std::vector<int32_t>& held = s->prompt();
      if (held == prompt && s->prefilled < held.size()) {
        slot->waits = true;  // being evaluated: taken once it is done
        return;
      }
      if (held == prompt && HoldsWhole(s->seq, held)) {
        whole_from = s->seq;
        break;
      }
      const size_t r = ReusablePrefix(held.data(), s->prefilled, prompt, n_batch_);
      if (r > most) {
        most = r;
        donor = s->seq;
      }
    }
    for (size_t i = 0; i < free_seqs_.size() && whole_from < 0; ++i) {
      const int s = free_seqs_[i];
      if (cached_[s] == prompt && HoldsWhole(s, prompt)) {
        whole_from = s;
        break;
      }
      const size_t r = ReusablePrefix(cached_[s], prompt, n_batch_);
      if (r > most) {
        most = r;
        donor = s;
      }
    }
  }
  PromptStore::Hit hit;
  const bool stored = whole_from < 0 && slot->job->request.cache_prompt && store_ &&
                      store_->Find(prompt, n_batch_, most, &hit);
  SaveHeld(seq, prompt, stored ? &hit : nullptr);  // before anything overwrites it
  if (whole_from >= 0 && engine_->CopySeq(whole_from, seq, static_cast<int>(prompt.size())).ok()) {
    KeepLogits(seq, prompt_logits_.data() + whole_from * n_vocab, prompt.size());
    slot->prefilled = prompt.size();
    slot->from_logits = true;
  } else if (stored && store_->Load(hit, engine_, seq, &store_logits_).ok()) {
    slot->prefilled = hit.reuse;
    if (hit.whole) {
      KeepLogits(seq, store_logits_.data(), prompt.size());
      slot->from_logits = true;
    }
  } else if (donor >= 0 && engine_->CopySeq(donor, seq, static_cast<int>(most)).ok()) {
    slot->prefilled = most;
  }
  slot->job->result.n_cached = static_cast<int>(slot->prefilled);
}

void BatchScheduler::StartFromLogits(std::vector<Slot*>* running) {
  for (size_t i = 0; i < running->size();) {
    Slot* slot = (*running)[i];
    if (!slot->from_logits) {
      ++i;
      continue;
    }
    slot->from_logits = false;
    RequestJob* job = slot->job.get();
    auto push = [this, job](int32_t id, const std::string& text) {
      return hooks_.token(job, id, text);
    };
    slot->gen->PromptDone(NowSeconds() - slot->prompt_start);
    const float* logits =
        prompt_logits_.data() + static_cast<size_t>(slot->seq) * engine_->n_vocab();
    int32_t next = -1;
    if (slot->gen->Next(logits, engine_->seq_n_past(slot->seq), push, &next)) {
      slot->next = next;
      ++i;
      continue;
    }
    slot->gen->Finish(push);
    running->erase(running->begin() + static_cast<long>(i));
    Leave(slot);
  }
}

bool BatchScheduler::EmbedStep(Slot* slot, size_t row, size_t from) {
  for (size_t i = from; i < slot->prefilled; ++i, ++row) {
    const int pos = static_cast<int>(i);
    if (slot->pool.Wants(pos)) slot->pool.Add(pos, engine_->batch_hidden(static_cast<int>(row)));
  }
  if (slot->prefilled < slot->prompt().size()) return false;
  RequestJob* job = slot->job.get();
  job->result.embeddings.push_back(slot->pool.Finish());
  if (++slot->embed_at < job->request.embed_prompts.size()) {  // the next prompt, from empty
    engine_->KeepSeq(slot->seq, 0);
    slot->prefilled = 0;
    slot->pool.Start(job->request.pooling, engine_->model().config.n_embd,
                     static_cast<int>(slot->prompt().size()));
    return false;
  }
  slot->gen->PromptDone(NowSeconds() - slot->prompt_start);
  slot->gen->Finish(nullptr);
  return true;
}

}  // namespace pi
