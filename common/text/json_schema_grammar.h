// JsonSchemaToGbnf: a JSON Schema (OpenAI's response_format {"type": "json_schema"},
// llama-server's json_schema field) as a GBNF grammar (grammar.h) whose texts are JSON texts
// valid under the schema, so that sampling can be held to the schema token by token.
//
// The grammar accepts only valid texts (oneOf aside, below): a keyword that constrains values
// and is not implemented exactly is refused by name with its JSON pointer
// ("json_schema: /properties/age: keyword 'not' is not supported"; the root is "/"). It is a
// subset of the valid texts in these deliberate ways, so that a model cannot wander:
//   - whitespace: `ws ::= ( " " | "\n" [ \t]{0,20} )?` between tokens (one space, or one
//     line break and an indent), none before or after the text;
//   - numbers: at most 16 digits before the point, 16 after it, 3 in the exponent; integers
//     have neither fraction nor exponent ("1.0" is not written);
//   - strings: characters as themselves, or escaped by \" \\ \/ \b \f \n \r \t or \uXXXX
//     outside the surrogates (a character beyond U+FFFF is written as itself, so that
//     minLength/maxLength count code points exactly);
//   - enum and const values: only their compact JSON text (nlohmann's dump);
//   - objects: properties in the schema's order (nlohmann::json sorts keys, so pass an
//     ordered_json to keep the declared order), further properties after the declared ones,
//     under keys that are no declared name (such a key may use an escape only once it has
//     left every declared name's prefix, since an escape could spell one);
//   - formats: time and date-time without leap seconds, with "T" and "Z" upper case and at most
//     9 fraction digits.
// Deliberate deviation: an absent additionalProperties is false when `properties` is given (as
// OpenAI's strict mode and llama.cpp have it); an object schema without `properties` allows
// any members.
//
// Supported: type (a name or a list), enum, const, properties, required,
// additionalProperties, items (a schema, or draft-07's list with additionalItems),
// prefixItems, minItems, maxItems, minLength, maxLength, format (date, time, date-time, uuid),
// minimum/maximum/exclusiveMinimum/exclusiveMaximum for integers (exactly, as digit ranges),
// anyOf, oneOf (taken as anyOf: that only one branch matches is not enforced), allOf of one
// schema, $ref to "#", "#/$defs/NAME" or "#/definitions/NAME" of the root (recursion allowed,
// each definition one rule). Ignored annotations: title, description, $schema, $id, $comment,
// default, examples, deprecated, readOnly, writeOnly, $defs, definitions. Boolean schemas:
// true is any value, false none (an optional property or item that is false is left out).
// Refused: every other keyword (pattern, not, if/then/else, multipleOf, minProperties,
// patternProperties, uniqueItems, contains, ...), other formats, number bounds on non-integers,
// a constraint beside $ref/anyOf/oneOf/allOf, remote or anchor references.
//
// Bounds, refused with the limit named: nesting deeper than 64 (through $ref too), more than
// 4096 rules, enum/const texts over 64 KiB in all, a count (minItems, maxItems, minLength,
// maxLength) over 1000, more than 32 prefixItems, a property name over 1000 bytes beside
// additionalProperties. The caller bounds the schema's text; the engine, the grammar's.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "common/base/status.h"

namespace pi {

// The GBNF grammar (start rule "root") of the JSON texts valid under `schema`; an error
// (Invalid for a schema that is wrong, Unsupported for one outside the subset above) naming
// the keyword and its path otherwise.
Status JsonSchemaToGbnf(const nlohmann::ordered_json& schema, std::string* gbnf);
// The same; nlohmann::json has already sorted the keys of `properties` by name.
Status JsonSchemaToGbnf(const nlohmann::json& schema, std::string* gbnf);

}  // namespace pi
