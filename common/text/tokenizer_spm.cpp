#include "common/text/tokenizer_spm.h"

#include <functional>
#include <queue>
#include <utility>

#include "common/text/unicode.h"

namespace pi {

const char kSpmSpace[] = "\xE2\x96\x81";

namespace {

// A run of text [start, start + len) in a doubly linked list; len 0 once merged away.
struct Symbol {
  int prev;
  int next;
  size_t start;
  size_t len;
};

struct Bigram {
  int left;
  int right;
  float score;
  size_t size;  // bytes of the merged piece; detects pairs made stale by other merges
};

// priority_queue keeps the "largest" on top: the highest score, then the leftmost pair.
struct BigramLess {
  bool operator()(const Bigram& a, const Bigram& b) const {
    return a.score < b.score || (a.score == b.score && a.left > b.left);
  }
};

using RevMerge = std::unordered_map<std::string, std::pair<std::string, std::string>>;

}  // namespace

std::string SpmEscapeSpaces(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    if (c == ' ') {
      out += kSpmSpace;
    } else {
      out.push_back(c);
    }
  }
  return out;
}

std::string SpmUnescape(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (size_t pos = 0; pos < text.size();) {
    if (text.compare(pos, 3, kSpmSpace) == 0) {
      out.push_back(' ');
      pos += 3;
    } else {
      out.push_back(text[pos++]);
    }
  }
  return out;
}

std::string SpmRemoveExtraWhitespaces(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  bool prev_space = true;  // drops leading spaces
  for (char c : text) {
    if (c == ' ') {
      if (!prev_space) out.push_back(c);
      prev_space = true;
    } else {
      out.push_back(c);
      prev_space = false;
    }
  }
  while (!out.empty() && out.back() == ' ') out.pop_back();
  return out;
}

std::vector<TextSpan> SpmMapSpans(const std::string& text, const std::vector<TextSpan>& spans) {
  // at[i]: where input byte i lands (or would: a dropped space maps to the next byte kept).
  std::vector<size_t> at(text.size() + 1);
  size_t kept = 0;
  bool prev_space = true;
  for (size_t i = 0; i < text.size(); ++i) {
    at[i] = kept;
    const bool space = text[i] == ' ';
    if (!space || !prev_space) ++kept;
    prev_space = space;
  }
  at[text.size()] = kept;
  const size_t size = SpmRemoveExtraWhitespaces(text).size();  // trailing spaces trimmed
  std::vector<TextSpan> out;
  out.reserve(spans.size());
  for (const TextSpan& s : spans) {
    out.push_back({std::min(at[std::min(s.begin, text.size())], size),
                   std::min(at[std::min(s.end, text.size())], size)});
  }
  return out;
}

int SpmParseByteToken(const std::string& text) {
  // Exactly "<0x" + two uppercase or lowercase hex digits + ">".
  if (text.size() != 6 || text.compare(0, 3, "<0x") != 0 || text[5] != '>') return -1;
  int value = 0;
  for (int k = 3; k < 5; ++k) {
    const char c = text[k];
    int digit;
    if (c >= '0' && c <= '9') {
      digit = c - '0';
    } else if (c >= 'A' && c <= 'F') {
      digit = c - 'A' + 10;
    } else if (c >= 'a' && c <= 'f') {
      digit = c - 'a' + 10;
    } else {
      return -1;
    }
    value = value * 16 + digit;
  }
  return value;
}

SpmEncoder::SpmEncoder(const TokenizerVocab& vocab,
                       const std::unordered_map<std::string, int32_t>& token_to_id)
    : vocab_(vocab), token_to_id_(token_to_id) {
  for (int32_t& id : byte_ids_) id = -1;
  for (size_t id = 0; id < vocab.tokens.size(); ++id) {
    if (vocab.types[id] != TokenType::kByte) continue;
    const int b = SpmParseByteToken(vocab.tokens[id]);
    if (b >= 0 && byte_ids_[b] < 0) {
      byte_ids_[b] = static_cast<int32_t>(id);
      has_byte_tokens_ = true;
    }
  }
}

int32_t SpmEncoder::MergeTarget(const std::string& text) const {
  const auto it = token_to_id_.find(text);
  if (it == token_to_id_.end()) return -1;
  // sentencepiece merges only into normal, user-defined and unused pieces; control,
  // unknown and byte pieces are reserved.
  switch (vocab_.types[it->second]) {
    case TokenType::kControl:
    case TokenType::kUnknown:
    case TokenType::kByte:
      return -1;
    default:
      return it->second;
  }
}

Status SpmEncoder::Encode(const std::string& text, std::vector<int32_t>* ids) const {
  if (text.empty()) return Status::Ok();

  // One symbol per UTF-8 character; an invalid byte is a symbol of its own (it will come
  // out through byte fallback, so no input byte is lost).
  std::vector<Symbol> symbols;
  symbols.reserve(text.size());
  for (size_t pos = 0; pos < text.size();) {
    uint32_t cp;
    size_t len;
    DecodeUtf8(text.data(), text.size(), pos, &cp, &len);
    const int index = static_cast<int>(symbols.size());
    symbols.push_back({index - 1, index + 1, pos, len});
    pos += len;
  }
  symbols.back().next = -1;

  std::priority_queue<Bigram, std::vector<Bigram>, BigramLess> heap;
  RevMerge rev_merge;
  auto try_add = [&](int left, int right) {
    if (left < 0 || right < 0) return;
    const Symbol& l = symbols[left];
    const Symbol& r = symbols[right];
    std::string piece = text.substr(l.start, l.len + r.len);
    const int32_t id = MergeTarget(piece);
    if (id < 0) return;
    heap.push({left, right, vocab_.scores[id], piece.size()});
    if (vocab_.types[id] == TokenType::kUnused) {
      rev_merge[piece] = {text.substr(l.start, l.len), text.substr(r.start, r.len)};
    }
  };

  for (int i = 1; i < static_cast<int>(symbols.size()); ++i) try_add(i - 1, i);

  while (!heap.empty()) {
    const Bigram b = heap.top();
    heap.pop();
    Symbol& l = symbols[b.left];
    Symbol& r = symbols[b.right];
    // Stale: one side was merged into something else since this pair was pushed.
    if (l.len == 0 || r.len == 0 || l.len + r.len != b.size) continue;
    l.len += r.len;
    r.len = 0;
    l.next = r.next;
    if (r.next >= 0) symbols[r.next].prev = b.left;
    try_add(l.prev, b.left);
    try_add(b.left, l.next);
  }

  bool prev_unk = false;
  Status status;
  // Emits one final symbol, splitting unused pieces back along their recorded merge.
  std::function<void(const std::string&)> emit;
  emit = [&](const std::string& piece) {
    const auto it = token_to_id_.find(piece);
    if (it != token_to_id_.end()) {
      const int32_t id = it->second;
      if (vocab_.types[id] == TokenType::kUnused) {
        const auto rm = rev_merge.find(piece);
        if (rm != rev_merge.end()) {
          // Copies: rev_merge may not be touched while we recurse, but be safe anyway.
          const std::pair<std::string, std::string> parts = rm->second;
          emit(parts.first);
          emit(parts.second);
          return;
        }
      }
      ids->push_back(id);
      prev_unk = false;
      return;
    }
    if (has_byte_tokens_) {
      for (unsigned char c : piece) {
        int32_t id = byte_ids_[c];
        if (id < 0) id = vocab_.unk;
        if (id < 0) {
          status = Status::Error("SPM: no token <0x%02X> and no unknown token", c);
          return;
        }
        ids->push_back(id);
      }
      prev_unk = false;
      return;
    }
    if (vocab_.unk < 0) {
      status = Status::Error("SPM: no token for \"%s\" and no unknown token", piece.c_str());
      return;
    }
    // sentencepiece folds a run of unknown symbols into a single unk.
    if (!prev_unk) ids->push_back(vocab_.unk);
    prev_unk = true;
  };
  for (int i = 0; i >= 0 && status.ok(); i = symbols[i].next) {
    emit(text.substr(symbols[i].start, symbols[i].len));
  }
  return status;
}

}  // namespace pi
