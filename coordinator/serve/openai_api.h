// The OpenAI-style completion API's bodies (POST /v1/completions and
// /v1/chat/completions, as llama-server serves them): the request JSON
// checked and turned into the Coordinator's GenerateRequest (so one
// validator, generate_request.h, checks both front ends; openai_request.cpp),
// and the response, stream chunk and error JSON (openai_api.cpp). Parsing
// uses nlohmann::json; every error names the field. A field the endpoint
// does not implement is refused by name, never skipped (docs/http-api.md
// lists them). Fuzzed by http_body_fuzz.
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "common/base/status.h"
#include "common/text/chat_template.h"
#include "common/text/chat_tools.h"
#include "common/text/infill.h"
#include "common/text/tokenizer.h"
#include "coordinator/engine/generation.h"
#include "coordinator/serve/mixed_prompt.h"
#include "coordinator/serve/responses_api.h"
#include "proto/pi.pb.h"

namespace pi {

// Choices one completion request may ask for: n for each prompt, together.
inline constexpr size_t kMaxChoices = 16;

inline constexpr size_t kMaxResponseFields = 64;

struct CompletionRequest {
  v1::GenerateRequest request;  // prompt or ids, n_predict, stops, sampling, logprobs
  // Completions: the prompts after the first (request's), each run as it
  // would be alone; choices go prompt by prompt, n each.
  std::vector<v1::GenerateRequest> more_prompts;
  // Prompt p's pieces where it mixes token ids and text (else empty): made
  // its prompt_ids by the server, which has the tokenizer.
  std::vector<MixedPrompt> mixed_prompts;
  int n = 1;  // choices per prompt
  bool stream = false;
  bool include_usage = false;      // stream_options: a last chunk with the usage alone
  bool echo = false;               // completions: the reply's text starts with the prompt's
  int n_probs = 0;                 // native: the alternatives listed beside each token
  bool return_tokens = false;      // native: each chunk's token ids
  bool timings_per_token = false;  // streamed: each chunk with the timings so far
  // native: the reply holds these fields alone ("a/b" a nested one), as named
  std::vector<std::string> response_fields;  // at most kMaxResponseFields
  // A chat's messages in the prompt text: tokenized as text, never as
  // control tokens (ParseGenerateRequest's `literal`).
  std::vector<TextSpan> content_spans;
  // Chat with tools offered: the reply's text is read for calls (chat_tools.h).
  bool tools = false;
  ToolSyntax tool_syntax = ToolSyntax::kGeneric;
  // Fill-in-the-middle (/infill, a completion's suffix): the prompt is
  // InfillPrompt's tokens of this input (infill.h), made with the tokenizer.
  bool infill = false;
  InfillInput infill_input;
  bool infill_truncated = false;  // the prompt lost text to fit the context
  // A /v1/responses request (read as the chat body it was rewritten to): the
  // reply is a response object echoing these.
  bool responses = false;
  ResponsesEcho responses_echo;
};

// Reads a /v1/completions body: prompt (a string, token ids, or an array
// of strings or of token-id arrays: several prompts), max_tokens (or llama.cpp's n_predict; default
// -1: until end of text), temperature, top_p, top_k, min_p, repeat_penalty, repeat_last_n,
// presence_penalty, frequency_penalty, logit_bias, seed, stop (a string or strings), stream,
// stream_options, echo, logprobs, n (choices per prompt; at most kMaxChoices in all), user,
// cache_prompt, ignore_eos, grammar and json_schema (output_constraint.h), model (must be
// `model_id` when given: else *http_status 404). Any other field is refused by name. On an error,
// *http_status is 400 (or 404) and the message names the field. any_model: take any model name
// (llama-server's way), serving this one.
Status ParseCompletionRequest(const std::string& body, const std::string& model_id,
                              CompletionRequest* out, int* http_status, bool any_model = false);

// Reads a /v1/chat/completions body: messages (an array of {role, content}:
// system, developer (as system), user, assistant; content a string, text
// parts, or null in an assistant's), rendered with `chat_template` into the
// prompt (the template's special tokens parsed, the messages' contents as
// text: content_spans), max_completion_tokens, response_format
// (output_constraint.h),
// logprobs and top_logprobs, and the completion's other fields. A null
// template: this model has none (400 saying to choose one).
Status ParseChatRequest(const std::string& body, const std::string& model_id,
                        const ChatTemplate* chat_template, CompletionRequest* out, int* http_status,
                        bool any_model = false);

// Reads llama-server's native POST /completion body: prompt, n_predict (or
// max_tokens), the sampling fields, stop, stream, ignore_eos, logit_bias,
// n_probs (0 to 20), return_tokens, cache_prompt, model (as above). Any
// other field is refused by name.
Status ParseNativeCompletionRequest(const std::string& body, const std::string& model_id,
                                    CompletionRequest* out, int* http_status,
                                    bool any_model = false);

// A request's "model": one served here (model_id; any with any_model),
// else an error with *http_status 404.
Status CheckRequestModel(const std::string& requested, const std::string& model_id, bool any_model,
                         int* http_status);

// Reads llama-server's POST /infill body: input_prefix, input_suffix,
// input_extra ([{"filename", "text"}], at most kMaxInfillFiles), prompt
// (optional: text after the prefix), and the native completion's fields.
Status ParseInfillRequest(const std::string& body, const std::string& model_id,
                          CompletionRequest* out, int* http_status, bool any_model = false);
inline constexpr size_t kMaxInfillFiles = 256;

// The messages of a chat body rendered with `chat_template` into *prompt
// (llama-server's /apply-template): the same checks as ParseChatRequest's.
Status RenderChatMessages(const std::string& body, const ChatTemplate* chat_template,
                          std::string* prompt);

// OpenAI's finish_reason for a generation's stop reason: "length" (the
// limit or the context) or "stop" (end of text, a stop string).
const char* FinishReason(const std::string& stop_reason);
// Whether the reply ended at its token cap or the context (finish_reason
// "length"): maybe mid-word, or mid tool call.
bool CutShort(const std::string& stop_reason);

// What a finished reply took, as llama-server's "timings" (prompt_n,
// prompt_ms, predicted_n, predicted_ms, predicted_per_second) plus the FFN
// neurons its decode steps computed and how many of them on the hot side
// (where the plan put them in VRAM: the gpu worker).
struct ReplyTimings {
  int prompt_n = 0;
  double prompt_ms = 0;
  int predicted_n = 0;  // tokens sampled (SampledTokens)
  double predicted_ms = 0;
  int64_t ffn_neurons = 0, ffn_hot = 0;
  bool has_ffn = true;  // false: a stream's timings so far (no FFN counts yet)
};

// llama-server's "timings" object: prompt_n, prompt_ms, prompt_per_token_ms,
// prompt_per_second, predicted_n, predicted_ms, predicted_per_token_ms,
// predicted_per_second; and pi's ffn_neurons, ffn_hot_neurons.
nlohmann::json TimingsJson(const ReplyTimings& t);

struct CompletionInfo {
  std::string id;  // "cmpl-<n>"
  int choice = 0;  // the choice's index (several: n, or several prompts)
  // A stream's last chunk of the choice carries the usage (one choice; with
  // several the usage is the whole request's, after them all).
  bool last_chunk_usage = true;
  int64_t created = 0;
  std::string model;
  // Set: the whole response and the last chunk carry "timings".
  const ReplyTimings* timings = nullptr;
  // Set: the whole response (or a chunk) carries these tokens'
  // log-probabilities (the request asked: logprobs), spelled by `tok`; the
  // first token's text starts at byte logprob_offset of the reply.
  const std::vector<TokenLogprob>* logprobs = nullptr;
  const Tokenizer* tok = nullptr;
  size_t logprob_offset = 0;
  // The backend's configuration (OpenAI's system_fingerprint); "" leaves it out.
  std::string system_fingerprint;
};

// The whole response of a non-streamed chat completion, and a stream chunk:
// the first carries the role, the others content deltas, the last
// finish_reason and usage.
std::string ChatCompletionJson(const CompletionInfo& info, const std::string& text,
                               const char* finish_reason, int prompt_tokens, int completion_tokens);
std::string ChatChunkJson(const CompletionInfo& info, bool first, const std::string& text,
                          const char* finish_reason, int prompt_tokens, int completion_tokens);

// A chat reply with tool calls: the message's content (null when empty)
// and its tool_calls, finish_reason `finish` ("tool_calls"; "length" when
// the token cap cut the reply after them); and a stream chunk of call
// `index` (OpenAI's delta: id, type, function name and arguments).
std::string ChatToolsCompletionJson(const CompletionInfo& info, const std::string& content,
                                    const std::vector<ToolCall>& calls, const char* finish,
                                    int prompt_tokens, int completion_tokens);
std::string ChatToolCallChunkJson(const CompletionInfo& info, int index, const ToolCall& call);

// The whole response of a non-streamed completion.
std::string CompletionJson(const CompletionInfo& info, const std::string& text,
                           const char* finish_reason, int prompt_tokens, int completion_tokens);
// One server-sent event's JSON: a text delta (finish_reason null), or the
// last one with finish_reason and usage.
std::string CompletionChunkJson(const CompletionInfo& info, const std::string& text,
                                const char* finish_reason, int prompt_tokens,
                                int completion_tokens);
// stream_options.include_usage's last chunk: no choices, the usage.
std::string UsageChunkJson(const CompletionInfo& info, bool chat, int prompt_tokens,
                           int completion_tokens);
// OpenAI's error shape: {"error": {"code", "message", "type"}}.
std::string ErrorJson(int http_status, const std::string& message);

}  // namespace pi
