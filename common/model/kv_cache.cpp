#include "common/model/kv_cache.h"

#include <cstddef>
#include <cstring>

#include "kernels/cpu/quant.h"

namespace pi {

Status ParseKvCacheType(const std::string& s, DType* out) {
  if (s == "f32") {
    *out = DType::kF32;
  } else if (s == "f16") {
    *out = DType::kF16;
  } else if (s == "q8_0") {
    *out = DType::kQ8_0;
  } else {
    return Status::Error("unknown KV cache type '%s' (expected f32, f16 or q8_0)", s.c_str());
  }
  return Status::Ok();
}

Status CheckKvCacheType(DType type, int head_dim) {
  if (type != DType::kF32 && type != DType::kF16 && type != DType::kQ8_0) {
    return Status::Error("KV cache type %s is not supported (f32, f16, q8_0)", DTypeName(type));
  }
  const int block = GetDTypeInfo(static_cast<uint32_t>(type)).block_elems;
  if (head_dim % block != 0) {
    return Status::Error("KV cache type %s needs a head size that is a multiple of %d, got %d",
                         DTypeName(type), block, head_dim);
  }
  return Status::Ok();
}

int64_t KvCache::BytesFor(int n_layer, int n_ctx, int n_head_kv, int head_dim, DType k_type,
                          DType v_type) {
  const int64_t rows = static_cast<int64_t>(n_layer) * n_head_kv * n_ctx;
  const int64_t row_bytes = RowBytes(k_type, head_dim) + RowBytes(v_type, head_dim);
  int64_t bytes = 0;
  return __builtin_mul_overflow(rows, row_bytes, &bytes) ? -1 : bytes;
}

Status KvCache::Init(int n_layer, int n_ctx, int n_head_kv, int head_dim, DType k_type,
                     DType v_type) {
  PI_RETURN_IF_ERROR(CheckKvCacheType(k_type, head_dim));
  PI_RETURN_IF_ERROR(CheckKvCacheType(v_type, head_dim));
  n_layer_ = n_layer;
  n_ctx_ = n_ctx;
  n_head_kv_ = n_head_kv;
  head_dim_ = head_dim;
  k_type_ = k_type;
  v_type_ = v_type;
  k_row_bytes_ = RowBytes(k_type, head_dim);
  v_row_bytes_ = RowBytes(v_type, head_dim);
  const size_t rows = static_cast<size_t>(n_layer) * n_head_kv * n_ctx;
  k_.assign(rows * k_row_bytes_, 0);
  v_.assign(rows * v_row_bytes_, 0);
  return Status::Ok();
}

void KvCache::CopyPrefix(const KvCache& from, int n, int first_layer) {
  if (n <= 0) return;  // no rows (an empty buffer may be null, which memcpy must not get)
  for (int layer = first_layer; layer < n_layer_; ++layer) {
    for (int h = 0; h < n_head_kv_; ++h) {
      const int64_t k_at = Offset(layer, h, k_row_bytes_), v_at = Offset(layer, h, v_row_bytes_);
      std::memcpy(k_.data() + k_at, from.k_.data() + k_at, n * k_row_bytes_);
      std::memcpy(v_.data() + v_at, from.v_.data() + v_at, n * v_row_bytes_);
    }
  }
}

void KvCache::SavePrefix(int n, uint8_t* out, int first_layer) const {
  if (n <= 0) return;  // no rows (an empty buffer may be null, which memcpy must not get)
  for (int layer = first_layer; layer < n_layer_; ++layer) {
    for (int h = 0; h < n_head_kv_; ++h) {
      std::memcpy(out, k_.data() + Offset(layer, h, k_row_bytes_), n * k_row_bytes_);
      out += n * k_row_bytes_;
      std::memcpy(out, v_.data() + Offset(layer, h, v_row_bytes_), n * v_row_bytes_);
      out += n * v_row_bytes_;
    }
  }
}

void KvCache::LoadPrefix(int n_saved, int n, const uint8_t* in, int first_layer) {
  if (n <= 0) return;  // no rows (an empty buffer may be null, which memcpy must not get)
  for (int layer = first_layer; layer < n_layer_; ++layer) {
    for (int h = 0; h < n_head_kv_; ++h) {
      std::memcpy(k_.data() + Offset(layer, h, k_row_bytes_), in, n * k_row_bytes_);
      in += n_saved * k_row_bytes_;
      std::memcpy(v_.data() + Offset(layer, h, v_row_bytes_), in, n * v_row_bytes_);
      in += n_saved * v_row_bytes_;
    }
  }
}

void KvCache::Store(int layer, int pos, const float* k, const float* v) {
  for (int h = 0; h < n_head_kv_; ++h) {
    const int64_t row = static_cast<int64_t>(h) * head_dim_;
    QuantizeRow(k_type_, k + row, k_.data() + Offset(layer, h, k_row_bytes_) + pos * k_row_bytes_,
                head_dim_);
    QuantizeRow(v_type_, v + row, v_.data() + Offset(layer, h, v_row_bytes_) + pos * v_row_bytes_,
                head_dim_);
  }
}

}  // namespace pi
