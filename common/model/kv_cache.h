// KvCache: keys and values of every layer for context positions [0, n_ctx),
// allocated once, stored head-major: for each (layer, KV head) an
// [n_ctx, head_dim] matrix whose row p is position p's key (or value) of that
// head. Attention then reads one head's keys as a plain row-major matrix —
// scores = K · q is a matvec and out = V^T · p an axpy over rows — so it runs
// on the same vectorized kernels as the weights (kernels/cpu/matmul.h).
//
// Keys and values each have a row type: F32 (exact), or F16 / Q8_0 (half /
// ~0.53 of the bytes, as llama.cpp's --cache-type-k/v f16|q8_0). Rounding
// happens once, when a position is stored.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/base/status.h"
#include "kernels/dtype.h"

namespace pi {

// Parses a --cache-type value ("f32", "f16", "q8_0") into *out.
Status ParseKvCacheType(const std::string& s, DType* out);

// OK when rows of `head_dim` values can be stored as `type`: F32, F16, or
// Q8_0 with whole blocks (head_dim % 32 == 0).
Status CheckKvCacheType(DType type, int head_dim);

class KvCache {
 public:
  // Bytes Init allocates for these sizes (-1 when it overflows int64).
  static int64_t BytesFor(int n_layer, int n_ctx, int n_head_kv, int head_dim, DType k_type,
                          DType v_type);

  // Fails when a type is not F32/F16/Q8_0 or its rows would not be whole
  // blocks (Q8_0: head_dim % 32).
  Status Init(int n_layer, int n_ctx, int n_head_kv, int head_dim, DType k_type = DType::kF32,
              DType v_type = DType::kF32);
  int n_ctx() const { return n_ctx_; }
  DType k_type() const { return k_type_; }
  DType v_type() const { return v_type_; }
  int64_t bytes() const { return static_cast<int64_t>(k_.size() + v_.size()); }

  // Stores position `pos` of layer `layer`: k and v are [n_head_kv * head_dim] f32.
  void Store(int layer, int pos, const float* k, const float* v);

  // Positions [0, n) of layers [first_layer, n_layer) copied from `from` (a
  // cache of the same sizes and types; n <= n_ctx): another sequence's
  // prefix, as stored. (first_layer: the layers before it live elsewhere, on
  // a device.)
  void CopyPrefix(const KvCache& from, int n, int first_layer = 0);
  // Positions [0, n) of layers [first_layer, n_layer) as bytes (PrefixBytes
  // of them: each layer's and head's key rows, then its value rows), and
  // back: the first n of a saved prefix of n_saved positions.
  int64_t PrefixBytes(int n, int first_layer = 0) const {
    return static_cast<int64_t>(n_layer_ - first_layer) * n_head_kv_ * n *
           (k_row_bytes_ + v_row_bytes_);
  }
  void SavePrefix(int n, uint8_t* out, int first_layer = 0) const;
  void LoadPrefix(int n_saved, int n, const uint8_t* in, int first_layer = 0);

  // Head `head` of layer `layer`: [n_ctx, head_dim] rows of row_bytes() each.
  const uint8_t* k(int layer, int head) const {
    return k_.data() + Offset(layer, head, k_row_bytes_);
  }
  const uint8_t* v(int layer, int head) const {
    return v_.data() + Offset(layer, head, v_row_bytes_);
  }

 private:
  int64_t Offset(int layer, int head, int64_t row_bytes) const {
    return (static_cast<int64_t>(layer) * n_head_kv_ + head) * n_ctx_ * row_bytes;
  }
  int n_layer_ = 0, n_ctx_ = 0, n_head_kv_ = 0, head_dim_ = 0;
  DType k_type_ = DType::kF32, v_type_ = DType::kF32;
  int64_t k_row_bytes_ = 0, v_row_bytes_ = 0;
  std::vector<uint8_t> k_;  // [n_layer][n_head_kv][n_ctx] rows
  std::vector<uint8_t> v_;  // [n_layer][n_head_kv][n_ctx] rows
};

}  // namespace pi
