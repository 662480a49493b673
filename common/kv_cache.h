// KvCache: keys and values of every layer for context positions [0, n_ctx),
// f32, allocated once. Row (layer, pos) holds kv_dim = n_head_kv * head_dim
// floats: head h at [h * head_dim, (h + 1) * head_dim).
#pragma once

#include <cstdint>
#include <vector>

namespace pi {

class KvCache {
 public:
  void Init(int n_layer, int n_ctx, int kv_dim);
  int n_ctx() const { return n_ctx_; }
  int kv_dim() const { return kv_dim_; }
  int64_t bytes() const { return static_cast<int64_t>(k_.size() + v_.size()) * sizeof(float); }

  float* k(int layer, int pos) { return k_.data() + Offset(layer, pos); }
  float* v(int layer, int pos) { return v_.data() + Offset(layer, pos); }

 private:
  int64_t Offset(int layer, int pos) const {
    return (static_cast<int64_t>(layer) * n_ctx_ + pos) * kv_dim_;
  }
  int n_ctx_ = 0;
  int kv_dim_ = 0;
  std::vector<float> k_;  // [n_layer][n_ctx][kv_dim]
  std::vector<float> v_;  // [n_layer][n_ctx][kv_dim]
};

}  // namespace pi
