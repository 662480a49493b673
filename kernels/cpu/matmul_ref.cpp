// Scalar reference kernels: plain loops that follow ggml's reference
// definitions. They are the ground truth the SIMD paths are tested against,
// and the fallback on CPUs without AVX2.
#include <cstring>

#include "kernels/cpu/fp16.h"
#include "kernels/cpu/kquant.h"
#include "kernels/cpu/matmul_impl.h"
#include "kernels/cpu/quant.h"

namespace pi {
namespace cpu_internal {

namespace {

// Float weights: products in f32, summed in double (ggml's ggml_float).
float DotF32(const float* w, const float* x, int64_t n) {
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(w[i] * x[i]);
  return static_cast<float>(sum);
}

float DotF16(const uint16_t* w, const float* x, int64_t n) {
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(F16ToF32(w[i]) * x[i]);
  return static_cast<float>(sum);
}

float DotBf16(const uint16_t* w, const float* x, int64_t n) {
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(Bf16ToF32(w[i]) * x[i]);
  return static_cast<float>(sum);
}

// ggml's vec_dot_q8_0_q8_0: per block an exact integer dot, scaled by both d's.
float DotQ8_0(const BlockQ8_0* w, const BlockQ8_0* x, int64_t nb) {
  float sum = 0.0f;
  for (int64_t i = 0; i < nb; ++i) {
    int sumi = 0;
    for (int j = 0; j < kQK; ++j) sumi += w[i].qs[j] * x[i].qs[j];
    sum += sumi * (F16ToF32(w[i].d) * F16ToF32(x[i].d));
  }
  return sum;
}

// ggml's vec_dot_q4_0_q8_0: nibble j pairs with x[j], nibble j+16 with x[j+16].
float DotQ4_0(const BlockQ4_0* w, const BlockQ8_0* x, int64_t nb) {
  float sum = 0.0f;
  for (int64_t i = 0; i < nb; ++i) {
    int sumi = 0;
    for (int j = 0; j < kQK / 2; ++j) {
      const int v0 = (w[i].qs[j] & 0x0F) - 8;
      const int v1 = (w[i].qs[j] >> 4) - 8;
      sumi += v0 * x[i].qs[j] + v1 * x[i].qs[j + kQK / 2];
    }
    sum += sumi * (F16ToF32(w[i].d) * F16ToF32(x[i].d));
  }
  return sum;
}

// The block formats of kquant.h against the Q8_0 activation: each weight
// block dequantized by ggml's formulas, each product with the activation's
// dequantized value in f32, summed in double. The SIMD kernels compute the
// same products factored as integer sums times the blocks' scales.
float DotBlocks(DType t, const uint8_t* row, const BlockQ8_0* x, int64_t cols) {
  float w[kQK_K];
  double sum = 0.0;
  for (int64_t i = 0, c = 0; c < cols; ++i) {
    const int n = DequantizeBlock(t, row, i, w);
    for (int j = 0; j < n; ++j) {
      const BlockQ8_0& b = x[(c + j) / kQK];
      sum += static_cast<double>(w[j] * (b.qs[(c + j) % kQK] * F16ToF32(b.d)));
    }
    c += n;
  }
  return static_cast<float>(sum);
}

float DotRow(const MatMulArgs& a, const uint8_t* row, const uint8_t* x) {
  if (IsBlockDequantDType(a.wtype)) {
    return DotBlocks(a.wtype, row, reinterpret_cast<const BlockQ8_0*>(x), a.cols);
  }
  switch (a.wtype) {
    case DType::kF32:
      return DotF32(reinterpret_cast<const float*>(row), reinterpret_cast<const float*>(x), a.cols);
    case DType::kF16:
      return DotF16(reinterpret_cast<const uint16_t*>(row), reinterpret_cast<const float*>(x),
                    a.cols);
    case DType::kBF16:
      return DotBf16(reinterpret_cast<const uint16_t*>(row), reinterpret_cast<const float*>(x),
                     a.cols);
    case DType::kQ8_0:
      return DotQ8_0(reinterpret_cast<const BlockQ8_0*>(row), reinterpret_cast<const BlockQ8_0*>(x),
                     a.layout.nb);
    case DType::kQ4_0:
      return DotQ4_0(reinterpret_cast<const BlockQ4_0*>(row), reinterpret_cast<const BlockQ8_0*>(x),
                     a.layout.nb);
    default:
      return 0.0f;
  }
}

// Dequantizes weights [c0, c0 + n) of a row (n <= 32; quantized rows in
// whole blocks) into `out`. Blockwise so that AxpyRows needs no row buffer.
void DequantizeChunk(DType t, const uint8_t* row, int64_t c0, int n, float* out) {
  switch (t) {
    case DType::kF32:
      std::memcpy(out, row + c0 * 4, sizeof(float) * n);
      break;
    case DType::kF16:
    case DType::kBF16: {
      for (int j = 0; j < n; ++j) {
        uint16_t h;
        std::memcpy(&h, row + (c0 + j) * 2, 2);
        out[j] = t == DType::kF16 ? F16ToF32(h) : Bf16ToF32(h);
      }
      break;
    }
    case DType::kQ8_0: {
      const BlockQ8_0& b = reinterpret_cast<const BlockQ8_0*>(row)[c0 / kQK];
      const float d = F16ToF32(b.d);
      for (int j = 0; j < kQK; ++j) out[j] = b.qs[j] * d;
      break;
    }
    case DType::kQ4_0: {
      const BlockQ4_0& b = reinterpret_cast<const BlockQ4_0*>(row)[c0 / kQK];
      const float d = F16ToF32(b.d);
      for (int j = 0; j < kQK / 2; ++j) {
        out[j] = ((b.qs[j] & 0x0F) - 8) * d;
        out[j + kQK / 2] = ((b.qs[j] >> 4) - 8) * d;
      }
      break;
    }
    default:
      break;
  }
}

}  // namespace

void MatMulRowsRef(const MatMulArgs& a) {
  for (int64_t b = 0; b < a.batch; ++b) {
    const uint8_t* x = a.x + b * a.x_stride;
    for (int64_t k = a.r0; k < a.r1; ++k) {
      const int64_t r = a.ids ? a.ids[k] : k;
      a.y[b * a.ldy + r] = DotRow(a, a.w + r * a.row_bytes, x);
    }
  }
}

void AxpyRowsRef(const AxpyArgs& a) {
  if (IsBlockDequantDType(a.wtype)) {
    float w[kQK_K];
    for (int64_t k = a.r0; k < a.r1; ++k) {
      if (a.a[k] == 0.0f) continue;
      const int64_t r = a.ids ? a.ids[k] : k;
      const uint8_t* row = a.w + r * a.row_bytes;
      for (int64_t i = 0, c = 0; c < a.cols; ++i) {
        const int n = DequantizeBlock(a.wtype, row, i, w);
        for (int j = 0; j < n; ++j) a.y[c + j] += a.a[k] * w[j];
        c += n;
      }
    }
    return;
  }
  const bool quant = a.wtype == DType::kQ8_0 || a.wtype == DType::kQ4_0;
  const int64_t cols = quant ? a.cols / kQK * kQK : a.cols;
  for (int64_t k = a.r0; k < a.r1; ++k) {
    if (a.a[k] == 0.0f) continue;
    const int64_t r = a.ids ? a.ids[k] : k;
    const uint8_t* row = a.w + r * a.row_bytes;
    for (int64_t c0 = 0; c0 < cols; c0 += kQK) {
      const int n = cols - c0 < kQK ? static_cast<int>(cols - c0) : kQK;
      float w[kQK];
      DequantizeChunk(a.wtype, row, c0, n, w);
      for (int j = 0; j < n; ++j) a.y[c0 + j] += a.a[k] * w[j];
    }
  }
}

}  // namespace cpu_internal
}  // namespace pi
