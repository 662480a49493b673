#include "kernels/cpu/quant.h"

#include <cmath>
#include <cstring>

#include "kernels/cpu/fp16.h"
#include "kernels/cpu/kquant.h"
#include "kernels/cpu/ops.h"

namespace pi {

namespace {

// (int) conversion of a finite float already known to be in range, made
// total: NaN becomes 0 and out-of-range values clamp, so malformed input
// (NaN or inf weights) yields garbage blocks instead of undefined behaviour.
int SafeTrunc(float v, int lo, int hi) {
  if (!(v == v)) return 0;
  if (v <= static_cast<float>(lo)) return lo;
  if (v >= static_cast<float>(hi)) return hi;
  return static_cast<int>(v);
}

// roundf(v) (halves away from zero) for |v| <= 127.5, inline and free of
// libm calls so the loop vectorizes: activations are quantized on every
// token (std::fmax/std::round would be calls). Exact: v - trunc(v) is
// computed without rounding. Clamping first keeps NaN (from NaN or inf
// input) out of the int conversion.
inline int RoundQ8(float v) {
  v = v >= -127.5f ? v : -127.5f;  // also NaN -> -127.5
  v = v <= 127.5f ? v : 127.5f;
  const int t = static_cast<int>(v);
  const float frac = v - static_cast<float>(t);
  return t + (frac >= 0.5f) - (frac <= -0.5f);
}

}  // namespace

// ggml's quantize_row_q8_0_ref: d = max|x| / 127, q = round(x / d).
void QuantizeRowQ8_0(const float* x, BlockQ8_0* y, int64_t n) {
  const int64_t nb = n / kQK;
  for (int64_t i = 0; i < nb; ++i) {
    const float* xb = x + i * kQK;
    float amax = 0.0f;
    // ggml's MAX(amax, fabsf(x)), written as a select so it inlines.
    for (int j = 0; j < kQK; ++j) {
      const float ax = std::fabs(xb[j]);
      amax = amax > ax ? amax : ax;
    }
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = F32ToF16(d);
    for (int j = 0; j < kQK; ++j) {
      // |x * id| <= 127 (up to rounding), so the clamp never binds on
      // finite input and the result is roundf's.
      y[i].qs[j] = static_cast<int8_t>(RoundQ8(xb[j] * id));
    }
  }
}

// ggml's quantize_row_q4_0_ref: d = (the value of largest magnitude) / -8, so
// that value maps to nibble 0 exactly; q = min(15, trunc(x / d + 8.5)).
void QuantizeRowQ4_0(const float* x, BlockQ4_0* y, int64_t n) {
  const int64_t nb = n / kQK;
  for (int64_t i = 0; i < nb; ++i) {
    const float* xb = x + i * kQK;
    float amax = 0.0f;
    float max = 0.0f;
    for (int j = 0; j < kQK; ++j) {
      if (amax < std::fabs(xb[j])) {
        amax = std::fabs(xb[j]);
        max = xb[j];
      }
    }
    const float d = max / -8.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = F32ToF16(d);
    for (int j = 0; j < kQK / 2; ++j) {
      // ggml truncates through int8_t, then caps at 15.
      int q0 = SafeTrunc(xb[j] * id + 8.5f, -128, 127);
      int q1 = SafeTrunc(xb[j + kQK / 2] * id + 8.5f, -128, 127);
      q0 = q0 < 15 ? q0 : 15;
      q1 = q1 < 15 ? q1 : 15;
      y[i].qs[j] = static_cast<uint8_t>((q0 & 0x0F) | ((q1 & 0x0F) << 4));
    }
  }
}

void QuantizeRow(DType type, const float* x, void* y, int64_t n) {
  switch (type) {
    case DType::kF32:
      std::memcpy(y, x, sizeof(float) * n);
      break;
    case DType::kF16:  // F32ToF16's bits, with F16C where the CPU has it
      F32ToF16Row(x, static_cast<uint16_t*>(y), n);
      break;
    case DType::kBF16: {
      uint16_t* o = static_cast<uint16_t*>(y);
      for (int64_t i = 0; i < n; ++i) o[i] = F32ToBf16(x[i]);
      break;
    }
    case DType::kQ8_0:
      QuantizeRowQ8_0(x, static_cast<BlockQ8_0*>(y), n);
      break;
    case DType::kQ4_0:
      QuantizeRowQ4_0(x, static_cast<BlockQ4_0*>(y), n);
      break;
    default:
      if (IsBlockDequantDType(type)) QuantizeBlocks(type, x, y, n);
      break;  // not a compute type: callers check IsComputeDType first
  }
}

void DequantizeRow(DType type, const void* x, float* y, int64_t n) {
  switch (type) {
    case DType::kF32:
      std::memcpy(y, x, sizeof(float) * n);
      break;
    case DType::kF16: {
      const uint16_t* h = static_cast<const uint16_t*>(x);
      for (int64_t i = 0; i < n; ++i) y[i] = F16ToF32(h[i]);
      break;
    }
    case DType::kBF16: {
      const uint16_t* h = static_cast<const uint16_t*>(x);
      for (int64_t i = 0; i < n; ++i) y[i] = Bf16ToF32(h[i]);
      break;
    }
    case DType::kQ8_0: {
      const BlockQ8_0* b = static_cast<const BlockQ8_0*>(x);
      for (int64_t i = 0; i < n / kQK; ++i) {
        const float d = F16ToF32(b[i].d);
        for (int j = 0; j < kQK; ++j) y[i * kQK + j] = b[i].qs[j] * d;
      }
      break;
    }
    case DType::kQ4_0: {
      const BlockQ4_0* b = static_cast<const BlockQ4_0*>(x);
      for (int64_t i = 0; i < n / kQK; ++i) {
        const float d = F16ToF32(b[i].d);
        for (int j = 0; j < kQK / 2; ++j) {
          y[i * kQK + j] = ((b[i].qs[j] & 0x0F) - 8) * d;
          y[i * kQK + j + kQK / 2] = ((b[i].qs[j] >> 4) - 8) * d;
        }
      }
      break;
    }
    default:
      if (IsBlockDequantDType(type)) {
        const int64_t per = GetDTypeInfo(static_cast<uint32_t>(type)).block_elems;
        for (int64_t i = 0; i < n / per; ++i) DequantizeBlock(type, x, i, y + i * per);
      }
      break;
  }
}

}  // namespace pi
