// llama-server's native completion replies (POST /completion, its
// "non-OAI-compatible" JSON), for clients written against llama.cpp's own
// API: a stream of {"content", "tokens", "stop": false, ...} chunks ended by
// one with "stop": true and the whole reply's fields (no [DONE]); a whole
// reply is that last object with the text in "content". The request is read
// by ParseNativeCompletionRequest (openai_api.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/text/sampler.h"
#include "common/text/tokenizer.h"
#include "coordinator/engine/generation.h"
#include "coordinator/serve/openai_api.h"

namespace pi {

// What the replies of one native request report besides its tokens.
struct NativeReplyInfo {
  int index = 0;  // the prompt's place among the request's (its "index")
  std::string model;
  std::string prompt;                // the prompt as the model reads it (NativePromptText)
  int n_prompt = 0;                  // its tokens (tokens_evaluated)
  bool return_tokens = false;        // "tokens": the ids of each chunk (else [])
  int n_probs = 0;                   // > 0: "completion_probabilities" of each token
  bool post_sampling_probs = false;  // ... as the draw's probabilities ("prob")
  bool prompt_truncated = false;     // an infill prompt lost text to fit (its "truncated")
  // generation_settings: what the request ran with.
  SamplerParams sampling;
  int n_predict = -1;
  std::vector<std::string> stops;
  bool ignore_eos = false;
  // A whole reply with these fields alone, each under its name ("a/b": b
  // of the object a); a name the reply lacks is left out.
  std::vector<std::string> response_fields;
};

// The prompt's tokens as llama-server shows them in "prompt": each one's
// piece, a control token (BOS) as its text ("<s> In the beginning").
std::string NativePromptText(const Tokenizer& tok, const std::vector<int32_t>& ids);

// llama-server's stop_type of a stop reason: eos, word (a stop string),
// limit (n_predict or the context), none.
const char* NativeStopType(const std::string& stop_reason);

// One streamed chunk: text (with the ids it came from), tokens_predicted so
// far; `probs` (the chunk's tokens') when n_probs asked; the timings so far
// when given (timings_per_token); the slot (sequence) it runs on.
std::string NativeChunkJson(const NativeReplyInfo& info, const std::string& text,
                            const std::vector<int32_t>& ids, int tokens_predicted,
                            const std::vector<TokenLogprob>* probs, const Tokenizer& tok,
                            const ReplyTimings* timings = nullptr, int id_slot = 0);

// The last object: "stop": true, the timings, generation_settings, stop_type
// and stopping_word; `text` and the ids and probabilities of the whole reply
// when not streamed (a stream sent them in its chunks).
std::string NativeFinalJson(const NativeReplyInfo& info, bool stream, const GenerationResult& g,
                            const std::string& text, int n_prompt, const ReplyTimings& t,
                            const Tokenizer& tok);

}  // namespace pi
