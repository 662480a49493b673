#include "common/text/json_schema_grammar.h"

#include <algorithm>
#include <cmath>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "common/text/unicode.h"

namespace pi {
namespace {

using Json = nlohmann::ordered_json;

constexpr int kMaxDepth = 64;
constexpr size_t kMaxRules = 4096;
constexpr size_t kMaxLiteralBytes = 64 * 1024;
constexpr int64_t kMaxCount = 1000;
constexpr size_t kMaxPrefixItems = 32;  // each optional one nests a group; the engine allows 64
constexpr size_t kMaxNameChars = 48;
constexpr int kKeyTrieDepthPerRule = 16;           // the extra-key trie opens a new rule this deep
constexpr int64_t kMaxInteger = 9999999999999999;  // 16 digits, as the integer rule allows

// The fixed rules, emitted (in this order) when something reachable uses them.
struct Primitive {
  const char* name;
  const char* body;
  const char* deps;  // space-separated
};
const Primitive kPrimitives[] = {
    {"value", "object | array | string | number | boolean | null",
     "object array string number boolean null"},
    {"object", R"("{" ws ( string ws ":" ws value ( ws "," ws string ws ":" ws value )* ws )? "}")",
     "ws string value"},
    {"array", R"("[" ws ( value ( ws "," ws value )* ws )? "]")", "ws value"},
    {"string", R"("\"" char* "\"")", "char"},
    // No surrogate escapes: a pair would count as two characters against minLength.
    {"char",
     R"([^\"\\\x00-\x1f] | "\\" ( [\"\\/bfnrt] | "u" ( [0-9a-cA-CefEF] [0-9a-fA-F]{3} | )"
     R"([dD] [0-7] [0-9a-fA-F]{2} ) ))",
     ""},
    {"number",
     R"("-"? ( "0" | [1-9] [0-9]{0,15} ) ( "." [0-9]{1,16} )? ( [eE] [-+]? [0-9]{1,3} )?)", ""},
    {"integer", R"("-"? ( "0" | [1-9] [0-9]{0,15} ))", ""},
    {"boolean", R"("true" | "false")", ""},
    {"null", R"("null")", ""},
    {"date-time", R"(date "T" time)", "date time"},
    // RFC 3339 full-date: the day bounded by the month, 29 February in leap years only.
    {"date",
     R"([0-9]{4} "-" ( ( "0" [13578] | "1" [02] ) "-" ( "0" [1-9] | [12] [0-9] | "3" [01] ) | )"
     R"(( "0" [469] | "11" ) "-" ( "0" [1-9] | [12] [0-9] | "30" ) | )"
     R"("02-" ( "0" [1-9] | "1" [0-9] | "2" [0-8] ) ) | ( [0-9]{2} ( "0" [48] | [2468] [048] | )"
     R"([13579] [26] ) | ( [02468] [048] | [13579] [26] ) "00" ) "-02-29")",
     ""},
    {"time",
     R"(( [01] [0-9] | "2" [0-3] ) ":" [0-5] [0-9] ":" [0-5] [0-9] ( "." [0-9]{1,9} )? )"
     R"(( "Z" | [+-] ( [01] [0-9] | "2" [0-3] ) ":" [0-5] [0-9] ))",
     ""},
    {"uuid",
     R"([0-9a-fA-F]{8} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{4} "-" )"
     R"([0-9a-fA-F]{12})",
     ""},
    // One space, or one line break and an indent: never a run of blank
    // lines (a small model left free to would fill its tokens with them).
    {"ws", R"(( " " | "\n" [ \t]{0,20} )?)", ""},
};

const Primitive* FindPrimitive(const std::string& name) {
  for (const Primitive& p : kPrimitives) {
    if (name == p.name) return &p;
  }
  return nullptr;
}

bool IsAnnotation(const std::string& k) {
  static const std::set<std::string> kAnnotations = {
      "title",    "description", "$schema",  "$id",       "$comment", "default",
      "examples", "deprecated",  "readOnly", "writeOnly", "$defs",    "definitions"};
  return kAnnotations.count(k) != 0;
}

// Keywords implemented exactly (additionalItems counts only beside a list of items, as in
// draft 7; without one it is ignored there too).
bool IsSupported(const std::string& k) {
  // clang-format off
  static const std::set<std::string> kSupported = {
      "type", "enum", "const", "anyOf", "oneOf", "allOf", "$ref",         // any value
      "properties", "required", "additionalProperties",                   // objects
      "items", "prefixItems", "additionalItems", "minItems", "maxItems",  // arrays
      "minLength", "maxLength", "format",                                 // strings
      "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"};      // integers
  // clang-format on
  return kSupported.count(k) != 0;
}

const char* const kBoundKeywords[] = {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"};
const char* const kTypeNames[] = {"object",  "array",   "string", "number",
                                  "integer", "boolean", "null"};

// One JSON pointer token (RFC 6901).
std::string PointerToken(const std::string& s) {
  std::string out;
  for (char ch : s) {
    if (ch == '~') {
      out += "~0";
    } else if (ch == '/') {
      out += "~1";
    } else {
      out += ch;
    }
  }
  return out;
}

// A JSON pointer token's text (~1 is '/', ~0 is '~').
std::string UnescapeToken(const std::string& token) {
  std::string out;
  for (size_t j = 0; j < token.size(); ++j) {
    if (token[j] == '~' && j + 1 < token.size() && (token[j + 1] == '0' || token[j + 1] == '1')) {
      out += token[j + 1] == '0' ? '~' : '/';
      ++j;
    } else {
      out += token[j];
    }
  }
  return out;
}

int HexValue(char ch) {
  if (ch >= '0' && ch <= '9') return ch - '0';
  if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
  if (ch >= 'A' && ch <= 'F') return ch - 'A' + 10;
  return -1;
}

// A schema that allows every value: true, or an object of annotations only.
bool AllowsAll(const Json& s) {
  if (s.is_boolean()) return s.get<bool>();
  if (!s.is_object()) return false;
  for (auto it = s.begin(); it != s.end(); ++it) {
    if (!IsAnnotation(it.key())) return false;
  }
  return true;
}

// A value's compact JSON text; false for a string that is not UTF-8 (nlohmann throws).
bool DumpJson(const Json& v, std::string* out) {
  try {
    *out = v.dump();
  } catch (const nlohmann::json::exception&) {
    return false;
  }
  return true;
}

// A GBNF literal of these bytes; UTF-8 passes through, control bytes are escaped.
std::string Literal(const std::string& bytes) {
  std::string out = "\"";
  for (unsigned char ch : bytes) {
    if (ch == '"' || ch == '\\') {
      out += '\\';
      out += static_cast<char>(ch);
    } else if (ch == '\n') {
      out += "\\n";
    } else if (ch == '\r') {
      out += "\\r";
    } else if (ch == '\t') {
      out += "\\t";
    } else if (ch < 0x20 || ch == 0x7f) {
      char buf[8];
      snprintf(buf, sizeof(buf), "\\x%02x", ch);
      out += buf;
    } else {
      out += static_cast<char>(ch);
    }
  }
  return out + "\"";
}

// A code point inside a character class.
std::string ClassChar(uint32_t cp) {
  if (cp >= 0x20 && cp < 0x7f) {
    const char ch = static_cast<char>(cp);
    if (ch == ']' || ch == '[' || ch == '-' || ch == '^' || ch == '\\' || ch == '"') {
      return std::string("\\") + ch;
    }
    return std::string(1, ch);
  }
  char buf[16];
  if (cp <= 0xffff) {
    snprintf(buf, sizeof(buf), "\\u%04x", static_cast<unsigned>(cp));
  } else {
    snprintf(buf, sizeof(buf), "\\U%08x", static_cast<unsigned>(cp));
  }
  return buf;
}

// `atom` repeated lo..hi times (hi < 0: no upper bound); empty when it may not appear.
std::string Repeat(const std::string& atom, int64_t lo, int64_t hi) {
  if (hi == 0) return "";
  if (hi < 0) {
    if (lo == 0) return atom + "*";
    if (lo == 1) return atom + "+";
    return atom + "{" + std::to_string(lo) + ",}";
  }
  if (lo == 0 && hi == 1) return atom + "?";
  if (lo == hi) return lo == 1 ? atom : atom + "{" + std::to_string(lo) + "}";
  return atom + "{" + std::to_string(lo) + "," + std::to_string(hi) + "}";
}

std::string Join(const std::vector<std::string>& parts, const char* sep) {
  std::string out;
  for (const std::string& p : parts) {
    if (p.empty()) continue;
    if (!out.empty()) out += sep;
    out += p;
  }
  return out;
}

// Readable rule names from property paths and definition names.
std::string Sanitize(const std::string& hint) {
  std::string out;
  for (char ch : hint) {
    const bool alnum =
        (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9');
    if (alnum) {
      out += ch;
    } else if (!out.empty() && out.back() != '-') {
      out += '-';
    }
  }
  if (out.size() > kMaxNameChars) out.resize(kMaxNameChars);
  while (!out.empty() && out.back() == '-') out.pop_back();
  return out.empty() ? "rule" : out;
}

// --- Digit ranges, for integer bounds ---------------------------------------------------------

std::string DigitClass(char lo, char hi) {
  if (lo == hi) return Literal(std::string(1, lo));
  return std::string("[") + lo + "-" + hi + "]";
}

// The decimal strings of lo.size() digits from lo to hi (same length, lo <= hi), as a sequence.
std::string DigitsBetween(const std::string& lo, const std::string& hi) {
  const size_t n = lo.size();
  if (n == 0) return "";
  if (lo == hi) return Literal(lo);
  size_t k = 0;
  while (lo[k] == hi[k]) ++k;
  const std::string prefix = k > 0 ? Literal(lo.substr(0, k)) + " " : "";
  const std::string lo_tail = lo.substr(k + 1), hi_tail = hi.substr(k + 1);
  const size_t t = n - k - 1;
  const std::string any_tail = t > 0 ? " " + Repeat("[0-9]", static_cast<int64_t>(t), t) : "";
  const bool lo_open = lo_tail.find_first_not_of('0') == std::string::npos;
  const bool hi_open = hi_tail.find_first_not_of('9') == std::string::npos;
  char mid_lo = lo[k] + (lo_open ? 0 : 1), mid_hi = hi[k] - (hi_open ? 0 : 1);
  // A digit then the rest; "1" "50" is written "150".
  auto then = [](char digit, const std::string& rest) {
    if (rest.size() >= 2 && rest.find_first_not_of("0123456789", 1) == rest.size() - 1) {
      return Literal(digit + rest.substr(1, rest.size() - 2));
    }
    return Literal(std::string(1, digit)) + " " + rest;
  };
  std::vector<std::string> alts;
  if (!lo_open) alts.push_back(then(lo[k], DigitsBetween(lo_tail, std::string(t, '9'))));
  if (mid_lo <= mid_hi) alts.push_back(DigitClass(mid_lo, mid_hi) + any_tail);
  if (!hi_open) alts.push_back(then(hi[k], DigitsBetween(std::string(t, '0'), hi_tail)));
  if (alts.size() == 1) return prefix + alts[0];
  return prefix + "( " + Join(alts, " | ") + " )";
}

// The decimal texts of the integers a..b (0 <= a <= b), as alternatives.
void NonNegativeRange(int64_t a, int64_t b, std::vector<std::string>* alts) {
  if (a == 0) {
    alts->push_back("\"0\"");
    if (b == 0) return;
    a = 1;
  }
  int64_t power = 1;  // 10^(d-1)
  int full_from = 0, full_to = 0;
  auto flush_full = [&]() {
    if (full_from == 0) return;
    alts->push_back("[1-9]" + (full_to > 1 ? " " + Repeat("[0-9]", full_from - 1, full_to - 1)
                                           : std::string()));
    full_from = 0;
  };
  for (int d = 1; d <= 16 && power <= b; ++d, power *= 10) {
    const int64_t top = power * 10 - 1;
    const int64_t lo = std::max(a, power), hi = std::min(b, top);
    if (lo > hi) continue;
    if (lo == power && hi == top) {  // every d-digit number: merges with its neighbours
      if (full_from == 0) full_from = d;
      full_to = d;
      continue;
    }
    flush_full();
    alts->push_back(DigitsBetween(std::to_string(lo), std::to_string(hi)));
  }
  flush_full();
}

// A bound keyword's value as an integer limit, clamped past the integers the grammar writes.
Status IntegerBound(const Json& v, bool lower, bool exclusive, int64_t* out) {
  const int64_t big = kMaxInteger + 1;
  int64_t n;
  if (v.is_number_unsigned()) {
    n = static_cast<int64_t>(std::min<uint64_t>(v.get<uint64_t>(), big));
  } else if (v.is_number_integer()) {
    n = std::max<int64_t>(std::min<int64_t>(v.get<int64_t>(), big), -big);
  } else if (v.is_number_float()) {
    const double d = v.get<double>();
    if (!std::isfinite(d)) return Status::Invalid("not a finite number");
    if (d >= 1e17) {
      n = big;
    } else if (d <= -1e17) {
      n = -big;
    } else {
      const double r = lower ? std::ceil(d) : std::floor(d);
      n = static_cast<int64_t>(r);
      // A bound that is not an integer already excludes itself.
      if (exclusive && r != d) exclusive = false;
    }
  } else {
    return Status::Invalid("must be a number");
  }
  if (exclusive) n += lower ? 1 : -1;
  *out = n;
  return Status::Ok();
}

// --- The converter -------------------------------------------------------------------------

// When a value can be finite: all of, any of, or a rule (rules are found to be finite together,
// as a fixpoint; a recursion that never ends is refused, as the engine would refuse it).
struct Finite {
  enum Kind { kAll, kAny, kRule } kind = kAll;
  std::string rule;
  std::vector<Finite> parts;
};

Finite FiniteRule(const std::string& name) {
  Finite f;
  if (FindPrimitive(name) == nullptr) {
    f.kind = Finite::kRule;
    f.rule = name;
  }
  return f;
}

// A schema's values: a rule's name, or none at all (a false schema, a contradiction).
struct Expr {
  std::string name;
  bool never = false;
};

// A rule's text and what it depends on.
struct Draft {
  std::string body;
  Finite finite;
  std::vector<std::string> heads;  // rules its text may begin with (to find left recursion)
  std::vector<std::string> refs;   // every rule it names
};

struct Rule {
  std::string name;
  std::string path;  // the schema it came from, for errors
  Draft draft;
  bool defined = false;
  bool dropped = false;
};

// Where in the schema a visit is: its pointer, a name hint for its rule, the rule it must
// define (a definition's or root's; empty: a new one) and its depth.
struct Ctx {
  std::string path;
  std::string hint;
  std::string target;
  int depth;
  Ctx Child(const std::string& path_suffix, const std::string& hint_suffix) const {
    return {path + path_suffix, hint + "-" + hint_suffix, "", depth + 1};
  }
};

struct DefEntry {
  std::string name;
  bool done = false;
  bool never = false;
  bool recursive = false;
};

// A declared object member (or the further members), for the chained object body.
struct Member {
  std::string kv;  // key, colon, value
  std::string label;
  bool required = false;
  bool repeat = false;
  Finite finite;
  std::vector<std::string> refs;
};

struct TrieNode {
  std::map<uint32_t, int> next;
  bool end = false;
};

// One conversion. Each schema node that needs a rule gets one, named before its children are
// visited (so the text reads top-down and a $ref can name a definition still being visited);
// a node that turns out to accept nothing drops its rule. At the end only the rules reachable
// from root are written, after the checks the engine would otherwise fail on: left recursion
// through bare $refs and unions, and rules with no finite text.
class Converter {
 public:
  Status Convert(const Json& schema, std::string* gbnf);

 private:
  Status Fail(Status::Code code, const std::string& path, const char* fmt, ...)
      __attribute__((format(printf, 4, 5)));
  Status Visit(const Json& s, const Ctx& c, Expr* out);
  Status VisitInner(const Json& s, const Ctx& c, Expr* out);
  Status VisitRef(const Json& s, const Ctx& c, Expr* out);
  Status ResolveRef(const std::string& ref, const Ctx& c, const Json** def, std::string* path,
                    std::string* name);
  Status VisitUnion(const Json& list, const char* key, const Ctx& c, Expr* out);
  Status FinishUnion(const std::string& name, const Ctx& c, const std::vector<Expr>& branches,
                     Expr* out);
  Status ParseTypes(const Json& s, const Ctx& c, std::vector<std::string>* types);
  Status VisitEnum(const Json& s, const Ctx& c, Expr* out);
  Status VisitTyped(const Json& s, const Ctx& c, Expr* out);
  Status VisitType(const std::string& type, const Json& s, const Ctx& c, Expr* out);
  Status VisitInteger(const Json& s, const Ctx& c, Expr* out);
  Status VisitString(const Json& s, const Ctx& c, Expr* out);
  Status VisitObject(const Json& s, const Ctx& c, Expr* out);
  Status ObjectMembers(const Json& s, const Ctx& c, std::vector<Member>* members, bool* never);
  Status ExtraMember(const Json& s, const Ctx& c, const std::vector<std::string>& declared,
                     std::vector<Member>* members);
  Status AssembleObject(const std::string& name, const std::vector<Member>& m, Draft* d);
  Status ExtraKeyRule(const std::string& hint, const std::string& path,
                      const std::vector<std::string>& declared, std::string* name);
  Status KeyNode(const std::vector<TrieNode>& trie, int node, int depth, const std::string& hint,
                 const std::string& path, std::string* out, std::vector<std::string>* opened);
  Status VisitArray(const Json& s, const Ctx& c, Expr* out);
  Status ReadCount(const Json& s, const char* key, const Ctx& c, int64_t* out);

  // A new rule's unique name, from a hint.
  Status Allocate(const std::string& hint, const std::string& path, std::string* name);
  // The rule a node defines: its target's, or a new one.
  Status Open(const Ctx& c, std::string* name) {
    if (!c.target.empty()) {
      *name = c.target;
      return Status::Ok();
    }
    return Allocate(c.hint, c.path, name);
  }
  void Define(const std::string& name, Draft draft);
  // A node's rule with this body: opened, defined, and named in *out.
  Status DefineNode(const Ctx& c, Draft draft, Expr* out) {
    std::string name;
    PI_RETURN_IF_ERROR(Open(c, &name));
    Define(name, std::move(draft));
    out->name = name;
    return Status::Ok();
  }
  // A node that accepts nothing gives its rule up (a target's is its caller's to give up).
  void Release(const std::string& name, const Ctx& c) {
    if (name != c.target) rules_[index_[name]].dropped = true;
  }
  Status Finish(std::string* gbnf);
  Status CheckLeftRecursion(const std::vector<char>& reachable);
  bool Eval(const Finite& f, const std::vector<char>& finite) const;

  const Json* root_ = nullptr;
  std::vector<Rule> rules_;
  std::map<std::string, size_t> index_;
  std::set<std::string> used_names_;
  std::map<std::string, DefEntry> defs_;  // by the definition's pointer ("#" for the root)
  size_t literal_bytes_ = 0;
};

Status Converter::Fail(Status::Code code, const std::string& path, const char* fmt, ...) {
  char buf[512];
  va_list args;
  va_start(args, fmt);
  vsnprintf(buf, sizeof(buf), fmt, args);
  va_end(args);
  return Status::FromCode(code, "json_schema: " + (path.empty() ? "/" : path) + ": " + buf);
}

Status Converter::Allocate(const std::string& hint, const std::string& path, std::string* name) {
  if (rules_.size() >= kMaxRules) {
    return Fail(Status::Code::kUnsupported, path, "the grammar needs more than %zu rules",
                kMaxRules);
  }
  const std::string base = Sanitize(hint);
  std::string n = base;
  for (int k = 2; used_names_.count(n) != 0 || FindPrimitive(n) != nullptr; ++k) {
    n = base + "-" + std::to_string(k);
  }
  used_names_.insert(n);
  index_[n] = rules_.size();
  rules_.push_back(Rule{n, path, {}, false, false});
  *name = n;
  return Status::Ok();
}

void Converter::Define(const std::string& name, Draft draft) {
  Rule& r = rules_[index_[name]];
  r.draft = std::move(draft);
  r.defined = true;
}

Status Converter::Visit(const Json& s, const Ctx& c, Expr* out) {
  *out = Expr();
  PI_RETURN_IF_ERROR(VisitInner(s, c, out));
  if (!c.target.empty() && out->name == c.target && !rules_[index_[c.target]].defined) {
    return Fail(Status::Code::kUnsupported, c.path, "a $ref to itself ('%s')", c.target.c_str());
  }
  // A definition's rule that is only another rule's name (a primitive, a $ref) is an alias.
  if (!c.target.empty() && !out->never && out->name != c.target) {
    Draft d;
    d.body = out->name;
    d.finite = FiniteRule(out->name);
    if (FindPrimitive(out->name) == nullptr) d.heads.push_back(out->name);
    d.refs.push_back(out->name);
    Define(c.target, std::move(d));
    out->name = c.target;
  }
  return Status::Ok();
}

Status Converter::VisitInner(const Json& s, const Ctx& c, Expr* out) {
  if (c.depth > kMaxDepth) {
    return Fail(Status::Code::kUnsupported, c.path, "nesting deeper than %d", kMaxDepth);
  }
  if (s.is_boolean()) {
    if (s.get<bool>()) {
      out->name = "value";
    } else {
      out->never = true;
    }
    return Status::Ok();
  }
  if (!s.is_object()) {
    return Fail(Status::Code::kInvalid, c.path, "a schema must be an object or a boolean, not %s",
                s.type_name());
  }
  for (auto it = s.begin(); it != s.end(); ++it) {
    if (!IsAnnotation(it.key()) && !IsSupported(it.key())) {
      return Fail(Status::Code::kUnsupported, c.path, "keyword '%s' is not supported",
                  it.key().c_str());
    }
  }
  // $ref and the combinators stand alone: a constraint beside one would be a conjunction.
  for (const char* combinator : {"$ref", "anyOf", "oneOf", "allOf"}) {
    if (!s.contains(combinator)) continue;
    for (auto it = s.begin(); it != s.end(); ++it) {
      if (it.key() != combinator && !IsAnnotation(it.key())) {
        return Fail(Status::Code::kUnsupported, c.path, "keyword '%s' beside '%s' is not supported",
                    it.key().c_str(), combinator);
      }
    }
    const Json& v = s[combinator];
    if (std::string(combinator) == "$ref") return VisitRef(s, c, out);
    if (std::string(combinator) == "allOf") {
      if (!v.is_array() || v.empty()) {
        return Fail(Status::Code::kInvalid, c.path, "allOf must be a non-empty array");
      }
      if (v.size() > 1) {
        return Fail(Status::Code::kUnsupported, c.path,
                    "allOf with more than one schema is not supported");
      }
      Ctx one = c;
      one.path += "/allOf/0";
      one.depth += 1;
      return VisitInner(v[0], one, out);
    }
    return VisitUnion(v, combinator, c, out);
  }
  if (s.contains("enum") || s.contains("const")) return VisitEnum(s, c, out);
  return VisitTyped(s, c, out);
}

Status Converter::ResolveRef(const std::string& ref, const Ctx& c, const Json** def,
                             std::string* path, std::string* name) {
  if (ref.empty() || ref[0] != '#') {
    return Fail(Status::Code::kUnsupported, c.path,
                "$ref '%s': remote references are not supported", ref.c_str());
  }
  std::vector<std::string> tokens;
  if (ref.size() > 1 && ref[1] == '/') {
    // Tokens of the fragment: percent-decoded (it is a URI fragment), then ~1 and ~0.
    std::string token;
    for (size_t i = 2; i <= ref.size(); ++i) {
      if (i == ref.size() || ref[i] == '/') {
        tokens.push_back(UnescapeToken(token));
        token.clear();
      } else if (ref[i] == '%') {
        const int hi = i + 2 < ref.size() ? HexValue(ref[i + 1]) : -1;
        const int lo = i + 2 < ref.size() ? HexValue(ref[i + 2]) : -1;
        if (hi < 0 || lo < 0) {
          return Fail(Status::Code::kInvalid, c.path, "$ref '%s': a bad percent escape",
                      ref.c_str());
        }
        token += static_cast<char>(hi * 16 + lo);
        i += 2;
      } else {
        token += ref[i];
      }
    }
  }
  if (tokens.size() != 2 || (tokens[0] != "$defs" && tokens[0] != "definitions")) {
    return Fail(Status::Code::kUnsupported, c.path,
                "$ref '%s': only '#', '#/$defs/NAME' and '#/definitions/NAME' are supported",
                ref.c_str());
  }
  const auto defs = root_->is_object() ? root_->find(tokens[0]) : root_->end();
  if (!root_->is_object() || defs == root_->end() || !defs->is_object() ||
      !defs->contains(tokens[1])) {
    return Fail(Status::Code::kInvalid, c.path, "$ref '%s': no such definition", ref.c_str());
  }
  *def = &(*defs)[tokens[1]];
  *path = "/" + tokens[0] + "/" + PointerToken(tokens[1]);
  *name = tokens[1];
  return Status::Ok();
}

Status Converter::VisitRef(const Json& s, const Ctx& c, Expr* out) {
  const Json& r = s["$ref"];
  if (!r.is_string()) return Fail(Status::Code::kInvalid, c.path, "$ref must be a string");
  const std::string ref = r.get<std::string>();
  const Json* def = root_;
  std::string def_path = "#", def_name;
  if (ref != "#") PI_RETURN_IF_ERROR(ResolveRef(ref, c, &def, &def_path, &def_name));
  auto it = defs_.find(def_path);
  if (it != defs_.end()) {
    if (!it->second.done) it->second.recursive = true;
    out->never = it->second.never;
    out->name = it->second.never ? "" : it->second.name;
    return Status::Ok();
  }
  std::string name;
  PI_RETURN_IF_ERROR(Allocate(def_name, def_path, &name));
  defs_[def_path] = DefEntry{name};
  Expr e;
  PI_RETURN_IF_ERROR(Visit(*def, Ctx{def_path, def_name, name, c.depth + 1}, &e));
  DefEntry& entry = defs_[def_path];
  entry.done = true;
  if (e.never) {
    if (entry.recursive) {
      return Fail(Status::Code::kUnsupported, def_path,
                  "a recursive definition that accepts no value is not supported");
    }
    rules_[index_[name]].dropped = true;
    entry.never = true;
    out->never = true;
    return Status::Ok();
  }
  out->name = name;
  return Status::Ok();
}

Status Converter::VisitUnion(const Json& list, const char* key, const Ctx& c, Expr* out) {
  if (!list.is_array() || list.empty()) {
    return Fail(Status::Code::kInvalid, c.path, "%s must be a non-empty array", key);
  }
  std::string name;
  PI_RETURN_IF_ERROR(Open(c, &name));
  std::vector<Expr> branches(list.size());
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string index = std::to_string(i);
    PI_RETURN_IF_ERROR(
        Visit(list[i], c.Child("/" + std::string(key) + "/" + index, index), &branches[i]));
  }
  return FinishUnion(name, c, branches, out);
}

Status Converter::FinishUnion(const std::string& name, const Ctx& c,
                              const std::vector<Expr>& branches, Expr* out) {
  std::vector<std::string> names;
  for (const Expr& e : branches) {
    if (!e.never && std::find(names.begin(), names.end(), e.name) == names.end()) {
      names.push_back(e.name);
    }
  }
  if (names.size() <= 1) {
    Release(name, c);
    out->never = names.empty();
    if (!names.empty()) out->name = names[0];
    return Status::Ok();
  }
  Draft d;
  d.finite.kind = Finite::kAny;
  for (const std::string& n : names) {
    d.finite.parts.push_back(FiniteRule(n));
    if (FindPrimitive(n) == nullptr) d.heads.push_back(n);
    d.refs.push_back(n);
  }
  d.body = Join(names, " | ");
  Define(name, std::move(d));
  out->name = name;
  return Status::Ok();
}

Status Converter::ParseTypes(const Json& s, const Ctx& c, std::vector<std::string>* types) {
  const auto t = s.find("type");
  std::vector<std::string> listed;
  if (t->is_string()) {
    listed.push_back(t->get<std::string>());
  } else if (t->is_array() && !t->empty()) {
    for (const Json& v : *t) {
      if (!v.is_string()) {
        return Fail(Status::Code::kInvalid, c.path, "type must list names, not %s", v.type_name());
      }
      listed.push_back(v.get<std::string>());
    }
  } else {
    return Fail(Status::Code::kInvalid, c.path, "type must be a name or a non-empty list of names");
  }
  for (const std::string& n : listed) {
    if (std::find(std::begin(kTypeNames), std::end(kTypeNames), n) == std::end(kTypeNames)) {
      return Fail(Status::Code::kInvalid, c.path,
                  "type '%s' is not one of object, array, string, number, integer, boolean, "
                  "null",
                  n.c_str());
    }
    // number already holds every integer; two alternatives would match "1" twice.
    if (n == "integer" && std::find(listed.begin(), listed.end(), "number") != listed.end()) {
      continue;
    }
    if (std::find(types->begin(), types->end(), n) == types->end()) types->push_back(n);
  }
  return Status::Ok();
}

bool TypeMatches(const Json& v, const std::vector<std::string>& types) {
  for (const std::string& t : types) {
    if ((t == "null" && v.is_null()) || (t == "boolean" && v.is_boolean()) ||
        (t == "object" && v.is_object()) || (t == "array" && v.is_array()) ||
        (t == "string" && v.is_string()) || (t == "number" && v.is_number())) {
      return true;
    }
    if (t == "integer" &&
        (v.is_number_integer() || (v.is_number_float() && std::isfinite(v.get<double>()) &&
                                   std::floor(v.get<double>()) == v.get<double>()))) {
      return true;
    }
  }
  return false;
}

Status Converter::VisitEnum(const Json& s, const Ctx& c, Expr* out) {
  const char* keyword = s.contains("enum") ? "enum" : "const";
  for (auto it = s.begin(); it != s.end(); ++it) {
    const std::string& k = it.key();
    if (k != "enum" && k != "const" && k != "type" && !IsAnnotation(k)) {
      return Fail(Status::Code::kUnsupported, c.path, "keyword '%s' beside '%s' is not supported",
                  k.c_str(), keyword);
    }
  }
  std::vector<const Json*> values;
  if (s.contains("enum")) {
    const Json& e = s["enum"];
    if (!e.is_array()) return Fail(Status::Code::kInvalid, c.path, "enum must be an array");
    for (const Json& v : e) {
      if (!s.contains("const") || v == s["const"]) values.push_back(&v);
    }
  } else {
    values.push_back(&s["const"]);
  }
  std::vector<std::string> types;
  if (s.contains("type")) PI_RETURN_IF_ERROR(ParseTypes(s, c, &types));
  std::vector<std::string> literals;
  for (const Json* v : values) {
    if (!types.empty() && !TypeMatches(*v, types)) continue;
    std::string text;
    if (!DumpJson(*v, &text)) {
      return Fail(Status::Code::kInvalid, c.path, "%s holds a string that is not UTF-8", keyword);
    }
    literal_bytes_ += text.size();
    if (literal_bytes_ > kMaxLiteralBytes) {
      return Fail(Status::Code::kUnsupported, c.path,
                  "enum and const values are over %zu bytes in all", kMaxLiteralBytes);
    }
    const std::string lit = Literal(text);
    if (std::find(literals.begin(), literals.end(), lit) == literals.end()) {
      literals.push_back(lit);
    }
  }
  if (literals.empty()) {
    out->never = true;
    return Status::Ok();
  }
  Draft d;
  d.body = Join(literals, " | ");
  return DefineNode(c, std::move(d), out);
}

Status Converter::VisitTyped(const Json& s, const Ctx& c, Expr* out) {
  std::vector<std::string> types;
  if (s.contains("type")) {
    PI_RETURN_IF_ERROR(ParseTypes(s, c, &types));
  } else {
    bool constrained = false;
    for (auto it = s.begin(); it != s.end(); ++it) constrained |= !IsAnnotation(it.key());
    if (!constrained) {
      out->name = "value";
      return Status::Ok();
    }
    // Without a type, a constraint binds only values of its own type; the others are free.
    types = {"object", "array", "string", "number", "boolean", "null"};
  }
  if (types.size() == 1) return VisitType(types[0], s, c, out);
  std::string name;
  PI_RETURN_IF_ERROR(Open(c, &name));
  std::vector<Expr> branches(types.size());
  for (size_t i = 0; i < types.size(); ++i) {
    Ctx branch = c;
    branch.hint = c.hint + "-" + types[i];
    branch.target.clear();
    PI_RETURN_IF_ERROR(VisitType(types[i], s, branch, &branches[i]));
  }
  return FinishUnion(name, c, branches, out);
}

Status Converter::VisitType(const std::string& type, const Json& s, const Ctx& c, Expr* out) {
  if (type == "number") {
    for (const char* k : kBoundKeywords) {
      if (s.contains(k)) {
        return Fail(Status::Code::kUnsupported, c.path,
                    "keyword '%s' is supported for integers only", k);
      }
    }
  }
  if (type == "integer") return VisitInteger(s, c, out);
  if (type == "string") return VisitString(s, c, out);
  if (type == "object") return VisitObject(s, c, out);
  if (type == "array") return VisitArray(s, c, out);
  out->name = type;  // null, boolean, number: their primitive rules
  return Status::Ok();
}

Status Converter::VisitInteger(const Json& s, const Ctx& c, Expr* out) {
  int64_t lo = -kMaxInteger, hi = kMaxInteger;
  bool bounded = false;
  for (const char* k : kBoundKeywords) {
    if (!s.contains(k)) continue;
    bounded = true;
    const std::string key = k;
    const bool lower = key == "minimum" || key == "exclusiveMinimum";
    int64_t v = 0;
    Status st = IntegerBound(s[k], lower, key.rfind("exclusive", 0) == 0, &v);
    if (!st.ok()) return Fail(Status::Code::kInvalid, c.path, "%s %s", k, st.message().c_str());
    if (lower) {
      lo = std::max(lo, v);
    } else {
      hi = std::min(hi, v);
    }
  }
  if (!bounded) {
    out->name = "integer";
    return Status::Ok();
  }
  if (lo > hi) {
    out->never = true;
    return Status::Ok();
  }
  std::vector<std::string> alts;
  if (lo < 0) {
    std::vector<std::string> neg;
    NonNegativeRange(std::max<int64_t>(1, -std::min<int64_t>(hi, -1)), -lo, &neg);
    alts.push_back("\"-\" " + (neg.size() == 1 ? neg[0] : "( " + Join(neg, " | ") + " )"));
  }
  if (hi >= 0) NonNegativeRange(std::max<int64_t>(lo, 0), hi, &alts);
  Draft d;
  d.body = Join(alts, " | ");
  return DefineNode(c, std::move(d), out);
}

Status Converter::ReadCount(const Json& s, const char* key, const Ctx& c, int64_t* out) {
  if (!s.contains(key)) return Status::Ok();
  const Json& v = s[key];
  const bool integral = v.is_number_unsigned() ||
                        (v.is_number_integer() && v.get<int64_t>() >= 0) ||
                        (v.is_number_float() && v.get<double>() >= 0 &&
                         std::floor(v.get<double>()) == v.get<double>());
  if (!integral) {
    return Fail(Status::Code::kInvalid, c.path, "%s must be a non-negative integer", key);
  }
  const double d = v.get<double>();
  if (d > kMaxCount) {
    return Fail(Status::Code::kUnsupported, c.path, "%s %.0f is over the limit of %lld", key, d,
                static_cast<long long>(kMaxCount));
  }
  *out = static_cast<int64_t>(d);
  return Status::Ok();
}

Status Converter::VisitString(const Json& s, const Ctx& c, Expr* out) {
  int64_t min_length = 0, max_length = -1;
  PI_RETURN_IF_ERROR(ReadCount(s, "minLength", c, &min_length));
  PI_RETURN_IF_ERROR(ReadCount(s, "maxLength", c, &max_length));
  std::string inner;
  if (s.contains("format")) {
    const Json& f = s["format"];
    if (!f.is_string()) return Fail(Status::Code::kInvalid, c.path, "format must be a string");
    const std::string format = f.get<std::string>();
    if (format != "date" && format != "time" && format != "date-time" && format != "uuid") {
      return Fail(Status::Code::kUnsupported, c.path, "format '%s' is not supported",
                  format.c_str());
    }
    for (const char* k : {"minLength", "maxLength"}) {
      if (s.contains(k)) {
        return Fail(Status::Code::kUnsupported, c.path,
                    "keyword '%s' beside 'format' is not supported", k);
      }
    }
    inner = format;
  } else if (min_length == 0 && max_length < 0) {
    out->name = "string";
    return Status::Ok();
  } else if (max_length >= 0 && min_length > max_length) {
    out->never = true;
    return Status::Ok();
  } else {
    inner = Repeat("char", min_length, max_length);
  }
  Draft d;
  d.body = Join({R"("\"")", inner, R"("\"")"}, " ");
  d.refs = {FindPrimitive(inner) != nullptr ? inner : "char"};  // a format, or char{m,n}
  return DefineNode(c, std::move(d), out);
}

Status Converter::VisitObject(const Json& s, const Ctx& c, Expr* out) {
  const bool constrained =
      s.contains("properties") || s.contains("required") ||
      (s.contains("additionalProperties") && !AllowsAll(s["additionalProperties"]));
  if (!constrained) {
    out->name = "object";
    return Status::Ok();
  }
  std::string name;
  PI_RETURN_IF_ERROR(Open(c, &name));
  std::vector<Member> members;
  bool never = false;
  PI_RETURN_IF_ERROR(ObjectMembers(s, c, &members, &never));
  if (never) {
    Release(name, c);
    out->never = true;
    return Status::Ok();
  }
  Draft d;
  PI_RETURN_IF_ERROR(AssembleObject(name, members, &d));
  Define(name, std::move(d));
  out->name = name;
  return Status::Ok();
}

Status Converter::ObjectMembers(const Json& s, const Ctx& c, std::vector<Member>* members,
                                bool* never) {
  std::set<std::string> required;
  if (s.contains("required")) {
    const Json& r = s["required"];
    if (!r.is_array()) return Fail(Status::Code::kInvalid, c.path, "required must be an array");
    for (const Json& n : r) {
      if (!n.is_string()) {
        return Fail(Status::Code::kInvalid, c.path, "required must list names, not %s",
                    n.type_name());
      }
      const std::string key = n.get<std::string>();
      if (!s.contains("properties") || !s["properties"].is_object() ||
          !s["properties"].contains(key)) {
        return Fail(Status::Code::kInvalid, c.path,
                    "required names '%s', which is not in properties", key.c_str());
      }
      required.insert(key);
    }
  }
  std::vector<std::string> declared;
  if (s.contains("properties")) {
    const Json& props = s["properties"];
    if (!props.is_object()) {
      return Fail(Status::Code::kInvalid, c.path, "properties must be an object");
    }
    for (auto it = props.begin(); it != props.end(); ++it) {
      std::string key_text;
      if (!DumpJson(Json(it.key()), &key_text)) {
        return Fail(Status::Code::kInvalid, c.path, "a property name is not UTF-8");
      }
      declared.push_back(it.key());
      Expr e;
      PI_RETURN_IF_ERROR(
          Visit(it.value(), c.Child("/properties/" + PointerToken(it.key()), it.key()), &e));
      const bool req = required.count(it.key()) != 0;
      if (e.never) {
        if (req) *never = true;  // a required member no value satisfies
        continue;                // an optional one is simply left out
      }
      Member m;
      m.kv = Literal(key_text) + " ws \":\" ws " + e.name;
      m.label = it.key();
      m.required = req;
      m.finite = FiniteRule(e.name);
      m.refs = {e.name};
      members->push_back(std::move(m));
    }
  }
  return ExtraMember(s, c, declared, members);
}

Status Converter::ExtraMember(const Json& s, const Ctx& c, const std::vector<std::string>& declared,
                              std::vector<Member>* members) {
  // Absent: none beside declared properties (a deliberate deviation, see the header); any
  // members when there are no properties.
  const Json absent = !s.contains("properties");
  const Json& extra = s.contains("additionalProperties") ? s["additionalProperties"] : absent;
  Expr value;
  PI_RETURN_IF_ERROR(Visit(extra, c.Child("/additionalProperties", "extra"), &value));
  if (value.never) return Status::Ok();
  std::string key = "string";
  if (!declared.empty()) {
    PI_RETURN_IF_ERROR(ExtraKeyRule(c.hint + "-extra-key", c.path, declared, &key));
  }
  Member m;
  m.kv = key + " ws \":\" ws " + value.name;
  m.label = "extra";
  m.repeat = true;
  m.refs = {key, value.name};
  members->push_back(std::move(m));
  return Status::Ok();
}

// Members in order, required ones always, optional ones maybe, the further ones repeated last,
// with a comma between two and none elsewhere: the first member written is one of those up
// to the first required one, and after it every later member brings its own leading comma.
// rest[j] (members j.. after one has been written) becomes a rule where two places use it.
Status Converter::AssembleObject(const std::string& name, const std::vector<Member>& m, Draft* d) {
  const size_t n = m.size();
  d->refs.push_back("ws");
  if (n == 0) {
    d->body = R"("{" ws "}")";
    return Status::Ok();
  }
  size_t n_alts = n;
  bool any_required = false;
  for (size_t i = 0; i < n; ++i) {
    d->refs.insert(d->refs.end(), m[i].refs.begin(), m[i].refs.end());
    if (m[i].required) {
      if (!any_required) n_alts = i + 1;
      any_required = true;
      d->finite.parts.push_back(m[i].finite);
    }
  }
  // The first member f continues with rest[f + 1] (a repeated one with rest[f]).
  auto rest_of = [&](size_t f) { return m[f].repeat ? f : f + 1; };
  std::vector<int> uses(n + 1, 0);
  for (size_t f = 0; f < n_alts; ++f) ++uses[rest_of(f)];
  for (size_t j = 1; j <= n; ++j) uses[j] += uses[j - 1] > 0 ? 1 : 0;
  std::vector<std::string> rest(n + 1);                // the text naming rest[j]
  const std::string path = rules_[index_[name]].path;  // a copy: Allocate grows rules_
  for (size_t j = 1; j < n; ++j) {                     // named in order, first to last
    if (uses[j] < 2) continue;
    PI_RETURN_IF_ERROR(Allocate(name + "-after-" + m[j - 1].label, path, &rest[j]));
    d->refs.push_back(rest[j]);
  }
  Draft tail;  // what rest[j + 1] brings where it is written out: its refs, its needs
  for (size_t j = n; j-- > 0;) {
    if (uses[j] == 0) continue;
    const std::string sep = R"(ws "," ws )" + m[j].kv;
    const std::string piece = m[j].required ? sep : "( " + sep + " )" + (m[j].repeat ? "*" : "?");
    Draft r = std::move(tail);
    r.body = Join({piece, rest[j + 1]}, " ");
    r.refs.insert(r.refs.end(), m[j].refs.begin(), m[j].refs.end());
    r.refs.push_back("ws");
    if (m[j].required) r.finite.parts.push_back(m[j].finite);
    tail = Draft();
    if (rest[j].empty()) {  // written out where it is used
      rest[j] = r.body;
      tail = std::move(r);
      continue;
    }
    tail.refs.push_back(rest[j]);
    tail.finite.parts.push_back(FiniteRule(rest[j]));
    Define(rest[j], std::move(r));
  }
  std::vector<std::string> alts;
  for (size_t f = 0; f < n_alts; ++f) alts.push_back(Join({m[f].kv, rest[rest_of(f)]}, " "));
  const std::string members = alts.size() == 1 ? alts[0] : "( " + Join(alts, " | ") + " )";
  if (any_required) {
    d->body = R"("{" ws )" + members + R"( ws "}")";
  } else {
    d->body = R"("{" ws ( )" + members + R"( ws )? "}")";
  }
  return Status::Ok();
}

// Keys for further members that can never spell a declared name: the declared names as a trie
// of characters; leaving the trie with any other character (or ending the key where no name
// ends) frees the rest of the key. Escapes are allowed only once free, since an escape could
// spell a declared name's character.
Status Converter::ExtraKeyRule(const std::string& hint, const std::string& path,
                               const std::vector<std::string>& declared, std::string* name) {
  std::vector<TrieNode> trie(1);
  for (const std::string& key : declared) {
    if (key.size() > static_cast<size_t>(kMaxCount)) {  // the trie is walked recursively
      return Fail(Status::Code::kUnsupported, path,
                  "a property name of %zu bytes beside additionalProperties is over the limit "
                  "of %lld",
                  key.size(), static_cast<long long>(kMaxCount));
    }
    int node = 0;
    bool plain = true;
    for (size_t pos = 0; pos < key.size() && plain;) {
      uint32_t cp;
      size_t len;
      plain = DecodeUtf8(key.data(), key.size(), pos, &cp, &len) == Utf8Status::kValid &&
              cp >= 0x20 && cp != '"' && cp != '\\';
      // A character a free key must escape cannot be spelled in the trie: stop there.
      if (!plain) break;
      auto it = trie[node].next.find(cp);
      if (it == trie[node].next.end()) {
        trie.push_back(TrieNode());
        it = trie[node].next.emplace(cp, static_cast<int>(trie.size()) - 1).first;
      }
      node = it->second;
      pos += len;
    }
    if (plain) trie[node].end = true;
  }
  PI_RETURN_IF_ERROR(Allocate(hint, path, name));
  Draft d;
  std::string node_text;
  d.refs = {"char"};
  PI_RETURN_IF_ERROR(KeyNode(trie, 0, 0, hint, path, &node_text, &d.refs));
  d.body = R"("\"" )" + node_text;
  Define(*name, std::move(d));
  return Status::Ok();
}

Status Converter::KeyNode(const std::vector<TrieNode>& trie, int node, int depth,
                          const std::string& hint, const std::string& path, std::string* out,
                          std::vector<std::string>* opened) {
  std::vector<std::string> alts;
  std::string others = R"([^\"\\\x00-\x1f)";
  for (const auto& [cp, child] : trie[node].next) {
    others += ClassChar(cp);
    std::string utf8;
    AppendUtf8(cp, &utf8);
    std::string child_text;
    if (depth + 1 >= kKeyTrieDepthPerRule) {  // bound the nesting of groups in one rule
      PI_RETURN_IF_ERROR(Allocate(hint, path, &child_text));
      opened->push_back(child_text);
      Draft d;
      d.refs = {"char"};
      std::string text;
      PI_RETURN_IF_ERROR(KeyNode(trie, child, 0, hint, path, &text, &d.refs));
      d.body = text;
      Define(child_text, std::move(d));
    } else {
      PI_RETURN_IF_ERROR(KeyNode(trie, child, depth + 1, hint, path, &child_text, opened));
    }
    alts.push_back(Literal(utf8) + " " + child_text);
  }
  alts.push_back(others + R"(] char* "\"")");
  if (!trie[node].end) alts.push_back(R"("\"")");
  *out = "( " + Join(alts, " | ") + " )";
  return Status::Ok();
}

Status Converter::VisitArray(const Json& s, const Ctx& c, Expr* out) {
  int64_t min_items = 0, max_items = -1;
  PI_RETURN_IF_ERROR(ReadCount(s, "minItems", c, &min_items));
  PI_RETURN_IF_ERROR(ReadCount(s, "maxItems", c, &max_items));
  // prefixItems, or draft-07's list form of items (whose rest is additionalItems).
  const Json* prefix = nullptr;
  const char* prefix_key = "prefixItems";
  const Json absent = true;
  const Json* rest = &absent;
  const char* rest_key = "items";
  if (s.contains("items") && s["items"].is_array()) {
    if (s.contains("prefixItems")) {
      return Fail(Status::Code::kInvalid, c.path, "items is a list beside prefixItems");
    }
    prefix = &s["items"];
    prefix_key = "items";
    if (s.contains("additionalItems")) rest = &s["additionalItems"];
    rest_key = "additionalItems";
  } else {
    if (s.contains("prefixItems")) prefix = &s["prefixItems"];
    if (s.contains("items")) rest = &s["items"];
  }
  if (prefix != nullptr && !prefix->is_array()) {
    return Fail(Status::Code::kInvalid, c.path, "%s must be an array", prefix_key);
  }
  const size_t p = prefix == nullptr ? 0 : prefix->size();
  if (p > kMaxPrefixItems) {
    return Fail(Status::Code::kUnsupported, c.path, "%s has %zu schemas, over the limit of %zu",
                prefix_key, p, kMaxPrefixItems);
  }
  if (p == 0 && min_items == 0 && max_items < 0 && AllowsAll(*rest)) {
    out->name = "array";
    return Status::Ok();
  }
  std::string name;
  PI_RETURN_IF_ERROR(Open(c, &name));
  // The most items there can be: maxItems, the first prefix item that is false, or the prefix
  // when the rest is false.
  int64_t most = max_items;
  std::vector<Expr> elems(p);
  for (size_t i = 0; i < p; ++i) {
    const std::string index = std::to_string(i);
    PI_RETURN_IF_ERROR(Visit(
        (*prefix)[i], c.Child("/" + std::string(prefix_key) + "/" + index, index), &elems[i]));
    if (elems[i].never && (most < 0 || most > static_cast<int64_t>(i))) most = i;
  }
  Expr item;
  PI_RETURN_IF_ERROR(Visit(*rest, c.Child("/" + std::string(rest_key), "item"), &item));
  if (item.never && (most < 0 || most > static_cast<int64_t>(p))) most = p;
  if (most >= 0 && min_items > most) {
    Release(name, c);
    out->never = true;
    return Status::Ok();
  }
  const size_t used = most < 0 ? p : std::min<size_t>(p, most);
  Draft d;
  d.refs.push_back("ws");
  const std::string sep = R"(ws "," ws )";
  // Elements from `used` on: the rest, as many as min/max allow (index i: i written before).
  auto tail = [&](int64_t i) {
    const int64_t lo = std::max<int64_t>(0, min_items - i), hi = most < 0 ? -1 : most - i;
    return Repeat("( " + sep + item.name + " )", lo, hi);
  };
  // Elements i.. of the prefix, each after a comma; required up to minItems, then nested.
  std::string seq = tail(used);
  for (size_t i = used; i-- > 1;) {
    const std::string piece = Join({sep + elems[i].name, seq}, " ");
    seq = static_cast<int64_t>(i) < min_items ? piece : "( " + piece + " )?";
  }
  std::string first;
  if (used > 0) {
    first = Join({elems[0].name, seq}, " ");
  } else if (most != 0) {
    first = Join({item.name, tail(1)}, " ");
  }
  for (size_t i = 0; i < used; ++i) {
    d.refs.push_back(elems[i].name);
    if (static_cast<int64_t>(i) < min_items) d.finite.parts.push_back(FiniteRule(elems[i].name));
  }
  if (!item.never && (most < 0 || most > static_cast<int64_t>(used))) {  // any after the prefix
    d.refs.push_back(item.name);
    if (min_items > static_cast<int64_t>(used)) d.finite.parts.push_back(FiniteRule(item.name));
  }
  if (first.empty()) {
    d.body = R"("[" ws "]")";
  } else if (min_items > 0) {
    d.body = R"("[" ws )" + first + R"( ws "]")";
  } else {
    d.body = R"("[" ws ( )" + first + R"( ws )? "]")";
  }
  Define(name, std::move(d));
  out->name = name;
  return Status::Ok();
}

bool Converter::Eval(const Finite& f, const std::vector<char>& finite) const {
  switch (f.kind) {
    case Finite::kRule:
      return finite[index_.at(f.rule)] != 0;
    case Finite::kAll:
      for (const Finite& p : f.parts) {
        if (!Eval(p, finite)) return false;
      }
      return true;
    case Finite::kAny:
      for (const Finite& p : f.parts) {
        if (Eval(p, finite)) return true;
      }
      return false;
  }
  return false;
}

// A rule that may begin with itself through other rules: the engine would expand it forever.
Status Converter::CheckLeftRecursion(const std::vector<char>& reachable) {
  std::vector<int> state(rules_.size(), 0);  // 0 new, 1 on the stack, 2 done
  std::vector<size_t> stack;
  for (size_t start = 0; start < rules_.size(); ++start) {
    if (!reachable[start] || state[start] != 0) continue;
    // Iterative DFS: (rule, next head to follow).
    std::vector<std::pair<size_t, size_t>> frames = {{start, 0}};
    state[start] = 1;
    while (!frames.empty()) {
      auto& [r, next] = frames.back();
      const std::vector<std::string>& heads = rules_[r].draft.heads;
      if (next == heads.size()) {
        state[r] = 2;
        frames.pop_back();
        continue;
      }
      const size_t h = index_.at(heads[next++]);
      if (state[h] == 1) {
        return Fail(Status::Code::kUnsupported, rules_[h].path,
                    "a $ref cycle that never passes through an object or array ('%s')",
                    rules_[h].name.c_str());
      }
      if (state[h] == 0) {
        state[h] = 1;
        frames.push_back({h, 0});
      }
    }
  }
  return Status::Ok();
}

Status Converter::Finish(std::string* gbnf) {
  // The rules reachable from root, and the primitives they use.
  std::vector<char> reachable(rules_.size(), 0);
  std::set<std::string> primitives;
  std::vector<std::string> todo = {"root"};
  while (!todo.empty()) {
    const std::string n = todo.back();
    todo.pop_back();
    if (const Primitive* p = FindPrimitive(n)) {
      if (!primitives.insert(n).second) continue;
      std::string dep;
      for (const char* ch = p->deps;; ++ch) {
        if (*ch == ' ' || *ch == '\0') {
          if (!dep.empty()) todo.push_back(dep);
          dep.clear();
          if (*ch == '\0') break;
        } else {
          dep += *ch;
        }
      }
      continue;
    }
    const auto it = index_.find(n);
    if (it == index_.end() || reachable[it->second]) continue;
    const Rule& r = rules_[it->second];
    if (r.dropped || !r.defined) {
      return Fail(Status::Code::kInternal, r.path, "rule '%s' was used but not defined",
                  r.name.c_str());
    }
    reachable[it->second] = 1;
    todo.insert(todo.end(), r.draft.refs.begin(), r.draft.refs.end());
  }
  PI_RETURN_IF_ERROR(CheckLeftRecursion(reachable));
  std::vector<char> finite(rules_.size(), 0);
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t i = 0; i < rules_.size(); ++i) {
      if (reachable[i] && !finite[i] && Eval(rules_[i].draft.finite, finite)) {
        finite[i] = 1;
        changed = true;
      }
    }
  }
  // The last such rule is the innermost (a definition, rather than the root that names it).
  for (size_t i = rules_.size(); i-- > 0;) {
    if (reachable[i] && !finite[i]) {
      return Fail(Status::Code::kUnsupported, rules_[i].path,
                  "'%s' has no finite value: each of its values must hold another",
                  rules_[i].name.c_str());
    }
  }
  gbnf->clear();
  for (size_t i = 0; i < rules_.size(); ++i) {
    if (reachable[i]) *gbnf += rules_[i].name + " ::= " + rules_[i].draft.body + "\n";
  }
  for (const Primitive& p : kPrimitives) {
    if (primitives.count(p.name)) *gbnf += std::string(p.name) + " ::= " + p.body + "\n";
  }
  return Status::Ok();
}

Status Converter::Convert(const Json& schema, std::string* gbnf) {
  root_ = &schema;
  if (schema.is_object()) {
    for (const char* k : {"$defs", "definitions"}) {
      if (schema.contains(k) && !schema[k].is_object()) {
        return Fail(Status::Code::kInvalid, "", "%s must be an object", k);
      }
    }
  }
  std::string name;
  PI_RETURN_IF_ERROR(Allocate("root", "", &name));
  defs_["#"] = DefEntry{name};
  Expr e;
  PI_RETURN_IF_ERROR(Visit(schema, Ctx{"", "root", name, 0}, &e));
  defs_["#"].done = true;
  if (e.never) return Fail(Status::Code::kInvalid, "", "the schema accepts no value");
  return Finish(gbnf);
}

}  // namespace

Status JsonSchemaToGbnf(const nlohmann::ordered_json& schema, std::string* gbnf) {
  Converter converter;
  return converter.Convert(schema, gbnf);
}

Status JsonSchemaToGbnf(const nlohmann::json& schema, std::string* gbnf) {
  return JsonSchemaToGbnf(nlohmann::ordered_json(schema), gbnf);
}

}  // namespace pi
