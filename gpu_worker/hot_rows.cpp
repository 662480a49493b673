#include "gpu_worker/hot_rows.h"

#include <cstring>

namespace pi {
namespace {

// Copies rows `ids` of `src` into `buf` and points `view` at them.
void Gather(const Tensor& src, const std::vector<int32_t>& ids, std::vector<uint8_t>* buf,
            Tensor* view) {
  buf->resize(ids.size() * static_cast<size_t>(src.row_bytes));
  for (size_t j = 0; j < ids.size(); ++j) {
    std::memcpy(buf->data() + j * src.row_bytes, src.row(ids[j]), src.row_bytes);
  }
  *view = src;
  view->info = nullptr;
  view->data = buf->data();
  view->rows = static_cast<int64_t>(ids.size());
}

}  // namespace

void GatherHotRows(const LlamaLayer& layer, const std::vector<int32_t>& ids, HotRows* out) {
  // Ungated FFNs (falcon) have no gate: their up rows decide who fires.
  if (layer.ffn_gate.present()) {
    Gather(layer.ffn_gate, ids, &out->gate, &out->gate_t);
  } else {
    out->gate.clear();
    out->gate_t = Tensor();
  }
  Gather(layer.ffn_up, ids, &out->up, &out->up_t);
  Gather(layer.ffn_down_t, ids, &out->down_t, &out->down_t_t);
}

int64_t HotRowBytes(const LlamaModel& model, const std::vector<std::vector<int32_t>>& hot_ids) {
  int64_t total = 0;
  for (size_t l = 0; l < hot_ids.size() && l < model.layers.size(); ++l) {
    const LlamaLayer& layer = model.layers[l];
    total += static_cast<int64_t>(hot_ids[l].size()) *
             (layer.ffn_gate.row_bytes + layer.ffn_up.row_bytes + layer.ffn_down_t.row_bytes);
  }
  return total;
}

}  // namespace pi
