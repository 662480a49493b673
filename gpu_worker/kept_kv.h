// KeptKv: what a device backend keeps of its sequences' KV caches
// (DeviceBackend::SaveSeq), in host memory, under the coordinator's keys:
// each entry's positions and bytes, in the backend's own layout. Entries
// also leave and come back a range of bytes at a time (ReadKept and
// WriteKept: a slot file's device part).
#pragma once

#include <cstdint>
#include <unordered_map>
#include <vector>

#include "common/base/status.h"

namespace pi {

class KeptKv {
 public:
  struct Entry {
    int n = 0;  // positions
    std::vector<uint8_t> bytes;
    int64_t written = 0;  // of bytes.size(): an entry being written (Write) is not loaded
  };
  // A new entry of n positions and `bytes` bytes under `key`, for the
  // caller to fill; fails when the key is in use or the bytes would not fit
  // in the memory available.
  Status Add(uint64_t key, int n, int64_t bytes, Entry** entry);
  // The entry under `key`, checked to hold at least n positions and to be
  // whole; kNotFound when there is none.
  Status Find(uint64_t key, int n, const Entry** entry) const;
  // [offset, offset + size) of the whole entry under `key`, which must hold
  // exactly n positions.
  Status Read(uint64_t key, int n, int64_t offset, int64_t size, uint8_t* out) const;
  // [offset, offset + size) of a new entry of n positions and `total` bytes
  // under `key`, written in order: offset 0 makes it (Add), each later range
  // starts where the one before ended.
  Status Write(uint64_t key, int n, int64_t total, int64_t offset, const uint8_t* data,
               int64_t size);
  void Drop(uint64_t key) { entries_.erase(key); }
  void Clear() { entries_.clear(); }

 private:
  std::unordered_map<uint64_t, Entry> entries_;
};

}  // namespace pi
