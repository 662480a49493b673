// Grammar: a GBNF grammar (llama.cpp's notation) compiled to a pushdown
// automaton over bytes, which GrammarMatcher (grammar_matcher.h) runs to
// say which tokens may come next.
//
// GBNF: rules `name ::= alternatives`, one per line (a rule goes on across
// lines inside parentheses or after a `|`), `#` comments; literals "..."
// and classes [...] / [^...] with the escapes \n \r \t \\ \" \[ \] \- \^
// \xHH \uHHHH \UHHHHHHHH; `.` (any character); groups ( ... ); postfix
// * + ? {m} {m,} {m,n}. Generation starts at the rule `root`.
//
// Compiled form: every rule is a list of alternatives, every alternative a
// run of elements ending in kEnd. A class over characters becomes byte
// sets: its one-byte characters one set, each run of multi-byte UTF-8
// sequences a chain of sets (so a token may end inside a character and the
// matcher still knows what may follow). Repetitions become rules of their
// own (x* is `r ::= x r |`, right recursive, so the automaton's stacks stay
// flat).
//
// Refused, with the rule named: an undefined rule, a rule defined twice, no
// root, left recursion (the automaton would expand it forever), a rule that
// can never end (no finite text matches it), and grammars over the bounds
// below. Fuzzed by grammar_fuzz.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/base/status.h"

namespace pi {

// Bounds on what a grammar's text may ask for, checked while it is read.
inline constexpr size_t kMaxGrammarBytes = 256 * 1024;
inline constexpr int kMaxGrammarRepeat = 1000;          // m and n of {m,n}
inline constexpr size_t kMaxGrammarElements = 1 << 20;  // after repetitions are unrolled
inline constexpr int kMaxGrammarNesting = 64;           // parentheses

class Grammar {
 public:
  enum class Kind : uint8_t {
    kEnd,    // the end of an alternative
    kBytes,  // one byte out of a set (arg: the set's index)
    kRule,   // a rule (arg: its index)
  };
  struct Element {
    Kind kind;
    int32_t arg;
  };
  using ByteSet = std::array<uint64_t, 4>;

  // Reads and compiles GBNF text; errors name the line and column, or the rule.
  static Status Parse(const std::string& text, std::shared_ptr<const Grammar>* out);

  const std::vector<Element>& elements() const { return elements_; }
  // Rule r's alternatives: positions in elements() where each begins.
  const std::vector<int32_t>& alternatives(int32_t r) const { return rules_[r].alternatives; }
  const std::string& rule_name(int32_t r) const { return rules_[r].name; }
  int32_t n_rules() const { return static_cast<int32_t>(rules_.size()); }
  int32_t root() const { return root_; }
  bool ByteMatches(int32_t set, uint8_t b) const {
    return (byte_sets_[set][b >> 6] >> (b & 63)) & 1;
  }

 private:
  friend class GrammarBuilder;
  struct Rule {
    std::string name;
    std::vector<int32_t> alternatives;
  };
  std::vector<Element> elements_;
  std::vector<Rule> rules_;
  std::vector<ByteSet> byte_sets_;
  int32_t root_ = -1;
};

// A character of a GBNF rule name: a-z, A-Z, 0-9, '-' and '_'.
inline bool IsGbnfNameChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
         c == '_';
}

// The byte-range runs of UTF-8 that encode exactly the code points [lo, hi]
// (surrogates excluded): each run a list of (first, last) byte ranges, one
// per byte of the encoding. Exposed for tests.
using Utf8Run = std::vector<std::pair<uint8_t, uint8_t>>;
void Utf8Runs(uint32_t lo, uint32_t hi, std::vector<Utf8Run>* out);

}  // namespace pi
