// RequestJob: one admitted request, shared by the front end that submitted
// it (which takes its tokens from `stream` and reads `result` once the
// stream has ended) and the scheduler that runs it on the engine. Its state
// moves once from pending to running or to abandoned (its client left while
// it waited), so a scheduler never starts a request its client gave up on
// and the place it held in line is freed at once.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "common/text/sampler.h"
#include "coordinator/engine/generation.h"
#include "coordinator/serve/request_stream.h"

namespace pi {

struct RequestJob {
  enum State { kPending, kRunning, kAbandoned };

  RequestJob(GenerationRequest r, const SamplerParams& sampling, int n_vocab, size_t max_tokens,
             size_t max_bytes)
      : request(std::move(r)), sampler(sampling, n_vocab), stream(max_tokens, max_bytes) {}

  // Running: pending -> running, false when the client left first.
  bool Start() {
    int expected = kPending;
    return state.compare_exchange_strong(expected, kRunning);
  }
  // Leaving the line before its turn: pending -> abandoned, false once running.
  bool Abandon() {
    int expected = kPending;
    return state.compare_exchange_strong(expected, kAbandoned);
  }

  uint64_t id = 0;            // its number in the server's log
  bool stream_tokens = true;  // false: only the end goes to the stream (a whole reply)
  GenerationRequest request;
  Sampler sampler;
  RequestStream stream;
  std::atomic<int> state{kPending};
  // Written by the scheduler's thread before stream.End(); read after it.
  GenerationResult result;
  double entered_at = 0;      // NowSeconds() at submission
  double queue_s = 0;         // waiting for the engine
  double last_token_at = 0;   // the last streamed token (the latency histogram's)
  double first_token_at = 0;  // the first (timings_per_token's predicted_ms counts from it)
  int64_t failures_before = 0, device_failures_before = 0;
  std::string warning;  // a worker lost during the run, or still down
};

// What a scheduler tells its owner of a job, on the scheduler's thread:
// started (it runs now), each token (false stops it), finished (the result
// is final; the owner ends the stream). Schedulers: scheduler.h.
struct SchedulerHooks {
  std::function<void(RequestJob*)> started;
  std::function<bool(RequestJob*, int32_t id, const std::string& text)> token;
  std::function<void(RequestJob*)> finished;
};

// The engine's worker failures and recoveries, and the last failure's
// message, as a scheduler last saw them.
struct WorkerHealth {
  int64_t failures = 0, recoveries = 0;
  std::string error;
  int64_t device_failures = 0, device_recoveries = 0;
  std::string device_error;
};

}  // namespace pi
