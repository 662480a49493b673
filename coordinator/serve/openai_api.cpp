#include "coordinator/serve/openai_api.h"

#include <nlohmann/json.hpp>
#include <utility>

namespace pi {

using json = nlohmann::json;

bool CutShort(const std::string& stop_reason) {
  return stop_reason == "length" || stop_reason == "context";
}

const char* FinishReason(const std::string& stop_reason) {
  return CutShort(stop_reason) ? "length" : "stop";
}

namespace {

json Usage(int prompt_tokens, int completion_tokens) {
  return {{"prompt_tokens", prompt_tokens},
          {"completion_tokens", completion_tokens},
          {"total_tokens", prompt_tokens + completion_tokens}};
}

// The bytes of a token's text, for chat logprobs' "bytes".
json Bytes(const std::string& text) {
  json b = json::array();
  for (unsigned char ch : text) b.push_back(static_cast<int>(ch));
  return b;
}

// The legacy completions shape: tokens, token_logprobs, top_logprobs, text_offset.
json CompletionLogprobs(const CompletionInfo& info) {
  json tokens = json::array(), lps = json::array(), tops = json::array(), offsets = json::array();
  size_t offset = info.logprob_offset;
  for (const TokenLogprob& t : *info.logprobs) {
    const std::string piece = info.tok->TokenToPiece(t.id);
    tokens.push_back(piece);
    lps.push_back(t.logprob);
    json top = json::object();
    for (const auto& [id, lp] : t.top) top[info.tok->TokenToPiece(id)] = lp;
    tops.push_back(top);
    offsets.push_back(offset);
    offset += piece.size();
  }
  return {{"tokens", tokens},
          {"token_logprobs", lps},
          {"top_logprobs", tops},
          {"text_offset", offsets}};
}

// The chat shape: content, each {token, logprob, bytes, top_logprobs}.
json ChatLogprobs(const CompletionInfo& info) {
  json content = json::array();
  for (const TokenLogprob& t : *info.logprobs) {
    const std::string piece = info.tok->TokenToPiece(t.id);
    json top = json::array();
    for (const auto& [id, lp] : t.top) {
      const std::string p = info.tok->TokenToPiece(id);
      top.push_back({{"token", p}, {"logprob", lp}, {"bytes", Bytes(p)}});
    }
    content.push_back(
        {{"token", piece}, {"logprob", t.logprob}, {"bytes", Bytes(piece)}, {"top_logprobs", top}});
  }
  return {{"content", content}};
}

// The reply around one choice, with the usage where `usage`.
std::string Reply(const CompletionInfo& info, const char* object, json choice, bool usage,
                  int prompt_tokens, int completion_tokens) {
  json j = {{"id", info.id},
            {"object", object},
            {"created", info.created},
            {"model", info.model},
            {"choices", {std::move(choice)}}};
  if (!info.system_fingerprint.empty()) j["system_fingerprint"] = info.system_fingerprint;
  if (usage) j["usage"] = Usage(prompt_tokens, completion_tokens);
  if (info.timings) j["timings"] = TimingsJson(*info.timings);
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace

json TimingsJson(const ReplyTimings& t) {
  auto per_token = [](double ms, int n) { return n > 0 ? ms / n : 0.0; };
  auto per_second = [](double ms, int n) { return ms > 0 ? 1e3 * n / ms : 0.0; };
  json j = {{"prompt_n", t.prompt_n},
            {"prompt_ms", t.prompt_ms},
            {"prompt_per_token_ms", per_token(t.prompt_ms, t.prompt_n)},
            {"prompt_per_second", per_second(t.prompt_ms, t.prompt_n)},
            {"predicted_n", t.predicted_n},
            {"predicted_ms", t.predicted_ms},
            {"predicted_per_token_ms", per_token(t.predicted_ms, t.predicted_n)},
            {"predicted_per_second", per_second(t.predicted_ms, t.predicted_n)}};
  if (t.has_ffn) {
    j["ffn_neurons"] = t.ffn_neurons;
    j["ffn_hot_neurons"] = t.ffn_hot;
  }
  return j;
}

std::string CompletionJson(const CompletionInfo& info, const std::string& text,
                           const char* finish_reason, int prompt_tokens, int completion_tokens) {
  json choice = {{"text", text},
                 {"index", info.choice},
                 {"logprobs", nullptr},
                 {"finish_reason", finish_reason}};
  if (info.logprobs && info.tok) choice["logprobs"] = CompletionLogprobs(info);
  return Reply(info, "text_completion", std::move(choice), true, prompt_tokens, completion_tokens);
}

std::string CompletionChunkJson(const CompletionInfo& info, const std::string& text,
                                const char* finish_reason, int prompt_tokens,
                                int completion_tokens) {
  json choice = {{"text", text}, {"index", info.choice}, {"logprobs", nullptr}};
  if (info.logprobs && info.tok) choice["logprobs"] = CompletionLogprobs(info);
  choice["finish_reason"] = finish_reason ? json(finish_reason) : json(nullptr);
  return Reply(info, "text_completion", std::move(choice),
               finish_reason != nullptr && info.last_chunk_usage, prompt_tokens, completion_tokens);
}

std::string UsageChunkJson(const CompletionInfo& info, bool chat, int prompt_tokens,
                           int completion_tokens) {
  json j = {{"id", info.id},
            {"object", chat ? "chat.completion.chunk" : "text_completion"},
            {"created", info.created},
            {"model", info.model},
            {"choices", json::array()},
            {"usage", Usage(prompt_tokens, completion_tokens)}};
  if (!info.system_fingerprint.empty()) j["system_fingerprint"] = info.system_fingerprint;
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string ChatCompletionJson(const CompletionInfo& info, const std::string& text,
                               const char* finish_reason, int prompt_tokens,
                               int completion_tokens) {
  json choice = {{"index", info.choice},
                 {"message", {{"role", "assistant"}, {"content", text}}},
                 {"finish_reason", finish_reason}};
  if (info.logprobs && info.tok) choice["logprobs"] = ChatLogprobs(info);
  return Reply(info, "chat.completion", std::move(choice), true, prompt_tokens, completion_tokens);
}

std::string ChatChunkJson(const CompletionInfo& info, bool first, const std::string& text,
                          const char* finish_reason, int prompt_tokens, int completion_tokens) {
  json delta = json::object();
  if (first) delta["role"] = "assistant";
  if (!finish_reason) delta["content"] = text;
  json choice = {{"index", info.choice}, {"delta", delta}};
  if (info.logprobs && info.tok) choice["logprobs"] = ChatLogprobs(info);
  choice["finish_reason"] = finish_reason ? json(finish_reason) : json(nullptr);
  return Reply(info, "chat.completion.chunk", std::move(choice),
               finish_reason != nullptr && info.last_chunk_usage, prompt_tokens, completion_tokens);
}

namespace {

json ToolCallJson(const ToolCall& c) {
  return {{"id", c.id},
          {"type", "function"},
          {"function", {{"name", c.name}, {"arguments", c.arguments}}}};
}

}  // namespace

std::string ChatToolsCompletionJson(const CompletionInfo& info, const std::string& content,
                                    const std::vector<ToolCall>& calls, const char* finish,
                                    int prompt_tokens, int completion_tokens) {
  json tool_calls = json::array();
  for (const ToolCall& c : calls) tool_calls.push_back(ToolCallJson(c));
  json message = {{"role", "assistant"},
                  {"content", content.empty() ? json(nullptr) : json(content)},
                  {"tool_calls", std::move(tool_calls)}};
  json choice = {
      {"index", info.choice}, {"message", std::move(message)}, {"finish_reason", finish}};
  return Reply(info, "chat.completion", std::move(choice), true, prompt_tokens, completion_tokens);
}

std::string ChatToolCallChunkJson(const CompletionInfo& info, int index, const ToolCall& call) {
  json c = ToolCallJson(call);
  c["index"] = index;
  json choice = {{"index", info.choice}, {"delta", {{"tool_calls", json::array({c})}}}};
  choice["finish_reason"] = nullptr;
  return Reply(info, "chat.completion.chunk", std::move(choice), false, 0, 0);
}

std::string ErrorJson(int http_status, const std::string& message) {
  const char* type = http_status == 401   ? "authentication_error"
                     : http_status == 404 ? "not_found_error"
                     : http_status == 503 ? "unavailable_error"
                     : http_status >= 500 ? "server_error"
                                          : "invalid_request_error";
  json j = {{"error", {{"code", http_status}, {"message", message}, {"type", type}}}};
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace pi
