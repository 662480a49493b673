#include "common/text/tokenizer.h"

#include <algorithm>
#include <climits>
#include <utility>

#include "common/format/gguf.h"
#include "common/text/tokenizer_bpe.h"
#include "common/text/tokenizer_spm.h"
#include "common/text/unicode.h"
#include "common/text/vocab_trie.h"

namespace pi {
namespace {

// sentencepiece's surface for <unk> (" ⁇ ").
const char kUnknownSurface[] = " \xE2\x81\x87 ";

Status ReadStringArray(const GgufFile& file, const std::string& key, bool required,
                       std::vector<std::string>* out) {
  const GgufValue* v = file.Find(key);
  if (v == nullptr) {
    if (required) return Status::Error("missing tokenizer key %s", key.c_str());
    return Status::Ok();
  }
  if (v->type != GgufType::kArray || v->array_type != GgufType::kString) {
    return Status::Error("%s: expected an array of strings, got %s", key.c_str(),
                         GgufTypeName(v->type == GgufType::kArray ? v->array_type : v->type));
  }
  out->clear();
  out->reserve(v->array.size());
  for (const GgufValue& e : v->array) out->push_back(e.str);
  return Status::Ok();
}

Status ReadFloatArray(const GgufFile& file, const std::string& key, std::vector<float>* out) {
  const GgufValue* v = file.Find(key);
  if (v == nullptr) return Status::Ok();
  if (v->type != GgufType::kArray ||
      (v->array_type != GgufType::kF32 && v->array_type != GgufType::kF64)) {
    return Status::Error("%s: expected an array of f32", key.c_str());
  }
  out->clear();
  out->reserve(v->array.size());
  for (const GgufValue& e : v->array) out->push_back(static_cast<float>(e.f));
  return Status::Ok();
}

Status ReadTypeArray(const GgufFile& file, const std::string& key, std::vector<TokenType>* out) {
  const GgufValue* v = file.Find(key);
  if (v == nullptr) return Status::Ok();
  if (v->type != GgufType::kArray) {
    return Status::Error("%s: expected an array of i32", key.c_str());
  }
  out->clear();
  out->reserve(v->array.size());
  for (size_t i = 0; i < v->array.size(); ++i) {
    const GgufValue& e = v->array[i];
    if (!e.is_integer()) return Status::Error("%s[%zu]: not an integer", key.c_str(), i);
    // Signed and unsigned widths keep their value in different fields.
    const int64_t t = e.type == GgufType::kI8 || e.type == GgufType::kI16 ||
                              e.type == GgufType::kI32 || e.type == GgufType::kI64
                          ? e.i
                          : static_cast<int64_t>(e.u);
    if (t < 0 || t > 6) {
      return Status::Error("%s[%zu] = %lld is not a token type (0..6)", key.c_str(), i,
                           static_cast<long long>(t));
    }
    out->push_back(static_cast<TokenType>(t));
  }
  return Status::Ok();
}

// Reads an optional token id key into *id (left alone when absent).
Status ReadId(const GgufFile& file, const std::string& key, int32_t* id) {
  uint32_t value = 0;
  if (file.Find(key) == nullptr) return Status::Ok();
  PI_RETURN_IF_ERROR(file.GetU32(key, &value));
  if (value > static_cast<uint32_t>(INT32_MAX)) {
    return Status::Error("%s = %u is not a token id", key.c_str(), value);
  }
  *id = static_cast<int32_t>(value);
  return Status::Ok();
}

bool IsText(TokenType t) {
  return t == TokenType::kNormal || t == TokenType::kUserDefined || t == TokenType::kUnused ||
         t == TokenType::kUndefined;
}

}  // namespace

Tokenizer::Tokenizer() = default;
Tokenizer::~Tokenizer() = default;

Status Tokenizer::FromGguf(const GgufFile& file, std::unique_ptr<Tokenizer>* out) {
  TokenizerVocab v;
  PI_RETURN_IF_ERROR(file.GetString("tokenizer.ggml.model", &v.model));
  const bool spm = v.model == "llama";
  if (spm) {
    v.add_bos = true;
    v.add_space_prefix = true;
  } else if (v.model == "gpt2") {
    PI_RETURN_IF_ERROR(file.GetStringOpt("tokenizer.ggml.pre", &v.pre));
  } else if (v.model == "no_vocab" || v.model == "none") {
    return Status::Error("the model has no vocabulary (tokenizer.ggml.model = \"%s\")",
                         v.model.c_str());
  } else {
    return Status::Error("unsupported tokenizer.ggml.model = \"%s\" (supported: llama, gpt2)",
                         v.model.c_str());
  }
  PI_RETURN_IF_ERROR(ReadStringArray(file, "tokenizer.ggml.tokens", true, &v.tokens));
  PI_RETURN_IF_ERROR(ReadFloatArray(file, "tokenizer.ggml.scores", &v.scores));
  PI_RETURN_IF_ERROR(ReadTypeArray(file, "tokenizer.ggml.token_type", &v.types));
  PI_RETURN_IF_ERROR(ReadStringArray(file, "tokenizer.ggml.merges", v.model == "gpt2", &v.merges));
  if (spm) {
    // llama.cpp's defaults, where the vocabulary is large enough for them.
    const size_t n = v.tokens.size();
    v.unk = n > 0 ? 0 : -1;
    v.bos = n > 1 ? 1 : -1;
    v.eos = n > 2 ? 2 : -1;
  }
  PI_RETURN_IF_ERROR(ReadId(file, "tokenizer.ggml.bos_token_id", &v.bos));
  PI_RETURN_IF_ERROR(ReadId(file, "tokenizer.ggml.eos_token_id", &v.eos));
  PI_RETURN_IF_ERROR(ReadId(file, "tokenizer.ggml.unknown_token_id", &v.unk));
  PI_RETURN_IF_ERROR(ReadId(file, "tokenizer.ggml.eot_token_id", &v.eot));
  PI_RETURN_IF_ERROR(ReadId(file, "tokenizer.ggml.eom_token_id", &v.eom));
  // FIM: llama.cpp's current keys, then the older ones (CodeLlama's files).
  const struct {
    const char* key;
    const char* old_key;
    int32_t* id;
  } fim[] = {{"fim_pre", "prefix", &v.fim_pre}, {"fim_suf", "suffix", &v.fim_suf},
             {"fim_mid", "middle", &v.fim_mid}, {"fim_pad", nullptr, &v.fim_pad},
             {"fim_rep", nullptr, &v.fim_rep},  {"fim_sep", nullptr, &v.fim_sep}};
  for (const auto& f : fim) {
    if (f.old_key != nullptr) {
      PI_RETURN_IF_ERROR(
          ReadId(file, std::string("tokenizer.ggml.") + f.old_key + "_token_id", f.id));
    }
    PI_RETURN_IF_ERROR(ReadId(file, std::string("tokenizer.ggml.") + f.key + "_token_id", f.id));
  }
  PI_RETURN_IF_ERROR(file.GetBoolOpt("tokenizer.ggml.add_bos_token", &v.add_bos));
  PI_RETURN_IF_ERROR(file.GetBoolOpt("tokenizer.ggml.add_eos_token", &v.add_eos));
  PI_RETURN_IF_ERROR(file.GetBoolOpt("tokenizer.ggml.add_space_prefix", &v.add_space_prefix));
  PI_RETURN_IF_ERROR(
      file.GetBoolOpt("tokenizer.ggml.remove_extra_whitespaces", &v.remove_extra_whitespaces));
  return FromVocab(std::move(v), out).WithContext("tokenizer");
}

Status Tokenizer::FromVocab(TokenizerVocab vocab, std::unique_ptr<Tokenizer>* out) {
  const size_t n = vocab.tokens.size();
  if (n == 0) return Status::Error("tokenizer.ggml.tokens is empty");
  if (n > static_cast<size_t>(INT32_MAX)) return Status::Error("too many tokens: %zu", n);
  if (vocab.model != "llama" && vocab.model != "gpt2") {
    return Status::Error("unsupported tokenizer.ggml.model = \"%s\" (supported: llama, gpt2)",
                         vocab.model.c_str());
  }
  if (vocab.scores.empty()) vocab.scores.assign(n, 0.0f);
  if (vocab.types.empty()) vocab.types.assign(n, TokenType::kNormal);
  if (vocab.scores.size() != n) {
    return Status::Error("tokenizer.ggml.scores has %zu entries, tokens has %zu",
                         vocab.scores.size(), n);
  }
  if (vocab.types.size() != n) {
    return Status::Error("tokenizer.ggml.token_type has %zu entries, tokens has %zu",
                         vocab.types.size(), n);
  }
  for (size_t i = 0; i < n; ++i) {
    const int32_t t = static_cast<int32_t>(vocab.types[i]);
    if (t < 0 || t > 6) {
      return Status::Error("tokenizer.ggml.token_type[%zu] = %d is not a token type", i, t);
    }
  }
  const struct {
    const char* key;
    int32_t id;
  } ids[] = {{"tokenizer.ggml.bos_token_id", vocab.bos},
             {"tokenizer.ggml.eos_token_id", vocab.eos},
             {"tokenizer.ggml.unknown_token_id", vocab.unk},
             {"tokenizer.ggml.eot_token_id", vocab.eot},
             {"tokenizer.ggml.eom_token_id", vocab.eom},
             {"tokenizer.ggml.fim_pre_token_id", vocab.fim_pre},
             {"tokenizer.ggml.fim_suf_token_id", vocab.fim_suf},
             {"tokenizer.ggml.fim_mid_token_id", vocab.fim_mid},
             {"tokenizer.ggml.fim_pad_token_id", vocab.fim_pad},
             {"tokenizer.ggml.fim_rep_token_id", vocab.fim_rep},
             {"tokenizer.ggml.fim_sep_token_id", vocab.fim_sep}};
  for (const auto& k : ids) {
    if (k.id < -1 || k.id >= static_cast<int32_t>(n)) {
      return Status::Error("%s = %d is out of range (%zu tokens)", k.key, k.id, n);
    }
  }
  std::unique_ptr<Tokenizer> tok(new Tokenizer());
  tok->vocab_ = std::move(vocab);
  PI_RETURN_IF_ERROR(tok->Init());
  *out = std::move(tok);
  return Status::Ok();
}

Status Tokenizer::Init() {
  const TokenizerVocab& v = vocab_;
  const bool spm = v.model == "llama";
  const size_t n = v.tokens.size();
  token_to_id_.reserve(n);
  // As llama.cpp: a string listed twice maps to its last id.
  for (size_t i = 0; i < n; ++i) token_to_id_[v.tokens[i]] = static_cast<int32_t>(i);

  pieces_.resize(n);
  for (size_t i = 0; i < n; ++i) {
    const std::string& text = v.tokens[i];
    std::string& piece = pieces_[i];
    switch (v.types[i]) {
      case TokenType::kControl:
        break;  // invisible
      case TokenType::kUnknown:
        piece = kUnknownSurface;
        break;
      case TokenType::kByte: {
        const int b = SpmParseByteToken(text);
        if (b >= 0) {
          piece.assign(1, static_cast<char>(b));
        } else {
          piece = text;
        }
        break;
      }
      case TokenType::kUserDefined:
        // Written as-is in the vocabulary (not in the byte alphabet).
        piece = spm ? SpmUnescape(text) : text;
        break;
      default:
        piece = spm ? SpmUnescape(text) : BpeDecodeText(text);
        break;
    }
  }

  for (size_t i = 0; i < n; ++i) {
    const TokenType t = v.types[i];
    if ((t == TokenType::kControl || t == TokenType::kUserDefined || t == TokenType::kUnknown) &&
        !v.tokens[i].empty()) {
      special_ids_.push_back(static_cast<int32_t>(i));
    }
  }
  std::stable_sort(special_ids_.begin(), special_ids_.end(),
                   [&](int32_t a, int32_t b) { return v.tokens[a].size() > v.tokens[b].size(); });
  MeasureTokenBytes();

  FindFimTokens();
  for (int32_t id : {v.eos, v.eot, v.eom, v.fim_pad, v.fim_rep, v.fim_sep}) {
    if (id >= 0) eog_ids_.push_back(id);
  }
  static const char* const kEogTexts[] = {"<|eot_id|>", "<|eom_id|>",    "<|im_end|>",
                                          "<|end|>",    "<end_of_turn>", "<|endoftext|>"};
  for (const char* text : kEogTexts) {
    const auto it = token_to_id_.find(text);
    if (it != token_to_id_.end() && v.types[it->second] == TokenType::kControl) {
      eog_ids_.push_back(it->second);
    }
  }
  std::sort(eog_ids_.begin(), eog_ids_.end());
  eog_ids_.erase(std::unique(eog_ids_.begin(), eog_ids_.end()), eog_ids_.end());

  if (spm) {
    spm_.reset(new SpmEncoder(vocab_, token_to_id_));
  } else {
    PI_RETURN_IF_ERROR(BpeEncoder::Create(vocab_, token_to_id_, &bpe_));
  }
  return Status::Ok();
}

void Tokenizer::FindFimTokens() {
  // The spellings of the code models' vocabularies (Qwen 2.5 Coder, StarCoder,
  // CodeGemma, CodeLlama, DeepSeek Coder), for files without the keys.
  const struct {
    int32_t* id;
    std::vector<const char*> texts;
  } kinds[] = {
      {&vocab_.fim_pre,
       {"<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<|fim_begin|>", "<PRE>",
        "\xe2\x96\x81<PRE>",
        "<\xef\xbd\x9c"
        "fim\xe2\x96\x81"
        "begin\xef\xbd\x9c>"}},
      {&vocab_.fim_suf,
       {"<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<|fim_hole|>", "<SUF>",
        "\xe2\x96\x81<SUF>",
        "<\xef\xbd\x9c"
        "fim\xe2\x96\x81"
        "hole\xef\xbd\x9c>"}},
      {&vocab_.fim_mid,
       {"<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<|fim_end|>", "<MID>",
        "\xe2\x96\x81<MID>",
        "<\xef\xbd\x9c"
        "fim\xe2\x96\x81"
        "end\xef\xbd\x9c>"}},
      {&vocab_.fim_pad, {"<|fim_pad|>", "<fim-pad>", "<fim_pad>"}},
      {&vocab_.fim_rep, {"<|repo_name|>", "<fim-repo>", "<reponame>"}},
      {&vocab_.fim_sep, {"<|file_sep|>", "<fim-sep>", "<file_sep>"}},
  };
  for (const auto& k : kinds) {
    for (size_t i = 0; *k.id < 0 && i < k.texts.size(); ++i) {
      const auto it = token_to_id_.find(k.texts[i]);
      if (it == token_to_id_.end()) continue;
      const TokenType t = vocab_.types[it->second];
      if (t == TokenType::kControl || t == TokenType::kUserDefined) *k.id = it->second;
    }
  }
}

void Tokenizer::MeasureTokenBytes() {
  const TokenizerVocab& v = vocab_;
  max_token_bytes_ = 0;
  if (v.model == "llama") {
    if (v.remove_extra_whitespaces) return;
    int byte_tokens = 0;
    for (size_t i = 0; i < v.tokens.size(); ++i) {
      byte_tokens += v.types[i] == TokenType::kByte && SpmParseByteToken(v.tokens[i]) >= 0;
    }
    if (byte_tokens < 256) return;  // unknown characters may fold into one token
  }
  // A token is read from its piece's bytes, or a special token from its vocabulary text.
  for (const std::string& piece : pieces_)
    max_token_bytes_ = std::max(max_token_bytes_, piece.size());
  for (int32_t id : special_ids_) {
    max_token_bytes_ = std::max(max_token_bytes_, v.tokens[id].size());
  }
  max_token_bytes_ = std::max<size_t>(max_token_bytes_, 4);  // a whole UTF-8 character
}

// Whether [begin, end) overlaps a span of `literal` (sorted).
static bool InLiteral(const std::vector<TextSpan>* literal, size_t begin, size_t end) {
  if (!literal) return false;
  for (const TextSpan& s : *literal) {
    if (s.begin >= end) break;
    if (s.end > begin) return true;
  }
  return false;
}

void Tokenizer::Partition(const std::string& text, bool parse_special,
                          const std::vector<TextSpan>* literal,
                          std::vector<Fragment>* fragments) const {
  fragments->clear();
  if (text.empty()) return;
  fragments->push_back({-1, 0, text.size()});
  std::vector<Fragment> next;
  for (int32_t id : special_ids_) {
    const TokenType t = vocab_.types[id];
    if (!parse_special && t != TokenType::kUserDefined) continue;
    const std::string& s = vocab_.tokens[id];
    bool found = false;
    next.clear();
    for (const Fragment& f : *fragments) {
      if (f.token >= 0) {
        next.push_back(f);
        continue;
      }
      size_t pos = f.begin, from = f.begin;
      while (from < f.end) {
        const size_t hit = text.find(s, from);
        if (hit == std::string::npos || hit + s.size() > f.end) break;
        if (InLiteral(literal, hit, hit + s.size())) {  // a message's own text
          from = hit + 1;
          continue;
        }
        if (hit > pos) next.push_back({-1, pos, hit});
        next.push_back({id, hit, hit + s.size()});
        pos = from = hit + s.size();
        found = true;
      }
      if (pos < f.end) next.push_back({-1, pos, f.end});
    }
    if (found) fragments->swap(next);
  }
}

Status Tokenizer::Encode(const std::string& input, bool add_bos, std::vector<int32_t>* ids,
                         bool parse_special, const std::vector<TextSpan>* literal) const {
  ids->clear();
  if (add_bos && vocab_.bos >= 0) ids->push_back(vocab_.bos);
  // sentencepiece normalizes the whole text before it looks for pieces.
  const std::string text =
      spm_ && vocab_.remove_extra_whitespaces ? SpmRemoveExtraWhitespaces(input) : input;

  // Spans are of the input: with the spaces dropped, they move with the text.
  std::vector<TextSpan> moved;
  if (literal && text.size() != input.size()) {
    moved = SpmMapSpans(input, *literal);
    literal = &moved;
  }
  std::vector<Fragment> fragments;
  Partition(text, parse_special, literal, &fragments);
  bool prev_special = true;  // the text's start counts as after a special token
  for (const Fragment& f : fragments) {
    if (f.token >= 0) {
      ids->push_back(f.token);
      prev_special = true;
      continue;
    }
    const std::string raw = text.substr(f.begin, f.end - f.begin);
    if (spm_) {
      // As llama.cpp: the space prefix goes before the text and after every special token.
      const std::string escaped =
          SpmEscapeSpaces(vocab_.add_space_prefix && prev_special ? " " + raw : raw);
      PI_RETURN_IF_ERROR(spm_->Encode(escaped, ids));
    } else {
      PI_RETURN_IF_ERROR(bpe_->Encode(raw, ids));
    }
    prev_special = false;
  }
  return Status::Ok();
}

std::string Tokenizer::Decode(const std::vector<int32_t>& ids) const {
  std::string out;
  bool first = true;
  for (int32_t id : ids) {
    if (id < 0 || id >= n_vocab()) continue;
    const std::string& piece = pieces_[id];
    if (piece.empty()) continue;
    // sentencepiece drops the space of the first visible piece that Encode prepended
    // (a <0x20> byte token is the user's own space and stays).
    if (first && spm_ && vocab_.add_space_prefix && IsText(vocab_.types[id]) && piece[0] == ' ') {
      out.append(piece, 1, std::string::npos);
    } else {
      out += piece;
    }
    first = false;
  }
  return out;
}

std::string Tokenizer::TokenToPiece(int32_t id) const {
  if (id < 0 || id >= n_vocab()) return std::string();
  return pieces_[id];
}

const std::string& Tokenizer::TokenText(int32_t id) const {
  static const std::string* empty = new std::string();
  if (id < 0 || id >= n_vocab()) return *empty;
  return vocab_.tokens[id];
}

TokenType Tokenizer::token_type(int32_t id) const {
  if (id < 0 || id >= n_vocab()) return TokenType::kUndefined;
  return vocab_.types[id];
}

int32_t Tokenizer::FindToken(const std::string& text) const {
  const auto it = token_to_id_.find(text);
  return it == token_to_id_.end() ? -1 : it->second;
}

bool Tokenizer::IsEog(int32_t id) const {
  return std::binary_search(eog_ids_.begin(), eog_ids_.end(), id);
}

const VocabTrie& Tokenizer::vocab_trie() const {
  std::call_once(trie_once_, [this] { trie_ = std::make_unique<VocabTrie>(pieces_); });
  return *trie_;
}

std::string Utf8Stream::Push(const std::string& bytes) {
  pending_ += bytes;
  std::string out;
  size_t pos = 0;
  while (pos < pending_.size()) {
    uint32_t cp;
    size_t len;
    const Utf8Status st = DecodeUtf8(pending_.data(), pending_.size(), pos, &cp, &len);
    if (st == Utf8Status::kIncomplete) break;  // wait for the rest of the character
    if (st == Utf8Status::kValid) {
      out.append(pending_, pos, len);
    } else {
      AppendUtf8(0xFFFD, &out);
    }
    pos += len;
  }
  pending_.erase(0, pos);
  return out;
}

std::string Utf8Stream::Flush() {
  std::string out = Push(std::string());
  if (!pending_.empty()) AppendUtf8(0xFFFD, &out);
  pending_.clear();
  return out;
}

}  // namespace pi
