#include "common/text/vocab_trie.h"

#include <algorithm>
#include <numeric>

namespace pi {

// Sorting the pieces puts every token right after the tokens that are its
// prefixes; one pass then opens a node per byte past the common prefix with
// the previous piece, and closes (sets `skip` of) the ones it leaves.
VocabTrie::VocabTrie(const std::vector<std::string>& pieces)
    : n_vocab_(static_cast<int32_t>(pieces.size())) {
  std::vector<int32_t> order(pieces.size());
  std::iota(order.begin(), order.end(), 0);
  order.erase(std::remove_if(order.begin(), order.end(),
                             [&](int32_t i) {
                               return pieces[i].empty() || pieces[i].size() > kMaxPieceBytes;
                             }),
              order.end());
  std::stable_sort(order.begin(), order.end(),
                   [&](int32_t a, int32_t b) { return pieces[a] < pieces[b]; });
  std::vector<uint32_t> open;  // the node at each depth of the current path
  const std::string* prev = nullptr;
  for (int32_t id : order) {
    const std::string& p = pieces[id];
    size_t common = 0;
    if (prev != nullptr) {
      while (common < p.size() && common < prev->size() && p[common] == (*prev)[common]) ++common;
    }
    while (open.size() > common) {
      nodes_[open.back()].skip = static_cast<uint32_t>(nodes_.size());
      open.pop_back();
    }
    for (size_t d = common; d < p.size(); ++d) {
      open.push_back(static_cast<uint32_t>(nodes_.size()));
      nodes_.push_back({static_cast<uint8_t>(p[d]), static_cast<uint16_t>(d + 1), 0, 0, 0});
    }
    max_depth_ = std::max(max_depth_, static_cast<int>(p.size()));
    Node& last = nodes_[open.back()];
    if (last.tokens == last.tokens_end) {
      last.tokens = static_cast<uint32_t>(token_ids_.size());
    }
    token_ids_.push_back(id);
    last.tokens_end = static_cast<uint32_t>(token_ids_.size());
    prev = &p;
  }
  while (!open.empty()) {
    nodes_[open.back()].skip = static_cast<uint32_t>(nodes_.size());
    open.pop_back();
  }
}

}  // namespace pi
