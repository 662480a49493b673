#include "gpu_worker/kept_kv.h"

#include <cinttypes>

#include "common/base/memory_limits.h"

namespace pi {

Status KeptKv::Add(uint64_t key, int n, int64_t bytes, Entry** entry) {
  if (entries_.count(key)) return Status::Invalid("a sequence is kept under key %" PRIu64, key);
  PI_RETURN_IF_ERROR(CheckMemory("a kept sequence's KV cache", bytes));
  Entry& e = entries_[key];
  e.n = n;
  e.bytes.resize(static_cast<size_t>(bytes));
  *entry = &e;
  return Status::Ok();
}

Status KeptKv::Find(uint64_t key, int n, const Entry** entry) const {
  const auto it = entries_.find(key);
  if (it == entries_.end()) return Status::NotFound("no sequence is kept under key %" PRIu64, key);
  if (n < 0 || n > it->second.n) {
    return Status::Invalid("loading %d positions of the %d kept under key %" PRIu64, n,
                           it->second.n, key);
  }
  *entry = &it->second;
  return Status::Ok();
}

}  // namespace pi
