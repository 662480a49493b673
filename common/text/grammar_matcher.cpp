#include "common/text/grammar_matcher.h"

#include <algorithm>
#include <cstring>

namespace pi {
namespace {

// Closures that explode (nested optional rules) are cut here: an error, not
// a hang. Deep enough for any grammar that is not built to explode.
constexpr size_t kMaxExpandSteps = 1 << 16;
constexpr int kMaxExpandDepth = 2048;

uint64_t Mix(uint64_t h, uint64_t v) {
  h ^= v + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2);
  return h;
}

}  // namespace

GrammarMatcher::GrammarMatcher(std::shared_ptr<const Grammar> grammar, const VocabTrie* trie)
    : grammar_(std::move(grammar)), trie_(trie), words_((trie->n_vocab() + 63) / 64) {
  walk_sets_.resize(trie_->max_depth() + 1);
  Reset();
}

void GrammarMatcher::Clear() {
  nodes_.clear();
  node_ids_.clear();
  set_nodes_.clear();
  set_begin_.assign(1, 0);
  set_accepts_.clear();
  set_ids_.clear();
  set_row_.clear();
  steps_.clear();
  mask_slot_.clear();
  masks_.clear();
}

void GrammarMatcher::Reset() {
  Clear();
  current_ = Start();
}

int32_t GrammarMatcher::InternNode(int32_t pos, int32_t parent) {
  const uint64_t key =
      (static_cast<uint64_t>(static_cast<uint32_t>(pos)) << 32) | static_cast<uint32_t>(parent);
  auto it = node_ids_.find(key);
  if (it != node_ids_.end()) return it->second;
  if (nodes_.size() >= kMaxNodes) return kOverflow;
  const int32_t id = static_cast<int32_t>(nodes_.size());
  nodes_.push_back({pos, parent});
  node_ids_.emplace(key, id);
  return id;
}

// scratch_ (the stacks reached) as a set: sorted, each once, numbered once.
int32_t GrammarMatcher::InternSet(bool accept) {
  std::sort(scratch_.begin(), scratch_.end());
  scratch_.erase(std::unique(scratch_.begin(), scratch_.end()), scratch_.end());
  if (scratch_.empty() && !accept) return kDead;
  uint64_t h = accept ? 1 : 0;
  for (int32_t n : scratch_) h = Mix(h, static_cast<uint64_t>(n));
  auto range = set_ids_.equal_range(h);
  for (auto it = range.first; it != range.second; ++it) {
    const int32_t s = it->second;
    if (set_accepts_[s] == accept && SetSize(s) == scratch_.size() &&
        std::equal(scratch_.begin(), scratch_.end(), set_nodes_.begin() + set_begin_[s])) {
      return s;
    }
  }
  if (set_accepts_.size() >= kMaxSets) return kOverflow;
  const int32_t s = static_cast<int32_t>(set_accepts_.size());
  set_nodes_.insert(set_nodes_.end(), scratch_.begin(), scratch_.end());
  set_begin_.push_back(static_cast<uint32_t>(set_nodes_.size()));
  set_accepts_.push_back(accept ? 1 : 0);
  set_row_.push_back(-1);
  set_ids_.emplace(h, s);
  return s;
}

// Adds to scratch_ the stacks that continue at `pos` under `parent`: a byte
// set is a stack's top; a rule pushes where to return (unless the rule ends
// the alternative: the caller's return is reused, so right recursion stays
// flat) and goes into each alternative; an alternative's end returns, and
// at the bottom the grammar has matched (accept).
bool GrammarMatcher::Expand(int32_t pos, int32_t parent, int depth, bool* accept) {
  const std::vector<Grammar::Element>& el = grammar_->elements();
  if (depth > kMaxExpandDepth) return false;
  for (;;) {
    if (++expand_steps_ > kMaxExpandSteps) return false;
    const Grammar::Element& e = el[pos];
    if (e.kind == Grammar::Kind::kEnd) {
      if (parent < 0) {
        *accept = true;
        return true;
      }
      pos = nodes_[parent].pos;
      parent = nodes_[parent].parent;
      continue;
    }
    if (e.kind == Grammar::Kind::kBytes) {
      const int32_t n = InternNode(pos, parent);
      if (n < 0) return false;
      scratch_.push_back(n);
      return true;
    }
    int32_t ret = parent;
    if (el[pos + 1].kind != Grammar::Kind::kEnd) {
      ret = InternNode(pos + 1, parent);
      if (ret < 0) return false;
    }
    const std::vector<int32_t>& alts = grammar_->alternatives(e.arg);
    for (size_t i = 0; i + 1 < alts.size(); ++i) {
      if (!Expand(alts[i], ret, depth + 1, accept)) return false;
    }
    pos = alts.back();
    parent = ret;
  }
}

// The root's closure; kDead when even that is over the bounds (then every
// Mask and Accept fails).
int32_t GrammarMatcher::Start() {
  scratch_.clear();
  expand_steps_ = 0;
  bool accept = false;
  for (int32_t alt : grammar_->alternatives(grammar_->root())) {
    if (!Expand(alt, -1, 0, &accept)) return kDead;
  }
  return InternSet(accept);
}

int32_t GrammarMatcher::Step(int32_t set, uint8_t byte) {
  if (set_row_[set] < 0) {
    if (steps_.size() / 256 >= kMaxStepRows) return kOverflow;
    set_row_[set] = static_cast<int32_t>(steps_.size() / 256);
    steps_.resize(steps_.size() + 256, kUnknown);
  }
  const size_t at = static_cast<size_t>(set_row_[set]) * 256 + byte;
  if (steps_[at] != kUnknown) return steps_[at];
  const std::vector<Grammar::Element>& el = grammar_->elements();
  scratch_.clear();
  expand_steps_ = 0;
  bool accept = false;
  for (uint32_t i = set_begin_[set]; i < set_begin_[set + 1]; ++i) {
    const Node n = nodes_[set_nodes_[i]];
    if (!grammar_->ByteMatches(el[n.pos].arg, byte)) continue;
    if (!Expand(n.pos + 1, n.parent, 0, &accept)) return kOverflow;
  }
  const int32_t next = InternSet(accept);
  if (next == kOverflow) return kOverflow;
  steps_[at] = next;
  return next;
}

// Everything dropped but the current set, which is made again from its
// stacks (each read out as the chain of positions to its bottom).
void GrammarMatcher::Rebase() {
  std::vector<std::vector<int32_t>> chains;
  for (uint32_t i = set_begin_[current_]; i < set_begin_[current_ + 1]; ++i) {
    std::vector<int32_t> chain;
    for (int32_t n = set_nodes_[i]; n >= 0; n = nodes_[n].parent) chain.push_back(nodes_[n].pos);
    chains.push_back(std::move(chain));
  }
  const bool accept = set_accepts_[current_] != 0;
  Clear();
  scratch_.clear();
  for (const std::vector<int32_t>& chain : chains) {
    int32_t parent = -1;
    for (auto it = chain.rbegin(); it != chain.rend(); ++it) parent = InternNode(*it, parent);
    scratch_.push_back(parent);
  }
  current_ = InternSet(accept);
}

// One depth-first pass over the trie; false when the steps overflowed.
bool GrammarMatcher::Walk(uint64_t* allowed) {
  std::memset(allowed, 0, words_ * sizeof(uint64_t));
  const std::vector<VocabTrie::Node>& nodes = trie_->nodes();
  const std::vector<int32_t>& ids = trie_->token_ids();
  walk_sets_[0] = current_;
  for (size_t i = 0; i < nodes.size();) {
    const VocabTrie::Node& n = nodes[i];
    const int32_t s = Step(walk_sets_[n.depth - 1], n.byte);
    if (s == kOverflow) return false;
    if (s == kDead) {
      i = n.skip;
      continue;
    }
    walk_sets_[n.depth] = s;
    for (uint32_t t = n.tokens; t < n.tokens_end; ++t) {
      allowed[ids[t] >> 6] |= 1ull << (ids[t] & 63);
    }
    ++i;
  }
  return true;
}

Status GrammarMatcher::Mask(uint64_t* allowed) {
  if (current_ < 0) return Status::Resource("grammar: the start rule expands too far");
  auto cached = mask_slot_.find(current_);
  if (cached != mask_slot_.end()) {
    std::memcpy(allowed, &masks_[cached->second], words_ * sizeof(uint64_t));
    return Status::Ok();
  }
  if (nodes_.size() > kMaxNodes / 2 || n_sets() > kMaxSets / 2 ||
      steps_.size() / 256 > kMaxStepRows / 2) {
    Rebase();
  }
  ++n_walks_;
  if (!Walk(allowed)) {
    Rebase();
    if (!Walk(allowed)) {
      return Status::Resource(
          "grammar: one token's step meets more than %zu states; the "
          "grammar is too ambiguous for this vocabulary",
          kMaxSets);
    }
  }
  if (mask_slot_.size() >= kMaxMasks) {
    mask_slot_.clear();
    masks_.clear();
  }
  mask_slot_.emplace(current_, masks_.size());
  masks_.insert(masks_.end(), allowed, allowed + words_);
  return Status::Ok();
}

Status GrammarMatcher::Accept(const std::string& bytes) {
  if (current_ < 0) return Status::Resource("grammar: the start rule expands too far");
  for (int attempt = 0; attempt < 2; ++attempt) {
    int32_t s = current_;
    for (size_t i = 0; i < bytes.size() && s >= 0; ++i) {
      s = Step(s, static_cast<uint8_t>(bytes[i]));
    }
    if (s == kDead) return Status::Invalid("grammar: the text cannot go on with this token");
    if (s >= 0) {
      current_ = s;
      return Status::Ok();
    }
    Rebase();
  }
  return Status::Resource("grammar: the token's step meets more than %zu states", kMaxSets);
}

}  // namespace pi
