// GrammarMatcher: one generation's place in a grammar (grammar.h), and the
// tokens that may come next.
//
// The place is a set of stacks of the pushdown automaton (it is
// nondeterministic: "a" | "ab" keeps both). Stacks are linked nodes
// (position, parent), each made once (hash-consed), so a set of stacks is a
// sorted list of node ids and equal sets are equal lists. Sets are
// numbered, and the step from a set over a byte is remembered, which makes
// the automaton a DFA built lazily over the sets it meets.
//
// The mask of allowed tokens is one depth-first walk over the vocabulary's
// trie (vocab_trie.h), a remembered step per trie node, a rejected byte
// skipping its subtree; a set's mask is kept, so the inside of a JSON string
// (the same set after every character) costs one walk. A token may end
// inside a UTF-8 character: the grammar is over bytes.
//
// Memory is bounded: past kMaxNodes / kMaxSets the remembered steps and
// masks are dropped and the current set rebuilt alone. A step that needs
// more than that on its own is an error, as is a token the grammar refuses:
// the matcher fails closed and never aborts. Nothing here is shared between
// threads; the Grammar is.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/base/status.h"
#include "common/text/grammar.h"
#include "common/text/vocab_trie.h"

namespace pi {

class GrammarMatcher {
 public:
  static constexpr size_t kMaxNodes = 1 << 18;
  static constexpr size_t kMaxSets = 1 << 15;
  static constexpr size_t kMaxStepRows = 1 << 13;  // 1 KiB each
  static constexpr size_t kMaxMasks = 64;

  // `trie` outlives the matcher. Starts at the grammar's root.
  GrammarMatcher(std::shared_ptr<const Grammar> grammar, const VocabTrie* trie);

  // allowed[n_vocab / 64 rounded up]: bit i set when token i's bytes can
  // continue the text. Tokens outside the trie (no bytes) are never set.
  Status Mask(uint64_t* allowed);
  // The text goes on with these bytes (a token's); an error if the grammar
  // refuses them (the matcher then stays where it was).
  Status Accept(const std::string& bytes);
  // The text so far is a whole match: an end of text may come now.
  bool CanEnd() const { return current_ >= 0 && set_accepts_[current_] != 0; }
  // The text so far is a whole match and nothing can follow it.
  bool Done() const { return CanEnd() && SetSize(current_) == 0; }
  // Back to the grammar's start.
  void Reset();

  // Steps and sets made so far (for tests and benchmarks).
  size_t n_sets() const { return set_accepts_.size(); }
  size_t n_mask_walks() const { return n_walks_; }

 private:
  static constexpr int32_t kDead = -1;
  static constexpr int32_t kUnknown = -2;
  static constexpr int32_t kOverflow = -3;

  int32_t InternNode(int32_t pos, int32_t parent);
  int32_t InternSet(bool accept);
  bool Expand(int32_t pos, int32_t parent, int depth, bool* accept);
  int32_t Step(int32_t set, uint8_t byte);
  int32_t Start();
  void Rebase();
  void Clear();
  bool Walk(uint64_t* allowed);
  uint32_t SetSize(int32_t s) const { return set_begin_[s + 1] - set_begin_[s]; }

  std::shared_ptr<const Grammar> grammar_;
  const VocabTrie* trie_;
  size_t words_;

  struct Node {
    int32_t pos;
    int32_t parent;
  };
  std::vector<Node> nodes_;
  std::unordered_map<uint64_t, int32_t> node_ids_;
  // Set s: node ids set_nodes_[set_begin_[s], set_begin_[s + 1]), sorted.
  std::vector<int32_t> set_nodes_;
  std::vector<uint32_t> set_begin_;
  std::vector<uint8_t> set_accepts_;
  std::unordered_multimap<uint64_t, int32_t> set_ids_;  // by hash
  std::vector<int32_t> set_row_;                        // -1 or its row in steps_
  std::vector<int32_t> steps_;                          // 256 per row: the next set
  std::unordered_map<int32_t, size_t> mask_slot_;       // set -> its mask in masks_
  std::vector<uint64_t> masks_;
  int32_t current_ = 0;
  std::vector<int32_t> scratch_;
  std::vector<int32_t> walk_sets_;
  size_t expand_steps_ = 0;
  size_t n_walks_ = 0;
};

}  // namespace pi
