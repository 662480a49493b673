#include "coordinator/serve/request_runner.h"

#include <cstdio>
#include <utility>
#include <vector>

#include "common/base/progress.h"
#include "coordinator/serve/batch_scheduler.h"
#include "coordinator/serve/serial_scheduler.h"

namespace pi {

RequestRunner::RequestRunner(Engine* engine, const Tokenizer* tok, int max_queue,
                             std::string log_prefix, StreamLimits limits,
                             int64_t prompt_store_bytes, Drafter* drafter)
    : engine_(engine),
      tok_(tok),
      admission_(max_queue, engine->n_seq()),
      log_prefix_(std::move(log_prefix)),
      limits_(limits) {
  SchedulerHooks hooks;
  hooks.started = [this](RequestJob* job) { Started(job); };
  hooks.token = [this](RequestJob* job, int32_t id, const std::string& text) {
    return Token(job, id, text);
  };
  hooks.finished = [this](RequestJob* job) { Finished(job); };
  if (prompt_store_bytes > 0) {
    store_ = std::make_unique<PromptStore>(prompt_store_bytes);
  }
  if (engine->n_seq() > 1) {
    scheduler_ = std::make_unique<BatchScheduler>(engine, tok, std::move(hooks), store_.get());
  } else {
    scheduler_ =
        std::make_unique<SerialScheduler>(engine, tok, std::move(hooks), store_.get(), drafter);
  }
}

RequestRunner::~RequestRunner() {
  scheduler_.reset();
}

std::shared_ptr<RequestJob> RequestRunner::Submit(GenerationRequest request,
                                                  const SamplerParams& sampling, bool stream_tokens,
                                                  std::function<void()> notify) {
  const uint64_t id = next_id_++;
  if (!admission_.Enter()) {
    fprintf(stderr, "%s: request %llu refused: %d already waiting (--max-queue)\n",
            log_prefix_.c_str(), static_cast<unsigned long long>(id), admission_.max_queue());
    ++rejected_;
    return nullptr;
  }
  SamplerParams p = sampling;
  p.repeat_last_n = RepeatLastNForContext(p.repeat_last_n, engine_->n_ctx());
  auto job = std::make_shared<RequestJob>(std::move(request), p, engine_->n_vocab(),
                                          limits_.max_tokens, limits_.max_bytes);
  job->id = id;
  job->stream_tokens = stream_tokens;
  job->entered_at = NowSeconds();
  job->stream.SetNotify(std::move(notify));
  scheduler_->Submit(job);
  return job;
}

void RequestRunner::Cancel(const std::shared_ptr<RequestJob>& job, const std::string& why) {
  job->stream.Cancel(why);
  if (!job->Abandon()) return;  // running: it stops at its next token
  admission_.Leave(false);
  ++cancelled_;
  fprintf(stderr, "%s: request %llu left while waiting: %s\n", log_prefix_.c_str(),
          static_cast<unsigned long long>(job->id), why.c_str());
  job->stream.End();
}

RunOutcome RequestRunner::Outcome(const RequestJob& job) {
  RunOutcome out;
  out.id = job.id;
  if (job.state == RequestJob::kAbandoned) {
    out.kind = RunOutcome::kCancelledWaiting;
    return out;
  }
  out.result = job.result;
  out.seed = job.sampler.seed();
  out.queue_s = job.queue_s;
  out.warning = job.warning;
  return out;
}

void RequestRunner::Run(const GenerationRequest& request, SamplerParams sampling,
                        const std::function<bool()>& cancelled, const TokenCallback& on_token,
                        RunOutcome* out) {
  std::shared_ptr<RequestJob> job = Submit(request, sampling, on_token != nullptr, nullptr);
  if (!job) {
    *out = RunOutcome();
    out->kind = RunOutcome::kQueueFull;
    return;
  }
  std::vector<RequestStream::Token> got;
  bool gave_up = false;
  while (true) {
    job->stream.Wait(0.02);
    const bool ended = job->stream.Take(&got);
    for (const RequestStream::Token& t : got) {
      if (!gave_up && !on_token(t.id, t.text)) {
        gave_up = true;
        Cancel(job, "the client stopped taking tokens");
      }
    }
    if (ended) break;
    if (!gave_up && cancelled && cancelled()) {
      gave_up = true;
      Cancel(job, "the client went away");
    }
  }
  *out = Outcome(*job);
}

void RequestRunner::Started(RequestJob* job) {
  admission_.Started();
  job->queue_s = NowSeconds() - job->entered_at;
  job->failures_before = engine_->shard_failures();
  job->device_failures_before = engine_->device_failures();
}

bool RequestRunner::Token(RequestJob* job, int32_t id, const std::string& text) {
  if (id >= 0) {  // (-1: the text held back for a stop string, flushed at the end)
    const double now = NowSeconds();
    if (job->last_token_at == 0) {
      first_token_s_.Observe(now - job->entered_at);
      job->first_token_at = now;
    } else {
      token_s_.Observe(now - job->last_token_at);
    }
    job->last_token_at = now;
  }
  if (!job->stream_tokens) return !job->stream.cancelled();
  const bool has_logprob = id >= 0 && job->request.logprobs >= 0;
  const int logprob = has_logprob ? static_cast<int>(job->result.logprobs.size()) - 1 : -1;
  TokenTimes times;
  const GenerationResult& g = job->result;
  times.prompt_n = static_cast<int>(job->request.prompt.size()) - g.n_cached;
  times.prompt_ms = g.prompt_s * 1e3;
  times.predicted_n = static_cast<int>(g.ids.size());  // (this token's pushed before it is told)
  times.predicted_ms = (job->last_token_at - job->first_token_at) * 1e3;
  return job->stream.Push(id, text, logprob, times);
}

void RequestRunner::Finished(RequestJob* job) {
  GenerationResult& g = job->result;
  const std::string stop = g.stop_reason;
  ++(stop == "cancelled" ? cancelled_ : stop == "error" ? errors_ : completed_);
  // Evaluated: what a sequence's cache held is not counted (as llama-server's).
  prompt_tokens_ += static_cast<int64_t>(PromptTokens(job->request)) - g.n_cached;
  generated_tokens_ += static_cast<int64_t>(g.ids.size());
  if (g.eval_s > 0) last_tokens_per_s_milli_ = static_cast<int64_t>(1000.0 * g.n_eval / g.eval_s);
  // A lost gpu_worker counts as a worker failure too.
  const WorkerHealth h = ReadWorkerHealth(*engine_);
  shard_failures_ = h.failures + h.device_failures;
  shard_recoveries_ = h.recoveries + h.device_recoveries;
  // A worker lost during the request, or still down from before.
  if (h.failures > job->failures_before || h.failures > h.recoveries) {
    job->warning = h.error + " (its neurons ran in the coordinator: same tokens, slower)";
  }
  if (h.device_failures > job->device_failures_before && g.error.empty()) {
    if (!job->warning.empty()) job->warning += "; ";
    job->warning += h.device_error +
                    " (restarted, its KV cache rebuilt from the sequence's tokens: same tokens, "
                    "slower)";
  }
  admission_.Leave(true);
  if (job->request.slot_op != SlotOp::kNone) {
    fprintf(stderr, "%s: request %llu: slot %d %s: %lld positions, %lld bytes, %.1f ms%s%s\n",
            log_prefix_.c_str(), static_cast<unsigned long long>(job->id), job->request.seq,
            SlotOpName(job->request.slot_op), static_cast<long long>(g.slot_tokens),
            static_cast<long long>(g.slot_bytes), g.prompt_s * 1e3, g.error.empty() ? "" : ": ",
            g.error.c_str());
    job->stream.End();
    return;
  }
  const std::string why = stop == "cancelled" ? job->stream.cancel_reason() : "";
  fprintf(
      stderr,
      "%s: request %llu: %zu prompt + %zu tokens, %.1f tokens/s, queued %.0f ms, %s%s%s%s%s%s%s\n",
      log_prefix_.c_str(), static_cast<unsigned long long>(job->id), PromptTokens(job->request),
      g.ids.size(), g.eval_s > 0 ? g.n_eval / g.eval_s : 0.0, job->queue_s * 1e3,
      job->request.pooling != Pooling::kNone && stop == "length" ? "embedded" : g.stop_reason,
      g.error.empty() ? "" : ": ", g.error.c_str(), why.empty() ? "" : ": ", why.c_str(),
      job->warning.empty() ? "" : "; worker lost: ", job->warning.c_str());
  job->stream.End();
}
void RequestRunner::RenderMetrics(std::string* out) const {
  AppendMetricHeader("pi_requests_total", "counter", "Requests by outcome.", out);
  const std::pair<const char*, int64_t> outcomes[] = {{"completed", completed_},
                                                      {"cancelled", cancelled_},
                                                      {"error", errors_},
                                                      {"rejected", rejected_}};
  for (const auto& [outcome, n] : outcomes) {
    std::string l;
    AppendLabel("outcome", outcome, &l);
    AppendSample("pi_requests_total", l, static_cast<double>(n), out);
  }
  AppendMetricHeader("pi_requests_running", "gauge", "Requests generating now.", out);
  AppendSample("pi_requests_running", "", admission_.running(), out);
  AppendMetricHeader("pi_requests_queued", "gauge", "Requests waiting for the engine.", out);
  AppendSample("pi_requests_queued", "", admission_.queued(), out);
  AppendMetricHeader("pi_queue_limit", "gauge", "Requests that may wait (--max-queue).", out);
  AppendSample("pi_queue_limit", "", admission_.max_queue(), out);
  AppendMetricHeader("pi_prompt_tokens_total", "counter", "Prompt tokens evaluated.", out);
  AppendSample("pi_prompt_tokens_total", "", static_cast<double>(prompt_tokens_), out);
  AppendMetricHeader("pi_prompt_store_bytes", "gauge",
                     "Bytes of the prompts kept after their sequences let them go (--cache-ram).",
                     out);
  AppendSample("pi_prompt_store_bytes", "", store_ ? static_cast<double>(store_->bytes()) : 0.0,
               out);
  AppendMetricHeader("pi_prompt_store_prompts", "gauge", "Prompts in the prompt store.", out);
  AppendSample("pi_prompt_store_prompts", "", store_ ? static_cast<double>(store_->size()) : 0.0,
               out);
  AppendMetricHeader("pi_generated_tokens_total", "counter", "Tokens generated.", out);
  AppendSample("pi_generated_tokens_total", "", static_cast<double>(generated_tokens_), out);
  AppendMetricHeader("pi_last_request_tokens_per_second", "gauge",
                     "Decode speed of the last request that finished.", out);
  AppendSample("pi_last_request_tokens_per_second", "", last_tokens_per_s_milli_ * 1e-3, out);
  AppendMetricHeader("pi_time_to_first_token_seconds", "histogram",
                     "From a request's arrival (queueing included) to its first token.", out);
  first_token_s_.Render("pi_time_to_first_token_seconds", "", out);
  AppendMetricHeader("pi_token_seconds", "histogram", "Between a request's streamed tokens.", out);
  token_s_.Render("pi_token_seconds", "", out);
  AppendMetricHeader("pi_worker_failures_total", "counter",
                     "Workers lost (their work ran here or was replayed).", out);
  AppendSample("pi_worker_failures_total", "", static_cast<double>(shard_failures_), out);
  AppendMetricHeader("pi_worker_recoveries_total", "counter", "Lost workers brought back.", out);
  AppendSample("pi_worker_recoveries_total", "", static_cast<double>(shard_recoveries_), out);
  const Engine& e = *engine_;
  AppendMetricHeader("pi_predictor_threshold", "gauge",
                     "The predictor's score threshold in use (0 without --sparse predictor).", out);
  AppendSample("pi_predictor_threshold", "", e.predictor_threshold(), out);
  AppendMetricHeader("pi_ffn_neurons_computed_total", "counter",
                     "FFN neurons computed per layer: side hot (where the plan put them in VRAM) "
                     "or cold (the CPU's); layer \"device\": a device's hot neurons, its layers "
                     "together.",
                     out);
  for (int il = -1; il < e.model().config.n_layer; ++il) {
    for (bool hot : {false, true}) {
      const int64_t n = e.ffn_computed(il, hot);
      if (il < 0 && !hot) continue;
      if (il < 0 && n == 0) continue;
      std::string l;
      AppendLabel("layer", il < 0 ? "device" : std::to_string(il), &l);
      AppendLabel("side", hot ? "hot" : "cold", &l);
      AppendSample("pi_ffn_neurons_computed_total", l, static_cast<double>(n), out);
    }
  }
}

}  // namespace pi
