// RequestRunner: the requests every server front end takes (gRPC for
// pi-client, HTTP for OpenAI-style clients) run on the one engine in
// arrival order: one at a time, or with an engine of several sequences
// (-np) that many at once, batched step by step (batch_scheduler.h).
// Admission: at most max_queue wait behind the running ones; more are
// refused at once. The engine runs on a scheduler's thread and never waits
// on a client: each request's tokens go to its bounded stream
// (request_stream.h), which its front end drains; a client that does not
// drain it is cancelled and its sequence freed at the next step. A run logs
// one line and says whether a worker was lost meanwhile (the tokens are the
// same; only slower).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "common/base/metrics.h"
#include "common/text/sampler.h"
#include "common/text/tokenizer.h"
#include "coordinator/engine/engine.h"
#include "coordinator/engine/generation.h"
#include "coordinator/engine/prompt_store.h"
#include "coordinator/serve/admission.h"
#include "coordinator/serve/request_job.h"
#include "coordinator/serve/scheduler.h"
#include "coordinator/serve/work_gate.h"

namespace pi {

// How much of a request's output may wait for its client: tokens, and
// bytes of their text. One more cancels the request.
struct StreamLimits {
  size_t max_tokens = 1024;
  size_t max_bytes = 256 << 10;
};

struct RunOutcome {
  enum Kind { kDone, kQueueFull, kCancelledWaiting };
  Kind kind = kDone;
  GenerationResult result;  // kDone (stop_reason "cancelled" when the client went away)
  uint32_t seed = 0;        // the sampler's seed (a random one resolved)
  double queue_s = 0;       // waiting for the engine
  std::string warning;      // a worker lost during the run, or still down
  uint64_t id = 0;          // the request's number in this server's log
};

class RequestRunner {
 public:
  // engine and tok must outlive the runner; log lines start with log_prefix.
  // prompt_store_bytes: the cap of the prompts kept after their sequences
  // let them go (prompt_store.h; 0: none kept). `drafter` (one sequence
  // only; may be null): decode runs speculatively (speculative.h).
  RequestRunner(Engine* engine, const Tokenizer* tok, int max_queue, std::string log_prefix,
                StreamLimits limits = StreamLimits(), int64_t prompt_store_bytes = 0,
                Drafter* drafter = nullptr);
  ~RequestRunner();  // running requests end as cancelled

  // Puts a request (checked already: generate_request.h) in line; null when
  // max_queue already wait (counted as rejected). With `stream_tokens` the
  // tokens go to job->stream as they come, else only its end. `notify` (may
  // be empty) is the stream's: called on the engine's thread when tokens or
  // the end are there to take.
  std::shared_ptr<RequestJob> Submit(GenerationRequest request, const SamplerParams& sampling,
                                     bool stream_tokens, std::function<void()> notify);
  // The client left (or stopped reading): a waiting job leaves the line now
  // (its stream ends), a running one stops at its next token.
  void Cancel(const std::shared_ptr<RequestJob>& job, const std::string& why);
  // What a finished job came to (its stream has ended).
  static RunOutcome Outcome(const RequestJob& job);

  // Submit, then tell on_token of each token on this thread until the end
  // (returning false, or cancelled() — polled — cancels the request).
  void Run(const GenerationRequest& request, SamplerParams sampling,
           const std::function<bool()>& cancelled, const TokenCallback& on_token, RunOutcome* out);

  const Engine& engine() const { return *engine_; }
  const Tokenizer& tokenizer() const { return *tok_; }
  // Tokenizing a client's text (a prompt, /tokenize): a few at a time, for
  // every front end together.
  WorkGate& tokenize_gate() const { return tokenize_gate_; }
  int running() const { return admission_.running(); }
  bool seq_busy(int seq) const { return scheduler_->seq_busy(seq); }
  int queued() const { return admission_.queued(); }
  int max_queue() const { return admission_.max_queue(); }
  // The engine's worker failure counts as of the last run's end, and
  // whether a worker is down (its neurons running in the coordinator).
  int64_t shard_failures() const { return shard_failures_; }
  int64_t shard_recoveries() const { return shard_recoveries_; }
  bool degraded() const { return shard_failures_ > shard_recoveries_; }

  // Appends the requests' and the engine's metrics in Prometheus's text
  // format (/metrics): requests by outcome, queue depth and running ones,
  // prompt and generated tokens, the last request's tokens/s, time to first
  // token and per-token latency histograms, worker failures and
  // recoveries, the FFN neurons computed per layer on each side, the
  // predictor threshold, the prompt store's bytes and prompts. Safe while a
  // request runs.
  void RenderMetrics(std::string* out) const;

 private:
  // The scheduler's hooks, on its thread (which alone touches the engine).
  void Started(RequestJob* job);
  bool Token(RequestJob* job, int32_t id, const std::string& text);
  void Finished(RequestJob* job);

  Engine* engine_;
  const Tokenizer* tok_;
  Admission admission_;
  const std::string log_prefix_;
  const StreamLimits limits_;
  std::atomic<uint64_t> next_id_{1};
  std::atomic<int64_t> shard_failures_{0}, shard_recoveries_{0};
  // Requests by outcome: completed (eos, length, stop, context), cancelled
  // (the client went away, running or waiting), error, rejected (queue full).
  std::atomic<int64_t> completed_{0}, cancelled_{0}, errors_{0}, rejected_{0};
  std::atomic<int64_t> prompt_tokens_{0}, generated_tokens_{0};
  std::atomic<int64_t> last_tokens_per_s_milli_{0};
  Histogram first_token_s_{Histogram::FirstTokenSeconds()};  // from arrival, queue included
  Histogram token_s_{Histogram::TokenSeconds()};             // between streamed tokens
  mutable WorkGate tokenize_gate_{2};
  std::unique_ptr<PromptStore> store_;    // null: none
  std::unique_ptr<Scheduler> scheduler_;  // last: its thread stops first
};

}  // namespace pi
