#include "coordinator/serve/output_constraint.h"

#include <initializer_list>
#include <string>
#include <utility>

#include "common/text/json_schema_grammar.h"

namespace pi {
namespace {

using json = nlohmann::json;

// The grammar of a schema found at `path` in the body, read again keeping
// its keys' order (json sorts them), so that properties come as declared.
Status SchemaAt(const std::string& body, std::initializer_list<const char*> path,
                bool in_response_format, std::string* gbnf) {
  const nlohmann::ordered_json whole = nlohmann::ordered_json::parse(body, nullptr, false);
  const nlohmann::ordered_json* at = &whole;
  for (const char* key : path) {
    // The same body read twice: only a key given twice could differ.
    const auto next = at->is_object() ? at->find(key) : at->end();
    if (next == at->end()) return Status::Error("%s: given twice, or not an object", key);
    at = &*next;
  }
  const Status st = JsonSchemaToGbnf(*at, gbnf);
  if (st.ok() || !in_response_format) return st;
  return Status::Error("response_format: %s", st.message().c_str());
}

// A chat's response_format: text (no constraint), json_object (any JSON
// object, or llama-server's `schema` beside the type), json_schema
// ({name, description, schema, strict}: the schema's texts). *gbnf stays
// empty for text.
Status ResponseFormat(const std::string& body, const json& j, std::string* gbnf) {
  const auto it = j.find("response_format");
  if (it == j.end() || it->is_null()) return Status::Ok();
  if (!it->is_object() || !it->contains("type") || !(*it)["type"].is_string()) {
    return Status::Error("response_format must be {\"type\": ...}");
  }
  const std::string type = (*it)["type"].get<std::string>();
  for (const auto& item : it->items()) {
    const std::string& key = item.key();
    const bool known = key == "type" || (type == "json_object" && key == "schema") ||
                       (type == "json_schema" && key == "json_schema");
    if (!known) {
      return Status::Error("response_format: unrecognized field %s for type %s", key.c_str(),
                           type.c_str());
    }
  }
  if (type == "text") return Status::Ok();
  if (type == "json_object") {
    if (it->contains("schema")) return SchemaAt(body, {"response_format", "schema"}, true, gbnf);
    return JsonSchemaToGbnf(nlohmann::ordered_json{{"type", "object"}}, gbnf);
  }
  if (type != "json_schema") {
    return Status::Error("response_format: type must be text, json_object or json_schema, got %s",
                         type.c_str());
  }
  const auto js = it->find("json_schema");
  if (js == it->end() || !js->is_object()) {
    return Status::Error("response_format: json_schema must be {name, schema, ...}");
  }
  for (const auto& item : js->items()) {
    const std::string& key = item.key();
    if (key == "name" || key == "description") {
      if (!item.value().is_string()) {
        return Status::Error("response_format: json_schema.%s must be a string", key.c_str());
      }
    } else if (key == "strict") {
      if (!item.value().is_boolean() && !item.value().is_null()) {
        return Status::Error("response_format: json_schema.strict must be true or false");
      }
    } else if (key != "schema") {
      return Status::Error("response_format: json_schema: unrecognized field %s", key.c_str());
    }
  }
  // Without a schema the reply is any JSON value, as OpenAI's is.
  if (!js->contains("schema")) return JsonSchemaToGbnf(nlohmann::ordered_json::object(), gbnf);
  return SchemaAt(body, {"response_format", "json_schema", "schema"}, true, gbnf);
}

}  // namespace

Status ReadOutputConstraint(const std::string& body, const json& j, v1::GenerateRequest* req) {
  std::string gbnf;
  int given = 0;
  const auto grammar = j.find("grammar");
  if (grammar != j.end() && !grammar->is_null()) {
    if (!grammar->is_string()) return Status::Error("grammar must be a string (GBNF)");
    gbnf = grammar->get<std::string>();
    given += gbnf.empty() ? 0 : 1;
  }
  const auto schema = j.find("json_schema");
  if (schema != j.end() && !schema->is_null()) {
    if (!schema->is_object() && !schema->is_boolean()) {
      return Status::Error("json_schema must be a JSON schema (an object)");
    }
    if (given > 0) return Status::Error("grammar and json_schema: give one");
    PI_RETURN_IF_ERROR(SchemaAt(body, {"json_schema"}, false, &gbnf));
    ++given;
  }
  std::string format;
  PI_RETURN_IF_ERROR(ResponseFormat(body, j, &format));
  if (!format.empty()) {
    if (given > 0) return Status::Error("response_format and grammar or json_schema: give one");
    gbnf = std::move(format);
  }
  req->set_grammar(gbnf);
  return Status::Ok();
}

}  // namespace pi
