// The device session device_fuzz drives and its seed writer shares: the
// step_fuzz model, every layer and the head on the host device backend, a
// third of each layer's neurons hot (so every layer hands out a cold part).
// A fuzz input is a session: messages one after another, each behind its
// length (u16, little-endian), as a coordinator would send them.
#pragma once

#include <cstdint>
#include <vector>

#include "common/shard/device_backend.h"
#include "tests/fuzz/step_fuzz_model.h"

namespace pi {

inline DevicePlan DeviceFuzzPlan(const LlamaConfig& c) {
  DevicePlan p;
  p.n_layers = c.n_layer;
  p.output = true;
  p.n_ctx = 8;
  p.n_seq = 2;  // (a kSeqCopy has somewhere to go)
  p.hot.assign(c.n_layer, {});
  for (int l = 0; l < c.n_layer; ++l) {
    for (int i = l; i < c.n_ff; i += 3) p.hot[l].push_back(i);
  }
  return p;
}

inline void AppendSessionMessage(const std::vector<uint8_t>& message, std::vector<uint8_t>* out) {
  out->push_back(static_cast<uint8_t>(message.size() & 0xff));
  out->push_back(static_cast<uint8_t>(message.size() >> 8));
  out->insert(out->end(), message.begin(), message.end());
}

}  // namespace pi
