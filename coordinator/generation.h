// Generate: one request's generation on an engine — the prompt evaluated,
// then sample, stream, evaluate, until -n tokens, end of text, a stop
// string, a full context, a cancel or an error. pi-run drives it today;
// pi-launch and the servers will, so a request's output and its stop reason
// mean the same everywhere.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/sampler.h"
#include "common/tokenizer.h"
#include "coordinator/engine.h"

namespace pi {

struct GenerationRequest {
  std::vector<int32_t> prompt;  // token ids, BOS included when the tokenizer adds one
  int n_predict = -1;           // -1: until end of text or a full context
  bool ignore_eos = false;
  std::vector<std::string> stops;  // non-empty strings; the text ends before the first match
};

struct GenerationResult {
  std::vector<int32_t> ids;  // generated tokens (a stop string's tokens included)
  std::string text;          // the generated text, cut before a matched stop string
  int n_eval = 0;            // decode steps run (the last token sampled is not evaluated)
  double prompt_s = 0, eval_s = 0, sample_s = 0;
  // FFN neurons the decode steps computed, and of them the hot side's
  // (Engine::last_ffn_neurons, last_ffn_hot_fired).
  int64_t ffn_neurons = 0, ffn_hot = 0;
  // length | eos | context | stop | cancelled | error
  const char* stop_reason = "length";
  std::string error;  // for "error"
};

// Told of each generated token and the text that became whole UTF-8 with it
// (possibly empty; text that may begin a stop string is held back, and a
// stop string is never sent, so the pieces add up to the result's text);
// returning false cancels the request. Called once more at the end, with
// id -1, with what is left.
using TokenCallback = std::function<bool(int32_t id, const std::string& text)>;

// The engine must be fresh or Reset(); the sampler's history gets the
// prompt. Allocates only the result's growth.
void Generate(Engine* engine, const Tokenizer& tok, Sampler* sampler,
              const GenerationRequest& request, const TokenCallback& on_token,
              GenerationResult* result);

// The position of the first stop string in `text` that ends within its last
// `fresh` bytes, or npos (exposed for tests).
size_t FindStopString(const std::string& text, size_t fresh, const std::vector<std::string>& stops);
// The length of the longest end of `text` that is the start (not the whole)
// of a stop string: what a stream holds back until the next tokens tell.
size_t StopPrefixAtEnd(const std::string& text, const std::vector<std::string>& stops);

}  // namespace pi
