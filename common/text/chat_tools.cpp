#include "common/text/chat_tools.h"

#include <random>

#include "common/text/grammar.h"
#include "common/text/json_schema_grammar.h"

namespace pi {
namespace {

using ojson = nlohmann::ordered_json;

// Python's json.dumps of the tool as the client sent it, "type" first.
ojson ToolSpec(const ToolDef& t) {
  ojson fn = ojson::object();
  fn["name"] = t.name;
  if (!t.description.empty()) fn["description"] = t.description;
  fn["parameters"] = t.parameters;
  return ojson{{"type", "function"}, {"function", std::move(fn)}};
}

// A call's arguments as JSON (a string that is not JSON stays a string).
ojson Arguments(const ToolCall& c) {
  ojson args = ojson::parse(c.arguments, nullptr, /*allow_exceptions=*/false);
  return args.is_discarded() ? ojson(c.arguments) : args;
}

std::string HermesSystem(const std::string& system, const ToolRequest& tools) {
  std::string s = system.empty() ? "" : system + "\n\n";
  s += "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
       "You are provided with function signatures within <tools></tools> XML tags:\n<tools>";
  for (const ToolDef& t : tools.tools) s += "\n" + PythonJson(ToolSpec(t));
  s += "\n</tools>\n\nFor each function call, return a json object with function name and "
       "arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": "
       "<function-name>, \"arguments\": <args-json-object>}\n</tool_call>";
  return s;
}

std::string GenericSystem(const std::string& system, const ToolRequest& tools) {
  std::string s = system.empty() ? "" : system + "\n\n";
  s += "You can call these tools (each with a JSON schema of its arguments):\n";
  for (const ToolDef& t : tools.tools) s += PythonJson(ToolSpec(t)) + "\n";
  s += "\nReply with one JSON object: {\"tool_call\": {\"name\": <tool name>, \"arguments\": "
       "<arguments>}} to call a tool";
  if (tools.parallel) {
    s += ", {\"tool_calls\": [<call>, ...]} to call several at once";
  }
  if (tools.choice == ToolChoice::kAuto) s += ", or {\"response\": <your answer>} to answer";
  return s + ".";
}

std::string HermesCalls(const ChatTurn& t) {
  std::string s = t.content;
  for (const ToolCall& c : t.tool_calls) {
    if (!s.empty()) s += "\n";
    s += "<tool_call>\n{\"name\": \"" + c.name + "\", \"arguments\": " + PythonJson(Arguments(c)) +
         "}\n</tool_call>";
  }
  return s;
}

std::string GenericCalls(const ChatTurn& t) {
  ojson calls = ojson::array();
  for (const ToolCall& c : t.tool_calls) {
    calls.push_back({{"id", c.id}, {"name", c.name}, {"arguments", Arguments(c)}});
  }
  ojson reply = ojson::object();
  if (!t.content.empty()) reply["response"] = t.content;
  if (calls.size() == 1 && t.content.empty()) {
    reply["tool_call"] = calls[0];
  } else {
    reply["tool_calls"] = calls;
  }
  return PythonJson(reply);
}

std::string NewCallId() {
  static const char kAlnum[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  thread_local std::mt19937 rng(std::random_device{}());
  std::string id = "call_";
  for (int i = 0; i < 24; ++i) id += kAlnum[rng() % 62];
  return id;
}

// The calls of one JSON object {"name", "arguments"}; false if it is not one.
bool ReadCall(const ojson& j, std::vector<ToolCall>* calls) {
  if (!j.is_object() || !j.contains("name") || !j["name"].is_string()) return false;
  ToolCall c;
  c.id = NewCallId();
  c.name = j["name"].get<std::string>();
  const auto args = j.find("arguments");
  if (args == j.end()) {
    c.arguments = "{}";
  } else if (args->is_string()) {
    c.arguments = args->get<std::string>();
  } else {
    c.arguments = args->dump(-1, ' ', false, ojson::error_handler_t::replace);
  }
  calls->push_back(std::move(c));
  return true;
}

// GBNF rules over JSON text shared by the generic syntax's grammar.
const char kGenericRules[] =
    "call-str ::= \"\\\"\" ( [^\"\\\\\\x00-\\x1f] | \"\\\\\" ( [\"\\\\/bfnrt] | \"u\" "
    "[0-9a-fA-F]{4} ) )* \"\\\"\"\n"
    "call-ws ::= ( \" \" | \"\\n\" [ \\t]{0,20} )?\n";

// A GBNF literal of `s` (a tool's name: [A-Za-z0-9_-]).
std::string Quoted(const std::string& s) {
  return "\"" + s + "\"";
}

}  // namespace

ToolSyntax ToolSyntaxOf(ChatTemplate t) {
  return t == ChatTemplate::kChatml ? ToolSyntax::kHermes : ToolSyntax::kGeneric;
}

Status ToolMessages(ToolSyntax syntax, const ToolRequest& tools, const std::vector<ChatTurn>& turns,
                    std::vector<ChatMessage>* out) {
  out->clear();
  std::string system;
  size_t first = 0;
  if (!turns.empty() && turns[0].role == "system") {
    system = turns[0].content;
    first = 1;
  }
  const bool offer = !tools.tools.empty() && tools.choice != ToolChoice::kNone;
  if (offer) {
    out->push_back({"system", syntax == ToolSyntax::kHermes ? HermesSystem(system, tools)
                                                            : GenericSystem(system, tools)});
  } else if (first == 1) {
    out->push_back({"system", system});
  }
  const ChatTurn* calling = nullptr;  // the last assistant turn with calls
  for (size_t k = first; k < turns.size(); ++k) {
    const ChatTurn& t = turns[k];
    if (t.role == "assistant" && !t.tool_calls.empty()) {
      calling = &t;
      out->push_back(
          {"assistant", syntax == ToolSyntax::kHermes ? HermesCalls(t) : GenericCalls(t)});
      continue;
    }
    if (t.role != "tool") {
      out->push_back({t.role, t.content});
      continue;
    }
    const ToolCall* answered = nullptr;
    for (size_t c = 0; calling != nullptr && c < calling->tool_calls.size(); ++c) {
      if (calling->tool_calls[c].id == t.tool_call_id) answered = &calling->tool_calls[c];
    }
    if (answered == nullptr) {
      return Status::Error(
          "messages[%zu]: tool_call_id '%s' answers no call of the assistant's "
          "message before it",
          k, t.tool_call_id.c_str());
    }
    // Results of one turn's calls go together in one user message.
    const bool joins = k > first && turns[k - 1].role == "tool";
    std::string block;
    if (syntax == ToolSyntax::kHermes) {
      block =
          (joins ? "\n" : "") + std::string("<tool_response>\n") + t.content + "\n</tool_response>";
    } else {
      block = (joins ? "\n" : "") + PythonJson(ojson{{"tool_response",
                                                      {{"tool_call_id", t.tool_call_id},
                                                       {"name", answered->name},
                                                       {"content", t.content}}}});
    }
    if (joins) {
      out->back().content += block;
    } else {
      out->push_back({"user", block});
    }
  }
  return Status::Ok();
}

Status ToolGrammar(ToolSyntax syntax, const ToolRequest& tools, std::string* gbnf,
                   std::string* trigger) {
  gbnf->clear();
  trigger->clear();
  std::string rules, names;
  for (size_t i = 0; i < tools.tools.size(); ++i) {
    const ToolDef& t = tools.tools[i];
    if (tools.choice == ToolChoice::kNamed && t.name != tools.named) continue;
    std::string args;
    Status st = JsonSchemaToGbnf(t.parameters, &args);
    if (!st.ok())
      return Status::Error("tools[%zu] (%s): %s", i, t.name.c_str(), st.message().c_str());
    const std::string p = "t" + std::to_string(i) + "-";
    rules += PrefixGbnfRules(args, p);
    const std::string call = "call-" + std::to_string(i);
    names += (names.empty() ? "" : " | ") + call;
    if (syntax == ToolSyntax::kHermes) {
      // The name as its literal with the JSON quotes escaped for GBNF.
      rules += call + " ::= \"\\\"" + t.name + "\\\", \\\"arguments\\\": \" " + p + "root\n";
    } else {
      rules += call + " ::= " + Quoted("\\\"" + t.name + "\\\"") +
               " call-ws \",\" call-ws \"\\\"arguments\\\"\" call-ws \":\" call-ws " + p + "root\n";
    }
  }
  if (names.empty()) return Status::Error("tool_choice: no tool named '%s'", tools.named.c_str());
  if (syntax == ToolSyntax::kHermes) {
    rules += "call ::= \"<tool_call>\\n{\\\"name\\\": \" ( " + names + " ) \"}\\n</tool_call>\"\n";
    rules += std::string("root ::= call") + (tools.parallel ? " ( \"\\n\" call )*" : "") + "\n";
    if (tools.choice == ToolChoice::kAuto) *trigger = "<tool_call>";
  } else {
    rules += kGenericRules;
    rules += "call ::= \"{\" call-ws \"\\\"name\\\"\" call-ws \":\" call-ws ( " + names +
             " ) call-ws \"}\"\n";
    std::string alts = "\"\\\"tool_call\\\"\" call-ws \":\" call-ws call";
    if (tools.parallel) {
      alts +=
          " | \"\\\"tool_calls\\\"\" call-ws \":\" call-ws \"[\" call-ws call ( call-ws \",\" "
          "call-ws call )* call-ws \"]\"";
    }
    if (tools.choice == ToolChoice::kAuto) {
      alts += " | \"\\\"response\\\"\" call-ws \":\" call-ws call-str";
    }
    rules += "root ::= \"{\" call-ws ( " + alts + " ) call-ws \"}\"\n";
  }
  *gbnf = rules;
  return Status::Ok();
}

void ParseToolReply(ToolSyntax syntax, const std::string& text, std::string* content,
                    std::vector<ToolCall>* calls) {
  calls->clear();
  *content = text;
  if (syntax == ToolSyntax::kGeneric) {
    const ojson j = ojson::parse(text, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object()) return;
    std::vector<ToolCall> found;
    bool ok = true;
    if (j.contains("tool_call")) ok = ReadCall(j["tool_call"], &found);
    if (ok && j.contains("tool_calls")) {
      ok = j["tool_calls"].is_array();
      for (size_t i = 0; ok && i < j["tool_calls"].size(); ++i)
        ok = ReadCall(j["tool_calls"][i], &found);
    }
    const auto response = j.find("response");
    if (!ok || (found.empty() && (response == j.end() || !response->is_string()))) return;
    *content = response != j.end() && response->is_string() ? response->get<std::string>() : "";
    *calls = std::move(found);
    return;
  }
  static const std::string kOpen = "<tool_call>", kClose = "</tool_call>";
  size_t at = text.find(kOpen);
  if (at == std::string::npos) return;
  std::vector<ToolCall> found;
  const size_t first = at;
  while (at != std::string::npos) {
    const size_t body = at + kOpen.size();
    const size_t end = text.find(kClose, body);
    const ojson j = ojson::parse(text.substr(body, end == std::string::npos ? end : end - body),
                                 nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !ReadCall(j, &found)) return;
    if (end == std::string::npos) break;
    at = text.find(kOpen, end + kClose.size());
  }
  size_t keep = first;
  while (keep > 0 && (text[keep - 1] == '\n' || text[keep - 1] == ' ')) --keep;
  *content = text.substr(0, keep);
  *calls = std::move(found);
}

size_t SettledToolContent(ToolSyntax syntax, const std::string& text) {
  if (syntax == ToolSyntax::kGeneric) return 0;
  static const std::string kOpen = "<tool_call>";
  size_t end = text.find(kOpen);
  if (end == std::string::npos) {
    end = text.size();
    for (size_t k = std::min(kOpen.size() - 1, text.size()); k > 0; --k) {
      if (text.compare(text.size() - k, k, kOpen, 0, k) == 0) {
        end = text.size() - k;
        break;
      }
    }
  }
  while (end > 0 && (text[end - 1] == '\n' || text[end - 1] == ' ')) --end;
  return end;
}

std::string PythonJson(const nlohmann::ordered_json& j) {
  if (j.is_object()) {
    std::string s = "{";
    bool first = true;
    for (const auto& item : j.items()) {
      if (!first) s += ", ";
      first = false;
      s += ojson(item.key()).dump(-1, ' ', false, ojson::error_handler_t::replace) + ": " +
           PythonJson(item.value());
    }
    return s + "}";
  }
  if (j.is_array()) {
    std::string s = "[";
    for (size_t i = 0; i < j.size(); ++i) s += (i ? ", " : "") + PythonJson(j[i]);
    return s + "]";
  }
  return j.dump(-1, ' ', false, ojson::error_handler_t::replace);
}

std::string PrefixGbnfRules(const std::string& g, const std::string& prefix) {
  std::string out;
  for (size_t i = 0; i < g.size();) {
    const char c = g[i];
    if (c == '"' || c == '[') {
      const char close = c == '"' ? '"' : ']';
      size_t j = i + 1;
      while (j < g.size() && g[j] != close) j += g[j] == '\\' ? 2 : 1;
      j = std::min(j + 1, g.size());
      out.append(g, i, j - i);
      i = j;
    } else if (c == '{' || c == '#') {
      const size_t j = g.find(c == '{' ? '}' : '\n', i);
      const size_t end = j == std::string::npos ? g.size() : j + 1;
      out.append(g, i, end - i);
      i = end;
    } else if (IsGbnfNameChar(c)) {
      size_t j = i;
      while (j < g.size() && IsGbnfNameChar(g[j])) ++j;
      out += prefix;
      out.append(g, i, j - i);
      i = j;
    } else {
      out += c;
      ++i;
    }
  }
  return out;
}

}  // namespace pi
