#include "coordinator/request_runner.h"

#include <cstdio>
#include <utility>

#include "common/progress.h"

namespace pi {

RequestRunner::RequestRunner(Engine* engine, const Tokenizer* tok, int max_queue,
                             std::string log_prefix)
    : engine_(engine),
      tok_(tok),
      admission_(max_queue, engine->n_seq()),
      log_prefix_(std::move(log_prefix)) {
  if (engine->n_seq() > 1) scheduler_ = std::make_unique<BatchScheduler>(engine, tok);
}

void RequestRunner::Run(const GenerationRequest& request, SamplerParams sampling,
                        const std::function<bool()>& cancelled, const TokenCallback& on_token,
                        RunOutcome* out) {
  *out = RunOutcome();
  out->id = next_id_++;
  uint64_t ticket = 0;
  if (!admission_.Enter(&ticket)) {
    fprintf(stderr, "%s: request %llu refused: %d already waiting (--max-queue)\n",
            log_prefix_.c_str(), static_cast<unsigned long long>(out->id), admission_.max_queue());
    out->kind = RunOutcome::kQueueFull;
    ++rejected_;
    return;
  }
  const double t_enter = NowSeconds();
  if (!admission_.WaitTurn(ticket, cancelled)) {
    out->kind = RunOutcome::kCancelledWaiting;
    ++cancelled_;
    return;
  }
  out->queue_s = NowSeconds() - t_enter;
  Engine* engine = engine_;
  sampling.repeat_last_n = RepeatLastNForContext(sampling.repeat_last_n, engine->n_ctx());
  Sampler sampler(sampling, engine->n_vocab());
  out->seed = sampler.seed();
  // The engine's worker failures: its own counters, or with the batch
  // scheduler (whose thread alone touches the engine) its snapshot.
  auto health = [&] {
    if (scheduler_) return scheduler_->worker_health();
    return BatchScheduler::WorkerHealth{engine->shard_failures(), engine->shard_recoveries(),
                                        engine->shard_error()};
  };
  const int64_t failures_before = health().failures;
  const int64_t device_failures_before = scheduler_ ? 0 : engine->device_failures();
  GenerationResult& g = out->result;
  double last_token_at = 0;
  const TokenCallback counted = [&](int32_t token, const std::string& text) {
    if (token >= 0) {  // (-1: the text held back for a stop string, flushed at the end)
      const double now = NowSeconds();
      if (last_token_at == 0) {
        first_token_s_.Observe(now - t_enter);
      } else {
        token_s_.Observe(now - last_token_at);
      }
      last_token_at = now;
    }
    return !(cancelled && cancelled()) && on_token(token, text);
  };
  if (scheduler_) {
    scheduler_->Run(request, &sampler, cancelled, counted, &g);
  } else {
    engine->Reset();
    Generate(engine, *tok_, &sampler, request, counted, &g);
  }
  const std::string stop = g.stop_reason;
  ++(stop == "cancelled" ? cancelled_ : stop == "error" ? errors_ : completed_);
  prompt_tokens_ += static_cast<int64_t>(request.prompt.size());
  generated_tokens_ += static_cast<int64_t>(g.ids.size());
  if (g.eval_s > 0) last_tokens_per_s_milli_ = static_cast<int64_t>(1000.0 * g.n_eval / g.eval_s);
  // A lost gpu_worker counts as a worker failure too (no device with -np).
  const BatchScheduler::WorkerHealth h = health();
  const int64_t device_failures = scheduler_ ? 0 : engine->device_failures();
  shard_failures_ = h.failures + device_failures;
  shard_recoveries_ = h.recoveries + (scheduler_ ? 0 : engine->device_recoveries());
  // A worker lost during the request, or still down from before.
  if (h.failures > failures_before || h.failures > h.recoveries) {
    out->warning = h.error + " (its neurons ran in the coordinator: same tokens, slower)";
  }
  if (device_failures > device_failures_before && g.error.empty()) {
    if (!out->warning.empty()) out->warning += "; ";
    out->warning += engine->device_error() +
                    " (restarted, its KV cache rebuilt from the sequence's tokens: same tokens, "
                    "slower)";
  }
  admission_.Leave(ticket);
  fprintf(stderr,
          "%s: request %llu: %zu prompt + %zu tokens, %.1f tokens/s, queued %.0f ms, %s%s%s%s%s\n",
          log_prefix_.c_str(), static_cast<unsigned long long>(out->id), request.prompt.size(),
          g.ids.size(), g.eval_s > 0 ? g.n_eval / g.eval_s : 0.0, out->queue_s * 1e3, g.stop_reason,
          g.error.empty() ? "" : ": ", g.error.c_str(),
          out->warning.empty() ? "" : "; worker lost: ", out->warning.c_str());
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
