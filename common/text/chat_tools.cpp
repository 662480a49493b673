#include "common/text/chat_tools.h"

#include <cctype>
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

const char kAlnum[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";

const char kLlama3System[] =
    "Environment: ipython\nCutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n";

std::string Llama3Tools(const ToolRequest& tools) {
  std::string s =
      "Given the following functions, please respond with a JSON for a function call with its "
      "proper arguments that best answers the given prompt.\n\nRespond in the format "
      "{\"name\": function name, \"parameters\": dictionary of argument name and its value}.Do "
      "not use variables.\n\n";
  for (const ToolDef& t : tools.tools) s += PythonJson(ToolSpec(t), 4) + "\n\n";
  return s;
}

std::string Llama3Call(const ToolCall& c) {
  return "{\"name\": \"" + c.name + "\", \"parameters\": " + PythonJson(Arguments(c)) + "}";
}

// Mistral's templates take ids of exactly 9 letters and digits; any other id
// (OpenAI's "call_...") becomes 9 of them, the same each time it is written.
std::string MistralId(const std::string& id) {
  bool ok = id.size() == 9;
  for (char c : id) ok = ok && std::isalnum(static_cast<unsigned char>(c));
  if (ok) return id;
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (char c : id) h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ull;
  std::string out;
  for (int i = 0; i < 9; ++i, h /= 62) out += kAlnum[h % 62];
  return out;
}

// The tools as Mistral's templates list them: a JSON list on one line.
std::string MistralTools(const ToolRequest& tools) {
  std::string s = "[";
  for (size_t i = 0; i < tools.tools.size(); ++i) {
    s += (i ? ", " : "") + PythonJson(ToolSpec(tools.tools[i]));
  }
  return s + "]";
}

std::string MistralCalls(const ChatTurn& t) {
  std::string s = "[";
  for (size_t i = 0; i < t.tool_calls.size(); ++i) {
    const ToolCall& c = t.tool_calls[i];
    const std::string fn = PythonJson(ojson{{"name", c.name}, {"arguments", Arguments(c)}});
    s += (i ? ", " : "") + fn.substr(0, fn.size() - 1) + ", \"id\": \"" + MistralId(c.id) + "\"}";
  }
  return s + "]";
}

std::string NewCallId() {
  thread_local std::mt19937 rng(std::random_device{}());
  std::string id = "call_";
  for (int i = 0; i < 24; ++i) id += kAlnum[rng() % 62];
  return id;
}

// The call of one JSON object {"name", args_key}; false if it is not one.
bool ReadCall(const ojson& j, std::vector<ToolCall>* calls, const char* args_key = "arguments") {
  if (!j.is_object() || !j.contains("name") || !j["name"].is_string()) return false;
  ToolCall c;
  c.id = NewCallId();
  c.name = j["name"].get<std::string>();
  const auto args = j.find(args_key);
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

bool Offered(const ToolRequest& tools) {
  return !tools.tools.empty() && tools.choice != ToolChoice::kNone;
}

// The call of the assistant's turn `calling` that tool turn k answers; an
// error naming the message if none.
Status Answered(const ChatTurn* calling, const ChatTurn& t, size_t k, const ToolCall** out) {
  *out = nullptr;
  for (size_t c = 0; calling != nullptr && c < calling->tool_calls.size(); ++c) {
    if (calling->tool_calls[c].id == t.tool_call_id) *out = &calling->tool_calls[c];
  }
  if (*out != nullptr) return Status::Ok();
  return Status::Error(
      "messages[%zu]: tool_call_id '%s' answers no call of the assistant's message before it", k,
      t.tool_call_id.c_str());
}

// Meta's Llama 3.1 template: contents trimmed, the tools before the first
// user message's text, each call an assistant turn of its own (that
// template takes one call a turn), each result an ipython turn.
Status Llama3Messages(const ToolRequest& tools, const std::vector<ChatTurn>& turns, size_t first,
                      std::vector<ChatMessage>* out) {
  const bool offer = Offered(tools);
  if (offer) {
    out->push_back({"system", kLlama3System + (first ? TrimSpace(turns[0].content) : "")});
  } else if (first == 1) {
    out->push_back({"system", TrimSpace(turns[0].content)});
  }
  bool tools_written = !offer;
  const ChatTurn* calling = nullptr;
  for (size_t k = first; k < turns.size(); ++k) {
    const ChatTurn& t = turns[k];
    if (!tools_written) {
      if (t.role != "user") {
        return Status::Error(
            "messages[%zu]: llama3's template writes the tools into the first message after the "
            "system message, which must then be the user's (this one is %s)",
            k, t.role.c_str());
      }
      out->push_back({"user", Llama3Tools(tools) + TrimSpace(t.content)});
      tools_written = true;
    } else if (t.role == "assistant" && !t.tool_calls.empty()) {
      calling = &t;
      if (!TrimSpace(t.content).empty()) out->push_back({"assistant", TrimSpace(t.content)});
      for (const ToolCall& c : t.tool_calls) out->push_back({"assistant", Llama3Call(c)});
    } else if (t.role == "tool") {
      const ToolCall* answered = nullptr;
      PI_RETURN_IF_ERROR(Answered(calling, t, k, &answered));
      // The template writes a result with tojson: a JSON string.
      out->push_back({"ipython", PythonJson(ojson(t.content))});
    } else {
      out->push_back({t.role, TrimSpace(t.content)});
    }
  }
  if (!tools_written)
    return Status::Error(
        "messages: llama3's template needs a user message to write the tools into");
  return Status::Ok();
}

// Mistral's templates: the tools just before the last user message.
Status MistralMessages(const ToolRequest& tools, const std::vector<ChatTurn>& turns, size_t first,
                       std::vector<ChatMessage>* out) {
  if (first == 1) out->push_back({"system", turns[0].content});
  size_t last_user = turns.size();
  for (size_t k = first; k < turns.size(); ++k) {
    if (turns[k].role == "user") last_user = k;
  }
  if (Offered(tools) && last_user == turns.size()) {
    return Status::Error(
        "messages: mistral's template needs a user message to write the tools before");
  }
  const ChatTurn* calling = nullptr;
  for (size_t k = first; k < turns.size(); ++k) {
    const ChatTurn& t = turns[k];
    if (k == last_user && Offered(tools)) out->push_back({"available_tools", MistralTools(tools)});
    if (t.role == "assistant" && !t.tool_calls.empty()) {
      calling = &t;
      if (!t.content.empty()) out->push_back({"assistant", t.content});
      out->push_back({"tool_calls", MistralCalls(t)});
    } else if (t.role == "tool") {
      const ToolCall* answered = nullptr;
      PI_RETURN_IF_ERROR(Answered(calling, t, k, &answered));
      out->push_back({"tool_results", "{\"content\": " + t.content + ", \"call_id\": \"" +
                                          MistralId(t.tool_call_id) + "\"}"});
    } else {
      out->push_back({t.role, t.content});
    }
  }
  return Status::Ok();
}

}  // namespace

ToolSyntax ToolSyntaxOf(ChatTemplate t) {
  switch (t) {
    case ChatTemplate::kChatml:
      return ToolSyntax::kHermes;
    case ChatTemplate::kLlama3:
      return ToolSyntax::kLlama3;
    case ChatTemplate::kMistralV3:
    case ChatTemplate::kMistralV3Tekken:
      return ToolSyntax::kMistral;
    default:
      return ToolSyntax::kGeneric;
  }
}

Status ToolMessages(ToolSyntax syntax, const ToolRequest& tools, const std::vector<ChatTurn>& turns,
                    std::vector<ChatMessage>* out) {
  out->clear();
  const size_t first = !turns.empty() && turns[0].role == "system" ? 1 : 0;
  if (syntax == ToolSyntax::kLlama3) return Llama3Messages(tools, turns, first, out);
  if (syntax == ToolSyntax::kMistral) return MistralMessages(tools, turns, first, out);
  const std::string system = first ? turns[0].content : "";
  if (Offered(tools)) {
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
    PI_RETURN_IF_ERROR(Answered(calling, t, k, &answered));
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
    if (syntax != ToolSyntax::kGeneric) {
      // The name as its literal with the JSON quotes escaped for GBNF.
      const char* key = syntax == ToolSyntax::kLlama3 ? "parameters" : "arguments";
      rules += call + " ::= \"\\\"" + t.name + "\\\", \\\"" + key + "\\\": \" " + p + "root\n";
    } else {
      rules += call + " ::= " + Quoted("\\\"" + t.name + "\\\"") +
               " call-ws \",\" call-ws \"\\\"arguments\\\"\" call-ws \":\" call-ws " + p + "root\n";
    }
  }
  if (names.empty()) return Status::Error("tool_choice: no tool named '%s'", tools.named.c_str());
  const bool lazy = tools.choice == ToolChoice::kAuto;
  if (syntax == ToolSyntax::kHermes) {
    rules += "call ::= \"<tool_call>\\n{\\\"name\\\": \" ( " + names + " ) \"}\\n</tool_call>\"\n";
    rules += std::string("root ::= call") + (tools.parallel ? " ( \"\\n\" call )*" : "") + "\n";
    if (lazy) *trigger = "<tool_call>";
  } else if (syntax == ToolSyntax::kLlama3) {
    // One call a reply: Llama 3.1's template takes no more.
    rules += "root ::= \"{\\\"name\\\": \" ( " + names + " ) \"}\"\n";
    if (lazy) *trigger = "{\"name\": \"";
  } else if (syntax == ToolSyntax::kMistral) {
    // After [TOOL_CALLS] (invisible): " [" in 7B v0.3's spelling, "[" in Nemo's.
    rules += "call ::= \"{\\\"name\\\": \" ( " + names + " ) \"}\"\n";
    rules += std::string("root ::= \" \"? \"[\" call") +
             (tools.parallel ? " ( \", \" call )*" : "") + " \"]\"\n";
    if (lazy) *trigger = "[{\"name\": \"";
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

std::string ToolPrefill(ToolSyntax syntax, const ToolRequest& tools) {
  const bool required = tools.choice == ToolChoice::kRequired || tools.choice == ToolChoice::kNamed;
  return syntax == ToolSyntax::kMistral && required && !tools.tools.empty() ? "[TOOL_CALLS]" : "";
}

namespace {

// Where a call may begin in each syntax's reply ("" for generic: all JSON).
const std::string& CallOpening(ToolSyntax syntax) {
  static const std::string kHermes = "<tool_call>", kLlama3 = "{\"name\"", kMistral = "[{\"name\"",
                           kNone;
  switch (syntax) {
    case ToolSyntax::kHermes:
      return kHermes;
    case ToolSyntax::kLlama3:
      return kLlama3;
    case ToolSyntax::kMistral:
      return kMistral;
    default:
      return kNone;
  }
}

// One past the end of the JSON object or array opening at text[at], or npos
// when the text ends first (strings and their escapes skipped; whether it is
// well-formed is the parser's to say).
size_t JsonValueEnd(const std::string& text, size_t at) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = at; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      ++depth;
    } else if ((c == '}' || c == ']') && --depth == 0) {
      return i + 1;
    }
  }
  return std::string::npos;
}

// The calls of a JSON list of them cut short, its '[' at text[at]: each
// whole element up to the first that is cut or is not a call.
void CompleteListCalls(const std::string& text, size_t at, std::vector<ToolCall>* calls) {
  static const char kSpace[] = " \n\r\t";
  size_t i = at + 1;
  for (;;) {
    i = text.find_first_not_of(kSpace, i);
    if (i == std::string::npos || text[i] != '{') return;
    const size_t end = JsonValueEnd(text, i);
    if (end == std::string::npos) return;
    const ojson j = ojson::parse(text.substr(i, end - i), nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !ReadCall(j, calls)) return;
    i = text.find_first_not_of(kSpace, end);
    if (i == std::string::npos || text[i] != ',') return;
    ++i;
  }
}

// The generic syntax's one JSON object: true with its calls and response.
bool ParseGeneric(const std::string& text, std::string* content, std::vector<ToolCall>* calls) {
  const ojson j = ojson::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return false;
  std::vector<ToolCall> found;
  bool ok = true;
  if (j.contains("tool_call")) ok = ReadCall(j["tool_call"], &found);
  if (ok && j.contains("tool_calls")) {
    ok = j["tool_calls"].is_array();
    for (size_t i = 0; ok && i < j["tool_calls"].size(); ++i)
      ok = ReadCall(j["tool_calls"][i], &found);
  }
  const auto response = j.find("response");
  if (!ok || (found.empty() && (response == j.end() || !response->is_string()))) return false;
  *content = response != j.end() && response->is_string() ? response->get<std::string>() : "";
  *calls = std::move(found);
  return true;
}

// Hermes' <tool_call> blocks from `at` on: true with their calls (`cut`:
// also with those before a last block the reply's end cut short).
bool ParseHermes(const std::string& text, size_t at, bool cut, std::vector<ToolCall>* calls) {
  static const std::string kOpen = "<tool_call>", kClose = "</tool_call>";
  while (at != std::string::npos) {
    const size_t body = at + kOpen.size();
    const size_t end = text.find(kClose, body);
    const ojson j = ojson::parse(text.substr(body, end == std::string::npos ? end : end - body),
                                 nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !ReadCall(j, calls)) {
      return cut && end == std::string::npos && !calls->empty();
    }
    if (end == std::string::npos) break;
    at = text.find(kOpen, end + kClose.size());
  }
  return true;
}

// The generic syntax's reply cut inside its "tool_calls" list: its whole calls.
bool ParseCutGeneric(const std::string& text, std::vector<ToolCall>* calls) {
  static const std::string kKey = "\"tool_calls\"";
  const size_t open = text.find_first_not_of(" \n\r\t");
  if (open == std::string::npos || text[open] != '{') return false;
  const size_t key = text.find_first_not_of(" \n\r\t", open + 1);
  if (key == std::string::npos || text.compare(key, kKey.size(), kKey) != 0) return false;
  const size_t colon = text.find_first_not_of(" \n\r\t", key + kKey.size());
  if (colon == std::string::npos || text[colon] != ':') return false;
  const size_t list = text.find_first_not_of(" \n\r\t", colon + 1);
  if (list == std::string::npos || text[list] != '[') return false;
  CompleteListCalls(text, list, calls);
  return !calls->empty();
}

}  // namespace

void ParseToolReply(ToolSyntax syntax, const std::string& text, std::string* content,
                    std::vector<ToolCall>* calls, bool cut) {
  calls->clear();
  *content = text;
  if (syntax == ToolSyntax::kGeneric) {
    if (!ParseGeneric(text, content, calls) && cut && ParseCutGeneric(text, calls))
      content->clear();
    return;
  }
  const size_t first = text.find(CallOpening(syntax));
  if (first == std::string::npos) return;
  std::vector<ToolCall> found;
  if (syntax == ToolSyntax::kHermes) {
    if (!ParseHermes(text, first, cut, &found)) return;
  } else {
    // The rest of the text one JSON value: Llama 3's call, Mistral's list.
    const ojson j = ojson::parse(text.substr(first), nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() && cut && syntax == ToolSyntax::kMistral) {
      CompleteListCalls(text, first, &found);
      if (found.empty()) return;
    } else if (j.is_discarded()) {
      return;
    } else if (syntax == ToolSyntax::kLlama3) {
      if (!ReadCall(j, &found, j.contains("parameters") ? "parameters" : "arguments")) return;
    } else {
      if (!j.is_array() || j.empty()) return;
      for (const ojson& c : j) {
        if (!ReadCall(c, &found)) return;
      }
    }
  }
  std::string before = text.substr(0, first);
  // Mistral's marker, where a vocabulary spells it as text.
  static const std::string kMarker = "[TOOL_CALLS]";
  const size_t marker = before.rfind(kMarker);
  if (syntax == ToolSyntax::kMistral && marker != std::string::npos &&
      before.find_first_not_of(" \n", marker + kMarker.size()) == std::string::npos) {
    before.resize(marker);
  }
  size_t keep = before.size();
  while (keep > 0 && (before[keep - 1] == '\n' || before[keep - 1] == ' ')) --keep;
  *content = before.substr(0, keep);
  *calls = std::move(found);
}

size_t SettledToolContent(ToolSyntax syntax, const std::string& text) {
  if (syntax == ToolSyntax::kGeneric) return 0;
  const std::string& open = CallOpening(syntax);
  size_t end = text.find(open);
  if (end == std::string::npos) {
    end = text.size();
    for (size_t k = std::min(open.size() - 1, text.size()); k > 0; --k) {
      if (text.compare(text.size() - k, k, open, 0, k) == 0) {
        end = text.size() - k;
        break;
      }
    }
  }
  while (end > 0 && (text[end - 1] == '\n' || text[end - 1] == ' ')) --end;
  return end;
}

namespace {

std::string PythonJsonAt(const ojson& j, int indent, int depth) {
  const bool lines = indent > 0;
  const std::string in =
      lines ? "\n" + std::string(static_cast<size_t>(indent * (depth + 1)), ' ') : "";
  const std::string out = lines ? "\n" + std::string(static_cast<size_t>(indent * depth), ' ') : "";
  const char* sep = lines ? "," : ", ";
  if (j.is_object() && !j.empty()) {
    std::string s = "{";
    bool first = true;
    for (const auto& item : j.items()) {
      s += (first ? "" : sep) + in;
      first = false;
      s += ojson(item.key()).dump(-1, ' ', false, ojson::error_handler_t::replace) + ": " +
           PythonJsonAt(item.value(), indent, depth + 1);
    }
    return s + out + "}";
  }
  if (j.is_array() && !j.empty()) {
    std::string s = "[";
    for (size_t i = 0; i < j.size(); ++i) {
      s += (i ? sep : "") + in + PythonJsonAt(j[i], indent, depth + 1);
    }
    return s + out + "]";
  }
  return j.dump(-1, ' ', false, ojson::error_handler_t::replace);
}

}  // namespace

std::string PythonJson(const nlohmann::ordered_json& j, int indent) {
  return PythonJsonAt(j, indent, 0);
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
