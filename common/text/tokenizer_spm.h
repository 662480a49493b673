// SentencePiece-style (SPM) segmentation: llama.cpp's llm_tokenizer_spm_session, which
// reproduces sentencepiece's BPE model (bpe_model.cc).
//
// The text (spaces already written as U+2581) starts as one symbol per UTF-8 character.
// Every adjacent pair whose concatenation is a vocabulary piece goes into a max-heap keyed
// by that piece's score, ties to the leftmost pair; the best pair is merged and its new
// neighbour pairs pushed, until no pair is left. Each final symbol becomes its token;
// "unused" pieces are split back into the pieces they were merged from (as sentencepiece
// does); symbols outside the vocabulary become byte tokens <0xNN> (byte fallback) or,
// without byte tokens, one unk for each run of unknown symbols (sentencepiece's rule).
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/base/status.h"
#include "common/text/tokenizer.h"

namespace pi {

class SpmEncoder {
 public:
  // `vocab` and `token_to_id` are the Tokenizer's and must outlive the encoder.
  SpmEncoder(const TokenizerVocab& vocab,
             const std::unordered_map<std::string, int32_t>& token_to_id);

  // Appends the ids of `text` (no special tokens inside, spaces escaped) to *ids.
  Status Encode(const std::string& text, std::vector<int32_t>* ids) const;

 private:
  // Vocabulary id of `text` if it may be the result of a merge, else -1.
  int32_t MergeTarget(const std::string& text) const;

  const TokenizerVocab& vocab_;
  const std::unordered_map<std::string, int32_t>& token_to_id_;
  int32_t byte_ids_[256];  // id of <0xNN>, -1 when the vocabulary lacks it
  bool has_byte_tokens_ = false;
};

// "▁" (U+2581), SentencePiece's visible space.
extern const char kSpmSpace[];

// Replaces every ' ' with U+2581.
std::string SpmEscapeSpaces(const std::string& text);

// Replaces every U+2581 with ' '.
std::string SpmUnescape(const std::string& text);

// sentencepiece's remove_extra_whitespaces: drops leading and trailing ' ' and collapses
// runs of ' ' into one (only U+0020 counts, as in sentencepiece's normalizer).
std::string SpmRemoveExtraWhitespaces(const std::string& text);
// Spans of `text` moved to where their bytes are in SpmRemoveExtraWhitespaces(text).
std::vector<TextSpan> SpmMapSpans(const std::string& text, const std::vector<TextSpan>& spans);

// "<0x41>" -> 0x41; -1 when `text` is not a byte token spelling.
int SpmParseByteToken(const std::string& text);

}  // namespace pi
