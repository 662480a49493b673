#include "kernels/cpu/kquant.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/cpu/fp16.h"

namespace pi {
namespace {

// The 6-bit scale and min of sub-block j of a Q4_K/Q5_K block (ggml's
// get_scale_min_k4): j < 4 in the low 6 bits of bytes j and j + 4; j >= 4
// in the nibbles of byte j + 4, topped by the high 2 bits of bytes j - 4 and j.
void ScaleMinK4(int j, const uint8_t* q, uint8_t* sc, uint8_t* m) {
  if (j < 4) {
    *sc = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
    *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

// The inverse: 8 scales and mins (each < 64) packed into 12 bytes.
void PackScaleMinK4(const uint8_t* ls, const uint8_t* lm, uint8_t* q) {
  std::memset(q, 0, 12);
  for (int j = 0; j < 8; ++j) {
    if (j < 4) {
      q[j] = ls[j];
      q[j + 4] = lm[j];
    } else {
      q[j + 4] = (ls[j] & 0xF) | ((lm[j] & 0xF) << 4);
      q[j - 4] |= (ls[j] >> 4) << 6;
      q[j] |= (lm[j] >> 4) << 6;
    }
  }
}

uint32_t Bits32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

void DequantQ4_1(const BlockQ4_1& b, float* y) {
  const float d = F16ToF32(b.d), m = F16ToF32(b.m);
  for (int j = 0; j < 16; ++j) {
    y[j] = (b.qs[j] & 0x0F) * d + m;
    y[j + 16] = (b.qs[j] >> 4) * d + m;
  }
}

// Q5_0 (offset 16, no min) and Q5_1 (min m).
void DequantQ5(const uint8_t* qh_bytes, const uint8_t* qs, float d, float m, bool q5_0, float* y) {
  const uint32_t qh = Bits32(qh_bytes);
  for (int j = 0; j < 16; ++j) {
    const int h0 = ((qh >> j) << 4) & 0x10;
    const int h1 = (qh >> (j + 12)) & 0x10;
    const int x0 = (qs[j] & 0x0F) | h0, x1 = (qs[j] >> 4) | h1;
    if (q5_0) {
      y[j] = (x0 - 16) * d;
      y[j + 16] = (x1 - 16) * d;
    } else {
      y[j] = x0 * d + m;
      y[j + 16] = x1 * d + m;
    }
  }
}

// Q4_K (qh null) and Q5_K: 4 chunks of 64, each two sub-blocks of 32 whose
// quants share bytes (low nibble: the first, high: the second).
void DequantQ45K(uint16_t d16, uint16_t dmin16, const uint8_t* scales, const uint8_t* qh,
                 const uint8_t* q, float* y) {
  const float d = F16ToF32(d16), min = F16ToF32(dmin16);
  int is = 0;
  uint8_t u1 = 1, u2 = 2;
  for (int j = 0; j < kQK_K; j += 64) {
    uint8_t sc, m;
    ScaleMinK4(is + 0, scales, &sc, &m);
    const float d1 = d * sc, m1 = min * m;
    ScaleMinK4(is + 1, scales, &sc, &m);
    const float d2 = d * sc, m2 = min * m;
    for (int l = 0; l < 32; ++l) {
      const int hi = qh && (qh[l] & u1) ? 16 : 0;
      *y++ = d1 * ((q[l] & 0xF) + hi) - m1;
    }
    for (int l = 0; l < 32; ++l) {
      const int hi = qh && (qh[l] & u2) ? 16 : 0;
      *y++ = d2 * ((q[l] >> 4) + hi) - m2;
    }
    q += 32;
    is += 2;
    u1 <<= 2;
    u2 <<= 2;
  }
}

void DequantQ6K(const BlockQ6_K& b, float* y) {
  const float d = F16ToF32(b.d);
  const uint8_t* ql = b.ql;
  const uint8_t* qh = b.qh;
  const int8_t* sc = b.scales;
  for (int n = 0; n < kQK_K; n += 128) {
    for (int l = 0; l < 32; ++l) {
      const int is = l / 16;
      const int q1 = static_cast<int8_t>((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
      const int q2 = static_cast<int8_t>((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
      const int q3 = static_cast<int8_t>((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
      const int q4 = static_cast<int8_t>((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
      y[l] = d * sc[is + 0] * q1;
      y[l + 32] = d * sc[is + 2] * q2;
      y[l + 64] = d * sc[is + 4] * q3;
      y[l + 96] = d * sc[is + 6] * q4;
    }
    y += 128;
    ql += 64;
    qh += 32;
    sc += 8;
  }
}

// ---- quantizers -----------------------------------------------------------

void QuantQ4_1(const float* x, BlockQ4_1* b) {
  float mn = x[0], mx = x[0];
  for (int j = 1; j < 32; ++j) {
    mn = std::min(mn, x[j]);
    mx = std::max(mx, x[j]);
  }
  const float d = (mx - mn) / 15, id = d ? 1.0f / d : 0.0f;
  b->d = F32ToF16(d);
  b->m = F32ToF16(mn);
  for (int j = 0; j < 16; ++j) {
    const int q0 = std::min(15, static_cast<int>((x[j] - mn) * id + 0.5f));
    const int q1 = std::min(15, static_cast<int>((x[j + 16] - mn) * id + 0.5f));
    b->qs[j] = static_cast<uint8_t>(q0 | (q1 << 4));
  }
}

// Q5_0 (ggml's: the value of largest magnitude maps to -16) and Q5_1.
void QuantQ5(const float* x, bool q5_0, uint16_t* d16, uint16_t* m16, uint8_t* qh_out,
             uint8_t* qs) {
  float d, mn = 0.0f;
  if (q5_0) {
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < 32; ++j) {
      if (std::fabs(x[j]) > amax) {
        amax = std::fabs(x[j]);
        max = x[j];
      }
    }
    d = max / -16;
  } else {
    float mx = x[0];
    mn = x[0];
    for (int j = 1; j < 32; ++j) {
      mn = std::min(mn, x[j]);
      mx = std::max(mx, x[j]);
    }
    d = (mx - mn) / 31;
    *m16 = F32ToF16(mn);
  }
  const float id = d ? 1.0f / d : 0.0f;
  *d16 = F32ToF16(d);
  uint32_t qh = 0;
  for (int j = 0; j < 16; ++j) {
    const float b = q5_0 ? 16.5f : 0.5f;
    const int q0 = std::min(31, static_cast<int>((x[j] - mn) * id + b));
    const int q1 = std::min(31, static_cast<int>((x[j + 16] - mn) * id + b));
    qs[j] = static_cast<uint8_t>((q0 & 0x0F) | ((q1 & 0x0F) << 4));
    qh |= static_cast<uint32_t>((q0 & 0x10) >> 4) << j;
    qh |= static_cast<uint32_t>((q1 & 0x10) >> 4) << (j + 16);
  }
  std::memcpy(qh_out, &qh, 4);
}

// Q4_K (levels 15) and Q5_K (31): x ~ d_j * q - m_j per sub-block of 32.
void QuantQ45K(const float* x, int levels, uint16_t* d16, uint16_t* dmin16, uint8_t* scales,
               uint8_t* q) {
  float scale[8], mins[8];
  float max_scale = 0.0f, max_min = 0.0f;
  for (int j = 0; j < 8; ++j) {
    float mn = std::min(0.0f, x[32 * j]), mx = x[32 * j];
    for (int l = 0; l < 32; ++l) {
      mn = std::min(mn, x[32 * j + l]);
      mx = std::max(mx, x[32 * j + l]);
    }
    scale[j] = (mx - mn) / levels;
    mins[j] = -mn;
    max_scale = std::max(max_scale, scale[j]);
    max_min = std::max(max_min, mins[j]);
  }
  const float d = max_scale / 63, dmin = max_min / 63;
  *d16 = F32ToF16(d);
  *dmin16 = F32ToF16(dmin);
  const float dr = F16ToF32(*d16), dminr = F16ToF32(*dmin16);
  uint8_t ls[8], lm[8];
  for (int j = 0; j < 8; ++j) {
    ls[j] = static_cast<uint8_t>(
        std::clamp(static_cast<int>(std::lround(d ? scale[j] / d : 0)), 0, 63));
    lm[j] = static_cast<uint8_t>(
        std::clamp(static_cast<int>(std::lround(dmin ? mins[j] / dmin : 0)), 0, 63));
  }
  PackScaleMinK4(ls, lm, scales);
  for (int j = 0; j < 8; ++j) {
    const float dj = dr * ls[j], mj = dminr * lm[j];
    for (int l = 0; l < 32; ++l) {
      const int v = dj > 0 ? static_cast<int>(std::lround((x[32 * j + l] + mj) / dj)) : 0;
      q[32 * j + l] = static_cast<uint8_t>(std::clamp(v, 0, levels));
    }
  }
}

void QuantQ6K(const float* x, BlockQ6_K* b) {
  float scale[16], max_abs_scale = 0.0f, max_scale = 0.0f;
  for (int j = 0; j < 16; ++j) {
    float amax = 0.0f, max = 0.0f;
    for (int l = 0; l < 16; ++l) {
      if (std::fabs(x[16 * j + l]) > amax) {
        amax = std::fabs(x[16 * j + l]);
        max = x[16 * j + l];
      }
    }
    scale[j] = max / -32;
    if (std::fabs(scale[j]) > max_abs_scale) {
      max_abs_scale = std::fabs(scale[j]);
      max_scale = scale[j];
    }
  }
  const float d = max_scale / -128;
  b->d = F32ToF16(d);
  const float dr = F16ToF32(b->d);
  uint8_t q[kQK_K];
  for (int j = 0; j < 16; ++j) {
    const int ls = std::clamp(static_cast<int>(std::lround(d ? scale[j] / d : 0)), -128, 127);
    b->scales[j] = static_cast<int8_t>(ls);
    const float dj = dr * ls;
    for (int l = 0; l < 16; ++l) {
      const int v = dj != 0 ? static_cast<int>(std::lround(x[16 * j + l] / dj)) : 0;
      q[16 * j + l] = static_cast<uint8_t>(std::clamp(v, -32, 31) + 32);
    }
  }
  for (int h = 0; h < 2; ++h) {
    const uint8_t* s = q + 128 * h;
    for (int l = 0; l < 32; ++l) {
      b->ql[64 * h + l] = static_cast<uint8_t>((s[l] & 0xF) | ((s[l + 64] & 0xF) << 4));
      b->ql[64 * h + 32 + l] = static_cast<uint8_t>((s[l + 32] & 0xF) | ((s[l + 96] & 0xF) << 4));
      b->qh[32 * h + l] = static_cast<uint8_t>((s[l] >> 4) | ((s[l + 32] >> 4) << 2) |
                                               ((s[l + 64] >> 4) << 4) | ((s[l + 96] >> 4) << 6));
    }
  }
}

}  // namespace

bool IsBlockDequantDType(DType t) {
  return t == DType::kQ4_1 || t == DType::kQ5_0 || t == DType::kQ5_1 || t == DType::kQ4_K ||
         t == DType::kQ5_K || t == DType::kQ6_K;
}

int DequantizeBlock(DType t, const void* row, int64_t i, float* out) {
  const uint8_t* p = static_cast<const uint8_t*>(row);
  switch (t) {
    case DType::kQ4_1:
      DequantQ4_1(reinterpret_cast<const BlockQ4_1*>(p)[i], out);
      return 32;
    case DType::kQ5_0: {
      const BlockQ5_0& b = reinterpret_cast<const BlockQ5_0*>(p)[i];
      DequantQ5(b.qh, b.qs, F16ToF32(b.d), 0.0f, true, out);
      return 32;
    }
    case DType::kQ5_1: {
      const BlockQ5_1& b = reinterpret_cast<const BlockQ5_1*>(p)[i];
      DequantQ5(b.qh, b.qs, F16ToF32(b.d), F16ToF32(b.m), false, out);
      return 32;
    }
    case DType::kQ4_K: {
      const BlockQ4_K& b = reinterpret_cast<const BlockQ4_K*>(p)[i];
      DequantQ45K(b.d, b.dmin, b.scales, nullptr, b.qs, out);
      return kQK_K;
    }
    case DType::kQ5_K: {
      const BlockQ5_K& b = reinterpret_cast<const BlockQ5_K*>(p)[i];
      DequantQ45K(b.d, b.dmin, b.scales, b.qh, b.qs, out);
      return kQK_K;
    }
    case DType::kQ6_K:
      DequantQ6K(reinterpret_cast<const BlockQ6_K*>(p)[i], out);
      return kQK_K;
    default:
      return 0;
  }
}

void QuantizeBlocks(DType t, const float* x, void* y, int64_t n) {
  uint8_t* out = static_cast<uint8_t*>(y);
  const DTypeInfo info = GetDTypeInfo(static_cast<uint32_t>(t));
  for (int64_t i = 0; i < n / info.block_elems; ++i) {
    const float* xb = x + i * info.block_elems;
    uint8_t* ob = out + i * info.block_bytes;
    switch (t) {
      case DType::kQ4_1:
        QuantQ4_1(xb, reinterpret_cast<BlockQ4_1*>(ob));
        break;
      case DType::kQ5_0: {
        auto* b = reinterpret_cast<BlockQ5_0*>(ob);
        QuantQ5(xb, true, &b->d, nullptr, b->qh, b->qs);
        break;
      }
      case DType::kQ5_1: {
        auto* b = reinterpret_cast<BlockQ5_1*>(ob);
        QuantQ5(xb, false, &b->d, &b->m, b->qh, b->qs);
        break;
      }
      case DType::kQ4_K: {
        auto* b = reinterpret_cast<BlockQ4_K*>(ob);
        uint8_t q[kQK_K];
        QuantQ45K(xb, 15, &b->d, &b->dmin, b->scales, q);
        for (int c = 0; c < 4; ++c) {
          for (int l = 0; l < 32; ++l) {
            b->qs[32 * c + l] = static_cast<uint8_t>(q[64 * c + l] | (q[64 * c + 32 + l] << 4));
          }
        }
        break;
      }
      case DType::kQ5_K: {
        auto* b = reinterpret_cast<BlockQ5_K*>(ob);
        uint8_t q[kQK_K];
        QuantQ45K(xb, 31, &b->d, &b->dmin, b->scales, q);
        std::memset(b->qh, 0, sizeof b->qh);
        for (int c = 0; c < 4; ++c) {
          for (int l = 0; l < 32; ++l) {
            const uint8_t a = q[64 * c + l], bq = q[64 * c + 32 + l];
            b->qs[32 * c + l] = static_cast<uint8_t>((a & 0xF) | ((bq & 0xF) << 4));
            b->qh[l] |= static_cast<uint8_t>(((a >> 4) << (2 * c)) | ((bq >> 4) << (2 * c + 1)));
          }
        }
        break;
      }
      case DType::kQ6_K:
        QuantQ6K(xb, reinterpret_cast<BlockQ6_K*>(ob));
        break;
      default:
        break;
    }
  }
}

}  // namespace pi
