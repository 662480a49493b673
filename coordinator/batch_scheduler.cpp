#include "coordinator/batch_scheduler.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <string>
#include <utility>

#include "common/progress.h"

namespace pi {

struct BatchScheduler::Job {
  const GenerationRequest* request = nullptr;
  GenerationResult* result = nullptr;
  std::unique_ptr<Generation> gen;
  int seq = -1;
  size_t prefilled = 0;  // prompt tokens evaluated
  int32_t next = -1;     // the token to evaluate next (decoding), else -1
  double prompt_start = 0;
  std::atomic<bool> cancelled{false};  // set by the caller's thread
  // Loop -> caller: the streamed pieces, then done.
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::pair<int32_t, std::string>> pieces;
  bool done = false;
};

BatchScheduler::BatchScheduler(Engine* engine, const Tokenizer* tok) : engine_(engine), tok_(tok) {
  const int n_seq = engine->n_seq();
  rows_.reserve(engine->max_batch_rows());
  row_job_.reserve(n_seq);
  done_.reserve(n_seq);
  for (int s = n_seq - 1; s >= 0; --s) free_seqs_.push_back(s);
  thread_ = std::thread([this] { Loop(); });
}

BatchScheduler::~BatchScheduler() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

void BatchScheduler::Run(const GenerationRequest& request, Sampler* sampler,
                         const std::function<bool()>& cancelled, const TokenCallback& on_token,
                         GenerationResult* out) {
  Job job;
  job.request = &request;
  job.result = out;
  job.gen = std::make_unique<Generation>(*tok_, sampler, request, engine_->n_ctx(),
                                         engine_->n_vocab(), out);
  job.prompt_start = NowSeconds();
  {
    std::lock_guard<std::mutex> lock(mu_);
    pending_.push_back(&job);
  }
  wake_.notify_all();
  std::deque<std::pair<int32_t, std::string>> got;
  while (true) {
    bool done = false;
    {
      std::unique_lock<std::mutex> lock(job.mu);
      job.cv.wait_for(lock, std::chrono::milliseconds(20),
                      [&] { return job.done || !job.pieces.empty(); });
      got.swap(job.pieces);
      done = job.done;
    }
    for (auto& [id, text] : got) {
      if (!job.cancelled && on_token && !on_token(id, text)) job.cancelled = true;
    }
    got.clear();
    if (done) break;
    if (cancelled && cancelled()) job.cancelled = true;
  }
  if (job.cancelled && std::string(out->stop_reason) != "error") out->stop_reason = "cancelled";
}

BatchScheduler::WorkerHealth BatchScheduler::worker_health() const {
  std::lock_guard<std::mutex> lock(health_mu_);
  return health_;
}

void BatchScheduler::Loop() {
  std::vector<Job*> running;
  while (true) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      wake_.wait(lock, [&] { return stopping_ || !pending_.empty() || !running.empty(); });
      if (stopping_) break;
      // Join: a free sequence each (the caller admits at most n_seq).
      while (!pending_.empty() && !free_seqs_.empty()) {
        Job* job = pending_.front();
        pending_.pop_front();
        job->seq = free_seqs_.back();
        free_seqs_.pop_back();
        engine_->ResetSeq(job->seq);
        running.push_back(job);
      }
    }
    if (!running.empty()) Step(&running);
  }
  // Stopping: every job still here ends as cancelled.
  std::lock_guard<std::mutex> lock(mu_);
  for (Job* job : running) pending_.push_back(job);
  for (Job* job : pending_) {
    job->result->stop_reason = "cancelled";
    std::lock_guard<std::mutex> job_lock(job->mu);
    job->done = true;
    job->cv.notify_all();
  }
  pending_.clear();
}

void BatchScheduler::Step(std::vector<Job*>* running) {
  // Finish the jobs whose callers gave up; their sequences are free again.
  auto finish = [&](Job* job) {
    std::lock_guard<std::mutex> lock(job->mu);
    job->done = true;
    job->cv.notify_all();
  };
  auto leave = [&](Job* job) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      free_seqs_.push_back(job->seq);
    }
    finish(job);
  };
  for (size_t i = 0; i < running->size();) {
    Job* job = (*running)[i];
    if (job->cancelled) {
      job->result->stop_reason = "cancelled";
      running->erase(running->begin() + i);
      leave(job);
    } else {
      ++i;
    }
  }
  if (running->empty()) return;
  // The decode rows, then one chunk of one prompt, cut where Eval cuts it
  // (every -b tokens from the prompt's start): the same runs as alone.
  rows_.clear();
  row_job_.clear();
  for (Job* job : *running) {
    if (job->next < 0) continue;
    rows_.push_back({job->seq, job->next, true});
    row_job_.push_back(job);
  }
  // The prompt with the least left goes first: a short request waits for at
  // most a chunk of a long one, not for all of it.
  Job* prefill = nullptr;
  for (Job* job : *running) {
    const size_t left = job->request->prompt.size() - job->prefilled;
    if (job->next >= 0 || left == 0) continue;
    if (!prefill || left < prefill->request->prompt.size() - prefill->prefilled) prefill = job;
  }
  if (prefill) {
    const int n_batch = engine_->max_batch_rows() - engine_->n_seq() + 1;
    const std::vector<int32_t>& prompt = prefill->request->prompt;
    const size_t end = std::min(prompt.size(), prefill->prefilled + n_batch);
    for (size_t i = prefill->prefilled; i < end; ++i) {
      const bool last = i + 1 == prompt.size();
      rows_.push_back({prefill->seq, prompt[i], last});
      if (last) row_job_.push_back(prefill);
    }
    prefill->prefilled = end;
  }
  const Status s = engine_->EvalBatch(rows_.data(), static_cast<int>(rows_.size()));
  // The worker failures this step saw (copied only when they change).
  if (engine_->shard_failures() != health_.failures ||
      engine_->shard_recoveries() != health_.recoveries) {
    std::lock_guard<std::mutex> lock(health_mu_);
    health_.failures = engine_->shard_failures();
    health_.recoveries = engine_->shard_recoveries();
    health_.error = engine_->shard_error();
  }
  // Each job asking: its logits, in row order.
  std::vector<Job*>& done = done_;
  done.clear();
  for (size_t k = 0; k < row_job_.size(); ++k) {
    Job* job = row_job_[k];
    auto push = [job](int32_t id, const std::string& text) {
      {
        std::lock_guard<std::mutex> lock(job->mu);
        job->pieces.emplace_back(id, text);
      }
      job->cv.notify_all();
      return !job->cancelled.load();
    };
    const bool prompt_done = job->next < 0;
    if (!s.ok()) {
      job->gen->Fail(s);
    } else {
      if (prompt_done) {
        job->gen->PromptDone(NowSeconds() - job->prompt_start);
      } else {
        job->gen->Evaluated(0, 0);  // (the step's FFN counts are the batch's, not the job's)
      }
      int32_t next = -1;
      if (job->gen->Next(engine_->batch_logits(static_cast<int>(k)), engine_->seq_n_past(job->seq),
                         push, &next)) {
        job->next = next;
        continue;
      }
    }
    job->gen->Finish(push);
    done.push_back(job);
  }
  if (!s.ok()) {  // a failed step ends every job in it (a prefill without logits too)
    for (Job* job : *running) {
      if (std::find(done.begin(), done.end(), job) == done.end()) {
        job->gen->Fail(s);
        job->gen->Finish(nullptr);
        done.push_back(job);
      }
    }
  }
  for (Job* job : done) {
    running->erase(std::find(running->begin(), running->end(), job));
    leave(job);
  }
}

}  // namespace pi
