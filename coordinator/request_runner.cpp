#include "coordinator/request_runner.h"

#include <cstdio>
#include <utility>

#include "common/progress.h"

namespace pi {

RequestRunner::RequestRunner(Engine* engine, const Tokenizer* tok, int max_queue,
                             std::string log_prefix)
    : engine_(engine), tok_(tok), admission_(max_queue), log_prefix_(std::move(log_prefix)) {}

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
    return;
  }
  const double t_enter = NowSeconds();
  if (!admission_.WaitTurn(ticket, cancelled)) {
    out->kind = RunOutcome::kCancelledWaiting;
    return;
  }
  out->queue_s = NowSeconds() - t_enter;
  Engine* engine = engine_;
  engine->Reset();
  sampling.repeat_last_n = RepeatLastNForContext(sampling.repeat_last_n, engine->n_ctx());
  Sampler sampler(sampling, engine->n_vocab());
  out->seed = sampler.seed();
  const int64_t failures_before = engine->shard_failures();
  const int64_t device_failures_before = engine->device_failures();
  GenerationResult& g = out->result;
  Generate(
      engine, *tok_, &sampler, request,
      [&](int32_t token, const std::string& text) {
        return !(cancelled && cancelled()) && on_token(token, text);
      },
      &g);
  // A lost gpu_worker counts as a worker failure too.
  shard_failures_ = engine->shard_failures() + engine->device_failures();
  shard_recoveries_ = engine->shard_recoveries() + engine->device_recoveries();
  // A worker lost during the request, or still down from before.
  if (engine->shard_failures() > failures_before ||
      engine->shard_failures() > engine->shard_recoveries()) {
    out->warning =
        engine->shard_error() + " (its neurons ran in the coordinator: same tokens, slower)";
  }
  if (engine->device_failures() > device_failures_before && g.error.empty()) {
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

}  // namespace pi
