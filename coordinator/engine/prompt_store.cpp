#include "coordinator/engine/prompt_store.h"

#include <algorithm>
#include <iterator>
#include <utility>

#include "coordinator/engine/prompt_cache.h"

namespace pi {

void PromptStore::Erase(std::list<Entry>::iterator it) {
  bytes_ -= it->bytes();
  --count_;
  entries_.erase(it);
}

bool PromptStore::Find(const std::vector<int32_t>& prompt, int n_batch, size_t at_least, Hit* hit) {
  bool found = false;
  for (auto it = entries_.begin(); it != entries_.end(); ++it) {
    if (!prompt.empty() && it->prompt == prompt && !it->logits.empty()) {
      *hit = Hit{it, prompt.size(), true};
      return true;
    }
    const size_t r = ReusablePrefix(it->prompt, prompt, n_batch);
    if (r > at_least) {
      at_least = r;
      *hit = Hit{it, r, false};
      found = true;
    }
  }
  return found;
}

Status PromptStore::Load(const Hit& hit, Engine* engine, int seq, std::vector<float>* logits) {
  const Entry& e = *hit.entry;
  const Status s = engine->LoadSeq(seq, e.kv, static_cast<int>(hit.reuse));
  if (!s.ok()) {
    Erase(hit.entry);
    return s;
  }
  if (hit.whole) *logits = e.logits;
  entries_.splice(entries_.begin(), entries_, hit.entry);
  return Status::Ok();
}

Status PromptStore::Save(Engine* engine, int seq, const std::vector<int32_t>& prompt,
                         const float* logits, const Hit* keep) {
  if (max_bytes_ <= 0 || prompt.empty()) return Status::Ok();
  for (auto it = entries_.begin(); it != entries_.end();) {
    const std::vector<int32_t>& held = it->prompt;
    const bool covers = held.size() >= prompt.size() &&
                        std::equal(prompt.begin(), prompt.end(), held.begin()) &&
                        (held.size() > prompt.size() || !it->logits.empty() || !logits);
    if (covers) {  // held already (or more of it): now the most recently used
      entries_.splice(entries_.begin(), entries_, it);
      return Status::Ok();
    }
    const bool prefix = GoesOnFrom(held, prompt) && !(keep && keep->entry == it);
    if (prefix) {
      Erase(it++);
    } else {
      ++it;
    }
  }
  Entry e;
  e.prompt = prompt;
  PI_RETURN_IF_ERROR(engine->SaveSeq(seq, static_cast<int>(prompt.size()), &e.kv));
  if (logits) e.logits.assign(logits, logits + engine->n_vocab());
  const int64_t bytes = e.bytes();
  const int64_t kept = keep ? keep->entry->bytes() : 0;
  if (bytes + kept > max_bytes_) return Status::Ok();
  while (bytes_ + bytes > max_bytes_) {
    auto last = std::prev(entries_.end());
    if (keep && keep->entry == last) last = std::prev(last);
    Erase(last);
  }
  entries_.push_front(std::move(e));
  bytes_ += bytes;
  ++count_;
  return Status::Ok();
}

}  // namespace pi
