#include "gpu_worker/kept_kv.h"

#include <cinttypes>
#include <cstring>

#include "common/base/memory_limits.h"

namespace pi {

Status KeptKv::Add(uint64_t key, int n, int64_t bytes, Entry** entry) {
  if (entries_.count(key)) return Status::Invalid("a sequence is kept under key %" PRIu64, key);
  PI_RETURN_IF_ERROR(CheckMemory("a kept sequence's KV cache", bytes));
  Entry& e = entries_[key];
  e.n = n;
  e.bytes.resize(static_cast<size_t>(bytes));
  e.written = bytes;
  *entry = &e;
  return Status::Ok();
}

Status KeptKv::Find(uint64_t key, int n, const Entry** entry) const {
  const auto it = entries_.find(key);
  if (it == entries_.end()) return Status::NotFound("no sequence is kept under key %" PRIu64, key);
  const Entry& e = it->second;
  if (e.written != static_cast<int64_t>(e.bytes.size())) {
    return Status::Invalid("the sequence kept under key %" PRIu64 " has %" PRId64
                           " of its %zu bytes",
                           key, e.written, e.bytes.size());
  }
  if (n < 0 || n > e.n) {
    return Status::Invalid("loading %d positions of the %d kept under key %" PRIu64, n, e.n, key);
  }
  *entry = &e;
  return Status::Ok();
}

Status KeptKv::Read(uint64_t key, int n, int64_t offset, int64_t size, uint8_t* out) const {
  const Entry* e = nullptr;
  PI_RETURN_IF_ERROR(Find(key, n, &e));
  const int64_t total = static_cast<int64_t>(e->bytes.size());
  if (e->n != n || offset < 0 || size < 0 || offset > total || size > total - offset) {
    return Status::Invalid("reading bytes [%" PRId64 ", +%" PRId64
                           ") of %d positions from the %" PRId64
                           " bytes of %d kept under key %" PRIu64,
                           offset, size, n, total, e->n, key);
  }
  if (size > 0) std::memcpy(out, e->bytes.data() + offset, static_cast<size_t>(size));
  return Status::Ok();
}

Status KeptKv::Write(uint64_t key, int n, int64_t total, int64_t offset, const uint8_t* data,
                     int64_t size) {
  Entry* e = nullptr;
  if (offset == 0) {
    PI_RETURN_IF_ERROR(Add(key, n, total, &e));
    e->written = 0;
  } else {
    const auto it = entries_.find(key);
    if (it == entries_.end()) {
      return Status::Invalid("bytes from %" PRId64 " of key %" PRIu64 ", which nothing is writing",
                             offset, key);
    }
    e = &it->second;
  }
  const int64_t have = static_cast<int64_t>(e->bytes.size());
  if (e->n != n || offset != e->written || size < 0 || size > have - offset) {
    const int64_t written = e->written;
    const int kept_n = e->n;
    if (offset == 0) entries_.erase(key);  // made by this call
    return Status::Invalid("writing bytes [%" PRId64 ", +%" PRId64
                           ") of %d positions to key %" PRIu64 ", which has %" PRId64
                           " of the %" PRId64 " bytes of %d",
                           offset, size, n, key, written, have, kept_n);
  }
  if (size > 0) std::memcpy(e->bytes.data() + offset, data, static_cast<size_t>(size));
  e->written += size;
  return Status::Ok();
}

}  // namespace pi
