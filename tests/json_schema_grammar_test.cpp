// JsonSchemaToGbnf: the exact grammar of small schemas (so a change to what a model may write
// is seen in review), and the refusals: every keyword that constrains values but is not
// implemented, schemas that are wrong, and the size bounds, each named with its path.
#include <gtest/gtest.h>

#include <initializer_list>
#include <string>

#include <nlohmann/json.hpp>

#include "common/text/json_schema_grammar.h"

namespace pi {
namespace {

// The fixed rules, as the converter writes them.
const char kString[] = R"(string ::= "\"" char* "\"")";
const char kChar[] =
    R"(char ::= [^\"\\\x00-\x1f] | "\\" ( [\"\\/bfnrt] | "u" ( [0-9a-cA-CefEF] [0-9a-fA-F]{3} | )"
    R"([dD] [0-7] [0-9a-fA-F]{2} ) ))";
const char kNumber[] = R"(number ::= "-"? ( "0" | [1-9] [0-9]{0,15} ) ( "." [0-9]{1,16} )? )"
                       R"(( [eE] [-+]? [0-9]{1,3} )?)";
const char kInteger[] = R"(integer ::= "-"? ( "0" | [1-9] [0-9]{0,15} ))";
const char kBoolean[] = R"(boolean ::= "true" | "false")";
const char kNull[] = R"(null ::= "null")";
const char kWs[] = R"(ws ::= ( " " | "\n" [ \t]{0,20} )?)";
const char kValue[] = "value ::= object | array | string | number | boolean | null";
const char kObject[] =
    R"(object ::= "{" ws ( string ws ":" ws value ( ws "," ws string ws ":" ws value )* ws )? "}")";
const char kArray[] = R"(array ::= "[" ws ( value ( ws "," ws value )* ws )? "]")";

// A grammar's text: one rule a line.
std::string Lines(std::initializer_list<std::string> lines) {
  std::string out;
  for (const std::string& line : lines) out += line + "\n";
  return out;
}

Status Convert(const std::string& schema, std::string* gbnf) {
  return JsonSchemaToGbnf(nlohmann::ordered_json::parse(schema), gbnf);
}

std::string Gbnf(const std::string& schema) {
  std::string gbnf;
  const Status st = Convert(schema, &gbnf);
  EXPECT_TRUE(st.ok()) << schema << ": " << st.message();
  return gbnf;
}

// The error's message; fails the test when the schema was accepted or the code is not `code`.
std::string Error(const std::string& schema, Status::Code code = Status::Code::kUnsupported) {
  std::string gbnf;
  const Status st = Convert(schema, &gbnf);
  EXPECT_FALSE(st.ok()) << schema << " gave\n" << gbnf;
  EXPECT_EQ(Status::CodeName(st.code()), std::string(Status::CodeName(code))) << st.message();
  return st.message();
}

TEST(JsonSchemaGrammarTest, Primitives) {
  EXPECT_EQ(Gbnf(R"({"type": "string"})"), Lines({"root ::= string", kString, kChar}));
  EXPECT_EQ(Gbnf(R"({"type": "integer", "description": "an annotation"})"),
            Lines({"root ::= integer", kInteger}));
  EXPECT_EQ(Gbnf(R"({"type": "number"})"), Lines({"root ::= number", kNumber}));
  EXPECT_EQ(Gbnf(R"({"type": "null"})"), Lines({"root ::= null", kNull}));
  // true, {} and annotations alone: any JSON value.
  const std::string any = Lines(
      {"root ::= value", kValue, kObject, kArray, kString, kChar, kNumber, kBoolean, kNull, kWs});
  EXPECT_EQ(Gbnf("true"), any);
  EXPECT_EQ(Gbnf("{}"), any);
  EXPECT_EQ(Gbnf(R"({"title": "t", "$schema": "https://json-schema.org/draft/2020-12/schema"})"),
            any);
}

TEST(JsonSchemaGrammarTest, StringLengthsAndFormats) {
  EXPECT_EQ(Gbnf(R"({"type": "string", "minLength": 2, "maxLength": 5})"),
            Lines({R"(root ::= "\"" char{2,5} "\"")", kChar}));
  EXPECT_EQ(Gbnf(R"({"type": "string", "minLength": 1})"),
            Lines({R"(root ::= "\"" char+ "\"")", kChar}));
  EXPECT_EQ(Gbnf(R"({"type": "string", "format": "uuid"})"),
            Lines({R"(root ::= "\"" uuid "\"")",
                   R"(uuid ::= [0-9a-fA-F]{8} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{4} "-" )"
                   R"([0-9a-fA-F]{4} "-" [0-9a-fA-F]{12})"}));
  const std::string date_time = Gbnf(R"({"type": "string", "format": "date-time"})");
  EXPECT_EQ(date_time.substr(0, date_time.find('\n')), R"(root ::= "\"" date-time "\"")");
  EXPECT_NE(date_time.find("date-time ::= date \"T\" time\n"), std::string::npos);
  // 29 February only in leap years (divisible by 4, and by 400 at a century).
  EXPECT_NE(date_time.find(R"(( [0-9]{2} ( "0" [48] | [2468] [048] | [13579] [26] ) | )"
                           R"(( [02468] [048] | [13579] [26] ) "00" ) "-02-29")"),
            std::string::npos);
}

TEST(JsonSchemaGrammarTest, IntegerBoundsAreExactDigitRanges) {
  EXPECT_EQ(Gbnf(R"({"type": "integer", "minimum": 1, "maximum": 100})"),
            Lines({R"(root ::= [1-9] [0-9]? | "100")"}));
  EXPECT_EQ(Gbnf(R"({"type": "integer", "minimum": 0})"),
            Lines({R"(root ::= "0" | [1-9] [0-9]{0,15})"}));
  EXPECT_EQ(Gbnf(R"({"type": "integer", "exclusiveMinimum": -3, "exclusiveMaximum": 2.5})"),
            Lines({R"(root ::= "-" [1-2] | "0" | [1-2])"}));
  EXPECT_EQ(Error(R"({"type": "integer", "minimum": 5, "maximum": 4})", Status::Code::kInvalid),
            "json_schema: /: the schema accepts no value");
}

TEST(JsonSchemaGrammarTest, EnumAndConstAreCompactJsonLiterals) {
  EXPECT_EQ(Gbnf(R"({"enum": ["red", 1, null, [1, 2], {"k": "v"}, 1.5]})"),
            Lines({R"(root ::= "\"red\"" | "1" | "null" | "[1,2]" | "{\"k\":\"v\"}" | "1.5")"}));
  EXPECT_EQ(Gbnf(R"({"const": "a\"b\\c"})"), Lines({R"(root ::= "\"a\\\"b\\\\c\"")"}));
  // type keeps the values of its types only; const keeps the enum's values equal to it.
  EXPECT_EQ(Gbnf(R"({"type": "string", "enum": ["a", 1, "b"]})"),
            Lines({R"(root ::= "\"a\"" | "\"b\"")"}));
  EXPECT_EQ(Gbnf(R"({"enum": ["a", "b"], "const": "b"})"), Lines({R"(root ::= "\"b\"")"}));
  EXPECT_EQ(Error(R"({"enum": []})", Status::Code::kInvalid),
            "json_schema: /: the schema accepts no value");
}

TEST(JsonSchemaGrammarTest, ObjectRequiredAndOptionalPropertiesInDeclaredOrder) {
  // The first member written is one of those up to the first required one; every later one
  // brings its own comma, so no comma leads, trails or doubles.
  EXPECT_EQ(Gbnf(R"({"type": "object", "properties": {"name": {"type": "string"},
                     "age": {"type": "integer"}, "nick": {"type": "string", "maxLength": 8}},
                     "required": ["age"]})"),
            Lines({R"(root ::= "{" ws ( "\"name\"" ws ":" ws string ws "," ws "\"age\"" ws ":" )"
                   R"(ws integer root-after-age | "\"age\"" ws ":" ws integer root-after-age ) )"
                   R"(ws "}")",
                   R"(root-nick ::= "\"" char{0,8} "\"")",
                   R"(root-after-age ::= ( ws "," ws "\"nick\"" ws ":" ws root-nick )?)", kString,
                   kChar, kInteger, kWs}));
  // All optional: the empty object too.
  EXPECT_EQ(Gbnf(R"({"type": "object", "properties": {"a": {"type": "integer"},
                     "b": {"type": "null"}}})"),
            Lines({R"(root ::= "{" ws ( ( "\"a\"" ws ":" ws integer ( ws "," ws "\"b\"" ws ":" )"
                   R"(ws null )? | "\"b\"" ws ":" ws null ) ws )? "}")",
                   kInteger, kNull, kWs}));
  // All required (OpenAI's strict mode): one sequence.
  EXPECT_EQ(Gbnf(R"({"type": "object", "properties": {"b": {"type": "boolean"},
                     "a": {"type": "null"}}, "required": ["b", "a"],
                     "additionalProperties": false})"),
            Lines({R"(root ::= "{" ws "\"b\"" ws ":" ws boolean ws "," ws "\"a\"" ws ":" ws )"
                   R"(null ws "}")",
                   kBoolean, kNull, kWs}));
}

TEST(JsonSchemaGrammarTest, AdditionalProperties) {
  // Without properties an object schema allows any members; with them, absent means none.
  EXPECT_EQ(Gbnf(R"({"type": "object"})").substr(0, 16), "root ::= object\n");
  EXPECT_EQ(Gbnf(R"({"type": "object", "properties": {}})"),
            Lines({R"(root ::= "{" ws "}")", kWs}));
  EXPECT_EQ(Gbnf(R"({"type": "object", "additionalProperties": {"type": "integer"}})"),
            Lines({R"(root ::= "{" ws ( string ws ":" ws integer ( ws "," ws string ws ":" ws )"
                   R"(integer )* ws )? "}")",
                   kString, kChar, kInteger, kWs}));
  // Further members come after the declared ones, under keys that are not a declared name.
  EXPECT_EQ(Gbnf(R"({"type": "object", "properties": {"id": {"type": "null"}},
                     "required": ["id"], "additionalProperties": {"type": "integer"}})"),
            Lines({R"(root ::= "{" ws "\"id\"" ws ":" ws null ( ws "," ws root-extra-key ws )"
                   R"(":" ws integer )* ws "}")",
                   R"(root-extra-key ::= "\"" ( "i" ( "d" ( [^\"\\\x00-\x1f] char* "\"" ) | )"
                   R"([^\"\\\x00-\x1fd] char* "\"" | "\"" ) | [^\"\\\x00-\x1fi] char* "\"" | )"
                   R"("\"" ))",
                   kChar, kInteger, kNull, kWs}));
  // A property whose schema is false may not appear: optional, it is left out.
  EXPECT_EQ(Gbnf(R"({"type": "object", "properties": {"x": false, "y": {"type": "null"}}})"),
            Lines({R"(root ::= "{" ws ( "\"y\"" ws ":" ws null ws )? "}")", kNull, kWs}));
}

TEST(JsonSchemaGrammarTest, Arrays) {
  EXPECT_EQ(Gbnf(R"({"type": "array", "items": {"type": "number"}, "minItems": 1,
                     "maxItems": 3})"),
            Lines({R"(root ::= "[" ws number ( ws "," ws number ){0,2} ws "]")", kNumber, kWs}));
  EXPECT_EQ(Gbnf(R"({"type": "array", "items": {"type": "null"}, "maxItems": 2})"),
            Lines({R"(root ::= "[" ws ( null ( ws "," ws null )? ws )? "]")", kNull, kWs}));
  EXPECT_EQ(Gbnf(R"({"type": "array", "prefixItems": [{"type": "string"}, {"type": "boolean"}],
                     "items": false})"),
            Lines({R"(root ::= "[" ws ( string ( ws "," ws boolean )? ws )? "]")", kString, kChar,
                   kBoolean, kWs}));
  EXPECT_EQ(Gbnf(R"({"type": "array", "prefixItems": [{"type": "string"}, {"type": "null"}],
                     "items": {"type": "boolean"}, "minItems": 3})"),
            Lines({R"(root ::= "[" ws string ws "," ws null ( ws "," ws boolean )+ ws "]")",
                   kString, kChar, kBoolean, kNull, kWs}));
  EXPECT_EQ(Gbnf(R"({"type": "array", "items": {"type": "array"}})"),
            Lines({R"(root ::= "[" ws ( array ( ws "," ws array )* ws )? "]")", kValue, kObject,
                   kArray, kString, kChar, kNumber, kBoolean, kNull, kWs}));
  EXPECT_EQ(Error(R"({"type": "array", "items": false, "minItems": 1})", Status::Code::kInvalid),
            "json_schema: /: the schema accepts no value");
}

TEST(JsonSchemaGrammarTest, RefsToDefinitionsIncludingRecursiveOnes) {
  EXPECT_EQ(Gbnf(R"({"$defs": {"node": {"type": "object", "properties": {
                       "value": {"type": "integer"},
                       "next": {"anyOf": [{"$ref": "#/$defs/node"}, {"type": "null"}]}},
                       "required": ["value", "next"]}},
                     "$ref": "#/$defs/node"})"),
            Lines({"root ::= node",
                   R"(node ::= "{" ws "\"value\"" ws ":" ws integer ws "," ws "\"next\"" ws ":" )"
                   R"(ws node-next ws "}")",
                   "node-next ::= node | null", kInteger, kNull, kWs}));
  // definitions, pointer escapes (~1 is '/'), one rule however often it is used.
  EXPECT_EQ(Gbnf(R"({"definitions": {"a/b": {"type": "string", "maxLength": 1}},
                     "type": "array", "prefixItems": [{"$ref": "#/definitions/a~1b"},
                     {"$ref": "#/definitions/a~1b"}], "minItems": 2, "maxItems": 2})"),
            Lines({R"(root ::= "[" ws a-b ws "," ws a-b ws "]")", R"(a-b ::= "\"" char? "\"")",
                   kChar, kWs}));
  // "#" is the root itself.
  EXPECT_EQ(Gbnf(R"({"type": "array", "items": {"$ref": "#"}})"),
            Lines({R"(root ::= "[" ws ( root ( ws "," ws root )* ws )? "]")", kWs}));
}

TEST(JsonSchemaGrammarTest, AnyOfOneOfAllOfAndTypeLists) {
  EXPECT_EQ(Gbnf(R"({"anyOf": [{"type": "string", "minLength": 1}, {"type": "null"}]})"),
            Lines({"root ::= root-0 | null", R"(root-0 ::= "\"" char+ "\"")", kChar, kNull}));
  EXPECT_EQ(Gbnf(R"({"oneOf": [{"type": "boolean"}, {"const": 2}]})"),
            Lines({"root ::= boolean | root-1", R"(root-1 ::= "2")", kBoolean}));
  EXPECT_EQ(Gbnf(R"({"allOf": [{"type": "integer"}], "description": "one schema"})"),
            Lines({"root ::= integer", kInteger}));
  EXPECT_EQ(Gbnf(R"({"type": ["string", "null"]})"),
            Lines({"root ::= string | null", kString, kChar, kNull}));
  // number holds every integer already.
  EXPECT_EQ(Gbnf(R"({"type": ["integer", "number"]})"), Lines({"root ::= number", kNumber}));
  // No type: a constraint binds only values of its own type.
  EXPECT_EQ(Gbnf(R"({"maxLength": 3})"),
            Lines({"root ::= object | array | root-string | number | boolean | null",
                   R"(root-string ::= "\"" char{0,3} "\"")", kValue, kObject, kArray, kString,
                   kChar, kNumber, kBoolean, kNull, kWs}));
}

TEST(JsonSchemaGrammarTest, OrderedJsonKeepsDeclaredOrderAndJsonSortsIt) {
  const char* schema = R"({"type": "object", "properties": {"b": {"type": "null"},
                           "a": {"type": "null"}}, "required": ["a", "b"]})";
  std::string ordered, sorted;
  ASSERT_TRUE(JsonSchemaToGbnf(nlohmann::ordered_json::parse(schema), &ordered).ok());
  ASSERT_TRUE(JsonSchemaToGbnf(nlohmann::json::parse(schema), &sorted).ok());
  EXPECT_LT(ordered.find("\\\"b\\\""), ordered.find("\\\"a\\\""));
  EXPECT_LT(sorted.find("\\\"a\\\""), sorted.find("\\\"b\\\""));
}

TEST(JsonSchemaGrammarTest, UnsupportedKeywordsAreRefusedByNameAndPath) {
  const char* keywords[] = {R"("pattern": "a+")",
                            R"("not": {})",
                            R"("if": {})",
                            R"("then": {})",
                            R"("else": {})",
                            R"("multipleOf": 2)",
                            R"("minProperties": 1)",
                            R"("maxProperties": 1)",
                            R"("patternProperties": {})",
                            R"("propertyNames": {})",
                            R"("dependentRequired": {})",
                            R"("dependentSchemas": {})",
                            R"("dependencies": {})",
                            R"("unevaluatedProperties": false)",
                            R"("unevaluatedItems": false)",
                            R"("contains": {})",
                            R"("minContains": 1)",
                            R"("maxContains": 1)",
                            R"("uniqueItems": true)",
                            R"("contentEncoding": "base64")",
                            R"("contentMediaType": "text/html")",
                            R"("$dynamicRef": "#x")",
                            R"("$anchor": "x")",
                            R"("nullable": true)",
                            R"("strict": true)",
                            R"("discriminator": {})"};
  for (const char* k : keywords) {
    const std::string name = std::string(k).substr(1, std::string(k).find('"', 1) - 1);
    EXPECT_EQ(Error(std::string(R"({"properties": {"a~b": {"type": "string", )") + k + "}}}"),
              "json_schema: /properties/a~0b: keyword '" + name + "' is not supported");
  }
  EXPECT_EQ(Error(R"({"type": "string", "format": "email"})"),
            "json_schema: /: format 'email' is not supported");
  EXPECT_EQ(Error(R"({"type": "number", "maximum": 1})"),
            "json_schema: /: keyword 'maximum' is supported for integers only");
  EXPECT_EQ(Error(R"({"items": {"minimum": 0}})"),
            "json_schema: /items: keyword 'minimum' is supported for integers only");
  EXPECT_EQ(Error(R"({"type": "string", "format": "date", "maxLength": 10})"),
            "json_schema: /: keyword 'maxLength' beside 'format' is not supported");
  EXPECT_EQ(Error(R"({"allOf": [{"type": "string"}, {"maxLength": 3}]})"),
            "json_schema: /: allOf with more than one schema is not supported");
  EXPECT_EQ(Error(R"({"$defs": {"a": true}, "$ref": "#/$defs/a", "type": "object"})"),
            "json_schema: /: keyword 'type' beside '$ref' is not supported");
  EXPECT_EQ(Error(R"({"anyOf": [{"type": "string"}], "maxLength": 2})"),
            "json_schema: /: keyword 'maxLength' beside 'anyOf' is not supported");
  EXPECT_EQ(Error(R"({"enum": ["a"], "minLength": 2})"),
            "json_schema: /: keyword 'minLength' beside 'enum' is not supported");
  EXPECT_EQ(Error(R"({"$ref": "other.json#/$defs/a"})"),
            "json_schema: /: $ref 'other.json#/$defs/a': remote references are not supported");
  EXPECT_EQ(Error(R"({"$ref": "#/properties/a", "properties": {"a": true}})"),
            "json_schema: /: keyword 'properties' beside '$ref' is not supported");
  EXPECT_EQ(Error(R"({"anyOf": [{"$ref": "#/properties/a"}]})"),
            "json_schema: /anyOf/0: $ref '#/properties/a': only '#', '#/$defs/NAME' and "
            "'#/definitions/NAME' are supported");
}

TEST(JsonSchemaGrammarTest, BadSchemasAreRefused) {
  const Status::Code invalid = Status::Code::kInvalid;
  EXPECT_EQ(Error("5", invalid),
            "json_schema: /: a schema must be an object or a boolean, not number");
  EXPECT_EQ(Error(R"({"items": "x"})", invalid),
            "json_schema: /items: a schema must be an object or a boolean, not string");
  EXPECT_EQ(Error("false", invalid), "json_schema: /: the schema accepts no value");
  EXPECT_EQ(Error(R"({"type": "strng"})", invalid),
            "json_schema: /: type 'strng' is not one of object, array, string, number, integer, "
            "boolean, null");
  EXPECT_EQ(Error(R"({"type": []})", invalid),
            "json_schema: /: type must be a name or a non-empty list of names");
  EXPECT_EQ(Error(R"({"type": "object", "properties": {"a": true}, "required": ["b"]})", invalid),
            "json_schema: /: required names 'b', which is not in properties");
  EXPECT_EQ(Error(R"({"$defs": {"a": true}, "$ref": "#/$defs/b"})", invalid),
            "json_schema: /: $ref '#/$defs/b': no such definition");
  EXPECT_EQ(Error(R"({"type": "string", "minLength": -1})", invalid),
            "json_schema: /: minLength must be a non-negative integer");
  EXPECT_EQ(Error(R"({"anyOf": []})", invalid), "json_schema: /: anyOf must be a non-empty array");
  EXPECT_EQ(Error(R"({"type": "object", "properties": {"a": false}, "required": ["a"]})", invalid),
            "json_schema: /: the schema accepts no value");
  // Recursion the engine could not run: a loop of bare $refs, or values that never end.
  EXPECT_EQ(Error(R"({"$defs": {"a": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"})"),
            "json_schema: /$defs/a: a $ref to itself ('a')");
  EXPECT_EQ(Error(R"({"$defs": {"a": {"anyOf": [{"$ref": "#/$defs/b"}, {"type": "null"}]},
                       "b": {"allOf": [{"$ref": "#/$defs/a"}]}}, "$ref": "#/$defs/a"})"),
            "json_schema: /$defs/a: a $ref cycle that never passes through an object or array "
            "('a')");
  EXPECT_EQ(Error(R"({"$defs": {"a": {"type": "array", "items": {"$ref": "#/$defs/a"},
                       "minItems": 1}}, "$ref": "#/$defs/a"})"),
            "json_schema: /$defs/a: 'a' has no finite value: each of its values must hold "
            "another");
}

TEST(JsonSchemaGrammarTest, SizeBoundsAreRefused) {
  EXPECT_EQ(Error(R"({"type": "string", "maxLength": 1001})"),
            "json_schema: /: maxLength 1001 is over the limit of 1000");
  EXPECT_EQ(Error(R"({"type": "array", "minItems": 5000})"),
            "json_schema: /: minItems 5000 is over the limit of 1000");
  EXPECT_TRUE(Gbnf(R"({"type": "array", "maxItems": 1000})").find("{0,999}") != std::string::npos);

  std::string deep = R"({"type": "integer"})";
  for (int i = 0; i < 65; ++i) deep = R"({"items": )" + deep + "}";
  EXPECT_NE(Error(deep).find(": nesting deeper than 64"), std::string::npos);

  nlohmann::ordered_json many = {{"type", "object"},
                                 {"properties", nlohmann::ordered_json::object()}};
  for (int i = 0; i < 5000; ++i) {
    many["properties"]["p" + std::to_string(i)] = {{"type", "string"}, {"maxLength", 3}};
  }
  std::string gbnf;
  Status st = JsonSchemaToGbnf(many, &gbnf);
  EXPECT_EQ(st.message(), "json_schema: /properties/p4095: the grammar needs more than 4096 rules");

  nlohmann::ordered_json big = {{"enum", nlohmann::ordered_json::array()}};
  for (int i = 0; i < 70; ++i) big["enum"].push_back(std::to_string(i) + std::string(1000, 'x'));
  st = JsonSchemaToGbnf(big, &gbnf);
  EXPECT_EQ(st.message(), "json_schema: /: enum and const values are over 65536 bytes in all");

  nlohmann::ordered_json prefix = {{"prefixItems", nlohmann::ordered_json::array()}};
  for (int i = 0; i < 33; ++i) prefix["prefixItems"].push_back(true);
  st = JsonSchemaToGbnf(prefix, &gbnf);
  EXPECT_EQ(st.message(), "json_schema: /: prefixItems has 33 schemas, over the limit of 32");
}

}  // namespace
}  // namespace pi
