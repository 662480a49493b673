#include "common/text/grammar.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <unordered_map>

namespace pi {

// ---- UTF-8 runs ---------------------------------------------------------------

namespace {

int Utf8Encode(uint32_t cp, uint8_t* out) {
  if (cp < 0x80) {
    out[0] = static_cast<uint8_t>(cp);
    return 1;
  }
  if (cp < 0x800) {
    out[0] = static_cast<uint8_t>(0xC0 | (cp >> 6));
    out[1] = static_cast<uint8_t>(0x80 | (cp & 0x3F));
    return 2;
  }
  if (cp < 0x10000) {
    out[0] = static_cast<uint8_t>(0xE0 | (cp >> 12));
    out[1] = static_cast<uint8_t>(0x80 | ((cp >> 6) & 0x3F));
    out[2] = static_cast<uint8_t>(0x80 | (cp & 0x3F));
    return 3;
  }
  out[0] = static_cast<uint8_t>(0xF0 | (cp >> 18));
  out[1] = static_cast<uint8_t>(0x80 | ((cp >> 12) & 0x3F));
  out[2] = static_cast<uint8_t>(0x80 | ((cp >> 6) & 0x3F));
  out[3] = static_cast<uint8_t>(0x80 | (cp & 0x3F));
  return 4;
}

}  // namespace

// Splits [lo, hi] until both ends encode to the same length and every
// continuation byte spans its whole range between them; then the run is the
// byte-wise pairs of the two encodings.
void Utf8Runs(uint32_t lo, uint32_t hi, std::vector<Utf8Run>* out) {
  hi = std::min<uint32_t>(hi, 0x10FFFF);
  if (lo > hi) return;
  if (lo <= 0xDFFF && hi >= 0xD800) {
    if (lo < 0xD800) Utf8Runs(lo, 0xD7FF, out);
    if (hi > 0xDFFF) Utf8Runs(0xE000, hi, out);
    return;
  }
  for (uint32_t edge : {0x7Fu, 0x7FFu, 0xFFFFu}) {
    if (lo <= edge && hi > edge) {
      Utf8Runs(lo, edge, out);
      Utf8Runs(edge + 1, hi, out);
      return;
    }
  }
  if (hi > 0x7F) {
    for (int i = 1; i < 4; ++i) {
      const uint32_t m = (1u << (6 * i)) - 1;
      if ((lo & ~m) != (hi & ~m)) {
        if ((lo & m) != 0) {
          Utf8Runs(lo, lo | m, out);
          Utf8Runs((lo | m) + 1, hi, out);
          return;
        }
        if ((hi & m) != m) {
          Utf8Runs(lo, (hi & ~m) - 1, out);
          Utf8Runs(hi & ~m, hi, out);
          return;
        }
      }
    }
  }
  uint8_t a[4], b[4];
  const int n = Utf8Encode(lo, a);
  Utf8Encode(hi, b);
  Utf8Run run;
  for (int i = 0; i < n; ++i) run.emplace_back(a[i], b[i]);
  out->push_back(run);
}

// ---- the builder: GBNF text -> rules over characters -> rules over bytes ------

using CodeRanges = std::vector<std::pair<uint32_t, uint32_t>>;  // sorted, disjoint

class GrammarBuilder {
 public:
  explicit GrammarBuilder(const std::string& text) : s_(text) {}
  Status Build(Grammar* g);

 private:
  struct Item {
    bool is_rule;
    int32_t index;  // a rule, or a class in classes_
  };
  using Sequence = std::vector<Item>;
  struct IrRule {
    std::string name;
    std::vector<Sequence> alts;
    bool defined = false;
    bool generated = false;
  };

  // Parsing.
  Status Fail(const char* what) const;
  void SkipSpace(bool newline_ok);
  Status ParseRule();
  Status ParseAlternatives(int32_t rule, bool nested, int depth, std::vector<Sequence>* alts);
  Status ParseSequence(int32_t rule, bool nested, int depth, Sequence* seq);
  Status ParseRepeat(int32_t rule, size_t unit_begin, Sequence* seq);
  Status ParseChar(uint32_t* cp);
  Status ParseInt(int* value);
  Status ParseLiteral(Sequence* seq);
  Status ParseClass(Sequence* seq);
  int32_t RuleId(const std::string& name);
  int32_t NewRule(int32_t parent);
  int32_t ClassId(CodeRanges ranges);
  Status CountElements(size_t n);

  // Compiling.
  Status CompileClasses(Grammar* g);
  Status Emit(Grammar* g);
  Status Check(const Grammar& g) const;
  std::string Describe(int32_t rule) const;

  const std::string& s_;
  size_t pos_ = 0;
  std::vector<IrRule> rules_;
  std::unordered_map<std::string, int32_t> rule_ids_;
  std::vector<CodeRanges> classes_;
  std::map<CodeRanges, int32_t> class_ids_;
  size_t n_items_ = 0;
  // A class compiled: inline byte-set elements, or a rule over bytes.
  struct CompiledClass {
    std::vector<int32_t> inline_sets;
    int32_t rule = -1;
  };
  std::vector<CompiledClass> compiled_;
};

Status GrammarBuilder::Fail(const char* what) const {
  int line = 1, col = 1;
  for (size_t i = 0; i < pos_ && i < s_.size(); ++i) {
    if (s_[i] == '\n') {
      ++line;
      col = 1;
    } else {
      ++col;
    }
  }
  return Status::Invalid("grammar: line %d, column %d: %s", line, col, what);
}

void GrammarBuilder::SkipSpace(bool newline_ok) {
  while (pos_ < s_.size()) {
    const char c = s_[pos_];
    if (c == '#') {
      while (pos_ < s_.size() && s_[pos_] != '\n') ++pos_;
    } else if (c == ' ' || c == '\t' || c == '\r' || (newline_ok && c == '\n')) {
      ++pos_;
    } else {
      break;
    }
  }
}

int32_t GrammarBuilder::RuleId(const std::string& name) {
  auto it = rule_ids_.find(name);
  if (it != rule_ids_.end()) return it->second;
  const int32_t id = static_cast<int32_t>(rules_.size());
  rules_.push_back(IrRule{name, {}, false, false});
  rule_ids_.emplace(name, id);
  return id;
}

// A rule made for a group or a repetition inside `parent`: named after it,
// with a suffix no GBNF name can have.
int32_t GrammarBuilder::NewRule(int32_t parent) {
  const int32_t id = static_cast<int32_t>(rules_.size());
  rules_.push_back(IrRule{rules_[parent].name + "#" + std::to_string(id), {}, true, true});
  return id;
}

int32_t GrammarBuilder::ClassId(CodeRanges r) {
  std::sort(r.begin(), r.end());
  CodeRanges merged;
  for (const auto& x : r) {
    if (!merged.empty() && x.first <= merged.back().second + 1) {
      merged.back().second = std::max(merged.back().second, x.second);
    } else {
      merged.push_back(x);
    }
  }
  auto it = class_ids_.find(merged);
  if (it != class_ids_.end()) return it->second;
  const int32_t id = static_cast<int32_t>(classes_.size());
  classes_.push_back(merged);
  class_ids_.emplace(std::move(merged), id);
  return id;
}

Status GrammarBuilder::CountElements(size_t n) {
  n_items_ += n;
  if (n_items_ > kMaxGrammarElements) {
    return Fail("the grammar is too large (over 1048576 elements once repetitions are unrolled)");
  }
  return Status::Ok();
}

Status GrammarBuilder::ParseRule() {
  const size_t begin = pos_;
  while (pos_ < s_.size() && IsGbnfNameChar(s_[pos_])) ++pos_;
  if (pos_ == begin) return Fail("expected a rule name");
  const std::string name = s_.substr(begin, pos_ - begin);
  SkipSpace(false);
  if (s_.compare(pos_, 3, "::=") != 0) return Fail("expected ::= after the rule name");
  pos_ += 3;
  SkipSpace(true);
  const int32_t id = RuleId(name);
  if (rules_[id].defined) {
    pos_ = begin;
    return Fail(("rule '" + name + "' is defined twice").c_str());
  }
  rules_[id].defined = true;
  std::vector<Sequence> alts;
  Status st = ParseAlternatives(id, false, 0, &alts);
  if (!st.ok()) return st;
  rules_[id].alts = std::move(alts);
  if (pos_ < s_.size() && s_[pos_] != '\n') return Fail("expected the end of the line");
  return Status::Ok();
}

Status GrammarBuilder::ParseAlternatives(int32_t rule, bool nested, int depth,
                                         std::vector<Sequence>* alts) {
  for (;;) {
    Sequence seq;
    Status st = ParseSequence(rule, nested, depth, &seq);
    if (!st.ok()) return st;
    alts->push_back(std::move(seq));
    if (pos_ >= s_.size() || s_[pos_] != '|') return Status::Ok();
    ++pos_;
    SkipSpace(true);
  }
}

Status GrammarBuilder::ParseSequence(int32_t rule, bool nested, int depth, Sequence* seq) {
  size_t unit_begin = SIZE_MAX;  // where the last element (what a postfix repeats) began
  while (pos_ < s_.size()) {
    const char c = s_[pos_];
    const size_t before = seq->size();
    Status st;
    if (c == '"') {
      st = ParseLiteral(seq);
    } else if (c == '[') {
      st = ParseClass(seq);
    } else if (c == '.') {
      ++pos_;
      seq->push_back({false, ClassId({{0, 0x10FFFF}})});
    } else if (c == '(') {
      if (depth >= kMaxGrammarNesting) return Fail("parentheses nested too deeply (over 64)");
      ++pos_;
      SkipSpace(true);
      const int32_t sub = NewRule(rule);
      std::vector<Sequence> alts;
      st = ParseAlternatives(sub, true, depth + 1, &alts);
      if (!st.ok()) return st;
      if (pos_ >= s_.size() || s_[pos_] != ')') return Fail("expected )");
      ++pos_;
      rules_[sub].alts = std::move(alts);
      seq->push_back({true, sub});
    } else if (IsGbnfNameChar(c)) {
      const size_t begin = pos_;
      while (pos_ < s_.size() && IsGbnfNameChar(s_[pos_])) ++pos_;
      const std::string name = s_.substr(begin, pos_ - begin);
      SkipSpace(nested);
      if (s_.compare(pos_, 3, "::=") == 0) {
        pos_ = begin;
        return Fail("a new rule must start on a new line");
      }
      seq->push_back({true, RuleId(name)});
      unit_begin = before;
      if (!(st = CountElements(1)).ok()) return st;
      continue;
    } else if (c == '*' || c == '+' || c == '?' || c == '{') {
      if (unit_begin == SIZE_MAX) return Fail("nothing before the repetition to repeat");
      st = ParseRepeat(rule, unit_begin, seq);
      if (!st.ok()) return st;
      unit_begin = SIZE_MAX;  // x** is refused, as llama.cpp does
      SkipSpace(nested);
      continue;
    } else {
      break;
    }
    if (!st.ok()) return st;
    if (!(st = CountElements(seq->size() - before)).ok()) return st;
    unit_begin = before;
    SkipSpace(nested);
  }
  return Status::Ok();
}

Status GrammarBuilder::ParseInt(int* value) {
  const size_t begin = pos_;
  long v = 0;
  while (pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9') {
    v = v * 10 + (s_[pos_] - '0');
    if (v > kMaxGrammarRepeat) return Fail("a repetition count is over 1000");
    ++pos_;
  }
  if (pos_ == begin) return Fail("expected a number");
  *value = static_cast<int>(v);
  return Status::Ok();
}

// The unit seq[unit_begin..] repeated: x* is `r ::= x r |`, x+ is
// `r ::= x r | x`, x? is `r ::= x |`, x{m,n} is m copies of x then n-m
// nested optionals (x (x (x)?)?)?, x{m,} m copies then x*.
Status GrammarBuilder::ParseRepeat(int32_t rule, size_t unit_begin, Sequence* seq) {
  Sequence unit(seq->begin() + unit_begin, seq->end());
  seq->resize(unit_begin);
  int lo = 0, hi = -1;  // -1: no upper bound
  const char c = s_[pos_++];
  if (c == '*') {
    lo = 0;
  } else if (c == '+') {
    lo = 1;
  } else if (c == '?') {
    hi = 1;
  } else {
    SkipSpace(false);
    Status st = ParseInt(&lo);
    if (!st.ok()) return st;
    SkipSpace(false);
    hi = lo;
    if (pos_ < s_.size() && s_[pos_] == ',') {
      ++pos_;
      SkipSpace(false);
      hi = -1;
      if (pos_ < s_.size() && s_[pos_] != '}') {
        if (!(st = ParseInt(&hi)).ok()) return st;
        SkipSpace(false);
      }
    }
    if (pos_ >= s_.size() || s_[pos_] != '}') return Fail("expected } after the repetition count");
    ++pos_;
    if (hi >= 0 && hi < lo) return Fail("a repetition {m,n} with n < m");
  }
  Status st = CountElements(unit.size() * static_cast<size_t>(std::max(lo, hi) + 1));
  if (!st.ok()) return st;
  for (int i = 0; i < lo; ++i) seq->insert(seq->end(), unit.begin(), unit.end());
  if (hi < 0) {
    const int32_t r = NewRule(rule);
    Sequence more = unit;
    more.push_back({true, r});
    rules_[r].alts = {more, {}};
    seq->push_back({true, r});
  } else if (hi > lo) {
    int32_t inner = -1;
    for (int i = lo; i < hi; ++i) {
      const int32_t r = NewRule(rule);
      Sequence more = unit;
      if (inner >= 0) more.push_back({true, inner});
      rules_[r].alts = {more, {}};
      inner = r;
    }
    seq->push_back({true, inner});
  }
  return Status::Ok();
}

Status GrammarBuilder::ParseChar(uint32_t* cp) {
  if (pos_ >= s_.size()) return Fail("unexpected end of the grammar");
  const uint8_t c = static_cast<uint8_t>(s_[pos_]);
  if (c == '\\') {
    if (pos_ + 1 >= s_.size()) return Fail("unexpected end of the grammar after \\");
    const char e = s_[pos_ + 1];
    pos_ += 2;
    int digits = 0;
    switch (e) {
      case 'n':
        *cp = '\n';
        return Status::Ok();
      case 'r':
        *cp = '\r';
        return Status::Ok();
      case 't':
        *cp = '\t';
        return Status::Ok();
      case '\\':
      case '"':
      case '\'':
      case '[':
      case ']':
      case '-':
      case '^':
      case '/':
        *cp = static_cast<uint8_t>(e);
        return Status::Ok();
      case 'x':
        digits = 2;
        break;
      case 'u':
        digits = 4;
        break;
      case 'U':
        digits = 8;
        break;
      default:
        pos_ -= 2;
        return Fail("unknown escape");
    }
    uint32_t v = 0;
    for (int i = 0; i < digits; ++i, ++pos_) {
      const char h = pos_ < s_.size() ? s_[pos_] : 0;
      const int d = h >= '0' && h <= '9'   ? h - '0'
                    : h >= 'a' && h <= 'f' ? h - 'a' + 10
                    : h >= 'A' && h <= 'F' ? h - 'A' + 10
                                           : -1;
      if (d < 0) return Fail("expected a hex digit in the escape");
      v = v * 16 + static_cast<uint32_t>(d);
    }
    if (v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) return Fail("the escape is not a character");
    *cp = v;
    return Status::Ok();
  }
  // UTF-8 as it is.
  int n = c < 0x80             ? 1
          : (c & 0xE0) == 0xC0 ? 2
          : (c & 0xF0) == 0xE0 ? 3
          : (c & 0xF8) == 0xF0 ? 4
                               : 0;
  if (n == 0 || pos_ + n > s_.size()) return Fail("invalid UTF-8");
  uint32_t v = n == 1 ? c : n == 2 ? (c & 0x1F) : n == 3 ? (c & 0x0F) : (c & 0x07);
  for (int i = 1; i < n; ++i) {
    const uint8_t k = static_cast<uint8_t>(s_[pos_ + i]);
    if ((k & 0xC0) != 0x80) return Fail("invalid UTF-8");
    v = (v << 6) | (k & 0x3F);
  }
  static const uint32_t kMin[5] = {0, 0, 0x80, 0x800, 0x10000};
  if (v < kMin[n] || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) return Fail("invalid UTF-8");
  pos_ += n;
  *cp = v;
  return Status::Ok();
}

Status GrammarBuilder::ParseLiteral(Sequence* seq) {
  ++pos_;  // "
  while (pos_ < s_.size() && s_[pos_] != '"') {
    if (s_[pos_] == '\n') return Fail("a literal must end on its line");
    uint32_t cp;
    Status st = ParseChar(&cp);
    if (!st.ok()) return st;
    seq->push_back({false, ClassId({{cp, cp}})});
  }
  if (pos_ >= s_.size()) return Fail("unterminated literal");
  ++pos_;
  return Status::Ok();
}

Status GrammarBuilder::ParseClass(Sequence* seq) {
  ++pos_;  // [
  bool negated = false;
  if (pos_ < s_.size() && s_[pos_] == '^') {
    negated = true;
    ++pos_;
  }
  CodeRanges ranges;
  while (pos_ < s_.size() && s_[pos_] != ']') {
    if (s_[pos_] == '\n') return Fail("a character class must end on its line");
    uint32_t lo, hi;
    Status st = ParseChar(&lo);
    if (!st.ok()) return st;
    hi = lo;
    if (pos_ + 1 < s_.size() && s_[pos_] == '-' && s_[pos_ + 1] != ']') {
      ++pos_;
      if (!(st = ParseChar(&hi)).ok()) return st;
      if (hi < lo) return Fail("a character range runs backwards");
    }
    ranges.emplace_back(lo, hi);
  }
  if (pos_ >= s_.size()) return Fail("unterminated character class");
  ++pos_;
  if (negated) {
    const int32_t id = ClassId(ranges);  // sorted and merged
    CodeRanges inverse;
    uint32_t next = 0;
    for (const auto& r : classes_[id]) {
      if (r.first > next) inverse.emplace_back(next, r.first - 1);
      next = r.second + 1;
    }
    if (next <= 0x10FFFF) inverse.emplace_back(next, 0x10FFFF);
    ranges = inverse;
  }
  if (ranges.empty()) return Fail("the character class matches nothing");
  seq->push_back({false, ClassId(ranges)});
  return Status::Ok();
}

// ---- compiling ----------------------------------------------------------------

// Each class becomes byte sets: runs of the same length that differ only in
// their first byte share one chain (its first set the union), so a class
// such as [^"\\] is one set for ASCII and a handful of chains. A class that
// is one chain (a literal's character) is inlined where it is used.
Status GrammarBuilder::CompileClasses(Grammar* g) {
  for (const CodeRanges& ranges : classes_) {
    std::vector<Utf8Run> runs;
    for (const auto& r : ranges) Utf8Runs(r.first, r.second, &runs);
    // Chains keyed by their length and every range but the first.
    std::map<Utf8Run, Grammar::ByteSet> chains;
    for (const Utf8Run& run : runs) {
      Utf8Run key(run.begin() + 1, run.end());
      key.insert(key.begin(), {static_cast<uint8_t>(run.size()), 0});
      Grammar::ByteSet& first = chains[key];
      for (int b = run[0].first; b <= run[0].second; ++b) first[b >> 6] |= 1ull << (b & 63);
    }
    std::vector<std::vector<int32_t>> alts;
    for (const auto& [key, first] : chains) {
      std::vector<int32_t> sets{static_cast<int32_t>(g->byte_sets_.size())};
      g->byte_sets_.push_back(first);
      for (size_t i = 1; i < key.size(); ++i) {
        Grammar::ByteSet set{};
        for (int b = key[i].first; b <= key[i].second; ++b) set[b >> 6] |= 1ull << (b & 63);
        sets.push_back(static_cast<int32_t>(g->byte_sets_.size()));
        g->byte_sets_.push_back(set);
      }
      alts.push_back(std::move(sets));
    }
    CompiledClass c;
    if (alts.size() == 1) {
      c.inline_sets = alts[0];
    } else {
      c.rule = static_cast<int32_t>(g->rules_.size());
      g->rules_.push_back({"[class " + std::to_string(compiled_.size()) + "]", {}});
      for (const auto& sets : alts) {
        g->rules_[c.rule].alternatives.push_back(static_cast<int32_t>(g->elements_.size()));
        for (int32_t set : sets) g->elements_.push_back({Grammar::Kind::kBytes, set});
        g->elements_.push_back({Grammar::Kind::kEnd, 0});
      }
    }
    compiled_.push_back(std::move(c));
  }
  return Status::Ok();
}

// The parsed rules keep their numbers; class rules come after them.
Status GrammarBuilder::Emit(Grammar* g) {
  g->rules_.resize(rules_.size());
  Status st = CompileClasses(g);
  if (!st.ok()) return st;
  for (size_t r = 0; r < rules_.size(); ++r) {
    g->rules_[r].name = rules_[r].name;
    for (const Sequence& seq : rules_[r].alts) {
      g->rules_[r].alternatives.push_back(static_cast<int32_t>(g->elements_.size()));
      for (const Item& item : seq) {
        if (item.is_rule) {
          g->elements_.push_back({Grammar::Kind::kRule, item.index});
        } else if (compiled_[item.index].rule >= 0) {
          g->elements_.push_back({Grammar::Kind::kRule, compiled_[item.index].rule});
        } else {
          for (int32_t set : compiled_[item.index].inline_sets) {
            g->elements_.push_back({Grammar::Kind::kBytes, set});
          }
        }
      }
      g->elements_.push_back({Grammar::Kind::kEnd, 0});
    }
    if (g->elements_.size() > 4 * kMaxGrammarElements) {
      return Status::Invalid("grammar: too large once compiled to bytes");
    }
  }
  return Status::Ok();
}

std::string GrammarBuilder::Describe(int32_t rule) const {
  if (rule >= static_cast<int32_t>(rules_.size())) return "a character class";
  const IrRule& r = rules_[rule];
  if (!r.generated) return "rule '" + r.name + "'";
  return "a group or repetition in rule '" + r.name.substr(0, r.name.find('#')) + "'";
}

// Rules that can never end, and left recursion (a rule reached again before
// any byte is read), which the matcher would expand forever.
Status GrammarBuilder::Check(const Grammar& g) const {
  const int32_t n = g.n_rules();
  // Nullable and productive rules, each by a worklist over the rule
  // occurrences (linear in the grammar's size: a fixed point by rounds
  // would be quadratic on a long chain of rules, a cheap request's DoS).
  std::vector<int32_t> alt_owner;
  std::vector<std::vector<int32_t>> occurrences(n);  // rule -> alternatives using it
  std::vector<int32_t> rule_refs, has_bytes;
  for (int32_t r = 0; r < n; ++r) {
    for (int32_t at : g.alternatives(r)) {
      const int32_t a = static_cast<int32_t>(alt_owner.size());
      alt_owner.push_back(r);
      rule_refs.push_back(0);
      has_bytes.push_back(0);
      for (int32_t p = at; g.elements()[p].kind != Grammar::Kind::kEnd; ++p) {
        const Grammar::Element& e = g.elements()[p];
        if (e.kind == Grammar::Kind::kBytes) {
          has_bytes[a] = 1;
        } else {
          ++rule_refs[a];
          occurrences[e.arg].push_back(a);
        }
      }
    }
  }
  auto solve = [&](bool bytes_block, std::vector<char>* holds) {
    holds->assign(n, 0);
    std::vector<int32_t> waiting(rule_refs), queue;
    for (size_t a = 0; a < waiting.size(); ++a) {
      if (bytes_block && has_bytes[a]) continue;
      if (waiting[a] == 0 && !(*holds)[alt_owner[a]]) {
        (*holds)[alt_owner[a]] = 1;
        queue.push_back(alt_owner[a]);
      }
    }
    while (!queue.empty()) {
      const int32_t r = queue.back();
      queue.pop_back();
      for (int32_t a : occurrences[r]) {
        if (--waiting[a] != 0 || (bytes_block && has_bytes[a]) || (*holds)[alt_owner[a]]) continue;
        (*holds)[alt_owner[a]] = 1;
        queue.push_back(alt_owner[a]);
      }
    }
  };
  std::vector<char> nullable, productive;
  solve(true, &nullable);
  solve(false, &productive);
  for (int32_t r = 0; r < n; ++r) {
    if (!productive[r]) {
      return Status::Invalid("grammar: %s can never end (no finite text matches it)",
                             Describe(r).c_str());
    }
  }
  // Depth-first search over "may begin with" edges; a back edge is left recursion.
  std::vector<char> color(n, 0);                 // 0 new, 1 on the path, 2 done
  std::vector<std::pair<int32_t, size_t>> path;  // rule, next edge
  std::vector<std::vector<int32_t>> edges(n);
  for (int32_t r = 0; r < n; ++r) {
    for (int32_t at : g.alternatives(r)) {
      for (int32_t p = at; g.elements()[p].kind == Grammar::Kind::kRule; ++p) {
        edges[r].push_back(g.elements()[p].arg);
        if (!nullable[g.elements()[p].arg]) break;
      }
    }
  }
  for (int32_t start = 0; start < n; ++start) {
    if (color[start]) continue;
    path.push_back({start, 0});
    color[start] = 1;
    while (!path.empty()) {
      auto& [r, next] = path.back();
      if (next == edges[r].size()) {
        color[r] = 2;
        path.pop_back();
        continue;
      }
      const int32_t s = edges[r][next++];
      if (color[s] == 1) {
        return Status::Invalid(
            "grammar: %s is left recursive (it can reach itself before "
            "reading a character)",
            Describe(s).c_str());
      }
      if (color[s] == 0) {
        color[s] = 1;
        path.push_back({s, 0});
      }
    }
  }
  return Status::Ok();
}

Status GrammarBuilder::Build(Grammar* g) {
  if (s_.size() > kMaxGrammarBytes) {
    return Status::Invalid("grammar: %zu bytes, at most %zu", s_.size(), kMaxGrammarBytes);
  }
  SkipSpace(true);
  while (pos_ < s_.size()) {
    Status st = ParseRule();
    if (!st.ok()) return st;
    SkipSpace(true);
  }
  for (const IrRule& r : rules_) {
    if (!r.defined) {
      return Status::Invalid("grammar: rule '%s' is used but never defined", r.name.c_str());
    }
  }
  auto root = rule_ids_.find("root");
  if (root == rule_ids_.end()) return Status::Invalid("grammar: no rule 'root' to start from");
  g->root_ = root->second;
  Status st = Emit(g);
  if (!st.ok()) return st;
  return Check(*g);
}

Status Grammar::Parse(const std::string& text, std::shared_ptr<const Grammar>* out) {
  auto g = std::make_shared<Grammar>();
  GrammarBuilder builder(text);
  Status st = builder.Build(g.get());
  if (!st.ok()) return st;
  *out = std::move(g);
  return Status::Ok();
}

}  // namespace pi
