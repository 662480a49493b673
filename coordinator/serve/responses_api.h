// POST /v1/responses (OpenAI's Responses API), whole or streamed: a request is
// rewritten as the /v1/chat/completions body that asks the same — its
// instructions the system message, its input items the messages
// (function_call and function_call_output items the assistant's calls and
// the tools' results), its flat function tools the chat's, text.format the
// response_format, max_output_tokens the max_completion_tokens — so the chat
// path (templates, tools, grammars) serves it; the reply is a response
// object whose output holds a message and function_call items, or its
// server-sent events (response.created ... output_text.delta ...
// response.completed, each "event: TYPE" with its sequence_number).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/base/status.h"
#include "common/text/chat_tools.h"

namespace pi {

// What the response object echoes of its request: instructions, tools,
// tool_choice, text, max_output_tokens, temperature, top_p,
// parallel_tool_calls (OpenAI's defaults where the request has none).
struct ResponsesEcho {
  nlohmann::ordered_json fields = nlohmann::ordered_json::object();
};

// The chat body of a Responses body into *chat; errors name the field
// (store true, previous_response_id, reasoning, non-function tools,
// image and file inputs and every field outside the subset are refused).
Status ResponsesToChat(const std::string& body, std::string* chat, ResponsesEcho* echo);
// An error from reading the rewritten chat body, in the Responses API's own
// names (max_output_tokens, text.format).
Status InResponsesTerms(const Status& chat_error);

// The response object of a finished reply: `content` (the text, or the
// text before the calls) and `calls`; status "incomplete" (reason
// max_output_tokens) when the reply stopped at its limit.
std::string ResponseJson(const std::string& id, int64_t created_at, const std::string& model,
                         const ResponsesEcho& echo, const std::string& content,
                         const std::vector<ToolCall>& calls, bool at_limit, int input_tokens,
                         int output_tokens);

// A streamed response's events, fed the message's text as it settles.
class ResponsesStream {
 public:
  ResponsesStream(std::string id, int64_t created_at, std::string model, ResponsesEcho echo);
  // More of the message's text (empty: the response opens, no message yet).
  void Text(const std::string& delta, std::string* out);
  // The end: the text's rest and its done events, each call's events, then
  // response.completed (response.incomplete at max_output_tokens).
  void End(const std::string& content, const std::vector<ToolCall>& calls, bool at_limit,
           int input_tokens, int output_tokens, std::string* out);
  // The generation failed: response.failed with the message.
  void Fail(const std::string& message, std::string* out);

 private:
  void Event(const char* type, nlohmann::ordered_json data, std::string* out);
  void Open(std::string* out);
  void OpenMessage(std::string* out);

  const std::string id_;
  const int64_t created_at_;
  const std::string model_;
  const ResponsesEcho echo_;
  int seq_ = 0;
  bool opened_ = false, message_open_ = false;
  std::string sent_;  // the message's text sent
};

}  // namespace pi
