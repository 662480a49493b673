// VocabTrie: every token's bytes (Tokenizer::TokenToPiece) in a trie laid
// out depth first, so that a walk that rejects a byte skips the whole
// subtree of tokens that begin with it by one jump. A grammar's token mask
// (grammar_matcher.h) is one such walk. Tokens with no bytes (control
// tokens) are not in it, nor tokens of over kMaxPieceBytes (a file's
// vocabulary is outside input: a grammar never allows such a token).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace pi {

class VocabTrie {
 public:
  static constexpr size_t kMaxPieceBytes = 1024;

  struct Node {
    uint8_t byte;     // the byte that leads here from the parent
    uint16_t depth;   // 1 for a token's first byte
    uint32_t skip;    // the index after this node's subtree
    uint32_t tokens;  // [tokens, tokens_end) in token_ids()
    uint32_t tokens_end;
  };

  // pieces[i]: token i's bytes.
  explicit VocabTrie(const std::vector<std::string>& pieces);

  const std::vector<Node>& nodes() const { return nodes_; }
  const std::vector<int32_t>& token_ids() const { return token_ids_; }
  int max_depth() const { return max_depth_; }
  int32_t n_vocab() const { return n_vocab_; }

 private:
  std::vector<Node> nodes_;
  std::vector<int32_t> token_ids_;
  int max_depth_ = 0;
  int32_t n_vocab_ = 0;
};

}  // namespace pi
