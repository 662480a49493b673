#include "common/text/tokenizer_bpe.h"

#include <array>
#include <queue>

#include "common/text/unicode.h"

namespace pi {
namespace {

// GPT-2's bytes_to_unicode(): printable Latin-1 bytes stand for themselves, the other 68
// bytes get code points 256, 257, ... in byte order.
struct ByteAlphabet {
  std::array<uint32_t, 256> to_cp;
  std::array<std::string, 256> to_utf8;
  ByteAlphabet() {
    uint32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
      to_cp[b] = printable ? static_cast<uint32_t>(b) : next++;
      AppendUtf8(to_cp[b], &to_utf8[b]);
    }
  }
};

const ByteAlphabet& Alphabet() {
  static const ByteAlphabet* alphabet = new ByteAlphabet();
  return *alphabet;
}

// Code points of a text with the byte offset of each; offsets[n] = text size.
struct Codepoints {
  std::vector<uint32_t> cps;
  std::vector<size_t> offsets;
};

Codepoints Decode(const std::string& text) {
  Codepoints out;
  out.cps.reserve(text.size());
  out.offsets.reserve(text.size() + 1);
  for (size_t pos = 0; pos < text.size();) {
    uint32_t cp;
    size_t len;
    // Invalid bytes decode as U+FFFD, one byte each: an "other" character.
    DecodeUtf8(text.data(), text.size(), pos, &cp, &len);
    out.cps.push_back(cp);
    out.offsets.push_back(pos);
    pos += len;
  }
  out.offsets.push_back(text.size());
  return out;
}

// Hand-written matchers for the two regexes in tokenizer_bpe.h. Each returns the end (a
// code point index > i) of the match that the regex's alternation finds at i.
class Matcher {
 public:
  explicit Matcher(const std::vector<uint32_t>& cps) : cps_(cps), n_(cps.size()) {}

  size_t Gpt2(size_t i) const {
    // 's|'t|'re|'ve|'m|'ll|'d
    if (const size_t c = Contraction(i, /*ignore_case=*/false)) return i + c;
    // ` ?\p{L}+`, ` ?\p{N}+`, ` ?[^\s\p{L}\p{N}]+`
    const size_t j = i + (cps_[i] == ' ' ? 1 : 0);
    if (Letter(j)) return RunOf(j, &Matcher::Letter);
    if (Number(j)) return RunOf(j, &Matcher::Number);
    if (Other(j)) return RunOf(j, &Matcher::Other);
    return Whitespace(i);
  }

  // Qwen2's pattern is this one with max_digits 1.
  size_t Llama3(size_t i, size_t max_digits = 3) const {
    // (?i:'s|'t|'re|'ve|'m|'ll|'d)
    if (const size_t c = Contraction(i, /*ignore_case=*/true)) return i + c;
    // [^\r\n\p{L}\p{N}]?\p{L}+
    if (Letter(i)) return RunOf(i, &Matcher::Letter);
    if (!Newline(i) && !Number(i) && Letter(i + 1)) return RunOf(i + 1, &Matcher::Letter);
    // \p{N}{1,3} (Qwen2: \p{N})
    if (Number(i)) {
      size_t j = i;
      while (j < i + max_digits && Number(j)) ++j;
      return j;
    }
    // ` ?[^\s\p{L}\p{N}]+[\r\n]*`
    const size_t j = i + (cps_[i] == ' ' ? 1 : 0);
    if (Other(j)) return RunOf(RunOf(j, &Matcher::Other), &Matcher::Newline);
    // \s*[\r\n]+ : the whitespace run up to and including its last newline.
    if (Space(i)) {
      size_t last_newline = n_;
      for (size_t k = i; Space(k); ++k) {
        if (Newline(k)) last_newline = k;
      }
      if (last_newline != n_) return last_newline + 1;
    }
    return Whitespace(i);
  }

 private:
  bool Letter(size_t i) const { return i < n_ && IsUnicodeLetter(cps_[i]); }
  bool Number(size_t i) const { return i < n_ && IsUnicodeNumber(cps_[i]); }
  bool Space(size_t i) const { return i < n_ && IsUnicodeWhitespace(cps_[i]); }
  bool Newline(size_t i) const { return i < n_ && (cps_[i] == '\r' || cps_[i] == '\n'); }
  bool Other(size_t i) const { return i < n_ && !Letter(i) && !Number(i) && !Space(i); }

  size_t RunOf(size_t j, bool (Matcher::*pred)(size_t) const) const {
    while ((this->*pred)(j)) ++j;
    return j;
  }

  // Length of the contraction at i ("'s" = 2, "'ll" = 3), 0 if none. ignore_case folds
  // ASCII letters only, like llama.cpp's '[sS] spelling of the Llama 3 pattern.
  size_t Contraction(size_t i, bool ignore_case) const {
    if (cps_[i] != '\'' || i + 1 >= n_) return 0;
    auto lower = [&](size_t k) -> uint32_t {
      const uint32_t c = cps_[k];
      return ignore_case && c >= 'A' && c <= 'Z' ? c + ('a' - 'A') : c;
    };
    const uint32_t c1 = lower(i + 1);
    if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd') return 2;
    if (i + 2 >= n_) return 0;
    const uint32_t c2 = lower(i + 2);
    if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l')) {
      return 3;
    }
    return 0;
  }

  // \s+(?!\S)|\s+ : a whitespace run, leaving its last space to the next word when a
  // non-space follows (so " world" keeps its space). Anything else: one character.
  size_t Whitespace(size_t i) const {
    if (!Space(i)) return i + 1;
    const size_t k = RunOf(i, &Matcher::Space);
    if (k < n_ && k - i > 1) return k - 1;
    return k;
  }

  const std::vector<uint32_t>& cps_;
  const size_t n_;
};

struct Symbol {
  int prev;
  int next;
  size_t start;
  size_t len;
};

struct Bigram {
  int left;
  int right;
  int32_t rank;
  size_t size;
};

// priority_queue's top is the "largest": the lowest rank, then the leftmost pair.
struct BigramLess {
  bool operator()(const Bigram& a, const Bigram& b) const {
    return a.rank > b.rank || (a.rank == b.rank && a.left > b.left);
  }
};

// Unambiguous key of a merge pair, even for pieces that contain spaces.
std::string PairKey(const std::string& left, const std::string& right) {
  return std::to_string(left.size()) + ":" + left + right;
}

// Falcon's first regex: [\p{P}\$\+<=>\^~\|`] (the ASCII symbols the \p{P} class lacks).
bool FalconPunct(uint32_t c) {
  return IsUnicodePunctuation(c) || c == '$' || c == '+' || c == '<' || c == '=' || c == '>' ||
         c == '^' || c == '~' || c == '|' || c == '`';
}

bool AsciiDigit(uint32_t c) {
  return c >= '0' && c <= '9';
}

// kFalcon (see tokenizer_bpe.h): each pass splits every piece [b, e) (code point
// indices) into its matches and the gaps between them.
void FalconPreTokenize(const Codepoints& cp, std::vector<std::pair<size_t, size_t>>* words) {
  const std::vector<uint32_t>& c = cp.cps;
  std::vector<std::pair<size_t, size_t>> a, b;
  // 1. Runs of punctuation (and the symbols above) against runs of the rest.
  for (size_t i = 0; i < c.size();) {
    const bool punct = FalconPunct(c[i]);
    size_t j = i + 1;
    while (j < c.size() && FalconPunct(c[j]) == punct) ++j;
    a.emplace_back(i, j);
    i = j;
  }
  // 2. GPT-2's matcher inside each piece: its lookahead and contractions end there.
  std::vector<uint32_t> piece;
  for (const auto& p : a) {
    piece.assign(c.begin() + p.first, c.begin() + p.second);
    const Matcher m(piece);
    for (size_t i = 0; i < piece.size();) {
      const size_t end = m.Gpt2(i);
      b.emplace_back(p.first + i, p.first + end);
      i = end;
    }
  }
  // 3. Each run of ASCII digits: groups of three from its start, the rest a gap.
  for (const auto& p : b) {
    size_t gap = p.first, i = p.first;
    while (i + 3 <= p.second) {
      if (AsciiDigit(c[i]) && AsciiDigit(c[i + 1]) && AsciiDigit(c[i + 2])) {
        if (gap < i) words->emplace_back(cp.offsets[gap], cp.offsets[i]);
        words->emplace_back(cp.offsets[i], cp.offsets[i + 3]);
        i += 3;
        gap = i;
      } else {
        ++i;
      }
    }
    if (gap < p.second) words->emplace_back(cp.offsets[gap], cp.offsets[p.second]);
  }
}

}  // namespace

Status ParseBpePreTokenizer(const std::string& name, BpePreTokenizer* out) {
  if (name == "default" || name == "gpt2" || name == "gpt-2") {
    *out = BpePreTokenizer::kGpt2;
  } else if (name == "llama-bpe" || name == "llama3" || name == "llama-v3") {
    *out = BpePreTokenizer::kLlama3;
  } else if (name == "qwen2") {
    *out = BpePreTokenizer::kQwen2;
  } else if (name == "falcon") {
    *out = BpePreTokenizer::kFalcon;
  } else {
    return Status::Error(
        "unsupported BPE pre-tokenizer tokenizer.ggml.pre = \"%s\" (supported: default, "
        "gpt2, gpt-2, llama-bpe, llama3, llama-v3, qwen2, falcon)",
        name.c_str());
  }
  return Status::Ok();
}

void BpePreTokenize(BpePreTokenizer pre, const std::string& text,
                    std::vector<std::pair<size_t, size_t>>* words) {
  words->clear();
  const Codepoints cp = Decode(text);
  if (pre == BpePreTokenizer::kFalcon) {
    FalconPreTokenize(cp, words);
    return;
  }
  const Matcher m(cp.cps);
  for (size_t i = 0; i < cp.cps.size();) {
    const size_t end = pre == BpePreTokenizer::kGpt2    ? m.Gpt2(i)
                       : pre == BpePreTokenizer::kQwen2 ? m.Llama3(i, 1)
                                                        : m.Llama3(i);
    words->emplace_back(cp.offsets[i], cp.offsets[end]);
    i = end;
  }
}

std::string BpeByteToChar(uint8_t b) {
  return Alphabet().to_utf8[b];
}

int BpeCharToByte(uint32_t cp) {
  static const auto* inverse = [] {
    auto* m = new std::unordered_map<uint32_t, int>();
    for (int b = 0; b < 256; ++b) (*m)[Alphabet().to_cp[b]] = b;
    return m;
  }();
  const auto it = inverse->find(cp);
  return it == inverse->end() ? -1 : it->second;
}

std::string BpeDecodeText(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (size_t pos = 0; pos < text.size();) {
    uint32_t cp;
    size_t len;
    const Utf8Status st = DecodeUtf8(text.data(), text.size(), pos, &cp, &len);
    const int b = st == Utf8Status::kValid ? BpeCharToByte(cp) : -1;
    if (b >= 0) {
      out.push_back(static_cast<char>(b));
    } else {
      out.append(text, pos, len);
    }
    pos += len;
  }
  return out;
}

BpeEncoder::BpeEncoder(const TokenizerVocab& vocab,
                       const std::unordered_map<std::string, int32_t>& token_to_id)
    : vocab_(vocab), token_to_id_(token_to_id) {}

Status BpeEncoder::Create(const TokenizerVocab& vocab,
                          const std::unordered_map<std::string, int32_t>& token_to_id,
                          std::unique_ptr<BpeEncoder>* out) {
  std::unique_ptr<BpeEncoder> enc(new BpeEncoder(vocab, token_to_id));
  PI_RETURN_IF_ERROR(ParseBpePreTokenizer(vocab.pre, &enc->pre_));
  enc->ignore_merges_ = enc->pre_ == BpePreTokenizer::kLlama3;
  enc->ranks_.reserve(vocab.merges.size());
  for (size_t i = 0; i < vocab.merges.size(); ++i) {
    const std::string& m = vocab.merges[i];
    // As llama.cpp: split at the first space after the first byte.
    const size_t pos = m.find(' ', 1);
    if (pos == std::string::npos || pos + 1 >= m.size()) {
      return Status::Error("tokenizer.ggml.merges[%zu] = \"%s\" is not \"left right\"", i,
                           m.c_str());
    }
    // The first occurrence of a pair keeps its rank.
    enc->ranks_.emplace(PairKey(m.substr(0, pos), m.substr(pos + 1)), static_cast<int32_t>(i));
  }
  *out = std::move(enc);
  return Status::Ok();
}

int32_t BpeEncoder::Rank(const std::string& left, const std::string& right) const {
  const auto it = ranks_.find(PairKey(left, right));
  return it == ranks_.end() ? -1 : it->second;
}

Status BpeEncoder::Encode(const std::string& text, std::vector<int32_t>* ids) const {
  std::vector<std::pair<size_t, size_t>> words;
  BpePreTokenize(pre_, text, &words);
  std::string word;
  for (const auto& w : words) {
    word.clear();
    for (size_t k = w.first; k < w.second; ++k) {
      word += Alphabet().to_utf8[static_cast<uint8_t>(text[k])];
    }
    PI_RETURN_IF_ERROR(EncodeWord(word, ids));
  }
  return Status::Ok();
}

Status BpeEncoder::EncodeWord(const std::string& word, std::vector<int32_t>* ids) const {
  if (ignore_merges_) {
    const auto it = token_to_id_.find(word);
    if (it != token_to_id_.end()) {
      ids->push_back(it->second);
      return Status::Ok();
    }
  }
  // One symbol per character of the byte-alphabet spelling (always valid UTF-8).
  std::vector<Symbol> symbols;
  for (size_t pos = 0; pos < word.size();) {
    uint32_t cp;
    size_t len;
    DecodeUtf8(word.data(), word.size(), pos, &cp, &len);
    const int index = static_cast<int>(symbols.size());
    symbols.push_back({index - 1, index + 1, pos, len});
    pos += len;
  }
  if (symbols.empty()) return Status::Ok();
  symbols.back().next = -1;

  std::priority_queue<Bigram, std::vector<Bigram>, BigramLess> heap;
  auto try_add = [&](int left, int right) {
    if (left < 0 || right < 0) return;
    const Symbol& l = symbols[left];
    const Symbol& r = symbols[right];
    const int32_t rank = Rank(word.substr(l.start, l.len), word.substr(r.start, r.len));
    if (rank < 0) return;
    heap.push({left, right, rank, l.len + r.len});
  };
  for (int i = 1; i < static_cast<int>(symbols.size()); ++i) try_add(i - 1, i);

  while (!heap.empty()) {
    const Bigram b = heap.top();
    heap.pop();
    Symbol& l = symbols[b.left];
    Symbol& r = symbols[b.right];
    if (l.len == 0 || r.len == 0 || l.len + r.len != b.size) continue;  // stale
    l.len += r.len;
    r.len = 0;
    l.next = r.next;
    if (r.next >= 0) symbols[r.next].prev = b.left;
    try_add(l.prev, b.left);
    try_add(b.left, l.next);
  }

  for (int i = 0; i >= 0; i = symbols[i].next) {
    const std::string piece = word.substr(symbols[i].start, symbols[i].len);
    const auto it = token_to_id_.find(piece);
    if (it != token_to_id_.end()) {
      ids->push_back(it->second);
      continue;
    }
    // Not a token: one token per byte (character of the byte alphabet).
    for (size_t pos = 0; pos < piece.size();) {
      uint32_t cp;
      size_t len;
      DecodeUtf8(piece.data(), piece.size(), pos, &cp, &len);
      const auto bt = token_to_id_.find(piece.substr(pos, len));
      if (bt != token_to_id_.end()) {
        ids->push_back(bt->second);
      } else if (vocab_.unk >= 0) {
        ids->push_back(vocab_.unk);
      } else {
        return Status::Error("BPE: no token for byte 0x%02X and no unknown token",
                             BpeCharToByte(cp) & 0xFF);
      }
      pos += len;
    }
  }
  return Status::Ok();
}

}  // namespace pi
