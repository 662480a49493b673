// CompletionReply: one /v1/completions or /v1/chat/completions reply built
// from its job: the whole response, or the server-sent events of a stream
// (a chunk per piece of text, the last with finish_reason and usage, then
// "data: [DONE]"). A generation that failed is an error: a 500 when nothing
// was sent yet, else an error event in OpenAI's shape and no [DONE], so a
// client never mistakes a failure for a normal end.
#pragma once

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/text/tokenizer.h"
#include "coordinator/engine/generation.h"
#include "coordinator/serve/native_api.h"
#include "coordinator/serve/openai_api.h"
#include "coordinator/serve/request_stream.h"

namespace pi {

// llama-server's timings of a finished generation: prompt_n counts the
// prompt tokens evaluated (not those its sequence's cache held),
// predicted_n the tokens sampled (usage's completion_tokens, and an end of
// text that stopped it, as llama-server counts), predicted_ms their time.
ReplyTimings TimingsOf(const GenerationResult& g, int n_prompt);

class CompletionReply {
 public:
  // `tok` spells the logprobs when the request asked for them (`logprobs`).
  CompletionReply(bool chat, CompletionInfo info, const Tokenizer* tok, bool logprobs);

  // The events for tokens just taken from the stream (pieces without text
  // send nothing; their logprobs go with the next that has text).
  void AppendTokenEvents(const std::vector<RequestStream::Token>& tokens,
                         const GenerationResult& result, std::string* out);
  // After the end: the last chunk and [DONE], or the error event.
  void AppendEndEvents(const GenerationResult& result, int n_prompt, std::string* out);
  // Whether an event went out (the stream's head with it).
  bool started() const { return started_; }
  // Text the reply's text starts with (completions' echo: the prompt's).
  void set_echo(std::string text) { echo_ = std::move(text); }
  // A stream ends with a chunk of the usage alone (stream_options).
  void set_include_usage(bool on) { include_usage_ = on; }
  // Each streamed chunk carries the timings so far (llama-server's
  // timings_per_token).
  void set_timings_per_token(bool on) { timings_per_token_ = on; }
  // One choice of several (CompletionChoices): its stream's end is the
  // choice's last chunk alone; the request's usage and [DONE] follow them all.
  void set_one_of_several() { one_of_several_ = true; }
  // Replies in llama-server's native shape (native_api.h) instead.
  void set_native(NativeReplyInfo info) { native_ = std::move(info); }
  bool native() const { return native_.has_value(); }
  // A whole chat or completions reply also carries "__verbose": the native
  // reply (native_api.h) of the same generation (llama-server's --verbose).
  void set_verbose(NativeReplyInfo info) { verbose_ = std::move(info); }
  // A chat with tools: the text is read for calls at the end (a stream
  // sends the content as it settles: SettledToolContent; each call when
  // the reply is whole).
  void set_tools(ToolSyntax syntax) { tools_ = syntax; }
  // A /v1/responses request's reply (responses_api.h): a response object,
  // or its events (the text as it settles, as with tools).
  void set_responses(ResponsesEcho echo) { responses_ = std::move(echo); }
  // An embeddings request's reply (embeddings_api.h): the list, whole;
  // native_n_embd > 0: llama-server's shape, in rows of that many.
  void set_embeddings(std::string model, bool base64, int native_n_embd = 0) {
    embeddings_model_ = std::move(model);
    embeddings_base64_ = base64;
    embeddings_native_n_embd_ = native_n_embd;
    embeddings_ = true;
  }

  // A slot action's reply (slots_api.h), whole.
  void set_slot_action(SlotOp op, int id_slot, std::string filename) {
    slot_op_ = op;
    slot_id_ = id_slot;
    slot_filename_ = std::move(filename);
  }

  // A non-streamed reply's status and body: 200 and the whole response, or
  // 500 and the error.
  int WholeResponse(const GenerationResult& result, int n_prompt, std::string* body) const;

  // One server-sent event: "data: <payload>\n\n".
  static void AppendEvent(const std::string& payload, std::string* out);

 private:
  const bool chat_;
  const CompletionInfo info_;
  const Tokenizer* tok_;
  const bool logprobs_;
  // timings: the chunk's (timings_per_token), or null.
  void AppendNativeChunk(const std::string& text, const ReplyTimings* timings, int id_slot,
                         std::string* out);
  // The timings of a chunk ending with a token told at `times` (null
  // without timings_per_token); *storage holds them.
  const ReplyTimings* ChunkTimings(const TokenTimes& times, ReplyTimings* storage) const;

  std::string echo_;
  bool include_usage_ = false;
  bool timings_per_token_ = false;
  bool one_of_several_ = false;
  std::optional<NativeReplyInfo> native_, verbose_;
  std::optional<ToolSyntax> tools_;
  std::optional<ResponsesEcho> responses_;
  std::unique_ptr<ResponsesStream> responses_stream_;  // streamed: made at the first event
  ResponsesStream* Responses();
  void AppendResponsesEnd(const GenerationResult& result, int n_prompt, std::string* out);
  bool embeddings_ = false, embeddings_base64_ = false;
  int embeddings_native_n_embd_ = 0;
  std::string embeddings_model_;
  SlotOp slot_op_ = SlotOp::kNone;
  int slot_id_ = -1;
  std::string slot_filename_;
  std::string tool_text_;  // tools: the reply's text so far
  size_t tool_sent_ = 0;   // tools: its bytes sent as content
  void AppendToolEndEvents(const GenerationResult& result, int n_prompt, std::string* out);
  std::vector<int32_t> pending_ids_;  // native: ids since the last chunk
  int told_ = 0;                      // native: tokens told so far
  bool started_ = false;
  size_t streamed_bytes_ = 0;
  std::vector<TokenLogprob> pending_logprobs_;  // tokens told since the last chunk
};

}  // namespace pi
