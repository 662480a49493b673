// Tool calls in a chat: the tools a request offers rendered into the
// conversation, the grammar that holds the model's calls to their schemas,
// and the calls parsed back out of its text. Two syntaxes:
//
//   Hermes (the chatml family; Qwen 2.5's template): the tools as JSON lines
//   between <tools></tools> in the system message; a call is
//   <tool_call>\n{"name": NAME, "arguments": {...}}\n</tool_call>, a result
//   a user turn of <tool_response>\n...\n</tool_response> blocks.
//
//   Generic (every other family): the tools described in the system message
//   and the reply one JSON object: {"tool_call": {"name", "arguments"}},
//   {"tool_calls": [...]} where calls may go in parallel, or
//   {"response": TEXT}; a result a user turn {"tool_response": {...}}.
//
// Both are a rewrite of the messages into plain system/user/assistant ones
// (RenderChat then renders them with the family's own markers), so every
// template takes tools.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/base/status.h"
#include "common/text/chat_template.h"

namespace pi {

struct ToolDef {
  std::string name;  // [A-Za-z0-9_-]{1,64}, as OpenAI's
  std::string description;
  nlohmann::ordered_json parameters;  // a JSON schema (json_schema_grammar.h)
};

struct ToolCall {
  std::string id;
  std::string name;
  std::string arguments;  // JSON text (OpenAI sends and takes a string)
};

enum class ToolChoice { kNone, kAuto, kRequired, kNamed };

struct ToolRequest {
  std::vector<ToolDef> tools;
  ToolChoice choice = ToolChoice::kAuto;
  std::string named;     // kNamed: the tool's name
  bool parallel = true;  // several calls in one reply
};

enum class ToolSyntax { kHermes, kGeneric };
ToolSyntax ToolSyntaxOf(ChatTemplate t);

// One message as a client sends it: an assistant's may hold calls, a
// tool's answers one (tool_call_id).
struct ChatTurn {
  std::string role;  // system | user | assistant | tool
  std::string content;
  std::vector<ToolCall> tool_calls;
  std::string tool_call_id;
};

// The turns as plain messages in `syntax`, the tools (unless choice is
// none) in the system message. Errors: a tool message that answers no call
// of the assistant's turn before it.
Status ToolMessages(ToolSyntax syntax, const ToolRequest& tools, const std::vector<ChatTurn>& turns,
                    std::vector<ChatMessage>* out);

// The GBNF grammar of a reply under `tools` (choice auto, required or
// named). *trigger: empty when the whole reply is held to the grammar;
// else the text that starts it (Hermes, auto: free text until a call).
Status ToolGrammar(ToolSyntax syntax, const ToolRequest& tools, std::string* gbnf,
                   std::string* trigger);

// The reply's text apart: *content (the text outside the calls; for
// Generic, the response) and the calls (ids made here). Text that is not
// a well-formed call stays content, whole.
void ParseToolReply(ToolSyntax syntax, const std::string& text, std::string* content,
                    std::vector<ToolCall>* calls);

// Of a reply's text so far, the bytes that are content whatever follows,
// for a stream to send at once: Hermes, the text before a call, before an
// end that may begin one ("<tool_c") and before the whitespace ahead of
// either (ParseToolReply leaves it out); generic, none (its content is
// inside the JSON).
size_t SettledToolContent(ToolSyntax syntax, const std::string& text);

// JSON as Python's json.dumps writes it (", " and ": " between items,
// non-ASCII as itself): what the models' templates render with tojson.
std::string PythonJson(const nlohmann::ordered_json& j);

// Every rule name of a GBNF text with `prefix` before it (literals,
// classes, repetition counts and comments left as they are), so that
// grammars can be joined into one.
std::string PrefixGbnfRules(const std::string& gbnf, const std::string& prefix);

}  // namespace pi
