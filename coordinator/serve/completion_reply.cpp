#include "coordinator/serve/completion_reply.h"

#include "coordinator/serve/embeddings_api.h"
#include "coordinator/serve/slots_api.h"

namespace pi {
namespace {

// A failed job's status: 400 when the request was at fault, else 500.
int FailureStatus(const GenerationResult& result) {
  return result.client_error ? 400 : 500;
}
std::string FailureJson(const GenerationResult& result) {
  return ErrorJson(FailureStatus(result),
                   result.client_error ? result.error : "the generation failed: " + result.error);
}

}  // namespace

ReplyTimings TimingsOf(const GenerationResult& g, int n_prompt) {
  ReplyTimings t;
  t.prompt_n = n_prompt - g.n_cached;  // evaluated, as llama-server counts (the rest was cached)
  t.prompt_ms = g.prompt_s * 1e3;
  t.predicted_n = SampledTokens(g);
  t.predicted_ms = g.eval_s * 1e3;
  t.ffn_neurons = g.ffn_neurons;
  t.ffn_hot = g.ffn_hot;
  return t;
}

CompletionReply::CompletionReply(bool chat, CompletionInfo info, const Tokenizer* tok,
                                 bool logprobs)
    : chat_(chat), info_(std::move(info)), tok_(tok), logprobs_(logprobs) {}

void CompletionReply::AppendEvent(const std::string& payload, std::string* out) {
  *out += "data: ";
  *out += payload;
  *out += "\n\n";
}

const ReplyTimings* CompletionReply::ChunkTimings(const TokenTimes& times,
                                                  ReplyTimings* storage) const {
  if (!timings_per_token_) return nullptr;
  storage->prompt_n = times.prompt_n;
  storage->prompt_ms = times.prompt_ms;
  storage->predicted_n = times.predicted_n;
  storage->predicted_ms = times.predicted_ms;
  storage->has_ffn = false;
  return storage;
}

void CompletionReply::AppendNativeChunk(const std::string& text, const ReplyTimings* timings,
                                        int id_slot, std::string* out) {
  AppendEvent(NativeChunkJson(*native_, text, pending_ids_, told_,
                              logprobs_ ? &pending_logprobs_ : nullptr, *tok_, timings, id_slot),
              out);
  started_ = true;
  pending_ids_.clear();
  pending_logprobs_.clear();
}

ResponsesStream* CompletionReply::Responses() {
  if (!responses_stream_) {
    responses_stream_ =
        std::make_unique<ResponsesStream>(info_.id, info_.created, info_.model, *responses_);
  }
  return responses_stream_.get();
}

void CompletionReply::AppendTokenEvents(const std::vector<RequestStream::Token>& tokens,
                                        const GenerationResult& result, std::string* out) {
  if (responses_) {
    // The text goes out as it settles (all of it without tools).
    for (const RequestStream::Token& t : tokens) tool_text_ += t.text;
    const size_t settled = tools_ ? SettledToolContent(*tools_, tool_text_) : tool_text_.size();
    const size_t n = settled > tool_sent_ ? settled - tool_sent_ : 0;
    Responses()->Text(tool_text_.substr(tool_sent_, n), out);
    tool_sent_ += n;
    started_ = true;
    return;
  }
  if (tools_) {
    for (const RequestStream::Token& t : tokens) tool_text_ += t.text;
    const size_t settled = SettledToolContent(*tools_, tool_text_);
    if (settled > tool_sent_ || (!started_ && !tokens.empty())) {
      const size_t n = settled > tool_sent_ ? settled - tool_sent_ : 0;
      CompletionInfo chunk = info_;
      ReplyTimings timings;
      if (!tokens.empty()) chunk.timings = ChunkTimings(tokens.back().times, &timings);
      AppendEvent(ChatChunkJson(chunk, !started_, tool_text_.substr(tool_sent_, n), nullptr, 0, 0),
                  out);
      tool_sent_ += n;
      started_ = true;
    }
    return;
  }
  for (const RequestStream::Token& t : tokens) {
    if (t.logprob >= 0 && logprobs_) pending_logprobs_.push_back(result.logprobs[t.logprob]);
    if (native_ && t.id >= 0) {
      pending_ids_.push_back(t.id);
      ++told_;
    }
    if (t.text.empty()) continue;
    ReplyTimings timings;
    const ReplyTimings* chunk_timings = ChunkTimings(t.times, &timings);
    if (native_) {
      AppendNativeChunk(t.text, chunk_timings, result.seq, out);
      continue;
    }
    CompletionInfo chunk = info_;
    chunk.timings = chunk_timings;
    // The echoed prompt goes out with the first text (its logprobs offsets
    // count from the reply's own text, as echo with logprobs is refused).
    const std::string text = started_ || echo_.empty() ? t.text : echo_ + t.text;
    if (logprobs_) {
      chunk.logprobs = &pending_logprobs_;
      chunk.tok = tok_;
      chunk.logprob_offset = streamed_bytes_;
    }
    streamed_bytes_ += t.text.size();
    AppendEvent(chat_ ? ChatChunkJson(chunk, !started_, text, nullptr, 0, 0)
                      : CompletionChunkJson(chunk, text, nullptr, 0, 0),
                out);
    started_ = true;
    pending_logprobs_.clear();
  }
}

void CompletionReply::AppendResponsesEnd(const GenerationResult& result, int n_prompt,
                                         std::string* out) {
  started_ = true;
  if (std::string(result.stop_reason) == "error") {
    Responses()->Fail("the generation failed: " + result.error, out);
    return;
  }
  Utf8Stream whole;
  const std::string text = whole.Push(result.text) + whole.Flush();
  std::string content = text;
  std::vector<ToolCall> calls;
  const bool cut = CutShort(result.stop_reason);
  if (tools_) ParseToolReply(*tools_, text, &content, &calls, cut);
  Responses()->End(content, calls, cut, n_prompt, static_cast<int>(result.ids.size()), out);
}

void CompletionReply::AppendEndEvents(const GenerationResult& result, int n_prompt,
                                      std::string* out) {
  if (responses_) return AppendResponsesEnd(result, n_prompt, out);
  if (std::string(result.stop_reason) == "error") {
    AppendEvent(FailureJson(result), out);
    started_ = true;
    return;
  }
  const ReplyTimings timings = TimingsOf(result, n_prompt);
  if (native_) {
    // What no text went with (a stop string's tokens), then the last object.
    if (!pending_ids_.empty() || !pending_logprobs_.empty()) {
      ReplyTimings so_far = timings;  // (as every chunk's: no FFN counts)
      so_far.has_ffn = false;
      AppendNativeChunk("", timings_per_token_ ? &so_far : nullptr, result.seq, out);
    }
    AppendEvent(NativeFinalJson(*native_, true, result, "", n_prompt, timings, *tok_), out);
    started_ = true;
    return;
  }
  if (tools_) {
    AppendToolEndEvents(result, n_prompt, out);
    return;
  }
  CompletionInfo end = info_;
  end.timings = &timings;
  // The last chunk carries the tokens no text went out with (a stop string's).
  if (logprobs_ && !pending_logprobs_.empty()) {
    end.logprobs = &pending_logprobs_;
    end.tok = tok_;
    end.logprob_offset = streamed_bytes_;
  }
  const int n_gen = static_cast<int>(result.ids.size());
  const char* finish = FinishReason(result.stop_reason);
  // A reply with no text still echoes its prompt.
  const std::string text = started_ ? "" : echo_;
  AppendEvent(chat_ ? ChatChunkJson(end, !started_, text, finish, n_prompt, n_gen)
                    : CompletionChunkJson(end, text, finish, n_prompt, n_gen),
              out);
  started_ = true;
  if (one_of_several_) return;  // the request's end follows its last choice's
  if (include_usage_) AppendEvent(UsageChunkJson(info_, chat_, n_prompt, n_gen), out);
  AppendEvent("[DONE]", out);
}

// The content and each call, then the last chunk: finish_reason
// "tool_calls" when there are calls ("length" when the cap cut the reply
// after them).
void CompletionReply::AppendToolEndEvents(const GenerationResult& result, int n_prompt,
                                          std::string* out) {
  const ReplyTimings timings = TimingsOf(result, n_prompt);
  std::string content;
  std::vector<ToolCall> calls;
  Utf8Stream whole;
  const bool cut = CutShort(result.stop_reason);
  ParseToolReply(*tools_, whole.Push(result.text) + whole.Flush(), &content, &calls, cut);
  // The content not sent yet (what was sent is where it starts).
  const std::string rest = content.size() > tool_sent_ ? content.substr(tool_sent_) : "";
  if (!rest.empty() || !started_)
    AppendEvent(ChatChunkJson(info_, !started_, rest, nullptr, 0, 0), out);
  for (size_t i = 0; i < calls.size(); ++i) {
    AppendEvent(ChatToolCallChunkJson(info_, static_cast<int>(i), calls[i]), out);
  }
  CompletionInfo end = info_;
  end.timings = &timings;
  const int n_gen = static_cast<int>(result.ids.size());
  // A reply cut after its calls says so: "length", as one cut in its text.
  const char* finish = calls.empty() || cut ? FinishReason(result.stop_reason) : "tool_calls";
  AppendEvent(ChatChunkJson(end, false, "", finish, n_prompt, n_gen), out);
  started_ = true;
  if (one_of_several_) return;  // the request's end follows its last choice's
  if (include_usage_) AppendEvent(UsageChunkJson(info_, chat_, n_prompt, n_gen), out);
  AppendEvent("[DONE]", out);
}

int CompletionReply::WholeResponse(const GenerationResult& result, int n_prompt,
                                   std::string* body) const {
  if (std::string(result.stop_reason) == "error") {
    *body = FailureJson(result);
    return FailureStatus(result);
  }
  if (slot_op_ != SlotOp::kNone) {
    *body = SlotActionJson(slot_op_, slot_id_, slot_filename_, result);
    return 200;
  }
  if (embeddings_) {
    *body =
        embeddings_native_n_embd_ > 0
            ? NativeEmbeddingsJson(result.embeddings, embeddings_native_n_embd_)
            : EmbeddingsJson(embeddings_model_, result.embeddings, embeddings_base64_, n_prompt);
    return 200;
  }
  const ReplyTimings timings = TimingsOf(result, n_prompt);
  CompletionInfo info = info_;
  info.timings = &timings;
  if (logprobs_) {
    info.logprobs = &result.logprobs;
    info.tok = tok_;
  }
  // The text as it would stream (bytes that are not UTF-8 as U+FFFD), cut
  // before a stop string.
  Utf8Stream whole;
  const std::string text = echo_ + whole.Push(result.text) + whole.Flush();
  if (native_) {
    *body = NativeFinalJson(*native_, false, result, text, n_prompt, timings, *tok_);
    return 200;
  }
  const int n_gen = static_cast<int>(result.ids.size());
  const char* finish = FinishReason(result.stop_reason);
  const bool cut = CutShort(result.stop_reason);
  if (responses_) {
    std::string content = text;
    std::vector<ToolCall> calls;
    if (tools_) ParseToolReply(*tools_, text, &content, &calls, cut);
    *body = ResponseJson(info.id, info.created, info.model, *responses_, content, calls, cut,
                         n_prompt, n_gen);
    return 200;
  }
  if (tools_) {
    std::string content;
    std::vector<ToolCall> calls;
    ParseToolReply(*tools_, text, &content, &calls, cut);
    if (!calls.empty()) {
      *body = ChatToolsCompletionJson(info, content, calls, cut ? finish : "tool_calls", n_prompt,
                                      n_gen);
    } else {
      *body = ChatCompletionJson(info, content, finish, n_prompt, n_gen);
    }
  } else {
    *body = chat_ ? ChatCompletionJson(info, text, finish, n_prompt, n_gen)
                  : CompletionJson(info, text, finish, n_prompt, n_gen);
  }
  if (verbose_) {  // (a debugging aid: the body is read back once)
    nlohmann::json j = nlohmann::json::parse(*body);
    j["__verbose"] = nlohmann::json::parse(
        NativeFinalJson(*verbose_, false, result, text, n_prompt, timings, *tok_));
    *body = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  }
  return 200;
}

}  // namespace pi
