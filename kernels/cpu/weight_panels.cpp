// Weight panels: the repack, the scalar reference product, and the dispatch
// to the AVX-512 kernel (weight_panels_avx512.cpp). weight_panels.h says what
// the layout is for; weight_panels_layout.h where each byte goes.
#include "kernels/cpu/weight_panels.h"

#include <atomic>
#include <climits>
#include <cmath>
#include <cstring>

#include "kernels/cpu/fp16.h"
#include "kernels/cpu/gemm_common.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/matmul_impl.h"
#include "kernels/cpu/quant.h"
#include "kernels/cpu/weight_panels_layout.h"

namespace pi {

using cpu_internal::PanelBlockBytes;
using cpu_internal::PanelDwords;
using cpu_internal::PanelOffset;

namespace {
bool IsKPanel(DType wtype) {
  return wtype == DType::kQ4_K || wtype == DType::kQ5_K || wtype == DType::kQ6_K;
}
}  // namespace

bool CanRepackWeights(DType wtype, int64_t rows, int64_t cols) {
  const bool block = wtype == DType::kQ4_0 || wtype == DType::kQ8_0;
  const bool k = IsKPanel(wtype);
  return (block || k || cpu_internal::IsFloatPanel(wtype)) && rows > 0 &&
         rows % kWeightPanelRows == 0 && cols > 0 && (!block || cols % kQK == 0) &&
         (!k || cols % kQK_K == 0);
}

bool WeightPanelsFast(DType wtype) {
  switch (ActiveCpuIsa()) {
    case CpuIsa::kAvx512:
      return true;  // every type CanRepackWeights takes
    case CpuIsa::kAvx2:
      return cpu_internal::HasWeightPanelsAvx2(wtype);
    case CpuIsa::kScalar:
      break;
  }
  return false;
}

namespace {
std::atomic<bool> g_panels_enabled{true};
}  // namespace

bool WeightPanelsEnabled() {
  return g_panels_enabled.load(std::memory_order_relaxed);
}

void SetWeightPanelsEnabled(bool on) {
  g_panels_enabled.store(on, std::memory_order_relaxed);
}

int64_t WeightPanelsMaxBatch(DType wtype) {
  // bench-kernels Batch/(Panels|Gemm)/q[456]_K: Q4_K's and Q5_K's panels
  // ahead at 64, behind at 256; Q6_K's ahead at 16, behind at 64.
  return wtype == DType::kQ4_K || wtype == DType::kQ5_K ? 128
         : wtype == DType::kQ6_K                        ? 48
                                                        : INT64_MAX;
}

size_t WeightPanelBytes(DType wtype, int64_t rows, int64_t cols) {
  if (IsKPanel(wtype)) {  // Q4_K, Q5_K: their scales and mins unpacked
    return static_cast<size_t>(rows / kWeightPanelRows) * static_cast<size_t>(cols / kQK_K) *
           static_cast<size_t>(cpu_internal::KPanelSuperBytes(wtype));
  }
  return static_cast<size_t>(RowBytes(wtype, cols)) * static_cast<size_t>(rows);
}

namespace {

// Float rows into [k][32 rows], 64 k at a time so the writes stay in L1;
// E: an unsigned integer of the element's size (the bits are copied).
template <class E>
void RepackFloat(const uint8_t* src, int64_t cols, int64_t r0, int64_t r1, uint8_t* dst) {
  for (int64_t p = r0 / kWeightPanelRows; p < r1 / kWeightPanelRows; ++p) {
    E* out = reinterpret_cast<E*>(dst) + p * cols * kWeightPanelRows;
    for (int64_t k0 = 0; k0 < cols; k0 += 64) {
      const int64_t k1 = k0 + 64 < cols ? k0 + 64 : cols;
      for (int i = 0; i < kWeightPanelRows; ++i) {
        const uint8_t* row = src + (p * kWeightPanelRows + i) * cols * int64_t{sizeof(E)};
        for (int64_t k = k0; k < k1; ++k) {
          E v;
          std::memcpy(&v, row + k * int64_t{sizeof(E)}, sizeof(E));
          out[k * kWeightPanelRows + i] = v;
        }
      }
    }
  }
}

// Row i of a Q4_K or Q5_K super-block (qh: Q5_K's fifth bits, else null)
// into its panel super-block `out` (weight_panels_layout.h).
void RepackQ45KRow(uint16_t d, uint16_t dmin, const uint8_t* scales, const uint8_t* qs,
                   const uint8_t* qh, int i, uint8_t* out) {
  std::memcpy(out + 2 * i, &d, 2);
  std::memcpy(out + 64 + 2 * i, &dmin, 2);
  for (int j = 0; j < 8; ++j) {
    float sc, m;
    cpu_internal::ScaleMinK4(scales, j, &sc, &m);
    out[cpu_internal::kKPanelScales + 32 * j + i] = static_cast<uint8_t>(sc);
    out[cpu_internal::kKPanelMins + 32 * j + i] = static_cast<uint8_t>(m);
  }
  const int h = i / 16, lane = i % 16;
  for (int c = 0; c < 8; ++c) {
    for (int q = 0; q < 4; ++q) {
      std::memcpy(out + cpu_internal::KPanelVector(q, h, c) + 4 * lane, qs + 32 * q + 4 * c, 4);
    }
    if (qh) std::memcpy(out + cpu_internal::Q5PanelQh(h, c) + 4 * lane, qh + 4 * c, 4);
  }
}

// Row i of a Q6_K super-block, likewise.
void RepackQ6KRow(const BlockQ6_K& blk, int i, uint8_t* out) {
  std::memcpy(out + 2 * i, &blk.d, 2);
  for (int t = 0; t < 16; ++t) {
    std::memcpy(out + cpu_internal::kQ6PanelScales + 32 * t + i, &blk.scales[t], 1);
  }
  const int h = i / 16, lane = i % 16;
  for (int H = 0; H < 2; ++H) {
    for (int c = 0; c < 8; ++c) {
      for (int part = 0; part < 2; ++part) {
        std::memcpy(out + cpu_internal::Q6PanelQl(H, part, h, c) + 4 * lane,
                    blk.ql + 64 * H + 32 * part + 4 * c, 4);
      }
      std::memcpy(out + cpu_internal::Q6PanelQh(H, h, c) + 4 * lane, blk.qh + 32 * H + 4 * c, 4);
    }
  }
}

// The K formats' super-blocks into panels.
void RepackKFormat(DType wtype, const uint8_t* src, int64_t cols, int64_t r0, int64_t r1,
                   uint8_t* dst) {
  const int64_t nsb = cols / kQK_K;
  const size_t block_bytes = RowBytes(wtype, kQK_K);
  for (int64_t p = r0 / kWeightPanelRows; p < r1 / kWeightPanelRows; ++p) {
    for (int64_t s = 0; s < nsb; ++s) {
      uint8_t* out = dst + cpu_internal::KPanelOffset(wtype, nsb, p, s);
      for (int i = 0; i < kWeightPanelRows; ++i) {
        const uint8_t* blk = src + ((p * kWeightPanelRows + i) * nsb + s) * block_bytes;
        if (wtype == DType::kQ4_K) {
          const BlockQ4_K* b = reinterpret_cast<const BlockQ4_K*>(blk);
          RepackQ45KRow(b->d, b->dmin, b->scales, b->qs, nullptr, i, out);
        } else if (wtype == DType::kQ5_K) {
          const BlockQ5_K* b = reinterpret_cast<const BlockQ5_K*>(blk);
          RepackQ45KRow(b->d, b->dmin, b->scales, b->qs, b->qh, i, out);
        } else {
          RepackQ6KRow(*reinterpret_cast<const BlockQ6_K*>(blk), i, out);
        }
      }
    }
  }
}

}  // namespace

void RepackWeights(DType wtype, const void* w, int64_t cols, int64_t r0, int64_t r1, void* panels) {
  if (IsKPanel(wtype)) {
    RepackKFormat(wtype, static_cast<const uint8_t*>(w), cols, r0, r1,
                  static_cast<uint8_t*>(panels));
    return;
  }
  if (cpu_internal::IsFloatPanel(wtype)) {
    const uint8_t* src = static_cast<const uint8_t*>(w);
    uint8_t* dst = static_cast<uint8_t*>(panels);
    if (wtype == DType::kF32) {
      RepackFloat<uint32_t>(src, cols, r0, r1, dst);
    } else {
      RepackFloat<uint16_t>(src, cols, r0, r1, dst);
    }
    return;
  }
  const int64_t nb = cols / kQK;
  const bool q4 = wtype == DType::kQ4_0;
  const size_t block_bytes = q4 ? sizeof(BlockQ4_0) : sizeof(BlockQ8_0);
  const int dwords = PanelDwords(wtype);
  const uint8_t* src = static_cast<const uint8_t*>(w);
  uint8_t* dst = static_cast<uint8_t*>(panels);
  for (int64_t p = r0 / kWeightPanelRows; p < r1 / kWeightPanelRows; ++p) {
    for (int64_t k = 0; k < nb; ++k) {
      uint8_t* out = dst + PanelOffset(wtype, nb, p, k);
      for (int i = 0; i < kWeightPanelRows; ++i) {
        const int64_t row = p * kWeightPanelRows + i;
        const uint8_t* blk = src + (row * nb + k) * block_bytes;
        std::memcpy(out + 2 * i, blk, 2);  // the f16 scale
        const int h = i / 16, lane = i % 16;
        for (int c = 0; c < dwords; ++c) {
          std::memcpy(out + 64 + (h * dwords + c) * 64 + 4 * lane, blk + 2 + 4 * c, 4);
        }
      }
    }
  }
}

namespace cpu_internal {

namespace {

float FloatAt(DType wtype, const uint8_t* p) {
  if (wtype == DType::kF32) {
    float f;
    std::memcpy(&f, p, 4);
    return f;
  }
  uint16_t h;
  std::memcpy(&h, p, 2);
  return wtype == DType::kF16 ? F16ToF32(h) : Bf16ToF32(h);
}

// Float weights: one running sum over k per (row, column), k in order.
void FloatPanelRowsRef(DType wtype, const uint8_t* panels, int64_t cols, const uint8_t* x,
                       int64_t batch, float* y, int64_t ldy, int64_t r0, int64_t r1) {
  const int e = PanelElemBytes(wtype);
  for (int64_t b = 0; b < batch; ++b) {
    const float* xb = reinterpret_cast<const float*>(x) + b * cols;
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t p = r / kWeightPanelRows, i = r % kWeightPanelRows;
      const uint8_t* w = panels + FloatPanelOffset(wtype, cols, p, 0) + i * e;
      float acc = 0.0f;
      for (int64_t k = 0; k < cols; ++k) {
        acc = std::fma(FloatAt(wtype, w + k * kWeightPanelRows * e), xb[k], acc);
      }
      y[b * ldy + r] = acc;
    }
  }
}

// Row i of Q4_K (q5: Q5_K) super-block `sb` (its activation blocks from
// k0): per sub-block the exact integer dot, then its scaled term and its
// min term (weight_panels_k_avx512.cpp says why in this form).
float Q45KSuperRef(const uint8_t* sb, bool q5, int i, const QuantColumn& x, int64_t k0, float acc) {
  const int h = i / 16, lane = i % 16;
  uint16_t d16, dmin16;
  std::memcpy(&d16, sb + 2 * i, 2);
  std::memcpy(&dmin16, sb + 64 + 2 * i, 2);
  const float d = F16ToF32(d16), dmin = F16ToF32(dmin16);
  for (int j = 0; j < 8; ++j) {
    const int64_t k = k0 + j;
    int32_t dot = 0;
    for (int t = 0; t < kQK; ++t) {
      const uint8_t v = sb[KPanelVector(j / 2, h, t / 4) + 4 * lane + t % 4];
      const int fifth = q5 ? (sb[Q5PanelQh(h, t / 4) + 4 * lane + t % 4] >> j) & 1 : 0;
      dot += ((j % 2 ? v >> 4 : v & 15) | fifth << 4) * x.qs[k * kQK + t];
    }
    const float a = d * static_cast<float>(sb[kKPanelScales + 32 * j + i]);
    const float c = -dmin * static_cast<float>(sb[kKPanelMins + 32 * j + i]);
    acc = std::fma(static_cast<float>(dot), a * x.dx[k], acc);
    acc = std::fma(c, x.dx[k] * static_cast<float>(x.b16[2 * k] + x.b16[2 * k + 1]), acc);
  }
  return acc;
}

// Q6_K: per 16 weights, the exact integer dot of (u - 32) and x, then its
// scaled term.
float Q6KSuperRef(const uint8_t* sb, int i, const QuantColumn& x, int64_t k0, float acc) {
  const int h = i / 16, lane = i % 16;
  uint16_t d16;
  std::memcpy(&d16, sb + 2 * i, 2);
  const float d = F16ToF32(d16);
  for (int blk = 0; blk < 8; ++blk) {
    const int H = blk / 4, j = blk % 4;
    const int64_t k = k0 + blk;
    for (int part = 0; part < 2; ++part) {
      int32_t dot = 0;
      for (int t = 16 * part; t < 16 * part + 16; ++t) {
        const uint8_t ql = sb[Q6PanelQl(H, j % 2, h, t / 4) + 4 * lane + t % 4];
        const uint8_t qh = sb[Q6PanelQh(H, h, t / 4) + 4 * lane + t % 4];
        const int u = ((ql >> (4 * (j / 2))) & 15) | (((qh >> (2 * j)) & 3) << 4);
        dot += (u - 32) * x.qs[k * kQK + t];
      }
      const int8_t sc = static_cast<int8_t>(sb[kQ6PanelScales + 32 * (2 * blk + part) + i]);
      acc = std::fma(static_cast<float>(dot), d * static_cast<float>(sc) * x.dx[k], acc);
    }
  }
  return acc;
}

// The K formats: super-blocks in order.
void KPanelRowsRef(DType wtype, const uint8_t* panels, int64_t cols, const uint8_t* x,
                   int64_t batch, float* y, int64_t ldy, int64_t r0, int64_t r1) {
  const int64_t nsb = cols / kQK_K;
  const QActLayout l = GetQActLayout(cols);
  for (int64_t b = 0; b < batch; ++b) {
    QuantColumn xc;
    QuantColumnsAt(x, l.total, l, b, 1, 0, &xc);
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t p = r / kWeightPanelRows;
      const int i = static_cast<int>(r % kWeightPanelRows);
      float acc = 0.0f;
      for (int64_t s = 0; s < nsb; ++s) {
        const uint8_t* sb = panels + KPanelOffset(wtype, nsb, p, s);
        acc = wtype == DType::kQ6_K ? Q6KSuperRef(sb, i, xc, 8 * s, acc)
                                    : Q45KSuperRef(sb, wtype == DType::kQ5_K, i, xc, 8 * s, acc);
      }
      y[b * ldy + r] = acc;
    }
  }
}

}  // namespace

// The scalar reference: the same sums as the AVX-512 kernel, in the same
// order, so the two agree bit for bit (std::fma: one rounding, as vfmadd).
void WeightPanelRowsRef(DType wtype, const uint8_t* panels, int64_t cols, const uint8_t* x,
                        int64_t batch, float* y, int64_t ldy, int64_t r0, int64_t r1) {
  if (IsFloatPanel(wtype)) {
    FloatPanelRowsRef(wtype, panels, cols, x, batch, y, ldy, r0, r1);
    return;
  }
  if (IsKPanel(wtype)) {
    KPanelRowsRef(wtype, panels, cols, x, batch, y, ldy, r0, r1);
    return;
  }
  const int64_t nb = cols / kQK;
  const QActLayout l = GetQActLayout(cols);
  const bool q4 = wtype == DType::kQ4_0;
  const int dwords = PanelDwords(wtype);
  const int offset = q4 ? 8 : 128;
  for (int64_t b = 0; b < batch; ++b) {
    QuantColumn xc;
    QuantColumnsAt(x, l.total, l, b, 1, 0, &xc);
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t p = r / kWeightPanelRows;
      const int i = static_cast<int>(r % kWeightPanelRows), h = i / 16, lane = i % 16;
      float acc = 0.0f;
      for (int64_t k = 0; k < nb; ++k) {
        const uint8_t* blk = panels + PanelOffset(wtype, nb, p, k);
        uint16_t d16;
        std::memcpy(&d16, blk + 2 * i, 2);
        int32_t dot = -offset * (xc.b16[2 * k] + xc.b16[2 * k + 1]);
        for (int j = 0; j < kQK; ++j) {
          // Weight j of the block: Q4_0 byte j % 16's low (j < 16) or high
          // nibble; Q8_0 byte j, made unsigned.
          const int byte = q4 ? j % 16 : j;
          const uint8_t v = blk[64 + (h * dwords + byte / 4) * 64 + 4 * lane + byte % 4];
          const int u = q4 ? (j < 16 ? v & 15 : v >> 4) : (v ^ 0x80);
          dot += u * xc.qs[k * kQK + j];
        }
        acc = std::fma(static_cast<float>(dot), F16ToF32(d16) * xc.dx[k], acc);
      }
      y[b * ldy + r] = acc;
    }
  }
}

}  // namespace cpu_internal

void WeightPanelRows(DType wtype, const void* panels, int64_t cols, const void* x_prepared,
                     int64_t batch, float* y, int64_t ldy, int64_t r0, int64_t r1) {
  if (r0 >= r1 || batch <= 0 || cols <= 0) return;
  const uint8_t* p = static_cast<const uint8_t*>(panels);
  const uint8_t* x = static_cast<const uint8_t*>(x_prepared);
  const CpuIsa isa = ActiveCpuIsa();
  if (!WeightPanelsFast(wtype)) {
    cpu_internal::WeightPanelRowsRef(wtype, p, cols, x, batch, y, ldy, r0, r1);
    return;
  }
  size_t stride = 0;
  if (cpu_internal::IsFloatPanel(wtype)) {
    x = cpu_internal::UnaliasedRows(x, static_cast<size_t>(cols) * 4, batch, cols, &stride);
  }
  if (isa == CpuIsa::kAvx512 && cpu_internal::IsFloatPanel(wtype)) {
    cpu_internal::FloatPanelRowsAvx512(wtype, p, cols, x, static_cast<int64_t>(stride), batch, y,
                                       ldy, r0, r1);
  } else if (isa == CpuIsa::kAvx512 && IsKPanel(wtype)) {
    cpu_internal::KPanelRowsAvx512(wtype, p, cols, x, batch, y, ldy, r0, r1);
  } else if (isa == CpuIsa::kAvx512) {
    cpu_internal::WeightPanelRowsAvx512(wtype, p, cols, x, batch, y, ldy, r0, r1);
  } else {
    cpu_internal::WeightPanelRowsAvx2(wtype, p, cols, x, static_cast<int64_t>(stride), batch, y,
                                      ldy, r0, r1);
  }
}

}  // namespace pi
