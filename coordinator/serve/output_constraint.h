// ReadOutputConstraint: what a completion body asks its output to match,
// as the GBNF grammar of the request (ParseGenerateRequest reads and checks
// it): llama-server's `grammar` (GBNF text) and `json_schema`, and a chat's
// `response_format` (OpenAI's json_schema {name, description, schema,
// strict}; json_object, any JSON object, or with llama-server's `schema`
// beside the type). At most one of them; a schema outside the subset
// (json_schema_grammar.h) is an error naming its keyword and path.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "common/base/status.h"
#include "proto/pi.pb.h"

namespace pi {

// `j` is `body` parsed; a schema is read again from `body` keeping its keys'
// order (nlohmann::json sorts them), so properties come as declared.
Status ReadOutputConstraint(const std::string& body, const nlohmann::json& j,
                            v1::GenerateRequest* req);

}  // namespace pi
