// Tool calls in a chat: the tools a request offers rendered into the
// conversation, the grammar that holds the model's calls to their schemas,
// and the calls parsed back out of its text. Four syntaxes, each as the
// family's own template writes it:
//
//   Hermes (chatml; Qwen 2.5's template): the tools as JSON lines between
//   <tools></tools> in the system message; a call is
//   <tool_call>\n{"name": NAME, "arguments": {...}}\n</tool_call>, a result
//   a user turn of <tool_response>\n...\n</tool_response> blocks.
//
//   Llama 3.1 (llama3): "Environment: ipython" and the date lines in the
//   system message, the tools (JSON, indented) in the first user message; a
//   call is the reply {"name": NAME, "parameters": {...}} (one a turn), a
//   result an ipython turn.
//
//   Mistral (mistral-v3, mistral-v3-tekken): [AVAILABLE_TOOLS][...] before
//   the last user message; a call is [TOOL_CALLS][{"name", "arguments"}, ...]
//   (ids of 9 letters and digits), a result [TOOL_RESULTS]{"content",
//   "call_id"}. [TOOL_CALLS] is a control token, invisible in the reply's text.
//
//   Generic (every other family): the tools described in the system message
//   and the reply one JSON object: {"tool_call": {"name", "arguments"}},
//   {"tool_calls": [...]} where calls may go in parallel, or
//   {"response": TEXT}; a result a user turn {"tool_response": {...}}.
//
// Each is a rewrite of the messages into ones RenderChat renders with the
// family's own markers, so every template takes tools.
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

enum class ToolSyntax { kHermes, kLlama3, kMistral, kGeneric };
ToolSyntax ToolSyntaxOf(ChatTemplate t);

// One message as a client sends it: an assistant's may hold calls, a
// tool's answers one (tool_call_id).
struct ChatTurn {
  std::string role;  // system | user | assistant | tool
  std::string content;
  std::vector<ToolCall> tool_calls;
  std::string tool_call_id;
};

// The turns as messages in `syntax`, the tools (unless choice is none)
// where the syntax puts them. Errors: a tool message that answers no call of
// the assistant's turn before it; tools (llama3, mistral) without the user
// message they go with.
Status ToolMessages(ToolSyntax syntax, const ToolRequest& tools, const std::vector<ChatTurn>& turns,
                    std::vector<ChatMessage>* out);

// The GBNF grammar of a reply under `tools` (choice auto, required or
// named). *trigger: empty when the whole reply is held to the grammar;
// else the text that starts it (Hermes, auto: free text until a call).
Status ToolGrammar(ToolSyntax syntax, const ToolRequest& tools, std::string* gbnf,
                   std::string* trigger);

// Text that opens the reply in the prompt: Mistral's [TOOL_CALLS] when a
// call is required (the grammar holds what follows it), else empty.
std::string ToolPrefill(ToolSyntax syntax, const ToolRequest& tools);

// The reply's text apart: *content (the text outside the calls; for
// Generic, the response) and the calls (ids made here). Text that is not
// a well-formed call stays content, whole. `cut`: the reply ended at its
// token cap or the context, maybe mid-call: the calls complete before the
// one it cut are kept, that one dropped (Hermes' blocks, Mistral's list,
// the generic tool_calls list; a single call cut stays content).
void ParseToolReply(ToolSyntax syntax, const std::string& text, std::string* content,
                    std::vector<ToolCall>* calls, bool cut = false);

// Of a reply's text so far, the bytes that are content whatever follows,
// for a stream to send at once: the text before a call, before an end that
// may begin one ("<tool_c", "{\"na") and before the whitespace ahead of
// either (ParseToolReply leaves it out); generic, none (its content is inside
// the JSON).
size_t SettledToolContent(ToolSyntax syntax, const std::string& text);

// JSON as Python's json.dumps writes it (", " and ": " between items,
// non-ASCII as itself; with indent > 0, items on lines of their own, ","
// ending them): what the models' templates render with tojson.
std::string PythonJson(const nlohmann::ordered_json& j, int indent = 0);

// Every rule name of a GBNF text with `prefix` before it (literals,
// classes, repetition counts and comments left as they are), so that
// grammars can be joined into one.
std::string PrefixGbnfRules(const std::string& gbnf, const std::string& prefix);

}  // namespace pi
