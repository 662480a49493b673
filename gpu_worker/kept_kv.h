// KeptKv: what a device backend keeps of its sequences' KV caches
// (DeviceBackend::SaveSeq), in host memory, under the coordinator's keys:
// each entry's positions and bytes, in the backend's own layout.
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
  };
  // A new entry of n positions and `bytes` bytes under `key`, for the
  // caller to fill; fails when the key is in use or the bytes would not fit
  // in the memory available.
  Status Add(uint64_t key, int n, int64_t bytes, Entry** entry);
  // The entry under `key`, checked to hold at least n positions; kNotFound
  // when there is none.
  Status Find(uint64_t key, int n, const Entry** entry) const;
  void Drop(uint64_t key) { entries_.erase(key); }
  void Clear() { entries_.clear(); }

 private:
  std::unordered_map<uint64_t, Entry> entries_;
};

}  // namespace pi
