#include "coordinator/serve/chat_messages.h"

#include <algorithm>
#include <set>
#include <utility>

#include "common/text/grammar.h"

namespace pi {
namespace {

using json = nlohmann::json;
using ojson = nlohmann::ordered_json;

// A message's content: a string, an array of text parts (joined by
// newlines, as llama-server does), or null for an assistant's turn.
Status Content(const json& m, size_t k, const std::string& role, std::string* out) {
  const auto it = m.find("content");
  if (it == m.end()) return Status::Error("messages[%zu]: content is required", k);
  if (it->is_string()) {
    *out = it->get<std::string>();
    return Status::Ok();
  }
  if (it->is_null()) {
    if (role != "assistant") {
      return Status::Error("messages[%zu]: content may be null only in an assistant's message", k);
    }
    out->clear();
    return Status::Ok();
  }
  if (!it->is_array()) {
    return Status::Error("messages[%zu]: content must be a string or an array of parts", k);
  }
  for (size_t p = 0; p < it->size(); ++p) {
    const json& part = (*it)[p];
    if (!part.is_object() || !part.contains("type") || !part["type"].is_string()) {
      return Status::Error("messages[%zu].content[%zu] must be {\"type\": \"text\", \"text\": ...}",
                           k, p);
    }
    const std::string type = part["type"].get<std::string>();
    if (type != "text") {
      return Status::Error(
          "messages[%zu].content[%zu]: %s parts are not supported by this server (text only)", k, p,
          type.c_str());
    }
    for (const auto& item : part.items()) {
      if (item.key() != "type" && item.key() != "text") {
        return Status::Error("messages[%zu].content[%zu]: unrecognized field %s", k, p,
                             item.key().c_str());
      }
    }
    if (!part.contains("text") || !part["text"].is_string()) {
      return Status::Error("messages[%zu].content[%zu].text must be a string", k, p);
    }
    if (p > 0) *out += "\n";
    *out += part["text"].get<std::string>();
  }
  return Status::Ok();
}

// A tool's name goes into the reply's grammar as a literal: OpenAI's
// [A-Za-z0-9_-]{1,64}, which are GBNF's name characters.
bool ToolNameOk(const std::string& name) {
  return !name.empty() && name.size() <= 64 &&
         std::all_of(name.begin(), name.end(), IsGbnfNameChar);
}

// An assistant's tool_calls: [{id, type: "function", function: {name, arguments}}].
Status ToolCalls(const json& v, size_t k, std::vector<ToolCall>* out) {
  if (!v.is_array()) return Status::Error("messages[%zu].tool_calls must be an array", k);
  for (size_t c = 0; c < v.size(); ++c) {
    const json& call = v[c];
    const json* fn = call.is_object() && call.contains("function") ? &call["function"] : nullptr;
    if (fn == nullptr || !fn->is_object() || !call.contains("id") || !call["id"].is_string() ||
        (call.contains("type") && call["type"] != "function")) {
      return Status::Error(
          "messages[%zu].tool_calls[%zu] must be {id, type: \"function\", "
          "function: {name, arguments}}",
          k, c);
    }
    for (const auto& item : call.items()) {
      if (item.key() != "id" && item.key() != "type" && item.key() != "function") {
        return Status::Error("messages[%zu].tool_calls[%zu]: unrecognized field %s", k, c,
                             item.key().c_str());
      }
    }
    const auto name = fn->find("name");
    const auto args = fn->find("arguments");
    if (name == fn->end() || !name->is_string() || args == fn->end() || !args->is_string()) {
      return Status::Error(
          "messages[%zu].tool_calls[%zu].function must be {name, arguments} "
          "(arguments a string of JSON)",
          k, c);
    }
    out->push_back(
        {call["id"].get<std::string>(), name->get<std::string>(), args->get<std::string>()});
  }
  return Status::Ok();
}

// One message: system, developer (OpenAI's newer name for the system's
// instructions: rendered as system), user, assistant (with tool_calls) or
// tool (with tool_call_id).
Status Message(const json& m, size_t k, ChatTurn* out) {
  if (!m.is_object()) return Status::Error("messages[%zu] must be an object {role, content}", k);
  const auto role = m.find("role");
  if (role == m.end() || !role->is_string()) {
    return Status::Error("messages[%zu]: role must be a string", k);
  }
  out->role = role->get<std::string>();
  if (out->role == "developer") out->role = "system";
  if (out->role == "function") {
    return Status::Error(
        "messages[%zu]: role function (the deprecated function calls) is not "
        "supported by this server: use tools",
        k);
  }
  if (out->role != "system" && out->role != "user" && out->role != "assistant" &&
      out->role != "tool") {
    return Status::Error(
        "messages[%zu]: role '%s' is not system, developer, user, assistant or tool", k,
        out->role.c_str());
  }
  for (const auto& item : m.items()) {
    const std::string& key = item.key();
    if (key == "role" || key == "content") continue;
    if (key == "tool_calls" && out->role == "assistant") {
      if (!item.value().is_null()) PI_RETURN_IF_ERROR(ToolCalls(item.value(), k, &out->tool_calls));
    } else if (key == "tool_call_id" && out->role == "tool") {
      if (!item.value().is_string()) {
        return Status::Error("messages[%zu].tool_call_id must be a string", k);
      }
      out->tool_call_id = item.value().get<std::string>();
    } else if (key == "function_call") {
      return Status::Error(
          "messages[%zu].function_call: the deprecated function calls are not "
          "supported by this server: use tool_calls",
          k);
    } else {
      return Status::Error("messages[%zu]: unrecognized field %s", k, key.c_str());
    }
  }
  if (out->role == "tool" && !m.contains("tool_call_id")) {
    return Status::Error("messages[%zu]: a tool message needs tool_call_id", k);
  }
  const bool calls = !out->tool_calls.empty();
  if (calls && (!m.contains("content") || m["content"].is_null())) return Status::Ok();
  return Content(m, k, calls ? "assistant" : out->role, &out->content);
}

// One tool: {type: "function", function: {name, description, parameters, strict}}.
Status Tool(const ojson& t, size_t i, std::set<std::string>* names, ToolDef* out) {
  const ojson* fn = t.is_object() && t.contains("function") ? &t["function"] : nullptr;
  if (fn == nullptr || !fn->is_object() || !t.contains("type") || t["type"] != "function") {
    return Status::Error("tools[%zu] must be {type: \"function\", function: {name, ...}}", i);
  }
  for (const auto& item : t.items()) {
    if (item.key() != "type" && item.key() != "function") {
      return Status::Error("tools[%zu]: unrecognized field %s", i, item.key().c_str());
    }
  }
  out->parameters = ojson{{"type", "object"}, {"properties", ojson::object()}};
  for (const auto& item : fn->items()) {
    const std::string& key = item.key();
    const ojson& v = item.value();
    if (key == "name" && v.is_string()) {
      out->name = v.get<std::string>();
    } else if (key == "description" && v.is_string()) {
      out->description = v.get<std::string>();
    } else if (key == "parameters" && (v.is_object() || v.is_boolean())) {
      out->parameters = v;
    } else if (key == "strict" && (v.is_boolean() || v.is_null())) {
      // Every call is held to its schema: strict or not.
    } else {
      return Status::Error(
          "tools[%zu].function.%s: %s", i, key.c_str(),
          key == "name" || key == "description" || key == "parameters" || key == "strict"
              ? "wrong type"
              : "unrecognized field");
    }
  }
  if (!ToolNameOk(out->name)) {
    return Status::Error("tools[%zu].function.name must be 1 to 64 of a-z, A-Z, 0-9, _ and -", i);
  }
  if (!names->insert(out->name).second) {
    return Status::Error("tools[%zu]: a second tool named '%s'", i, out->name.c_str());
  }
  return Status::Ok();
}

// tools, tool_choice and parallel_tool_calls; the schemas from `body` in
// their keys' order.
Status Tools(const std::string& body, const json& j, ToolRequest* out) {
  const auto tools = j.find("tools");
  const bool any = tools != j.end() && !tools->is_null();
  if (any) {
    if (!tools->is_array()) return Status::Error("tools must be an array of tools");
    if (tools->size() > kMaxTools) {
      return Status::Error("tools: %zu tools, at most %zu", tools->size(), kMaxTools);
    }
    const ojson whole = ojson::parse(body, nullptr, /*allow_exceptions=*/false);
    const auto ordered = whole.is_object() ? whole.find("tools") : whole.end();
    if (ordered == whole.end() || !ordered->is_array() || ordered->size() != tools->size()) {
      return Status::Error("tools: given twice");
    }
    std::set<std::string> names;
    out->tools.resize(tools->size());
    for (size_t i = 0; i < tools->size(); ++i) {
      PI_RETURN_IF_ERROR(Tool((*ordered)[i], i, &names, &out->tools[i]));
    }
  }
  const auto choice = j.find("tool_choice");
  if (choice != j.end() && !choice->is_null()) {
    if (!any) return Status::Error("tool_choice: no tools given");
    if (choice->is_string() && *choice == "none") {
      out->choice = ToolChoice::kNone;
    } else if (choice->is_string() && *choice == "auto") {
      out->choice = ToolChoice::kAuto;
    } else if (choice->is_string() && *choice == "required") {
      out->choice = ToolChoice::kRequired;
    } else if (choice->is_object() && choice->contains("type") && (*choice)["type"] == "function" &&
               choice->contains("function") && (*choice)["function"].is_object() &&
               (*choice)["function"].contains("name") &&
               (*choice)["function"]["name"].is_string()) {
      out->choice = ToolChoice::kNamed;
      out->named = (*choice)["function"]["name"].get<std::string>();
      bool known = false;
      for (const ToolDef& t : out->tools) known = known || t.name == out->named;
      if (!known) return Status::Error("tool_choice: no tool named '%s'", out->named.c_str());
    } else {
      return Status::Error(
          "tool_choice must be none, auto, required or {\"type\": "
          "\"function\", \"function\": {\"name\": ...}}");
    }
  }
  const auto parallel = j.find("parallel_tool_calls");
  if (parallel != j.end() && !parallel->is_null()) {
    if (!parallel->is_boolean()) return Status::Error("parallel_tool_calls must be true or false");
    out->parallel = parallel->get<bool>();
  }
  return Status::Ok();
}

}  // namespace

Status ReadChatPrompt(const std::string& body, const json& j, const ChatTemplate* chat_template,
                      ChatPrompt* out) {
  const auto messages = j.find("messages");
  if (messages == j.end() || !messages->is_array() || messages->empty()) {
    return Status::Error("messages must be a non-empty array of {role, content}");
  }
  std::vector<ChatTurn> turns(messages->size());
  bool tool_turns = false;
  for (size_t k = 0; k < messages->size(); ++k) {
    PI_RETURN_IF_ERROR(Message((*messages)[k], k, &turns[k]));
    tool_turns = tool_turns || turns[k].role == "tool" || !turns[k].tool_calls.empty();
  }
  ToolRequest tools;
  PI_RETURN_IF_ERROR(Tools(body, j, &tools));
  if (!chat_template) {
    return Status::Error(
        "this model has no chat template: start pi-launch with --chat-template NAME (%s)",
        ChatTemplateNames());
  }
  out->syntax = ToolSyntaxOf(*chat_template);
  out->tools = !tools.tools.empty() && tools.choice != ToolChoice::kNone;
  std::vector<ChatMessage> chat;
  if (out->tools || tool_turns) {
    PI_RETURN_IF_ERROR(ToolMessages(out->syntax, tools, turns, &chat));
  } else {
    for (ChatTurn& t : turns) chat.push_back({t.role, std::move(t.content)});
  }
  if (out->tools) PI_RETURN_IF_ERROR(ToolGrammar(out->syntax, tools, &out->grammar, &out->trigger));
  PI_RETURN_IF_ERROR(RenderChat(*chat_template, chat, true, &out->text, &out->spans));
  out->text += ToolPrefill(out->syntax, tools);
  return Status::Ok();
}

}  // namespace pi
