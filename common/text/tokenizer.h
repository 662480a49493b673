// Tokenizer: text <-> token ids, built from a GGUF's tokenizer.ggml.* metadata.
//
// Two vocabulary types, as in llama.cpp:
//   "llama" — SentencePiece-style (SPM): spaces as U+2581, merges by piece score, byte
//             fallback to <0xNN> tokens (tokenizer_spm.h);
//   "gpt2"  — byte-level BPE: GPT-2's byte alphabet, merges by rank, a regex
//             pre-tokenizer chosen by tokenizer.ggml.pre (tokenizer_bpe.h).
// Special tokens (control, user-defined, unknown types) are split out of the text before
// the algorithm runs: user-defined ones always, control/unknown ones only when the caller
// asks (parse_special), so user text cannot inject "</s>" by accident.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/base/status.h"

namespace pi {

class GgufFile;
class SpmEncoder;
class VocabTrie;
class BpeEncoder;

// tokenizer.ggml.token_type values; sentencepiece's piece types use the same numbers.
enum class TokenType : int32_t {
  kUndefined = 0,
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6,
};

// A vocabulary as plain values: what FromGguf reads, and what unit tests build by hand.
struct TokenizerVocab {
  std::string model;            // "llama" (SPM) or "gpt2" (byte-level BPE)
  std::string pre = "default";  // BPE pre-tokenizer: "default", "gpt2"/"gpt-2", "llama-bpe"
  std::vector<std::string> tokens;
  std::vector<float> scores;        // SPM merge priorities (higher first); empty = all 0
  std::vector<TokenType> types;     // empty = all normal
  std::vector<std::string> merges;  // BPE "left right", index = rank
  int32_t bos = -1;                 // -1: none
  int32_t eos = -1;
  int32_t unk = -1;
  int32_t eot = -1;  // end of turn (tokenizer.ggml.eot_token_id), ends generation too
  int32_t eom = -1;  // end of message (tokenizer.ggml.eom_token_id)
  // Fill-in-the-middle (tokenizer.ggml.fim_*_token_id; found by their text
  // when absent): prefix, suffix, middle, padding, repository, file separator.
  int32_t fim_pre = -1, fim_suf = -1, fim_mid = -1, fim_pad = -1, fim_rep = -1, fim_sep = -1;
  bool add_bos = false;  // tokenizer.ggml.add_bos_token: what callers should pass to Encode
  bool add_eos = false;  // tokenizer.ggml.add_eos_token (Encode never appends eos itself)
  bool add_space_prefix = false;          // SPM: prepend one space to the text
  bool remove_extra_whitespaces = false;  // SPM: sentencepiece's normalizer option
};

// Bytes [begin, end) of a text.
struct TextSpan {
  size_t begin = 0;
  size_t end = 0;
};

class Tokenizer {
 public:
  ~Tokenizer();
  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;

  // Reads tokenizer.ggml.* from a GGUF (model "llama" -> SPM, "gpt2" -> BPE). Errors name
  // the key. Defaults for absent keys follow llama.cpp: SPM bos 1, eos 2, unk 0,
  // add_bos_token true, add_space_prefix true; BPE no bos/eos/unk, add_bos_token false.
  static Status FromGguf(const GgufFile& file, std::unique_ptr<Tokenizer>* out);
  // Validates `vocab` (sizes, ids in range, merges well-formed, known pre-tokenizer).
  static Status FromVocab(TokenizerVocab vocab, std::unique_ptr<Tokenizer>* out);

  // Replaces *ids with the tokens of `text`, preceded by bos when add_bos is set (and the
  // vocabulary has one). With parse_special, control tokens written literally in the text
  // ("<s>", "<|eot_id|>") become those tokens; without it they are ordinary text.
  // With `literal` (sorted, not overlapping), no control token is read inside those
  // spans: a chat message's content stays text while the template's markers around it
  // are parsed (the text is split where they are, exactly as without spans).
  Status Encode(const std::string& text, bool add_bos, std::vector<int32_t>* ids,
                bool parse_special = false, const std::vector<TextSpan>* literal = nullptr) const;
  // The text of `ids`: control tokens vanish, byte tokens become their bytes (the result
  // may hold invalid UTF-8 if the ids do), and for SPM with add_space_prefix the space
  // that Encode prepended is removed. Ids out of range are skipped.
  std::string Decode(const std::vector<int32_t>& ids) const;
  // The bytes this token adds when output is streamed token by token: concatenating
  // TokenToPiece over a sequence equals Decode of it, except that Decode drops the prefix
  // space of the first token. Bytes may end inside a UTF-8 character: see Utf8Stream.
  std::string TokenToPiece(int32_t id) const;
  // The vocabulary string of a token (U+2581 / byte-alphabet spelling), "" out of range.
  const std::string& TokenText(int32_t id) const;
  TokenType token_type(int32_t id) const;            // kUndefined out of range
  int32_t FindToken(const std::string& text) const;  // vocabulary string -> id, -1 if none

  int32_t bos() const { return vocab_.bos; }
  int32_t eos() const { return vocab_.eos; }
  int32_t unk() const { return vocab_.unk; }
  int32_t n_vocab() const { return static_cast<int32_t>(vocab_.tokens.size()); }
  bool add_bos_token() const { return vocab_.add_bos; }
  bool add_eos_token() const { return vocab_.add_eos; }
  bool is_spm() const { return spm_ != nullptr; }
  // The most bytes of text one token can stand for, so that a text of more than
  // n * max_token_bytes() bytes is more than n tokens (checked before tokenizing it);
  // 0 when there is no such bound (an SPM vocabulary without byte tokens folds a run of
  // unknown characters into one token, and one that drops extra spaces shrinks the text).
  size_t max_token_bytes() const { return max_token_bytes_; }
  const TokenizerVocab& vocab() const { return vocab_; }
  // Fill-in-the-middle: a model that has them all takes an infill prompt (infill.h).
  bool has_fim() const { return vocab_.fim_pre >= 0 && vocab_.fim_suf >= 0 && vocab_.fim_mid >= 0; }
  // End of generation: eos, eot, eom, FIM's pad, repository and file separator (a code
  // model's middle ends there), and control tokens that chat models use to end a
  // turn ("<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>").
  bool IsEog(int32_t id) const;
  // Those ids, sorted.
  const std::vector<int32_t>& eog_ids() const { return eog_ids_; }
  // Every token's TokenToPiece bytes as a trie (a grammar's token masks),
  // built on the first call (thread-safe), then kept.
  const VocabTrie& vocab_trie() const;

 private:
  Tokenizer();
  Status Init();
  void MeasureTokenBytes();  // max_token_bytes_, once the pieces are known
  void FindFimTokens();      // the FIM ids the file left out, by their text
  // Splits `text` into runs of raw text and special tokens (llama.cpp's
  // tokenizer_st_partition): longest special tokens first, leftmost occurrences.
  struct Fragment {
    int32_t token = -1;  // >= 0: a special token; -1: raw text [begin, end)
    size_t begin = 0;
    size_t end = 0;
  };
  void Partition(const std::string& text, bool parse_special, const std::vector<TextSpan>* literal,
                 std::vector<Fragment>* fragments) const;

  TokenizerVocab vocab_;
  std::unordered_map<std::string, int32_t> token_to_id_;
  std::vector<std::string> pieces_;   // TokenToPiece, precomputed
  std::vector<int32_t> special_ids_;  // by text length, longest first
  std::vector<int32_t> eog_ids_;      // sorted, each once
  mutable std::once_flag trie_once_;
  mutable std::unique_ptr<VocabTrie> trie_;
  size_t max_token_bytes_ = 0;
  std::unique_ptr<SpmEncoder> spm_;
  std::unique_ptr<BpeEncoder> bpe_;
};

// Holds back incomplete UTF-8 so that streamed output is always whole characters.
// Bytes that can never be part of a valid character come out as U+FFFD.
class Utf8Stream {
 public:
  // Appends `bytes`; returns every complete character buffered so far.
  std::string Push(const std::string& bytes);
  // Returns what is still held (an unfinished character, as U+FFFD) and resets.
  std::string Flush();

 private:
  std::string pending_;
};

}  // namespace pi
