// SavedSeq: a sequence's first positions kept apart from the engine
// (Engine::SaveSeq; the prompt store, prompt_store.h): the keys and values
// of the host's layers as bytes and, with a device, those of the device's
// layers kept on the device's side (DeviceBackend::SaveSeq: a GPU worker's
// memory, so a kept prompt never crosses to the coordinator), forgotten
// there when this goes. Move-only.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "common/shard/device_backend.h"

namespace pi {

struct SavedSeq {
  SavedSeq() = default;
  SavedSeq(SavedSeq&& o) noexcept { *this = std::move(o); }
  SavedSeq& operator=(SavedSeq&& o) noexcept;
  SavedSeq(const SavedSeq&) = delete;
  SavedSeq& operator=(const SavedSeq&) = delete;
  ~SavedSeq() { Release(); }

  int n() const { return static_cast<int>(tokens.size()); }
  // What it holds, here and on the device.
  int64_t bytes() const {
    return static_cast<int64_t>(host_kv.size() + tokens.size() * sizeof(int32_t) + dense.size()) +
           device_bytes;
  }

  std::vector<uint8_t> host_kv;  // KvCache::SavePrefix's bytes of the host's layers
  std::vector<int32_t> tokens;   // [n] the tokens at those positions
  std::vector<uint8_t> dense;    // [n] 1: the device ran it dense (a replay's record)
  // With a device: its layers' keys and values, kept there under `key`
  // since the engine's `device_epoch`th recovery (a device recovered later
  // has lost them).
  DeviceBackend* device = nullptr;
  uint64_t key = 0;
  int64_t device_bytes = 0;
  int64_t device_epoch = 0;

 private:
  void Release() {
    if (device) (void)device->DropSeq(key);
    device = nullptr;
  }
};

inline SavedSeq& SavedSeq::operator=(SavedSeq&& o) noexcept {
  if (this != &o) {
    Release();
    host_kv = std::move(o.host_kv);
    tokens = std::move(o.tokens);
    dense = std::move(o.dense);
    device = o.device;
    key = o.key;
    device_bytes = o.device_bytes;
    device_epoch = o.device_epoch;
    o.device = nullptr;
  }
  return *this;
}

}  // namespace pi
