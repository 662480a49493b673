// grammar_walk MODEL.gguf SEED < schemas.jsonl > texts.jsonl
//
// For json_schema_test.py: each input line a JSON schema; each output line
// {"text": ..., "utf8": bool, "complete": bool} or {"error": ...}. The text is a random
// walk over the model's vocabulary held to the schema's grammar
// (json_schema_grammar.h, grammar_matcher.h): each step one token drawn
// uniformly from those the mask allows, stopping with a chance once the text
// is a whole match, or after 4000 tokens (complete: false). No model runs:
// the walk reaches tokens (unicode, escapes, split characters) a model's
// preferences would not, and python3-jsonschema, an independent validator,
// judges every text.
#include <cstdio>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "common/format/gguf.h"
#include "common/text/grammar.h"
#include "common/text/grammar_matcher.h"
#include "common/text/json_schema_grammar.h"
#include "common/text/tokenizer.h"
#include "common/text/unicode.h"

namespace {

std::string Walk(const std::shared_ptr<const pi::Grammar>& g, const pi::Tokenizer& tok,
                 std::mt19937* rng, bool* complete, pi::Status* st) {
  pi::GrammarMatcher m(g, &tok.vocab_trie());
  std::vector<uint64_t> mask((tok.n_vocab() + 63) / 64);
  std::vector<int32_t> allowed;
  std::string text;
  *complete = false;
  for (int step = 0; step < 4000; ++step) {
    if (m.CanEnd() && (m.Done() || (*rng)() % 3 == 0)) {
      *complete = true;
      return text;
    }
    *st = m.Mask(mask.data());
    if (!st->ok()) return text;
    allowed.clear();
    for (int32_t i = 0; i < tok.n_vocab(); ++i) {
      if ((mask[i >> 6] >> (i & 63)) & 1) allowed.push_back(i);
    }
    if (allowed.empty()) {
      *st = pi::Status::Error("no token can continue '%s'", text.c_str());
      return text;
    }
    const std::string piece = tok.TokenToPiece(allowed[(*rng)() % allowed.size()]);
    *st = m.Accept(piece);
    if (!st->ok()) return text;
    text += piece;
  }
  return text;
}

bool ValidUtf8(const std::string& s) {
  for (size_t pos = 0; pos < s.size();) {
    uint32_t cp;
    size_t len;
    if (pi::DecodeUtf8(s.data(), s.size(), pos, &cp, &len) != pi::Utf8Status::kValid) return false;
    pos += len;
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: grammar_walk MODEL.gguf SEED < schemas.jsonl\n");
    return 2;
  }
  std::unique_ptr<pi::GgufFile> file;
  std::unique_ptr<pi::Tokenizer> tok;
  pi::Status st = pi::GgufFile::Open(argv[1], &file);
  if (st.ok()) st = pi::Tokenizer::FromGguf(*file, &tok);
  if (!st.ok()) {
    fprintf(stderr, "grammar_walk: %s\n", st.message().c_str());
    return 1;
  }
  std::mt19937 rng(static_cast<uint32_t>(std::stoul(argv[2])));
  std::string line;
  while (std::getline(std::cin, line)) {
    nlohmann::json out;
    const nlohmann::ordered_json schema = nlohmann::ordered_json::parse(line, nullptr, false);
    std::string gbnf;
    std::shared_ptr<const pi::Grammar> g;
    st =
        schema.is_discarded() ? pi::Status::Error("not JSON") : pi::JsonSchemaToGbnf(schema, &gbnf);
    if (st.ok()) st = pi::Grammar::Parse(gbnf, &g);
    bool complete = false;
    if (st.ok()) {
      const std::string text = Walk(g, *tok, &rng, &complete, &st);
      out["text"] = text;
      out["utf8"] = ValidUtf8(text);  // the dump below would hide invalid bytes
    }
    out["complete"] = complete;
    if (!st.ok()) out["error"] = st.message();
    std::cout << out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  }
  return 0;
}
