#include "kernels/cuda/packed_matrix.h"

#include <cstring>

#include "kernels/cpu/fp16.h"
#include "kernels/cpu/quant.h"

namespace pi {
namespace {

int64_t Align256(int64_t n) {
  return (n + 255) / 256 * 256;
}

bool IsFloat(DType t) {
  return t == DType::kF32 || t == DType::kF16 || t == DType::kBF16;
}

}  // namespace

bool PackedTypeSupported(DType t) {
  return IsFloat(t) || t == DType::kQ8_0 || t == DType::kQ4_0;
}

int PackedQuantBytes(DType t) {
  return t == DType::kQ8_0 ? 32 : t == DType::kQ4_0 ? 16 : 0;
}

int64_t PackedScalesOffset(DType t, int64_t rows, int64_t cols) {
  return Align256(rows * (cols / kQK) * PackedQuantBytes(t));
}

int64_t PackedMatrixBytes(DType t, int64_t rows, int64_t cols) {
  if (IsFloat(t)) return Align256(rows * RowBytes(t, cols));
  return PackedScalesOffset(t, rows, cols) + Align256(rows * (cols / kQK) * 2);
}

void PackRows(DType t, const uint8_t* src, int64_t cols, const int32_t* ids, int64_t n, void* dst) {
  uint8_t* out = static_cast<uint8_t*>(dst);
  const int64_t row_bytes = RowBytes(t, cols);
  std::memset(out, 0, static_cast<size_t>(PackedMatrixBytes(t, n, cols)));
  if (IsFloat(t)) {
    for (int64_t i = 0; i < n; ++i) {
      const int64_t r = ids ? ids[i] : i;
      std::memcpy(out + i * row_bytes, src + r * row_bytes, static_cast<size_t>(row_bytes));
    }
    return;
  }
  const int qb = PackedQuantBytes(t);
  const int block_bytes = 2 + qb;  // ggml: the f16 scale, then the quants
  const int64_t nb = cols / kQK;
  uint8_t* quants = out;
  uint8_t* scales = out + PackedScalesOffset(t, n, cols);
  for (int64_t i = 0; i < n; ++i) {
    const uint8_t* row = src + (ids ? ids[i] : i) * row_bytes;
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* block = row + b * block_bytes;
      std::memcpy(scales + (i * nb + b) * 2, block, 2);
      std::memcpy(quants + (i * nb + b) * qb, block + 2, static_cast<size_t>(qb));
    }
  }
}

void UnpackRow(DType t, const void* packed, int64_t rows, int64_t cols, int64_t r, float* out) {
  const uint8_t* p = static_cast<const uint8_t*>(packed);
  if (IsFloat(t)) {
    DequantizeRow(t, p + r * RowBytes(t, cols), out, cols);
    return;
  }
  const int qb = PackedQuantBytes(t);
  const int64_t nb = cols / kQK;
  const uint8_t* quants = p + r * nb * qb;
  const uint8_t* scales = p + PackedScalesOffset(t, rows, cols) + r * nb * 2;
  for (int64_t b = 0; b < nb; ++b) {
    uint16_t dh;
    std::memcpy(&dh, scales + b * 2, 2);
    const float d = F16ToF32(dh);
    const uint8_t* q = quants + b * qb;
    float* o = out + b * kQK;
    if (t == DType::kQ8_0) {
      for (int j = 0; j < kQK; ++j) o[j] = d * static_cast<float>(static_cast<int8_t>(q[j]));
    } else {
      for (int j = 0; j < kQK / 2; ++j) {
        o[j] = d * static_cast<float>((q[j] & 0x0F) - 8);
        o[j + kQK / 2] = d * static_cast<float>((q[j] >> 4) - 8);
      }
    }
  }
}

}  // namespace pi
