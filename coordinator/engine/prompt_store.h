// PromptStore: prompts whose KV-cache positions had to leave their sequence
// (another request took it), kept in host memory up to a byte cap, the least
// recently used going first, so that a conversation whose sequence went to
// another client still starts from its prefix (llama-server's --cache-ram).
// An entry holds a prompt's positions as its evaluation wrote them and, when
// known, the logits after its last token: the reuse rules are the sequences'
// own (prompt_cache.h), so an answer from the store is the uncached one, bit
// for bit. With a device, the device's layers' part of an entry stays on the
// device's side (Engine::SaveSeq) and counts in the cap. Used by one
// scheduler thread; bytes() and size() may be read from any.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <list>
#include <vector>

#include "common/base/status.h"
#include "coordinator/engine/engine.h"

namespace pi {

class PromptStore {
  struct Entry;

 public:
  // max_bytes: the cap (0: nothing is kept).
  explicit PromptStore(int64_t max_bytes) : max_bytes_(max_bytes) {}

  // An entry found for a prompt: how much of it the entry gives.
  struct Hit {
    std::list<Entry>::iterator entry;
    size_t reuse = 0;    // positions
    bool whole = false;  // the prompt whole, with its logits
  };
  // The entry with the longest reusable prefix of `prompt` (ReusablePrefix
  // with n_batch) beyond `at_least` positions, or one that is `prompt`
  // whole with its logits; false when none gives more.
  bool Find(const std::vector<int32_t>& prompt, int n_batch, size_t at_least, Hit* hit);
  // The hit's positions into sequence `seq` (which then holds hit.reuse of
  // them), the kept logits into *logits when whole; the entry becomes the
  // most recently used. An entry that cannot be loaded (its device part
  // lost with a restarted device) goes, the sequence unchanged.
  Status Load(const Hit& hit, Engine* engine, int seq, std::vector<float>* logits);

  // Keeps what sequence `seq` holds of `prompt` (its first prompt.size()
  // positions, as a prompt evaluation wrote them) and `logits` (n_vocab
  // floats after its last token; null: unknown), unless an entry holds it
  // already; an entry that is a prefix of it goes. The least recently used
  // entries go until it fits, never `keep`'s (a Hit about to be loaded);
  // one larger than the cap is not kept.
  Status Save(Engine* engine, int seq, const std::vector<int32_t>& prompt, const float* logits,
              const Hit* keep = nullptr);

  int64_t max_bytes() const { return max_bytes_; }
  int64_t bytes() const { return bytes_.load(); }
  int64_t size() const { return count_.load(); }

 private:
  struct Entry {
    std::vector<int32_t> prompt;
    SavedSeq kv;
    std::vector<float> logits;  // empty: not kept
    int64_t bytes() const {
      return kv.bytes() +
             static_cast<int64_t>(logits.size() * sizeof(float) + prompt.size() * sizeof(int32_t));
    }
  };
  void Erase(std::list<Entry>::iterator it);

  const int64_t max_bytes_;
  std::list<Entry> entries_;  // the most recently used first
  std::atomic<int64_t> bytes_{0}, count_{0};
};

}  // namespace pi
