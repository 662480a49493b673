// The grammar engine (common/text/grammar.h, grammar_matcher.h, vocab_trie.h)
// against independent references: UTF-8 runs against the encoder of every
// code point, whole-text matching against std::regex for regular grammars,
// token masks against trying every token's bytes one by one, and random
// constrained JSON against nlohmann's parser.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <random>
#include <regex>
#include <string>
#include <vector>

#include "common/text/grammar.h"
#include "common/text/grammar_matcher.h"
#include "common/text/vocab_trie.h"

namespace pi {
namespace {

std::string Encode(uint32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else if (cp < 0x800) {
    s += static_cast<char>(0xC0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    s += static_cast<char>(0xE0 | (cp >> 12));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    s += static_cast<char>(0xF0 | (cp >> 18));
    s += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return s;
}

bool RunMatches(const Utf8Run& run, const std::string& bytes) {
  if (run.size() != bytes.size()) return false;
  for (size_t i = 0; i < run.size(); ++i) {
    const uint8_t b = static_cast<uint8_t>(bytes[i]);
    if (b < run[i].first || b > run[i].second) return false;
  }
  return true;
}

TEST(Utf8Runs, EncodeExactlyTheRange) {
  std::mt19937 rng(7);
  const std::vector<std::pair<uint32_t, uint32_t>> ranges = {
      {0, 0x10FFFF},      {0x20, 0x7F},      {0x7F, 0x80}, {0x7FF, 0x800}, {0xD7FF, 0xE000},
      {0x12345, 0x54321}, {0xFFFF, 0x10000}, {0x41, 0x41}, {0xE9, 0xE9},   {0x3A9, 0x2603}};
  for (const auto& [lo, hi] : ranges) {
    std::vector<Utf8Run> runs;
    Utf8Runs(lo, hi, &runs);
    for (int k = 0; k < 4000; ++k) {
      // Code points near the ends and the encoding's edges, and random ones.
      uint32_t cp =
          k < 8 ? std::vector<uint32_t>{lo, hi, lo - 1, hi + 1, 0x7F, 0x80, 0x800, 0xFFFF}[k]
                : rng() % 0x110000;
      if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) continue;
      const std::string bytes = Encode(cp);
      int hits = 0;
      for (const Utf8Run& run : runs) hits += RunMatches(run, bytes) ? 1 : 0;
      const bool inside = cp >= lo && cp <= hi;
      EXPECT_EQ(hits, inside ? 1 : 0) << std::hex << "cp " << cp << " range " << lo << "-" << hi;
    }
  }
}

std::shared_ptr<const Grammar> MustParse(const std::string& text) {
  std::shared_ptr<const Grammar> g;
  const Status st = Grammar::Parse(text, &g);
  EXPECT_TRUE(st.ok()) << st.message() << "\n" << text;
  return g;
}

std::string ParseError(const std::string& text) {
  std::shared_ptr<const Grammar> g;
  const Status st = Grammar::Parse(text, &g);
  return st.ok() ? "ok" : st.message();
}

TEST(Grammar, RefusesBadGrammarsByName) {
  const std::pair<const char*, const char*> cases[] = {
      {"root ::= foo", "rule 'foo' is used but never defined"},
      {"root ::= \"a\"\nroot ::= \"b\"", "line 2, column 1: rule 'root' is defined twice"},
      {"start ::= \"a\"", "no rule 'root'"},
      {"root ::= root \"a\" | \"b\"", "rule 'root' is left recursive"},
      {"root ::= a\na ::= b \"x\"\nb ::= \"y\"? a | \"z\"", "rule 'a' is left recursive"},
      {"root ::= (\"a\"?)*", "a group or repetition in rule 'root' is left recursive"},
      {"root ::= \"a\" root", "rule 'root' can never end"},
      {"root ::= \"a", "unterminated literal"},
      {"root ::= [a-", "unterminated character class"},
      {"root ::= [z-a]", "runs backwards"},
      {"root ::= \"\\q\"", "line 1, column 11: unknown escape"},
      {"root ::= \"\\uD800\"", "not a character"},
      {"root ::= \"a\"{1001}", "over 1000"},
      {"root ::= \"a\"{3,2}", "n < m"},
      {"root ::= * \"a\"", "nothing before the repetition"},
      {"root ::= \"a\" b ::= \"c\"", "must start on a new line"},
      {"root ::= (\"a\"", "expected )"},
      {"root ::= [^\\x00-\\U0010FFFF]", "matches nothing"},
      {"root ::= \"\xC3\"", "invalid UTF-8"},
      {"root", "expected ::="},
      {"::= \"a\"", "expected a rule name"},
  };
  for (const auto& [text, want] : cases) {
    EXPECT_NE(ParseError(text).find(want), std::string::npos) << text << " -> " << ParseError(text);
  }
  std::string deep = "root ::= ";
  for (int i = 0; i < 70; ++i) deep += "(";
  deep += "\"a\"";
  for (int i = 0; i < 70; ++i) deep += ")";
  EXPECT_NE(ParseError(deep).find("nested too deeply"), std::string::npos);
  EXPECT_NE(ParseError(std::string(kMaxGrammarBytes + 1, ' ')).find("at most"), std::string::npos);
  std::string large = "root ::= ";
  for (int i = 0; i < 200; ++i) large += "\"abcdefgh\"{1000} ";
  EXPECT_NE(ParseError(large).find("too large"), std::string::npos);
}

// Whole texts: the matcher fed every byte, then CanEnd, against std::regex.
bool Matches(std::shared_ptr<const Grammar> g, const std::string& text) {
  VocabTrie trie({"a"});
  GrammarMatcher m(std::move(g), &trie);
  for (char c : text) {
    if (!m.Accept(std::string(1, c)).ok()) return false;
  }
  return m.CanEnd();
}

TEST(GrammarMatcher, WholeTextsAsRegexSays) {
  const std::pair<const char*, const char*> cases[] = {
      {"root ::= \"ab\" | \"a\" \"c\"*", "ab|ac*"},
      {"root ::= [a-c]+ (\"-\" [0-9]{2,3})?", "[a-c]+(-[0-9]{2,3})?"},
      {"root ::= x{0,3} \"b\"\nx ::= \"a\" | \"ab\"", "(a|ab){0,3}b"},
      {"root ::= ( [^b] | \"bb\" ){1,} # comment\n", "([^b]|bb)+"},
      {"root ::= (\n  \"a\"\n  | \"b\" \"c\"\n)* \".\"", "(a|bc)*\\."},
      {"root ::= \"\\x61\" [\\-\\]] .", "a[-\\]][^]"},
      {"root ::= a a\na ::= \"a\" | ", "a{0,2}"},
  };
  const std::string alphabet = "abc-0129.]x";
  std::mt19937 rng(1);
  for (const auto& [gbnf, re] : cases) {
    auto g = MustParse(gbnf);
    ASSERT_TRUE(g);
    const std::regex reference(re);
    for (int k = 0; k < 3000; ++k) {
      std::string text;
      const int len = static_cast<int>(rng() % 7);
      for (int i = 0; i < len; ++i) text += alphabet[rng() % alphabet.size()];
      EXPECT_EQ(Matches(g, text), std::regex_match(text, reference))
          << gbnf << " on '" << text << "'";
    }
  }
}

// A vocabulary with multi-byte characters split across tokens, duplicates
// and pieces that are prefixes of others.
std::vector<std::string> TestPieces() {
  std::vector<std::string> p = {
      "",         "{",        "}",    "\"",           "\":", ",",   " ",  "a",    "ab",
      "abc",      "b",        "1",    "12",           "-",   ".",   "e",  "true", "tr",
      "ue",       "null",     "\\",   "\\n",          "\\u", "00",  "e9", "\xC3", "\xA9",
      "\xC3\xA9", "\xE2\x82", "\xAC", "\xE2\x82\xAC", "{\"", "\"}", "[",  "]",    "x\"",
      "\n",       "\x01",     "\xFF", "ab",           "é\"", "0",   ":"};
  return p;
}

TEST(GrammarMatcher, MaskIsEveryTokenTriedAlone) {
  const std::vector<std::string> pieces = TestPieces();
  VocabTrie trie(pieces);
  const char* grammars[] = {
      "root ::= \"{\" ( str \":\" \" \"? val ( \",\" str \":\" val )* )? \"}\"\n"
      "str ::= \"\\\"\" ( [^\"\\\\] | \"\\\\\" ( [n\"] | \"u\" [0-9a-f]{4} ) )* \"\\\"\"\n"
      "val ::= str | \"true\" | \"null\" | \"-\"? [0-9]+ ( \".\" [0-9]+ )?",
      "root ::= [é€a]{1,5} \"\\n\"?",
      "root ::= \"ab\" | \"abc\" \"1\"* | \"tr\" \"ue\"",
  };
  std::mt19937 rng(3);
  for (const char* text : grammars) {
    auto g = MustParse(text);
    ASSERT_TRUE(g);
    for (int walk = 0; walk < 40; ++walk) {
      GrammarMatcher m(g, &trie);
      for (int step = 0; step < 30; ++step) {
        std::vector<uint64_t> mask(1);
        ASSERT_TRUE(m.Mask(mask.data()).ok());
        std::vector<int> allowed;
        for (size_t i = 0; i < pieces.size(); ++i) {
          GrammarMatcher alone = m;
          const bool ok = !pieces[i].empty() && alone.Accept(pieces[i]).ok();
          EXPECT_EQ(((mask[0] >> i) & 1) != 0, ok) << text << " token " << i;
          if (ok) allowed.push_back(static_cast<int>(i));
        }
        if (allowed.empty()) break;  // done, or this vocabulary cannot go on
        ASSERT_TRUE(m.Accept(pieces[allowed[rng() % allowed.size()]]).ok());
      }
    }
  }
}

TEST(GrammarMatcher, RefusedTokenLeavesItWhereItWas) {
  VocabTrie trie({"a", "b"});
  GrammarMatcher m(MustParse("root ::= \"ab\""), &trie);
  EXPECT_FALSE(m.Accept("b").ok());
  EXPECT_TRUE(m.Accept("a").ok());
  EXPECT_FALSE(m.CanEnd());
  EXPECT_TRUE(m.Accept("b").ok());
  EXPECT_TRUE(m.Done());
  uint64_t mask = ~0ull;
  ASSERT_TRUE(m.Mask(&mask).ok());
  EXPECT_EQ(mask, 0u);
  m.Reset();
  EXPECT_FALSE(m.CanEnd());
  EXPECT_TRUE(m.Accept("ab").ok());
}

// An explosive grammar (each x optional, a thousand in a row: a step meets
// every way of skipping them) fails closed with an error, fast.
TEST(GrammarMatcher, ExplosiveGrammarFailsClosed) {
  VocabTrie trie({"x", "y"});
  GrammarMatcher m(MustParse("root ::= a{0,1000} \"y\"\na ::= \"x\"?"), &trie);
  uint64_t mask = 0;
  Status st = m.Mask(&mask);
  if (st.ok()) st = m.Accept("x");
  if (st.ok()) st = m.Accept("x");
  if (st.ok()) st = m.Mask(&mask);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("grammar:"), std::string::npos) << st.message();
}

// Many JSON values drawn at random through the masks are valid JSON.
TEST(GrammarMatcher, RandomConstrainedJsonParses) {
  const std::vector<std::string> pieces = TestPieces();
  VocabTrie trie(pieces);
  auto g = MustParse(
      "root ::= value\n"
      "value ::= object | array | string | number | \"true\" | \"null\"\n"
      "object ::= \"{\" ( string \":\" value ( \",\" string \":\" value )* )? \"}\"\n"
      "array ::= \"[\" ( value ( \",\" value ){0,3} )? \"]\"\n"
      "string ::= \"\\\"\" ( [^\"\\\\\\x00-\\x1f] | \"\\\\\" [n\"] )* \"\\\"\"\n"
      "number ::= \"-\"? ( \"0\" | [1-9] [0-9]* ) ( \".\" [0-9]+ )? ( \"e\" [0-9]{1,2} )?");
  ASSERT_TRUE(g);
  std::mt19937 rng(11);
  int parsed = 0;
  for (int walk = 0; walk < 300; ++walk) {
    GrammarMatcher m(g, &trie);
    std::string text;
    for (int step = 0; step < 60; ++step) {
      uint64_t mask = 0;
      ASSERT_TRUE(m.Mask(&mask).ok());
      if (mask == 0 || (m.CanEnd() && rng() % 4 == 0)) break;
      std::vector<int> allowed;
      for (size_t i = 0; i < pieces.size(); ++i) {
        if ((mask >> i) & 1) allowed.push_back(static_cast<int>(i));
      }
      const std::string& piece = pieces[allowed[rng() % allowed.size()]];
      ASSERT_TRUE(m.Accept(piece).ok());
      text += piece;
    }
    if (!m.CanEnd()) continue;  // cut by the step bound
    ++parsed;
    EXPECT_TRUE(nlohmann::json::accept(text)) << text;
  }
  EXPECT_GT(parsed, 100);
}

TEST(VocabTrie, HoldsEveryTokenOnceInOrder) {
  const std::vector<std::string> pieces = TestPieces();
  VocabTrie trie(pieces);
  std::vector<int> seen(pieces.size(), 0);
  std::vector<std::string> path;
  for (const VocabTrie::Node& n : trie.nodes()) {
    path.resize(n.depth - 1);
    path.push_back(std::string(1, static_cast<char>(n.byte)));
    std::string bytes;
    for (const std::string& b : path) bytes += b;
    for (uint32_t t = n.tokens; t < n.tokens_end; ++t) {
      const int32_t id = trie.token_ids()[t];
      EXPECT_EQ(pieces[id], bytes);
      ++seen[id];
    }
  }
  for (size_t i = 0; i < pieces.size(); ++i) EXPECT_EQ(seen[i], pieces[i].empty() ? 0 : 1) << i;
  // skip jumps past exactly the nodes deeper than the node.
  const auto& nodes = trie.nodes();
  for (size_t i = 0; i < nodes.size(); ++i) {
    size_t j = i + 1;
    while (j < nodes.size() && nodes[j].depth > nodes[i].depth) ++j;
    EXPECT_EQ(nodes[i].skip, j) << i;
  }
}

}  // namespace
}  // namespace pi
