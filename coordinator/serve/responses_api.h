// POST /v1/responses (OpenAI's Responses API), whole replies: a request is
// rewritten as the /v1/chat/completions body that asks the same — its
// instructions the system message, its input items the messages
// (function_call and function_call_output items the assistant's calls and
// the tools' results), its flat function tools the chat's, text.format the
// response_format, max_output_tokens the max_completion_tokens — so the chat
// path (templates, tools, grammars) serves it; the reply is a response
// object whose output holds a message and function_call items.
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
// (stream, store true, previous_response_id, reasoning, non-function tools,
// image and file inputs and every field outside the subset are refused).
Status ResponsesToChat(const std::string& body, std::string* chat, ResponsesEcho* echo);

// The response object of a finished reply: `content` (the text, or the
// text before the calls) and `calls`; status "incomplete" (reason
// max_output_tokens) when the reply stopped at its limit.
std::string ResponseJson(const std::string& id, int64_t created_at, const std::string& model,
                         const ResponsesEcho& echo, const std::string& content,
                         const std::vector<ToolCall>& calls, bool at_limit, int input_tokens,
                         int output_tokens);

}  // namespace pi
