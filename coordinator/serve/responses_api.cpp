#include "coordinator/serve/responses_api.h"

#include <cstring>
#include <utility>

namespace pi {
namespace {

using ojson = nlohmann::ordered_json;

// Refused with what to do instead; any other field outside the subset is
// an unrecognized argument.
struct Refused {
  const char* field;
  const char* what;
};
const Refused kRefused[] = {
    {"previous_response_id",
     "stored responses are not supported by this server: send the whole conversation as input"},
    {"conversation",
     "stored conversations are not supported by this server: send the whole conversation as "
     "input"},
    {"reasoning", "reasoning settings are not supported by this server"},
    {"background", "background responses are not supported by this server"},
    {"include", "extra output data is not supported by this server"},
    {"metadata", "stored responses are not supported by this server"},
    {"prompt", "stored prompts are not supported by this server: send instructions and input"},
};

// Each key of `o` is one of `keys`, else the error names it under `where`.
Status OnlyKeys(const ojson& o, std::initializer_list<const char*> keys, const std::string& where) {
  for (const auto& item : o.items()) {
    bool known = false;
    for (const char* k : keys) known = known || item.key() == k;
    if (!known)
      return Status::Error("%s.%s: unrecognized field", where.c_str(), item.key().c_str());
  }
  return Status::Ok();
}

// A message's content: a string, or input_text / output_text parts.
Status Content(const ojson& content, size_t i, ojson* out) {
  if (content.is_string()) {
    *out = content;
    return Status::Ok();
  }
  if (!content.is_array()) {
    return Status::Error("input[%zu].content must be a string or an array of text parts", i);
  }
  *out = ojson::array();
  for (size_t k = 0; k < content.size(); ++k) {
    const ojson& p = content[k];
    const std::string where = "input[" + std::to_string(i) + "].content[" + std::to_string(k) + "]";
    if (!p.is_object() || !p.contains("type") || !p["type"].is_string()) {
      return Status::Error("%s must be {type, text}", where.c_str());
    }
    const std::string type = p["type"].get<std::string>();
    if (type != "input_text" && type != "output_text") {
      return Status::Error("%s: %s parts are not supported by this server: text only",
                           where.c_str(), type.c_str());
    }
    PI_RETURN_IF_ERROR(OnlyKeys(p, {"type", "text", "annotations", "logprobs"}, where));
    if (!p.contains("text") || !p["text"].is_string()) {
      return Status::Error("%s.text must be a string", where.c_str());
    }
    out->push_back({{"type", "text"}, {"text", p["text"]}});
  }
  return Status::Ok();
}

Status StringField(const ojson& o, const char* key, const std::string& where) {
  if (!o.contains(key) || !o[key].is_string()) {
    return Status::Error("%s.%s must be a string", where.c_str(), key);
  }
  return Status::Ok();
}

// One input item into the chat's messages.
Status Item(const ojson& it, size_t i, ojson* messages) {
  const std::string where = "input[" + std::to_string(i) + "]";
  if (!it.is_object()) return Status::Error("%s must be an object", where.c_str());
  const std::string type =
      it.contains("type") && it["type"].is_string() ? it["type"].get<std::string>() : "message";
  if (type == "message") {
    PI_RETURN_IF_ERROR(OnlyKeys(it, {"type", "role", "content", "id", "status"}, where));
    PI_RETURN_IF_ERROR(StringField(it, "role", where));
    const std::string role = it["role"].get<std::string>();
    if (role != "user" && role != "system" && role != "developer" && role != "assistant") {
      return Status::Error("%s.role must be user, system, developer or assistant", where.c_str());
    }
    ojson content;
    PI_RETURN_IF_ERROR(Content(it.contains("content") ? it["content"] : ojson(), i, &content));
    messages->push_back({{"role", role}, {"content", std::move(content)}});
  } else if (type == "function_call") {
    PI_RETURN_IF_ERROR(
        OnlyKeys(it, {"type", "call_id", "name", "arguments", "id", "status"}, where));
    for (const char* key : {"call_id", "name", "arguments"}) {
      PI_RETURN_IF_ERROR(StringField(it, key, where));
    }
    // Calls one after another: one assistant message.
    if (messages->empty() || messages->back()["role"] != "assistant" ||
        !messages->back().contains("tool_calls")) {
      messages->push_back(
          {{"role", "assistant"}, {"content", nullptr}, {"tool_calls", ojson::array()}});
    }
    messages->back()["tool_calls"].push_back(
        {{"id", it["call_id"]},
         {"type", "function"},
         {"function", {{"name", it["name"]}, {"arguments", it["arguments"]}}}});
  } else if (type == "function_call_output") {
    PI_RETURN_IF_ERROR(OnlyKeys(it, {"type", "call_id", "output", "id", "status"}, where));
    PI_RETURN_IF_ERROR(StringField(it, "call_id", where));
    PI_RETURN_IF_ERROR(StringField(it, "output", where));
    messages->push_back(
        {{"role", "tool"}, {"tool_call_id", it["call_id"]}, {"content", it["output"]}});
  } else {
    return Status::Error("%s: items of type %s are not supported by this server", where.c_str(),
                         type.c_str());
  }
  return Status::Ok();
}

// instructions, then the input's items; instructions and a first system
// (developer) message of text become one system message.
Status Messages(const ojson& j, ojson* messages) {
  const auto input = j.find("input");
  if (input == j.end()) return Status::Error("input is required");
  if (input->is_string()) {
    messages->push_back({{"role", "user"}, {"content", *input}});
  } else if (!input->is_array() || input->empty()) {
    return Status::Error("input must be a string or a non-empty array of items");
  } else {
    for (size_t i = 0; i < input->size(); ++i) PI_RETURN_IF_ERROR(Item((*input)[i], i, messages));
  }
  const auto instructions = j.find("instructions");
  if (instructions == j.end() || instructions->is_null()) return Status::Ok();
  if (!instructions->is_string()) return Status::Error("instructions must be a string");
  ojson& first = (*messages)[0];
  const bool system = first["role"] == "system" || first["role"] == "developer";
  if (system && first["content"].is_string()) {
    first["content"] =
        instructions->get<std::string>() + "\n\n" + first["content"].get<std::string>();
    first["role"] = "system";
  } else {
    messages->insert(messages->begin(), ojson{{"role", "system"}, {"content", *instructions}});
  }
  return Status::Ok();
}

// Flat function tools ({type, name, description, parameters, strict}) as the chat's.
Status Tools(const ojson& tools, ojson* out) {
  if (!tools.is_array()) return Status::Error("tools must be an array of function tools");
  *out = ojson::array();
  for (size_t i = 0; i < tools.size(); ++i) {
    const ojson& t = tools[i];
    const std::string where = "tools[" + std::to_string(i) + "]";
    if (!t.is_object() || !t.contains("type") || !t["type"].is_string()) {
      return Status::Error("%s must be {type: \"function\", name, ...}", where.c_str());
    }
    if (t["type"] != "function") {
      return Status::Error("%s: %s tools are not supported by this server: function tools only",
                           where.c_str(), t["type"].get<std::string>().c_str());
    }
    PI_RETURN_IF_ERROR(OnlyKeys(t, {"type", "name", "description", "parameters", "strict"}, where));
    ojson fn = ojson::object();
    for (const auto& item : t.items()) {
      if (item.key() != "type" && !item.value().is_null()) fn[item.key()] = item.value();
    }
    out->push_back({{"type", "function"}, {"function", std::move(fn)}});
  }
  return Status::Ok();
}

Status ChatToolChoice(const ojson& c, ojson* out) {
  if (c.is_string()) {
    *out = c;
    return Status::Ok();
  }
  if (c.is_object() && c.contains("type") && c["type"] == "function" && c.contains("name")) {
    PI_RETURN_IF_ERROR(OnlyKeys(c, {"type", "name"}, "tool_choice"));
    *out = {{"type", "function"}, {"function", {{"name", c["name"]}}}};
    return Status::Ok();
  }
  return Status::Error(
      "tool_choice must be none, auto, required or {\"type\": \"function\", \"name\": ...}");
}

// text.format as the chat's response_format (none for plain text).
Status TextFormat(const ojson& text, ojson* chat) {
  if (!text.is_object()) return Status::Error("text must be {format: {...}}");
  PI_RETURN_IF_ERROR(OnlyKeys(text, {"format"}, "text"));
  const auto format = text.find("format");
  if (format == text.end() || format->is_null()) return Status::Ok();
  if (!format->is_object() || !format->contains("type") || !(*format)["type"].is_string()) {
    return Status::Error("text.format must be {type: text | json_object | json_schema, ...}");
  }
  const std::string type = (*format)["type"].get<std::string>();
  if (type == "text") return OnlyKeys(*format, {"type"}, "text.format");
  if (type == "json_object") {
    PI_RETURN_IF_ERROR(OnlyKeys(*format, {"type"}, "text.format"));
    (*chat)["response_format"] = {{"type", "json_object"}};
    return Status::Ok();
  }
  if (type != "json_schema") {
    return Status::Error("text.format.type must be text, json_object or json_schema");
  }
  PI_RETURN_IF_ERROR(
      OnlyKeys(*format, {"type", "name", "schema", "strict", "description"}, "text.format"));
  ojson schema = ojson::object();
  for (const auto& item : format->items()) {
    if (item.key() != "type") schema[item.key()] = item.value();
  }
  (*chat)["response_format"] = {{"type", "json_schema"}, {"json_schema", std::move(schema)}};
  return Status::Ok();
}

// The settings that take one value only here.
Status Switches(const ojson& j) {
  const auto store = j.find("store");
  if (store != j.end() && !store->is_null() && *store != false) {
    return Status::Error(
        "store: stored responses are not supported by this server: send store: false");
  }
  const auto truncation = j.find("truncation");
  if (truncation != j.end() && !truncation->is_null() && *truncation != "disabled") {
    return Status::Error("truncation: only \"disabled\" is supported by this server");
  }
  return Status::Ok();
}

}  // namespace

Status ResponsesToChat(const std::string& body, std::string* chat_body, ResponsesEcho* echo) {
  const ojson j = ojson::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return Status::Error("the body must be a JSON object");
  static const char* const kKnown[] = {
      "model",       "input", "instructions",      "tools", "tool_choice", "parallel_tool_calls",
      "temperature", "top_p", "max_output_tokens", "text",  "stream",      "store",
      "truncation",  "user"};
  for (const auto& item : j.items()) {
    const std::string& key = item.key();
    bool known = false;
    for (const char* k : kKnown) known = known || key == k;
    if (known) continue;
    for (const Refused& r : kRefused) {
      if (key == r.field) return Status::Error("%s: %s", r.field, r.what);
    }
    return Status::Error("unrecognized request argument: %s", key.c_str());
  }
  PI_RETURN_IF_ERROR(Switches(j));
  ojson chat = ojson::object();
  ojson messages = ojson::array();
  PI_RETURN_IF_ERROR(Messages(j, &messages));
  chat["messages"] = std::move(messages);
  for (const char* key :
       {"model", "temperature", "top_p", "parallel_tool_calls", "user", "stream"}) {
    if (j.contains(key)) chat[key] = j[key];
  }
  if (j.contains("max_output_tokens") && !j["max_output_tokens"].is_null()) {
    chat["max_completion_tokens"] = j["max_output_tokens"];
  }
  if (j.contains("tools") && !j["tools"].is_null()) {
    PI_RETURN_IF_ERROR(Tools(j["tools"], &chat["tools"]));
  }
  if (j.contains("tool_choice") && !j["tool_choice"].is_null()) {
    PI_RETURN_IF_ERROR(ChatToolChoice(j["tool_choice"], &chat["tool_choice"]));
  }
  if (j.contains("text") && !j["text"].is_null()) PI_RETURN_IF_ERROR(TextFormat(j["text"], &chat));
  *chat_body = chat.dump();
  // What the response echoes, OpenAI's defaults where the request is silent.
  ojson& e = echo->fields;
  auto given = [&](const char* key, ojson fallback) {
    e[key] = j.contains(key) && !j[key].is_null() ? j[key] : std::move(fallback);
  };
  given("instructions", nullptr);
  given("max_output_tokens", nullptr);
  given("parallel_tool_calls", true);
  given("temperature", 1.0);
  given("text", {{"format", {{"type", "text"}}}});
  given("tool_choice", "auto");
  given("tools", ojson::array());
  given("top_p", 1.0);
  return Status::Ok();
}

namespace {

std::string Suffix(const std::string& id) {
  return id.substr(id.find('_') + 1);
}

ojson MessageItem(const std::string& response_id, const char* status, const std::string& text,
                  bool with_part) {
  ojson content = ojson::array();
  if (with_part) {
    content.push_back({{"type", "output_text"}, {"text", text}, {"annotations", ojson::array()}});
  }
  return {{"type", "message"},
          {"id", "msg_" + Suffix(response_id)},
          {"status", status},
          {"role", "assistant"},
          {"content", std::move(content)}};
}

ojson CallItem(const ToolCall& c, const char* status, bool with_arguments) {
  return {{"type", "function_call"},
          {"id", "fc_" + Suffix(c.id)},
          {"call_id", c.id},
          {"name", c.name},
          {"arguments", with_arguments ? c.arguments : ""},
          {"status", status}};
}

// The response object: `output` as given, usage when the tokens are known (>= 0).
ojson ResponseObject(const std::string& id, int64_t created_at, const std::string& model,
                     const ResponsesEcho& echo, const char* status, ojson output, int input_tokens,
                     int output_tokens) {
  const bool incomplete = std::string(status) == "incomplete";
  ojson j = {
      {"id", id},
      {"object", "response"},
      {"created_at", created_at},
      {"status", status},
      {"error", nullptr},
      {"incomplete_details", incomplete ? ojson{{"reason", "max_output_tokens"}} : ojson(nullptr)},
      {"model", model},
      {"output", std::move(output)}};
  for (const auto& item : echo.fields.items()) j[item.key()] = item.value();
  j["usage"] = nullptr;
  if (input_tokens >= 0) {
    j["usage"] = {{"input_tokens", input_tokens},
                  {"input_tokens_details", {{"cached_tokens", 0}}},
                  {"output_tokens", output_tokens},
                  {"output_tokens_details", {{"reasoning_tokens", 0}}},
                  {"total_tokens", input_tokens + output_tokens}};
  }
  return j;
}

ojson FinalOutput(const std::string& id, const char* status, const std::string& content,
                  const std::vector<ToolCall>& calls) {
  ojson output = ojson::array();
  if (!content.empty() || calls.empty()) output.push_back(MessageItem(id, status, content, true));
  for (const ToolCall& c : calls) output.push_back(CallItem(c, "completed", true));
  return output;
}

std::string Dump(const ojson& j) {
  return j.dump(-1, ' ', false, ojson::error_handler_t::replace);
}

}  // namespace

std::string ResponseJson(const std::string& id, int64_t created_at, const std::string& model,
                         const ResponsesEcho& echo, const std::string& content,
                         const std::vector<ToolCall>& calls, bool at_limit, int input_tokens,
                         int output_tokens) {
  const char* status = at_limit ? "incomplete" : "completed";
  return Dump(ResponseObject(id, created_at, model, echo, status,
                             FinalOutput(id, status, content, calls), input_tokens, output_tokens));
}

ResponsesStream::ResponsesStream(std::string id, int64_t created_at, std::string model,
                                 ResponsesEcho echo)
    : id_(std::move(id)),
      created_at_(created_at),
      model_(std::move(model)),
      echo_(std::move(echo)) {}

void ResponsesStream::Event(const char* type, ojson data, std::string* out) {
  ojson j = {{"type", type}, {"sequence_number", seq_++}};
  for (const auto& item : data.items()) j[item.key()] = item.value();
  *out += std::string("event: ") + type + "\ndata: " + Dump(j) + "\n\n";
}

void ResponsesStream::Open(std::string* out) {
  if (opened_) return;
  opened_ = true;
  for (const char* type : {"response.created", "response.in_progress"}) {
    Event(type,
          {{"response",
            ResponseObject(id_, created_at_, model_, echo_, "in_progress", ojson::array(), -1, 0)}},
          out);
  }
}

void ResponsesStream::OpenMessage(std::string* out) {
  Open(out);
  if (message_open_) return;
  message_open_ = true;
  Event("response.output_item.added",
        {{"output_index", 0}, {"item", MessageItem(id_, "in_progress", "", false)}}, out);
  Event("response.content_part.added",
        {{"item_id", "msg_" + Suffix(id_)},
         {"output_index", 0},
         {"content_index", 0},
         {"part", {{"type", "output_text"}, {"text", ""}, {"annotations", ojson::array()}}}},
        out);
}

void ResponsesStream::Text(const std::string& delta, std::string* out) {
  if (delta.empty()) {
    Open(out);
    return;
  }
  OpenMessage(out);
  Event("response.output_text.delta",
        {{"item_id", "msg_" + Suffix(id_)},
         {"output_index", 0},
         {"content_index", 0},
         {"delta", delta}},
        out);
  sent_ += delta;
}

void ResponsesStream::End(const std::string& content, const std::vector<ToolCall>& calls,
                          bool at_limit, int input_tokens, int output_tokens, std::string* out) {
  const char* status = at_limit ? "incomplete" : "completed";
  // What the text has beyond what went out (what went out is where it starts).
  if (content.size() > sent_.size()) Text(content.substr(sent_.size()), out);
  if (calls.empty()) OpenMessage(out);  // an empty reply is an empty message
  Open(out);
  int index = 0;
  if (message_open_) {
    const std::string item_id = "msg_" + Suffix(id_);
    Event("response.output_text.done",
          {{"item_id", item_id}, {"output_index", 0}, {"content_index", 0}, {"text", content}},
          out);
    Event("response.content_part.done",
          {{"item_id", item_id},
           {"output_index", 0},
           {"content_index", 0},
           {"part", {{"type", "output_text"}, {"text", content}, {"annotations", ojson::array()}}}},
          out);
    Event("response.output_item.done",
          {{"output_index", 0}, {"item", MessageItem(id_, status, content, true)}}, out);
    index = 1;
  }
  ojson output = ojson::array();
  if (message_open_) output.push_back(MessageItem(id_, status, content, true));
  for (const ToolCall& c : calls) {
    const std::string item_id = "fc_" + Suffix(c.id);
    Event("response.output_item.added",
          {{"output_index", index}, {"item", CallItem(c, "in_progress", false)}}, out);
    Event("response.function_call_arguments.delta",
          {{"item_id", item_id}, {"output_index", index}, {"delta", c.arguments}}, out);
    Event("response.function_call_arguments.done",
          {{"item_id", item_id}, {"output_index", index}, {"arguments", c.arguments}}, out);
    Event("response.output_item.done",
          {{"output_index", index}, {"item", CallItem(c, "completed", true)}}, out);
    output.push_back(CallItem(c, "completed", true));
    ++index;
  }
  Event(at_limit ? "response.incomplete" : "response.completed",
        {{"response", ResponseObject(id_, created_at_, model_, echo_, status, std::move(output),
                                     input_tokens, output_tokens)}},
        out);
}

void ResponsesStream::Fail(const std::string& message, std::string* out) {
  Open(out);
  ojson failed = ResponseObject(id_, created_at_, model_, echo_, "failed", ojson::array(), -1, 0);
  failed["error"] = {{"code", "server_error"}, {"message", message}};
  Event("response.failed", {{"response", std::move(failed)}}, out);
}

Status InResponsesTerms(const Status& chat_error) {
  if (chat_error.ok()) return chat_error;
  static const std::pair<const char*, const char*> kNames[] = {
      {"max_completion_tokens", "max_output_tokens"},
      {"response_format: json_schema: ", "text.format: "},
      {"response_format", "text.format"},
  };
  std::string message = chat_error.message();
  for (const auto& [chat, responses] : kNames) {
    for (size_t at = message.find(chat); at != std::string::npos;
         at = message.find(chat, at + std::strlen(responses))) {
      message.replace(at, std::strlen(chat), responses);
    }
  }
  return Status::FromCode(chat_error.code(), message);
}

}  // namespace pi
