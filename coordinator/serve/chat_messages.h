// ReadChatPrompt: a chat body's messages and tools as the prompt text
// (chat_template.h, chat_tools.h): messages of the roles system, developer
// (as system), user, assistant (content null with tool_calls) and tool
// (answering a call by tool_call_id); content a string or text parts.
// `tools` (OpenAI's function tools), `tool_choice` (none, auto, required,
// or {"type": "function", "function": {"name"}}) and `parallel_tool_calls`
// give the tools' section of the prompt and the grammar that holds a reply
// to them. Every field is read or refused by name.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/base/status.h"
#include "common/text/chat_template.h"
#include "common/text/chat_tools.h"
#include "common/text/tokenizer.h"

namespace pi {

// At most this many tools in one request (each is in the prompt and the grammar).
inline constexpr size_t kMaxTools = 128;

struct ChatPrompt {
  std::string text;
  std::vector<TextSpan> spans;  // the messages' own text
  // Tools offered (tool_choice not none): the reply is read for calls.
  bool tools = false;
  ToolSyntax syntax = ToolSyntax::kGeneric;
  std::string grammar, trigger;  // ToolGrammar's
};

// `j` is `body` parsed (the tools' schemas are read again from `body`,
// keeping their keys' order); a null template: this model has none (an
// error saying to choose one).
Status ReadChatPrompt(const std::string& body, const nlohmann::json& j,
                      const ChatTemplate* chat_template, ChatPrompt* out);

}  // namespace pi
