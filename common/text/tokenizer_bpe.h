// Byte-level BPE (GPT-2 style): llama.cpp's llm_tokenizer_bpe_session.
//
// The text is split into words by a pre-tokenizer regex (chosen by tokenizer.ggml.pre);
// each word's bytes are spelled in GPT-2's byte alphabet (every byte a printable
// character: space is "Ġ", newline "Ċ"); the word starts as one symbol per character and
// the adjacent pair with the lowest merge rank is merged (ties to the leftmost) until no
// pair is in the merge table. Symbols missing from the vocabulary fall back to their
// single-byte tokens.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/base/status.h"
#include "common/text/tokenizer.h"

namespace pi {

// The pre-tokenizer regexes implemented (by hand, code point by code point).
enum class BpePreTokenizer {
  // GPT-2: 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
  kGpt2,
  // Llama 3: (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
  //          ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
  kLlama3,
  // Qwen2: Llama 3's, but digits one at a time (\p{N} for \p{N}{1,3}), and
  // merges applied to every word (no ignore_merges).
  kQwen2,
  // Falcon: three regexes in sequence, each splitting the previous one's pieces into its
  // matches and the text between them (llama.cpp's unicode_regex_split):
  //   [\p{P}\$\+<=>\^~\|`]+
  //   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)   (GPT-2's;
  //                                   llama.cpp runs its GPT-2 matcher, \s+ included)
  //   [0-9][0-9][0-9]
  kFalcon,
};

// tokenizer.ggml.pre -> pre-tokenizer: "default", "gpt2", "gpt-2" -> kGpt2;
// "llama-bpe", "llama3", "llama-v3" -> kLlama3; "qwen2" -> kQwen2; "falcon" -> kFalcon;
// anything else is an error naming the value.
Status ParseBpePreTokenizer(const std::string& name, BpePreTokenizer* out);

// Splits `text` into words, as [begin, end) byte ranges that cover the text in order.
// Invalid UTF-8 bytes count as "other" characters (neither letter, number nor space).
void BpePreTokenize(BpePreTokenizer pre, const std::string& text,
                    std::vector<std::pair<size_t, size_t>>* words);

// GPT-2's bytes_to_unicode(): the UTF-8 spelling of byte `b` in the byte alphabet.
std::string BpeByteToChar(uint8_t b);
// The inverse for one code point: the byte it spells, -1 if it is not in the alphabet.
int BpeCharToByte(uint32_t cp);
// A token's byte-alphabet spelling -> its bytes; characters outside the alphabet (and
// invalid UTF-8) are kept as they are.
std::string BpeDecodeText(const std::string& text);

class BpeEncoder {
 public:
  // `vocab` and `token_to_id` are the Tokenizer's and must outlive the encoder. Fails on
  // a malformed merge (the message names its index) or an unknown pre-tokenizer.
  static Status Create(const TokenizerVocab& vocab,
                       const std::unordered_map<std::string, int32_t>& token_to_id,
                       std::unique_ptr<BpeEncoder>* out);

  // Appends the ids of `text` (no special tokens inside) to *ids.
  Status Encode(const std::string& text, std::vector<int32_t>* ids) const;

 private:
  BpeEncoder(const TokenizerVocab& vocab,
             const std::unordered_map<std::string, int32_t>& token_to_id);
  Status EncodeWord(const std::string& word, std::vector<int32_t>* ids) const;
  int32_t Rank(const std::string& left, const std::string& right) const;

  const TokenizerVocab& vocab_;
  const std::unordered_map<std::string, int32_t>& token_to_id_;
  BpePreTokenizer pre_ = BpePreTokenizer::kGpt2;
  // Llama 3 emits a word that is already a whole token without merging (ignore_merges).
  bool ignore_merges_ = false;
  std::unordered_map<std::string, int32_t> ranks_;  // "left right" -> rank
};

}  // namespace pi
