// HotRows: one layer's hot neurons gathered out of the model into compact
// matrices: row j of gate, up and down_t is hot neuron ids[j], its bytes
// copied as they are in the GGUF. HostHotShard holds its hot set in this
// layout, so the hot part of a layer is three contiguous streams instead of
// rows scattered through the file.
#pragma once

#include <cstdint>
#include <vector>

#include "common/model/llama_model.h"

namespace pi {

struct HotRows {
  std::vector<uint8_t> gate, up, down_t;  // row j = hot neuron j
  Tensor gate_t, up_t, down_t_t;          // views of the above (rows = hot neurons)

  int64_t bytes() const { return static_cast<int64_t>(gate.size() + up.size() + down_t.size()); }
};

// Gathers rows `ids` (valid row indices of the layer's FFN tensors) of
// layer's ffn_gate, ffn_up and ffn_down_t into *out, reusing its buffers.
// An ungated layer (no ffn_gate) leaves gate empty and gate_t absent.
void GatherHotRows(const LlamaLayer& layer, const std::vector<int32_t>& ids, HotRows* out);

// Bytes the hot rows of all layers take (what a backend holds resident).
int64_t HotRowBytes(const LlamaModel& model, const std::vector<std::vector<int32_t>>& hot_ids);

}  // namespace pi
