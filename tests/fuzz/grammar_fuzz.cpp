// What a client's grammar and schema reach: the GBNF reader and compiler
// (grammar.h), the JSON-schema converter (json_schema_grammar.h), and the
// matcher (grammar_matcher.h) over a small vocabulary. The first byte picks
// the input: bit 0 clear, GBNF text; set, a JSON schema. After a NUL, the
// rest is text fed to the matcher token by token. With bit 1 set instead,
// the rest is a model's reply (a prompt can steer it) read for tool calls
// (chat_tools.h: ParseToolReply in each syntax, cut and not, and
// SettledToolContent).
//
// Checked beyond "no crash": a schema the converter takes gives GBNF the
// reader takes; a token the mask allows is one Accept takes and the reverse;
// the matcher never aborts on any byte; a reply's content is its text whole,
// or (but the generic syntax's, inside its JSON) a prefix of it.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/text/chat_tools.h"
#include "common/text/grammar.h"
#include "common/text/grammar_matcher.h"
#include "common/text/json_schema_grammar.h"
#include "common/text/vocab_trie.h"

namespace {

const std::vector<std::string>& Pieces() {
  static const std::vector<std::string> p = {
      "",  "{", "}",    "\"",   ":",    ",",   " ",     "a",    "ab",   "1",        "-",
      ".", "e", "true", "null", "\\",   "\\n", "\\u00", "\xC3", "\xA9", "\xC3\xA9", "\xE2\x82\xAC",
      "[", "]", "\n",   "\x01", "\xFF", "x\"", "0"};
  return p;
}

void Check(bool ok) {
  if (!ok) abort();
}

void ToolReply(const std::string& text) {
  for (pi::ToolSyntax syntax : {pi::ToolSyntax::kHermes, pi::ToolSyntax::kLlama3,
                                pi::ToolSyntax::kMistral, pi::ToolSyntax::kGeneric}) {
    for (bool cut : {false, true}) {
      std::string content;
      std::vector<pi::ToolCall> calls;
      pi::ParseToolReply(syntax, text, &content, &calls, cut);
      if (syntax != pi::ToolSyntax::kGeneric) Check(text.compare(0, content.size(), content) == 0);
      if (calls.empty() && syntax != pi::ToolSyntax::kGeneric) Check(content == text);
      for (const pi::ToolCall& c : calls) Check(!c.id.empty());
    }
    Check(pi::SettledToolContent(syntax, text) <= text.size());
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  if (data[0] & 2) {
    ToolReply(std::string(reinterpret_cast<const char*>(data) + 1, size - 1));
    return 0;
  }
  const std::string all(reinterpret_cast<const char*>(data) + 1, size - 1);
  const size_t nul = all.find('\0');
  const std::string input = all.substr(0, nul);
  const std::string text = nul == std::string::npos ? "" : all.substr(nul + 1);
  std::string gbnf = input;
  if (data[0] & 1) {
    const nlohmann::ordered_json schema = nlohmann::ordered_json::parse(input, nullptr, false);
    if (schema.is_discarded()) return 0;
    if (!pi::JsonSchemaToGbnf(schema, &gbnf).ok()) return 0;
  }
  std::shared_ptr<const pi::Grammar> g;
  const pi::Status parsed = pi::Grammar::Parse(gbnf, &g);
  if (data[0] & 1) Check(parsed.ok());  // the converter writes only what the reader takes
  if (!parsed.ok()) return 0;
  static const pi::VocabTrie trie(Pieces());
  pi::GrammarMatcher m(g, &trie);
  uint64_t mask = 0;
  for (size_t i = 0; i < text.size() && i < 16; ++i) {
    if (!m.Mask(&mask).ok()) return 0;
    for (size_t t = 0; t < Pieces().size(); ++t) {
      pi::GrammarMatcher alone = m;
      const bool ok = !Pieces()[t].empty() && alone.Accept(Pieces()[t]).ok();
      Check(ok == (((mask >> t) & 1) != 0));
    }
    const std::string piece = Pieces()[static_cast<uint8_t>(text[i]) % Pieces().size()];
    (void)m.Accept(piece);
  }
  return 0;
}
