// Seeds for grammar_fuzz: GBNF grammars (first byte 0) and JSON schemas
// (1), each followed by a NUL and the text fed to the matcher; models'
// replies read for tool calls (2).
#include <string>
#include <vector>

#include "tests/fuzz/seed_file.h"

namespace {

std::string Seed(char mode, const std::string& input, const std::string& text) {
  return std::string(1, mode) + input + std::string(1, '\0') + text;
}

}  // namespace

int main(int argc, char** argv) {
  std::string dir;
  if (!pi::SeedDirFromArgs(argc, argv, &dir)) return 2;
  const std::vector<std::string> seeds = {
      Seed(0, "root ::= \"a\" [b-d]* (\"x\" | \"yz\"){1,3}\n", "\x07\x08\x09"),
      Seed(0,
           "root ::= obj\nobj ::= \"{\" ( str \":\" obj )? \"}\"\n"
           "str ::= \"\\\"\" [^\"\\\\]* \"\\\"\"\n",
           "\x01\x03\x07\x03\x04"),
      Seed(0, "root ::= [^\\x00-\\x1f]{0,5} \"\\u00e9\" .  # comment\n", "\x12\x13"),
      Seed(1,
           "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"},"
           "\"b\":{\"type\":\"string\",\"maxLength\":3}},\"required\":[\"a\"]}",
           "\x01\x03\x07\x04"),
      Seed(1, "{\"type\":\"array\",\"items\":{\"enum\":[\"x\",1,null]},\"maxItems\":2}",
           "\x16\x17"),
      Seed(1,
           "{\"$defs\":{\"n\":{\"type\":\"object\",\"properties\":{\"k\":{\"$ref\":"
           "\"#/$defs/n\"}}}},\"$ref\":\"#/$defs/n\"}",
           "\x01\x03"),
      Seed(1, "{}", "\x16\x1c\x17"),
      std::string(1, 2) +
          "Two.\n<tool_call>\n{\"name\": \"now\", \"arguments\": {\"tz\": \"U\\\"\"}}\n"
          "</tool_call>\n<tool_call>\n{\"name\": \"get_we",
      std::string(1, 2) + " [{\"name\": \"a\", \"arguments\": {}}, {\"name\": \"b\", \"argu",
      std::string(1, 2) + "{\"tool_calls\": [{\"name\": \"a\"}, {\"na",
  };
  for (size_t i = 0; i < seeds.size(); ++i) {
    const std::string& s = seeds[i];
    if (!pi::WriteSeedFile(dir + "/seed" + std::to_string(i),
                           std::vector<uint8_t>(s.begin(), s.end()))) {
      return 1;
    }
  }
  return 0;
}
