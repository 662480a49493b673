// Tests for kernels/cpu: f16/bf16 conversion, ggml's Q8_0/Q4_0 quantizers,
// and MatVecRows / MatMulRows / AxpyRows and their indexed (sparse) forms on
// every ISA this CPU has.
//
// References are independent of the code under test: F16C hardware
// conversions, literal hand-computed blocks, quantizers and decoders
// re-written here from ggml's documented formulas, and double-precision dot
// products. SIMD paths are compared with the scalar reference (same math up
// to summation order), which is itself checked against the double dots.
#include <cpuid.h>
#include <gtest/gtest.h>
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "kernels/cpu/fp16.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/kquant.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/quant.h"
#include "kernels/dtype.h"

namespace pi {
namespace {

uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
float FromBits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// ---- F16 / BF16 ---------------------------------------------------------------

__attribute__((target("f16c"))) float HwF16ToF32(uint16_t h) {
  return _cvtsh_ss(h);
}
__attribute__((target("f16c"))) uint16_t HwF32ToF16(float f) {
  return static_cast<uint16_t>(_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}
// CPUID leaf 1, ECX bit 29 (clang 14's __builtin_cpu_supports knows no "f16c").
bool HaveF16c() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  return __get_cpuid(1, &a, &b, &c, &d) && (c & (1u << 29));
}

TEST(Fp16Test, DecodesLiterals) {
  EXPECT_EQ(Bits(F16ToF32(0x0000)), Bits(0.0f));
  EXPECT_EQ(Bits(F16ToF32(0x8000)), Bits(-0.0f));
  EXPECT_EQ(F16ToF32(0x3C00), 1.0f);
  EXPECT_EQ(F16ToF32(0xC000), -2.0f);
  EXPECT_EQ(F16ToF32(0x3555), 0.333251953125f);
  EXPECT_EQ(F16ToF32(0x7BFF), 65504.0f);
  EXPECT_EQ(F16ToF32(0x0400), std::ldexp(1.0f, -14));     // smallest normal
  EXPECT_EQ(F16ToF32(0x0001), std::ldexp(1.0f, -24));     // smallest subnormal
  EXPECT_EQ(F16ToF32(0x03FF), std::ldexp(1023.0f, -24));  // largest subnormal
  EXPECT_EQ(F16ToF32(0x8001), -std::ldexp(1.0f, -24));
  EXPECT_EQ(F16ToF32(0x7C00), INFINITY);
  EXPECT_EQ(F16ToF32(0xFC00), -INFINITY);
  EXPECT_TRUE(std::isnan(F16ToF32(0x7E00)));
  EXPECT_TRUE(std::isnan(F16ToF32(0x7C01)));  // signalling NaN stays a NaN
  EXPECT_TRUE(std::isnan(F16ToF32(0xFE00)));
}

TEST(Fp16Test, DecodeMatchesF16cForAllValues) {
  if (!HaveF16c()) GTEST_SKIP() << "no F16C";
  for (uint32_t h = 0; h < 65536; ++h) {
    ASSERT_EQ(Bits(F16ToF32(static_cast<uint16_t>(h))), Bits(HwF16ToF32(static_cast<uint16_t>(h))))
        << "h=0x" << std::hex << h;
  }
}

TEST(Fp16Test, EncodesLiteralsAndTies) {
  EXPECT_EQ(F32ToF16(0.0f), 0x0000);
  EXPECT_EQ(F32ToF16(-0.0f), 0x8000);
  EXPECT_EQ(F32ToF16(1.0f), 0x3C00);
  EXPECT_EQ(F32ToF16(-2.0f), 0xC000);
  EXPECT_EQ(F32ToF16(65504.0f), 0x7BFF);
  EXPECT_EQ(F32ToF16(65519.0f), 0x7BFF);  // below the halfway point
  EXPECT_EQ(F32ToF16(65520.0f), 0x7C00);  // tie: even neighbour is infinity
  EXPECT_EQ(F32ToF16(1e10f), 0x7C00);
  EXPECT_EQ(F32ToF16(-1e10f), 0xFC00);
  EXPECT_EQ(F32ToF16(INFINITY), 0x7C00);
  EXPECT_EQ(F32ToF16(-INFINITY), 0xFC00);
  const uint16_t nan = F32ToF16(NAN);
  EXPECT_EQ(nan & 0x7C00, 0x7C00);
  EXPECT_NE(nan & 0x03FF, 0);
  EXPECT_NE(F32ToF16(FromBits(0x7F800001)) & 0x03FF, 0);  // tiny payload: still NaN
  // Ties to even in the normal range: 1 + 2^-11 lies halfway between 0x3C00
  // and 0x3C01; 1 + 3*2^-11 halfway between 0x3C01 and 0x3C02.
  EXPECT_EQ(F32ToF16(1.0f + std::ldexp(1.0f, -11)), 0x3C00);
  EXPECT_EQ(F32ToF16(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3C02);
  EXPECT_EQ(F32ToF16(1.0f + std::ldexp(1.0f, -11) + std::ldexp(1.0f, -20)), 0x3C01);
  // Subnormal results.
  EXPECT_EQ(F32ToF16(std::ldexp(1.0f, -14)), 0x0400);
  EXPECT_EQ(F32ToF16(std::ldexp(1.0f, -24)), 0x0001);
  EXPECT_EQ(F32ToF16(std::ldexp(1.0f, -25)), 0x0000);  // tie -> even (0)
  EXPECT_EQ(F32ToF16(std::ldexp(1.5f, -25)), 0x0001);
  EXPECT_EQ(F32ToF16(std::ldexp(3.0f, -25)), 0x0002);  // tie between 1 and 2 -> 2
  EXPECT_EQ(F32ToF16(std::ldexp(5.0f, -25)), 0x0002);  // tie between 2 and 3 -> 2
  EXPECT_EQ(F32ToF16(std::ldexp(1023.0f, -24)), 0x03FF);
  EXPECT_EQ(F32ToF16(std::ldexp(2047.0f, -25)), 0x0400);  // rounds up into normal
  EXPECT_EQ(F32ToF16(-std::ldexp(1.0f, -24)), 0x8001);
  EXPECT_EQ(F32ToF16(1e-40f), 0x0000);  // f32 subnormal
  EXPECT_EQ(F32ToF16(-1e-40f), 0x8000);
}

TEST(Fp16Test, EncodeMatchesF16c) {
  if (!HaveF16c()) GTEST_SKIP() << "no F16C";
  std::mt19937 rng(1);
  // Random bit patterns cover NaNs and every exponent; the range sweep covers
  // the f16 subnormal/normal/overflow boundaries densely.
  for (int i = 0; i < 2000000; ++i) {
    const float f = FromBits(rng());
    ASSERT_EQ(F32ToF16(f), HwF32ToF16(f)) << "bits=0x" << std::hex << Bits(f);
  }
  for (uint32_t u = 0x32000000; u < 0x48000000; u += 97) {
    for (uint32_t s : {0u, 0x80000000u}) {
      const float f = FromBits(u | s);
      ASSERT_EQ(F32ToF16(f), HwF32ToF16(f)) << "bits=0x" << std::hex << (u | s);
    }
  }
}

TEST(Bf16Test, Conversions) {
  EXPECT_EQ(Bf16ToF32(0x3F80), 1.0f);
  EXPECT_EQ(Bf16ToF32(0xC040), -3.0f);
  EXPECT_EQ(Bits(Bf16ToF32(0x8000)), Bits(-0.0f));
  EXPECT_EQ(Bf16ToF32(0x7F80), INFINITY);
  EXPECT_EQ(Bf16ToF32(0x0001), FromBits(0x00010000));  // subnormal
  EXPECT_TRUE(std::isnan(Bf16ToF32(0x7FC0)));

  EXPECT_EQ(F32ToBf16(1.0f), 0x3F80);
  EXPECT_EQ(F32ToBf16(0.0f), 0x0000);
  EXPECT_EQ(F32ToBf16(-0.0f), 0x8000);
  EXPECT_EQ(F32ToBf16(INFINITY), 0x7F80);
  EXPECT_EQ(F32ToBf16(-INFINITY), 0xFF80);
  EXPECT_EQ(F32ToBf16(FromBits(0x3F808000)), 0x3F80);  // tie -> even
  EXPECT_EQ(F32ToBf16(FromBits(0x3F818000)), 0x3F82);  // tie -> even
  EXPECT_EQ(F32ToBf16(FromBits(0x3F808001)), 0x3F81);  // above the tie
  EXPECT_EQ(F32ToBf16(FromBits(0x3F807FFF)), 0x3F80);  // below the tie
  EXPECT_EQ(F32ToBf16(FromBits(0x7F7FFFFF)), 0x7F80);  // FLT_MAX rounds to inf
  EXPECT_EQ(F32ToBf16(FromBits(0x00018000)), 0x0002);  // subnormal tie -> even
  EXPECT_EQ(F32ToBf16(FromBits(0x00010000)), 0x0001);  // subnormals are kept
  // NaN stays NaN, including a payload only in the low 16 bits (plain
  // rounding would turn 0x7F800001 into infinity).
  for (uint32_t nan : {0x7FC00000u, 0x7F800001u, 0xFF800001u, 0x7FFFFFFFu}) {
    const uint16_t b = F32ToBf16(FromBits(nan));
    EXPECT_EQ(b & 0x7F80, 0x7F80) << std::hex << nan;
    EXPECT_NE(b & 0x007F, 0) << std::hex << nan;
    EXPECT_EQ(b & 0x8000, (nan >> 16) & 0x8000);
  }
}

// ---- Quantizers -----------------------------------------------------------------

// Test-local decoders straight from the format definitions.
double DecodeF16(uint16_t h) {
  const int sign = (h & 0x8000) ? -1 : 1;
  const int e = (h >> 10) & 0x1F;
  const int m = h & 0x3FF;
  if (e == 0) return sign * std::ldexp(static_cast<double>(m), -24);
  return sign * std::ldexp(static_cast<double>(1024 + m), e - 25);
}

// ggml quantize_row_q8_0_ref, re-written from the formula: d = amax / 127,
// q = roundf(x / d) (computed as x * (1/d), as ggml does).
void RefQuantQ8(const float* x, BlockQ8_0* b) {
  float amax = 0;
  for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[j]));
  const float d = amax / 127;
  const float id = d ? 1.0f / d : 0.0f;
  b->d = HaveF16c() ? HwF32ToF16(d) : F32ToF16(d);
  for (int j = 0; j < 32; ++j) b->qs[j] = static_cast<int8_t>(std::roundf(x[j] * id));
}

// ggml quantize_row_q4_0_ref: d = (signed value of largest |x|) / -8,
// q = min(15, (int8)(x / d + 8.5)); byte j = q[j] | q[j + 16] << 4.
void RefQuantQ4(const float* x, BlockQ4_0* b) {
  float amax = 0, max = 0;
  for (int j = 0; j < 32; ++j) {
    if (amax < std::fabs(x[j])) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  }
  const float d = max / -8;
  const float id = d ? 1.0f / d : 0.0f;
  b->d = HaveF16c() ? HwF32ToF16(d) : F32ToF16(d);
  for (int j = 0; j < 16; ++j) {
    const int q0 = std::min(15, static_cast<int>(static_cast<int8_t>(x[j] * id + 8.5f)));
    const int q1 = std::min(15, static_cast<int>(static_cast<int8_t>(x[j + 16] * id + 8.5f)));
    b->qs[j] = static_cast<uint8_t>(q0 | (q1 << 4));
  }
}

TEST(QuantTest, Q8_0HandComputedBlock) {
  // amax = 127 -> d = 1 (f16 0x3C00), q = round-half-away(x).
  const float below_half = std::nextafter(0.5f, 0.0f);  // 0.49999997 -> 0, not 1
  float x[32] = {127,     -63.5f, 1,          0.5f,        -0.5f,  2.5f,    -2.5f, 0.49f,
                 -126.6f, 3.2f,   below_half, -below_half, 126.5f, -126.5f, 1.5f,  -1.5f};
  BlockQ8_0 b;
  QuantizeRowQ8_0(x, &b, 32);
  EXPECT_EQ(b.d, 0x3C00);
  const int8_t want[16] = {127, -64, 1, 1, -1, 3, -3, 0, -127, 3, 0, 0, 127, -127, 2, -2};
  for (int j = 0; j < 16; ++j) EXPECT_EQ(b.qs[j], want[j]) << j;
  for (int j = 16; j < 32; ++j) EXPECT_EQ(b.qs[j], 0) << j;

  // amax = 254 -> d = 2 (0x4000); 3 -> round(1.5) = 2; -5 -> -3.
  float y[32] = {};
  y[5] = -254;
  y[6] = 3;
  y[7] = -5;
  QuantizeRowQ8_0(y, &b, 32);
  EXPECT_EQ(b.d, 0x4000);
  EXPECT_EQ(b.qs[5], -127);
  EXPECT_EQ(b.qs[6], 2);
  EXPECT_EQ(b.qs[7], -3);
}

TEST(QuantTest, Q4_0HandComputedBlocks) {
  // Largest magnitude is -8 -> d = 1 (0x3C00), q = min(15, trunc(x + 8.5)).
  float x[32] = {};
  x[0] = -8;
  x[1] = 7;       // 15
  x[2] = 7.4f;    // trunc(15.9) = 15
  x[3] = -0.5f;   // trunc(8.0) = 8
  x[4] = -0.51f;  // 7
  x[5] = 0.49f;   // 8
  x[16] = 3;      // 11, high nibble of byte 0
  x[17] = -3;     // 5, high nibble of byte 1
  x[31] = -7.9f;  // trunc(0.6) = 0
  BlockQ4_0 b;
  QuantizeRowQ4_0(x, &b, 32);
  EXPECT_EQ(b.d, 0x3C00);
  EXPECT_EQ(b.qs[0], 0x0 | (11 << 4));
  EXPECT_EQ(b.qs[1], 15 | (5 << 4));
  EXPECT_EQ(b.qs[2], 15 | (8 << 4));
  EXPECT_EQ(b.qs[3], 8 | (8 << 4));
  EXPECT_EQ(b.qs[4], 7 | (8 << 4));
  EXPECT_EQ(b.qs[5], 8 | (8 << 4));
  EXPECT_EQ(b.qs[15], 8 | (0 << 4));

  // Largest magnitude is +16 -> d = -2 (0xC000), id = -0.5:
  // 16 -> trunc(0.5) = 0; -14 -> 15.5 -> 15; -16 -> 16.5 -> 16 -> capped 15.
  float y[32] = {};
  y[0] = 16;
  y[1] = -14;
  y[2] = -16;
  y[3] = 1;  // -0.5 + 8.5 = 8
  QuantizeRowQ4_0(y, &b, 32);
  EXPECT_EQ(b.d, 0xC000);
  EXPECT_EQ(b.qs[0] & 0x0F, 0);
  EXPECT_EQ(b.qs[1] & 0x0F, 15);
  EXPECT_EQ(b.qs[2] & 0x0F, 15);
  EXPECT_EQ(b.qs[3] & 0x0F, 8);
  EXPECT_EQ(b.qs[0] >> 4, 8);

  // All zero: d = 0.0f / -8 = -0.0 (f16 0x8000), every nibble 8.
  float z[32] = {};
  QuantizeRowQ4_0(z, &b, 32);
  EXPECT_EQ(b.d, 0x8000);
  for (int j = 0; j < 16; ++j) EXPECT_EQ(b.qs[j], 0x88);
}

std::vector<float> RandomRow(std::mt19937* rng, int64_t n, float scale) {
  std::normal_distribution<float> nd(0.0f, scale);
  std::uniform_int_distribution<int> pick(0, 40);
  std::vector<float> v(n);
  for (auto& f : v) {
    f = nd(*rng);
    if (pick(*rng) == 0) f *= 8;  // outliers: blocks with one large value
  }
  return v;
}

TEST(QuantTest, RandomRowsMatchFormulaAndRoundTrip) {
  std::mt19937 rng(7);
  const int64_t n = 32 * 64;
  for (int rep = 0; rep < 20; ++rep) {
    std::vector<float> x = RandomRow(&rng, n, rep % 2 ? 1e-3f : 3.0f);
    if (rep == 3) std::fill(x.begin(), x.begin() + 32, 0.0f);  // an all-zero block
    std::vector<BlockQ8_0> q8(n / 32), want8(n / 32);
    std::vector<BlockQ4_0> q4(n / 32), want4(n / 32);
    QuantizeRowQ8_0(x.data(), q8.data(), n);
    QuantizeRowQ4_0(x.data(), q4.data(), n);
    std::vector<uint8_t> via_generic8(RowBytes(DType::kQ8_0, n)),
        via_generic4(RowBytes(DType::kQ4_0, n));
    QuantizeRow(DType::kQ8_0, x.data(), via_generic8.data(), n);
    QuantizeRow(DType::kQ4_0, x.data(), via_generic4.data(), n);
    for (int64_t i = 0; i < n / 32; ++i) {
      RefQuantQ8(&x[i * 32], &want8[i]);
      RefQuantQ4(&x[i * 32], &want4[i]);
    }
    ASSERT_EQ(0, std::memcmp(q8.data(), want8.data(), q8.size() * sizeof(BlockQ8_0)));
    ASSERT_EQ(0, std::memcmp(q4.data(), want4.data(), q4.size() * sizeof(BlockQ4_0)));
    ASSERT_EQ(0, std::memcmp(via_generic8.data(), want8.data(), via_generic8.size()));
    ASSERT_EQ(0, std::memcmp(via_generic4.data(), want4.data(), via_generic4.size()));

    std::vector<float> back8(n), back4(n);
    DequantizeRow(DType::kQ8_0, q8.data(), back8.data(), n);
    DequantizeRow(DType::kQ4_0, q4.data(), back4.data(), n);
    for (int64_t i = 0; i < n / 32; ++i) {
      float amax = 0;
      for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[i * 32 + j]));
      const double d8 = DecodeF16(q8[i].d), d4 = DecodeF16(q4[i].d);
      for (int j = 0; j < 32; ++j) {
        const int64_t k = i * 32 + j;
        // Decoders from the format definition.
        ASSERT_EQ(back8[k], static_cast<float>(q8[i].qs[j] * d8));
        const int nib = j < 16 ? (q4[i].qs[j] & 0x0F) : (q4[i].qs[j - 16] >> 4);
        ASSERT_EQ(back4[k], static_cast<float>((nib - 8) * d4));
        // Error bounds: half a step (one step where Q4_0 caps at 15), plus the
        // scale's f16 rounding times the largest code.
        const double step8 = amax / 127.0, step4 = amax / 8.0;
        ASSERT_LE(std::fabs(back8[k] - x[k]), 0.5 * step8 + 127 * std::fabs(d8 - step8) + 1e-12)
            << k;
        ASSERT_LE(std::fabs(back4[k] - x[k]), step4 + 8 * std::fabs(d4 - step4) + 1e-12) << k;
      }
    }
  }
}

TEST(QuantTest, FloatRowsRoundTrip) {
  std::mt19937 rng(3);
  std::vector<float> x = RandomRow(&rng, 1000, 10.0f);
  x[0] = 0.0f;
  x[1] = -0.0f;
  x[2] = 1e-6f;
  std::vector<uint8_t> buf(4000);
  std::vector<float> back(1000);
  QuantizeRow(DType::kF32, x.data(), buf.data(), 1000);
  DequantizeRow(DType::kF32, buf.data(), back.data(), 1000);
  EXPECT_EQ(0, std::memcmp(back.data(), x.data(), 4000));
  QuantizeRow(DType::kF16, x.data(), buf.data(), 1000);
  DequantizeRow(DType::kF16, buf.data(), back.data(), 1000);
  for (int i = 0; i < 1000; ++i) {
    uint16_t h;
    std::memcpy(&h, &buf[2 * i], 2);
    if (HaveF16c()) {
      ASSERT_EQ(h, HwF32ToF16(x[i])) << i;
    }
    ASSERT_EQ(back[i], static_cast<float>(DecodeF16(h))) << i;
    ASSERT_LE(std::fabs(back[i] - x[i]), std::fabs(x[i]) * std::ldexp(1.0, -11) + 6e-8) << i;
  }
  QuantizeRow(DType::kBF16, x.data(), buf.data(), 1000);
  DequantizeRow(DType::kBF16, buf.data(), back.data(), 1000);
  for (int i = 0; i < 1000; ++i) {
    ASSERT_LE(std::fabs(back[i] - x[i]), std::fabs(x[i]) * std::ldexp(1.0, -8)) << i;
    ASSERT_EQ(Bits(back[i]) & 0xFFFF, 0u);
  }
}

// ---- ISA selection ----------------------------------------------------------------

TEST(IsaTest, SetIsClampedToDetected) {
  const CpuIsa best = DetectCpuIsa();
  SetCpuIsa(CpuIsa::kAvx512);
  EXPECT_EQ(ActiveCpuIsa(), best);
  SetCpuIsa(CpuIsa::kScalar);
  EXPECT_EQ(ActiveCpuIsa(), CpuIsa::kScalar);
  SetCpuIsa(best);
  EXPECT_STREQ(CpuIsaName(CpuIsa::kAvx2), "avx2");
  EXPECT_STREQ(CpuIsaName(CpuIsa::kAvx512), "avx512");
  EXPECT_STREQ(CpuIsaName(CpuIsa::kScalar), "scalar");
}

TEST(PrepareTest, LayoutContract) {
  // Float weights read the raw f32 rows; Q8_0 and Q4_0 share one prepared
  // form whose head is plain ggml block_q8_0 data.
  for (int64_t cols : {32, 96, 4096, 11008}) {
    EXPECT_EQ(PreparedActivationBytes(DType::kF32, cols), static_cast<size_t>(cols) * 4);
    EXPECT_EQ(PreparedActivationBytes(DType::kF16, cols), static_cast<size_t>(cols) * 4);
    EXPECT_EQ(PreparedActivationBytes(DType::kBF16, cols), static_cast<size_t>(cols) * 4);
    EXPECT_EQ(PreparedActivationBytes(DType::kQ8_0, cols),
              PreparedActivationBytes(DType::kQ4_0, cols));
    EXPECT_GE(PreparedActivationBytes(DType::kQ8_0, cols), static_cast<size_t>(cols / 32 * 34));
    EXPECT_EQ(PreparedActivationBytes(DType::kQ8_0, cols) % 64, 0u);

    std::mt19937 rng(static_cast<unsigned>(cols));
    std::vector<float> x = RandomRow(&rng, cols, 1.0f);
    std::vector<uint8_t> p(PreparedActivationBytes(DType::kQ4_0, cols));
    PrepareActivation(DType::kQ4_0, x.data(), cols, p.data());
    for (int64_t i = 0; i < cols / 32; ++i) {
      BlockQ8_0 want;
      RefQuantQ8(&x[i * 32], &want);
      ASSERT_EQ(0, std::memcmp(p.data() + i * 34, &want, 34)) << "block " << i;
    }
    std::vector<float> fp(cols);
    PrepareActivation(DType::kF16, x.data(), cols, fp.data());
    EXPECT_EQ(0, std::memcmp(fp.data(), x.data(), cols * 4));
  }
}

// The SIMD levels' preparation (one pass, prepare_avx2.cpp) gives the scalar
// path's bytes, the whole layout: random rows, and blocks that stress the
// quantizer — all zeros, ties of the rounding (d = 1: x.5 values), the
// largest magnitude at either sign, tiny and huge scales, an infinity, NaNs
// at the start, the end and inside a block (the reference's running max
// keeps a NaN or drops it by its place).
TEST(PrepareTest, SimdLevelsGiveTheScalarBytes) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (int64_t cols : {32, 96, 320, 4096, 11008}) {
    std::mt19937 rng(static_cast<unsigned>(cols) + 5);
    std::vector<float> x = RandomRow(&rng, cols, 3.0f);
    const int64_t nb = cols / 32;
    for (int64_t i = 0; i < nb; ++i) {
      float* b = &x[i * 32];
      switch (i % 9) {
        case 1:
          std::fill(b, b + 32, 0.0f);
          b[7] = -0.0f;
          break;
        case 2:  // d = 127 / 127 = 1: every x.5 is a tie
          for (int j = 0; j < 32; ++j) b[j] = static_cast<float>(j % 9) - 4.5f;
          b[31] = -127.0f;
          break;
        case 3:
          for (int j = 0; j < 32; ++j) b[j] *= 1e-30f;
          break;
        case 4:
          for (int j = 0; j < 32; ++j) b[j] *= 1e30f;
          break;
        case 5:
          b[3] = inf;
          b[9] = -inf;
          break;
        case 6:
          b[0] = nan;
          break;
        case 7:
          b[31] = nan;
          break;
        case 8:
          b[26] = nan;
          b[20] = -nan;
          break;
        default:
          break;
      }
    }
    const size_t bytes = PreparedActivationBytes(DType::kQ8_0, cols);
    std::vector<uint8_t> want(bytes, 0xA5);
    SetCpuIsa(CpuIsa::kScalar);
    PrepareActivation(DType::kQ8_0, x.data(), cols, want.data());
    for (CpuIsa isa : {CpuIsa::kAvx2, CpuIsa::kAvx512}) {
      if (static_cast<int>(isa) > static_cast<int>(DetectCpuIsa())) continue;
      std::vector<uint8_t> got(bytes, 0x5A);  // stale bytes differ from want's
      SetCpuIsa(isa);
      PrepareActivation(DType::kQ8_0, x.data(), cols, got.data());
      for (size_t k = 0; k < bytes; ++k) {
        ASSERT_EQ(got[k], want[k]) << CpuIsaName(isa) << " cols=" << cols << " byte " << k;
      }
    }
    SetCpuIsa(DetectCpuIsa());
  }
}

// ---- Matrix kernels ------------------------------------------------------------------

constexpr uint32_t kSentinelBits = 0x7FA5A5A5;  // a NaN no kernel would produce

// Decodes row `r` of W (test-local decoders) into doubles.
std::vector<double> DecodeRow(DType t, const uint8_t* row, int64_t cols) {
  std::vector<double> w(cols);
  for (int64_t c = 0; c < cols; ++c) {
    switch (t) {
      case DType::kF32: {
        float f;
        std::memcpy(&f, row + 4 * c, 4);
        w[c] = f;
        break;
      }
      case DType::kF16: {
        uint16_t h;
        std::memcpy(&h, row + 2 * c, 2);
        w[c] = DecodeF16(h);
        break;
      }
      case DType::kBF16: {
        uint16_t h;
        std::memcpy(&h, row + 2 * c, 2);
        w[c] = FromBits(static_cast<uint32_t>(h) << 16);
        break;
      }
      case DType::kQ8_0: {
        const uint8_t* b = row + (c / 32) * 34;
        uint16_t d;
        std::memcpy(&d, b, 2);
        w[c] = static_cast<int8_t>(b[2 + c % 32]) * DecodeF16(d);
        break;
      }
      case DType::kQ4_0: {
        const uint8_t* b = row + (c / 32) * 18;
        uint16_t d;
        std::memcpy(&d, b, 2);
        const int j = c % 32;
        const int nib = j < 16 ? (b[2 + j] & 0x0F) : (b[2 + j - 16] >> 4);
        w[c] = (nib - 8) * DecodeF16(d);
        break;
      }
      default:
        break;
    }
  }
  if (IsBlockDequantDType(t)) {  // kquant.h's decoder, checked bit for bit in kquant_test
    float block[kQK_K];
    for (int64_t i = 0, c = 0; c < cols; ++i) {
      const int n = DequantizeBlock(t, row, i, block);
      for (int j = 0; j < n; ++j) w[c + j] = block[j];
      c += n;
    }
  }
  return w;
}

bool IsQuant(DType t) {
  return t == DType::kQ8_0 || t == DType::kQ4_0 || IsBlockDequantDType(t);
}

bool IsKQuant(DType t) {
  return t == DType::kQ4_K || t == DType::kQ5_K || t == DType::kQ6_K;
}

struct Problem {
  DType type;
  int64_t rows, cols, batch;
  std::vector<uint8_t> w;               // rows * RowBytes
  std::vector<std::vector<double>> wd;  // decoded weights
  std::vector<float> x;                 // [batch, cols]
  std::vector<uint8_t> xp;              // prepared, batch * stride
  size_t stride = 0;
  std::vector<std::vector<double>> xd;  // the activation the kernels see, decoded
};

Problem MakeProblem(DType t, int64_t rows, int64_t cols, int64_t batch, unsigned seed) {
  Problem p;
  p.type = t;
  p.rows = rows;
  p.cols = cols;
  p.batch = batch;
  std::mt19937 rng(seed);
  const size_t rb = RowBytes(t, cols);
  p.w.resize(rows * rb);
  for (int64_t r = 0; r < rows; ++r) {
    const std::vector<float> v = RandomRow(&rng, cols, r % 3 == 0 ? 0.05f : 1.0f);
    QuantizeRow(t, v.data(), p.w.data() + r * rb, cols);
    p.wd.push_back(DecodeRow(t, p.w.data() + r * rb, cols));
  }
  p.x.resize(batch * cols);
  for (int64_t b = 0; b < batch; ++b) {
    const std::vector<float> v = RandomRow(&rng, cols, b % 2 ? 2.0f : 0.5f);
    std::copy(v.begin(), v.end(), p.x.begin() + b * cols);
  }
  p.stride = PreparedActivationBytes(t, cols);
  p.xp.resize(batch * p.stride);
  for (int64_t b = 0; b < batch; ++b) {
    PrepareActivation(t, &p.x[b * cols], cols, p.xp.data() + b * p.stride);
    std::vector<double> xd(cols);
    for (int64_t c = 0; c < cols; ++c) {
      if (IsQuant(t)) {
        // Decode the block_q8_0 head of the prepared activation.
        const uint8_t* blk = p.xp.data() + b * p.stride + (c / 32) * 34;
        uint16_t d;
        std::memcpy(&d, blk, 2);
        xd[c] = static_cast<int8_t>(blk[2 + c % 32]) * DecodeF16(d);
      } else {
        xd[c] = p.x[b * cols + c];
      }
    }
    p.xd.push_back(xd);
  }
  return p;
}

// Which product a check runs.
enum class Product { kMatVec, kMatMul, kGemm };

// Runs `product` (MatVecRows needs batch == 1) on [r0, r1) into a
// sentinel-filled buffer with row stride ldy.
std::vector<float> RunMatMul(const Problem& p, CpuIsa isa, int64_t r0, int64_t r1, int64_t ldy,
                             Product product) {
  std::vector<float> y(p.batch * ldy + 16, FromBits(kSentinelBits));
  SetCpuIsa(isa);
  switch (product) {
    case Product::kMatVec:
      MatVecRows(p.type, p.w.data(), p.cols, p.xp.data(), y.data(), r0, r1);
      break;
    case Product::kMatMul:
      MatMulRows(p.type, p.w.data(), p.cols, p.xp.data(), p.batch, y.data(), ldy, r0, r1);
      break;
    case Product::kGemm:
      GemmRows(p.type, p.w.data(), p.cols, p.xp.data(), p.batch, y.data(), ldy, r0, r1);
      break;
  }
  SetCpuIsa(DetectCpuIsa());
  return y;
}

using KernelParam = std::tuple<DType, CpuIsa>;

class KernelTest : public ::testing::TestWithParam<KernelParam> {
 protected:
  DType type() const { return std::get<0>(GetParam()); }
  CpuIsa isa() const { return std::get<1>(GetParam()); }
  std::vector<int64_t> ColsList() const {
    if (IsKQuant(type())) return {256, 512, 4096 + 256};
    // 416: 13 blocks, through the Q4_0 axpy's 8-, 4- and 1-block steps.
    if (IsQuant(type())) return {32, 64, 96, 160, 416, 4096 + 32};
    return {1, 7, 16, 33, 100, 4096 + 32};
  }
};

// Checks y from [r0, r1) against the scalar reference (for kGemm: the
// scalar MatMulRows) and the reference against double-precision dots;
// everything outside must be untouched.
void CheckMatMul(const Problem& p, CpuIsa isa, int64_t r0, int64_t r1, Product product) {
  const bool matvec = product == Product::kMatVec;
  const int64_t ldy = matvec ? p.rows : p.rows + 3;
  const std::vector<float> ref =
      RunMatMul(p, CpuIsa::kScalar, r0, r1, ldy, matvec ? product : Product::kMatMul);
  const std::vector<float> got = RunMatMul(p, isa, r0, r1, ldy, product);
  const std::string where = std::string(product == Product::kGemm ? "gemm " : "") +
                            DTypeName(p.type) + " " + CpuIsaName(isa) +
                            " rows=" + std::to_string(p.rows) + " cols=" + std::to_string(p.cols) +
                            " batch=" + std::to_string(p.batch) + " range=[" + std::to_string(r0) +
                            "," + std::to_string(r1) + ")";
  for (int64_t i = 0; i < static_cast<int64_t>(got.size()); ++i) {
    const int64_t b = i / ldy, r = i % ldy;
    const bool written = b < p.batch && r >= r0 && r < r1;
    if (!written) {
      ASSERT_EQ(Bits(got[i]), kSentinelBits) << where << ": wrote outside at " << i;
      ASSERT_EQ(Bits(ref[i]), kSentinelBits) << where << ": ref wrote outside at " << i;
      continue;
    }
    double exact = 0, abs_sum = 0, quant_err = 0;
    for (int64_t c = 0; c < p.cols; ++c) {
      exact += p.wd[r][c] * p.x[b * p.cols + c];
      abs_sum += std::fabs(p.wd[r][c] * p.xd[b][c]);
      quant_err += std::fabs(p.wd[r][c]) * std::fabs(p.x[b * p.cols + c] - p.xd[b][c]);
    }
    // SIMD vs reference: the same products, summed in another order.
    ASSERT_NEAR(got[i], ref[i], 2e-5 * abs_sum + 1e-30) << where << " b=" << b << " r=" << r;
    // Reference vs exact: for float weights only rounding; for quantized ones
    // also the activation's Q8_0 error, bounded term by term.
    const double tol = quant_err * 1.0001 + (IsQuant(p.type) ? 1e-5 : 1e-6) * abs_sum + 1e-30;
    ASSERT_NEAR(ref[i], exact, tol) << where << " b=" << b << " r=" << r;
  }
}

TEST_P(KernelTest, MatVecRows) {
  unsigned seed = 1;
  for (int64_t cols : ColsList()) {
    for (int64_t rows : {1, 3, 17, 64}) {
      const Problem p = MakeProblem(type(), rows, cols, 1, seed++);
      CheckMatMul(p, isa(), 0, rows, Product::kMatVec);
      if (rows > 2) CheckMatMul(p, isa(), 1, rows - 1, Product::kMatVec);
      if (rows > 8) CheckMatMul(p, isa(), rows / 3, 2 * rows / 3 + 1, Product::kMatVec);
      if (HasFatalFailure()) return;
    }
  }
}

TEST_P(KernelTest, MatMulRows) {
  unsigned seed = 100;
  for (int64_t batch : {1, 2, 5, 8}) {
    for (int64_t cols : ColsList()) {
      for (int64_t rows : {1, 3, 17, 64}) {
        const Problem p = MakeProblem(type(), rows, cols, batch, seed++);
        CheckMatMul(p, isa(), 0, rows, Product::kMatMul);
        if (rows > 8) CheckMatMul(p, isa(), 5, rows - 2, Product::kMatMul);
        if (HasFatalFailure()) return;
      }
    }
  }
}

TEST_P(KernelTest, MatMulRowsLargeBatchPanels) {
  // Enough rows and batch columns that MatMulRows walks the rows in panels.
  const int64_t cols = IsQuant(type()) ? 4096 : 1000;
  const Problem p = MakeProblem(type(), 150, cols, 11, 999);
  CheckMatMul(p, isa(), 3, 149, Product::kMatMul);
}

// The matrix-matrix kernels (GemmRows): panels of 32 rows, k-blocks (128
// floats, 16 quantized blocks), column chunks of 12 / 6, so the shapes cut
// every one of them partway: rows and ranges not multiples of 32, cols
// past one k-block and an odd block count, batches past one chunk.
TEST_P(KernelTest, GemmRows) {
  unsigned seed = 500;
  std::vector<int64_t> cols_list = ColsList();
  // (The K formats' panels hold two super-blocks: 4096 + 256 ends on half a
  // panel, 1280 on half of the third.)
  cols_list.push_back(IsKQuant(type()) ? 1280 : IsQuant(type()) ? 544 : 300);
  // Float rows of 1024 are 4 KiB apart: the batch goes through a padded copy.
  if (!IsQuant(type())) cols_list.push_back(1024);
  for (int64_t batch : {1, 5, 13, 40}) {
    for (int64_t cols : cols_list) {
      for (int64_t rows : {1, 17, 33, 70}) {
        const Problem p = MakeProblem(type(), rows, cols, batch, seed++);
        CheckMatMul(p, isa(), 0, rows, Product::kGemm);
        if (rows > 8) CheckMatMul(p, isa(), 5, rows - 2, Product::kGemm);
        if (HasFatalFailure()) return;
      }
    }
  }
}

TEST_P(KernelTest, AxpyRows) {
  unsigned seed = 500;
  for (int64_t cols : ColsList()) {
    for (int64_t rows : {1, 3, 17, 64}) {
      Problem p = MakeProblem(type(), rows, cols, 1, seed++);
      std::mt19937 rng(seed);
      std::vector<float> a = RandomRow(&rng, rows, 1.0f);
      // Zeros (and a -0) must be skipped exactly: give those rows NaN/Inf
      // weights, which would poison y if they were read.
      const size_t rb = RowBytes(type(), cols);
      for (int64_t r = 0; r < rows; r += 3) {
        a[r] = (r % 2) ? -0.0f : 0.0f;
        uint8_t* row = p.w.data() + r * rb;
        switch (type()) {
          case DType::kF32:
            for (int64_t c = 0; c < cols; ++c) std::memcpy(row + 4 * c, "\x00\x00\xc0\x7f", 4);
            break;
          case DType::kF16:
            for (int64_t c = 0; c < cols; ++c) std::memcpy(row + 2 * c, "\x00\x7e", 2);
            break;
          case DType::kBF16:
            for (int64_t c = 0; c < cols; ++c) std::memcpy(row + 2 * c, "\x80\x7f", 2);
            break;
          case DType::kQ8_0:
          case DType::kQ4_0:
            for (int64_t c = 0; c < cols; c += 32) {
              std::memcpy(row + (c / 32) * (type() == DType::kQ8_0 ? 34 : 18), "\x00\x7c", 2);
            }
            break;
          default: {  // kquant.h's formats: an infinite f16 d in every block
            const int elems = GetDTypeInfo(static_cast<uint32_t>(type())).block_elems;
            const size_t bb = RowBytes(type(), elems);
            const size_t d_off = type() == DType::kQ6_K ? bb - 2 : 0;
            for (int64_t c = 0; c < cols; c += elems) {
              std::memcpy(row + (c / elems) * bb + d_off, "\x00\x7c", 2);
            }
            break;
          }
        }
      }
      std::vector<float> y0 = RandomRow(&rng, cols, 1.0f);
      for (auto [r0, r1] : {std::pair<int64_t, int64_t>{0, rows}, {rows / 4, rows - rows / 4}}) {
        if (r0 >= r1) continue;
        std::vector<float> ref(cols + 16, FromBits(kSentinelBits)), got = ref;
        std::copy(y0.begin(), y0.end(), ref.begin());
        std::copy(y0.begin(), y0.end(), got.begin());
        SetCpuIsa(CpuIsa::kScalar);
        AxpyRows(type(), p.w.data(), cols, a.data(), ref.data(), r0, r1);
        SetCpuIsa(isa());
        AxpyRows(type(), p.w.data(), cols, a.data(), got.data(), r0, r1);
        SetCpuIsa(DetectCpuIsa());
        for (int64_t c = 0; c < cols + 16; ++c) {
          if (c >= cols) {
            ASSERT_EQ(Bits(got[c]), kSentinelBits) << "wrote past y at " << c;
            ASSERT_EQ(Bits(ref[c]), kSentinelBits) << "ref wrote past y at " << c;
            continue;
          }
          double exact = y0[c], abs_sum = std::fabs(y0[c]);
          for (int64_t r = r0; r < r1; ++r) {
            if (a[r] == 0.0f) continue;  // poisoned rows; p.wd predates the poison
            exact += a[r] * p.wd[r][c];
            abs_sum += std::fabs(a[r] * p.wd[r][c]);
          }
          ASSERT_TRUE(std::isfinite(got[c])) << "c=" << c;
          // Each of the (r1 - r0) additions rounds once or twice.
          const double tol = (r1 - r0 + 2) * std::ldexp(1.0, -22) * abs_sum + 1e-30;
          ASSERT_NEAR(got[c], ref[c], tol) << DTypeName(type()) << " c=" << c;
          ASSERT_NEAR(ref[c], exact, tol) << DTypeName(type()) << " c=" << c;
        }
      }
      if (HasFatalFailure()) return;
    }
  }
}

TEST_P(KernelTest, ThreadsSplittingRowsMatchOneCall) {
  // The engine splits a matrix's rows across threads writing one y.
  const int64_t cols = IsQuant(type()) ? 4096 : 1000;
  const Problem p = MakeProblem(type(), 203, cols, 1, 77);
  const std::vector<float> one = RunMatMul(p, isa(), 0, p.rows, p.rows, Product::kMatVec);
  std::vector<float> split(one.size(), FromBits(kSentinelBits));
  SetCpuIsa(isa());
  std::vector<std::thread> threads;
  const int64_t cuts[] = {0, 16, 80, 81, 203};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      MatVecRows(p.type, p.w.data(), p.cols, p.xp.data(), split.data(), cuts[t], cuts[t + 1]);
    });
  }
  for (auto& th : threads) th.join();
  SetCpuIsa(DetectCpuIsa());
  for (size_t i = 0; i < one.size(); ++i) {
    // Same rows, same tiles where the cuts allow: results agree closely.
    if (i >= static_cast<size_t>(p.rows)) {
      ASSERT_EQ(Bits(split[i]), kSentinelBits) << i;
      continue;
    }
    double abs_sum = 0;
    for (int64_t c = 0; c < cols; ++c) abs_sum += std::fabs(p.wd[i][c] * p.xd[0][c]);
    ASSERT_NEAR(split[i], one[i], 2e-5 * abs_sum + 1e-30) << i;
  }
}

// ---- Indexed (sparse) kernels ------------------------------------------------------

// Id lists of several shapes over `rows` rows.
std::vector<std::pair<std::string, std::vector<int32_t>>> IdLists(int64_t rows, unsigned seed) {
  std::mt19937 rng(seed);
  std::vector<std::pair<std::string, std::vector<int32_t>>> lists;
  std::vector<int32_t> all(rows);
  for (int64_t r = 0; r < rows; ++r) all[r] = static_cast<int32_t>(r);
  lists.push_back({"empty", {}});
  lists.push_back({"all", all});
  std::vector<int32_t> shuffled = all;
  std::shuffle(shuffled.begin(), shuffled.end(), rng);
  lists.push_back({"all_shuffled", shuffled});
  lists.push_back({"one_last", {static_cast<int32_t>(rows - 1)}});
  // A random ~10% subset (at least one row), sorted as a mask scan gives it,
  // and the same subset unsorted.
  std::vector<int32_t> sub;
  std::bernoulli_distribution fire(0.1);
  for (int64_t r = 0; r < rows; ++r) {
    if (fire(rng)) sub.push_back(static_cast<int32_t>(r));
  }
  if (sub.empty()) sub.push_back(static_cast<int32_t>(rows / 2));
  lists.push_back({"sparse_sorted", sub});
  std::shuffle(sub.begin(), sub.end(), rng);
  lists.push_back({"sparse_unsorted", sub});
  // Duplicates, and more ids than rows.
  std::uniform_int_distribution<int32_t> pick(0, static_cast<int32_t>(rows - 1));
  std::vector<int32_t> dup;
  for (int64_t k = 0; k < rows + 5; ++k) dup.push_back(pick(rng));
  dup.push_back(dup[0]);
  lists.push_back({"duplicates", dup});
  return lists;
}

// MatVecRowsIndexed: every listed row equals the reference dense MatVecRows
// of that row (scalar, itself checked against double dots above) and the
// double-precision dot; rows not listed, and y past the rows, keep their
// sentinel.
TEST_P(KernelTest, MatVecRowsIndexed) {
  unsigned seed = 900;
  for (int64_t cols : ColsList()) {
    for (int64_t rows : {1, 5, 17, 203}) {
      const Problem p = MakeProblem(type(), rows, cols, 1, seed++);
      const std::vector<float> dense =
          RunMatMul(p, CpuIsa::kScalar, 0, rows, rows, Product::kMatVec);
      for (const auto& [name, ids] : IdLists(rows, seed)) {
        const std::string where = std::string(DTypeName(type())) + " " + CpuIsaName(isa()) +
                                  " rows=" + std::to_string(rows) +
                                  " cols=" + std::to_string(cols) + " ids=" + name;
        std::vector<bool> listed(rows, false);
        for (int32_t id : ids) listed[id] = true;
        std::vector<float> got(rows + 16, FromBits(kSentinelBits));
        SetCpuIsa(isa());
        MatVecRowsIndexed(type(), p.w.data(), cols, p.xp.data(), ids.data(),
                          static_cast<int64_t>(ids.size()), got.data());
        SetCpuIsa(DetectCpuIsa());
        for (int64_t r = 0; r < rows + 16; ++r) {
          if (r >= rows || !listed[r]) {
            ASSERT_EQ(Bits(got[r]), kSentinelBits) << where << ": wrote unlisted y[" << r << "]";
            continue;
          }
          double exact = 0, abs_sum = 0, quant_err = 0;
          for (int64_t c = 0; c < cols; ++c) {
            exact += p.wd[r][c] * p.x[c];
            abs_sum += std::fabs(p.wd[r][c] * p.xd[0][c]);
            quant_err += std::fabs(p.wd[r][c]) * std::fabs(p.x[c] - p.xd[0][c]);
          }
          ASSERT_NEAR(got[r], dense[r], 2e-5 * abs_sum + 1e-30) << where << " r=" << r;
          const double tol = quant_err * 1.0001 + (IsQuant(type()) ? 1e-5 : 1e-6) * abs_sum + 1e-30;
          ASSERT_NEAR(got[r], exact, tol) << where << " r=" << r;
        }
      }
      if (HasFatalFailure()) return;
    }
  }
}

// Fills row r of p's weights with NaNs (f32/f16/bf16) or infinite block
// scales (Q8_0/Q4_0): a row that must not be read poisons y if it is.
void PoisonRow(Problem* p, int64_t r) {
  const size_t rb = RowBytes(p->type, p->cols);
  uint8_t* row = p->w.data() + r * rb;
  for (int64_t c = 0; c < p->cols; ++c) {
    switch (p->type) {
      case DType::kF32:
        std::memcpy(row + 4 * c, "\x00\x00\xc0\x7f", 4);
        break;
      case DType::kF16:
        std::memcpy(row + 2 * c, "\x00\x7e", 2);
        break;
      case DType::kBF16:
        std::memcpy(row + 2 * c, "\x80\x7f", 2);
        break;
      case DType::kQ8_0:
      case DType::kQ4_0:
        if (c % 32 == 0) {
          std::memcpy(row + (c / 32) * (p->type == DType::kQ8_0 ? 34 : 18), "\x00\x7c", 2);
        }
        break;
      default:
        break;
    }
  }
}

// AxpyRowsIndexed against (1) the double-precision sum over the listed rows
// and (2) dense AxpyRows (scalar reference) with a zero-filled dense `a` that
// holds a[k] at rows[k]. (2) needs unique ids; duplicates are checked against
// (1) only. Rows with a[k] == 0 (or -0) have poisoned weights: they must be
// skipped, not read.
TEST_P(KernelTest, AxpyRowsIndexed) {
  unsigned seed = 1300;
  for (int64_t cols : ColsList()) {
    for (int64_t rows : {1, 5, 17, 203}) {
      Problem p = MakeProblem(type(), rows, cols, 1, seed++);
      for (const auto& [name, ids] : IdLists(rows, seed)) {
        const std::string where = std::string(DTypeName(type())) + " " + CpuIsaName(isa()) +
                                  " rows=" + std::to_string(rows) +
                                  " cols=" + std::to_string(cols) + " ids=" + name;
        const int64_t n = static_cast<int64_t>(ids.size());
        std::mt19937 rng(seed + 7);
        std::vector<float> a = RandomRow(&rng, n, 1.0f);
        Problem q = p;  // poisoned copy
        std::vector<bool> zero_row(rows, false), used_row(rows, false);
        for (int64_t k = 0; k < n; ++k) used_row[ids[k]] = true;
        for (int64_t k = 0; k < n; k += 4) {
          a[k] = (k % 8) ? -0.0f : 0.0f;
          zero_row[ids[k]] = true;
        }
        // Poison a row only if no nonzero a[k] refers to it (duplicates).
        for (int64_t k = 0; k < n; ++k) {
          if (a[k] != 0.0f) zero_row[ids[k]] = false;
        }
        for (int64_t r = 0; r < rows; ++r) {
          // Unlisted rows are poisoned too: reading one is a bug.
          if (zero_row[r] || !used_row[r]) PoisonRow(&q, r);
        }
        std::vector<float> y0 = RandomRow(&rng, cols, 1.0f);
        std::vector<float> got(cols + 16, FromBits(kSentinelBits));
        std::copy(y0.begin(), y0.end(), got.begin());
        SetCpuIsa(isa());
        AxpyRowsIndexed(type(), q.w.data(), cols, ids.data(), a.data(), n, got.data());
        SetCpuIsa(DetectCpuIsa());

        const bool unique = name != "duplicates";
        std::vector<float> ref = got;
        if (unique) {
          std::vector<float> dense_a(rows, 0.0f);
          for (int64_t k = 0; k < n; ++k) dense_a[ids[k]] = a[k];
          std::copy(y0.begin(), y0.end(), ref.begin());
          SetCpuIsa(CpuIsa::kScalar);
          AxpyRows(type(), p.w.data(), cols, dense_a.data(), ref.data(), 0, rows);
          SetCpuIsa(DetectCpuIsa());
        }
        for (int64_t c = 0; c < cols + 16; ++c) {
          if (c >= cols) {
            ASSERT_EQ(Bits(got[c]), kSentinelBits) << where << ": wrote past y at " << c;
            continue;
          }
          double exact = y0[c], abs_sum = std::fabs(y0[c]);
          for (int64_t k = 0; k < n; ++k) {
            if (a[k] == 0.0f) continue;
            exact += a[k] * p.wd[ids[k]][c];
            abs_sum += std::fabs(a[k] * p.wd[ids[k]][c]);
          }
          ASSERT_TRUE(std::isfinite(got[c])) << where << " c=" << c;
          const double tol = (n + 2) * std::ldexp(1.0, -22) * abs_sum + 1e-30;
          ASSERT_NEAR(got[c], exact, tol) << where << " c=" << c;
          if (unique) {
            ASSERT_NEAR(got[c], ref[c], tol) << where << " c=" << c;
          }
        }
        if (n == 0) {
          for (int64_t c = 0; c < cols; ++c) ASSERT_EQ(Bits(got[c]), Bits(y0[c])) << where;
        }
      }
      if (HasFatalFailure()) return;
    }
  }
}

// AxpyRowsIndexedColumns over block-aligned column slices equals the whole
// rows' AxpyRowsIndexed bit for bit, and writes nothing past its slice.
TEST_P(KernelTest, AxpyRowsIndexedColumnsEqualsWholeRows) {
  const int64_t block = IsKQuant(type()) ? 256 : 32;
  const int64_t cols = 8 * block, rows = 61;
  const Problem p = MakeProblem(type(), rows, cols, 1, 4242);
  std::vector<int32_t> ids;
  for (int32_t r = 1; r < rows; r += 2) ids.push_back(r);
  const int64_t n = static_cast<int64_t>(ids.size());
  std::mt19937 rng(9);
  std::vector<float> a = RandomRow(&rng, n, 1.0f);
  a[3] = 0.0f;  // skipped, as whole rows skip it
  SetCpuIsa(isa());
  std::vector<float> whole(cols, 0.25f);
  AxpyRowsIndexed(type(), p.w.data(), cols, ids.data(), a.data(), n, whole.data());
  for (const auto& [c0, c1] : std::vector<std::pair<int64_t, int64_t>>{
           {0, cols}, {0, block}, {block, 3 * block}, {5 * block, cols}}) {
    std::vector<float> slice(c1 - c0 + 8, 0.25f);
    slice[c1 - c0] = FromBits(kSentinelBits);
    AxpyRowsIndexedColumns(type(), p.w.data(), cols, c0, c1, ids.data(), a.data(), n, slice.data());
    for (int64_t c = c0; c < c1; ++c) {
      ASSERT_EQ(Bits(slice[c - c0]), Bits(whole[c]))
          << DTypeName(type()) << " " << CpuIsaName(isa()) << " [" << c0 << ", " << c1
          << ") c=" << c;
    }
    ASSERT_EQ(Bits(slice[c1 - c0]), kSentinelBits) << "wrote past the slice";
  }
  SetCpuIsa(DetectCpuIsa());
}

TEST_P(KernelTest, IndexedThreadsSplittingIdsMatchOneCall) {
  // The engine splits an id list across threads: the matvec into one y
  // (disjoint ids), the axpy into one y per thread, summed afterwards.
  const int64_t cols = IsQuant(type()) ? 4096 : 1000;
  const int64_t rows = 301;
  const Problem p = MakeProblem(type(), rows, cols, 1, 78);
  std::vector<int32_t> ids;
  for (int32_t r = 3; r < rows; r += 3) ids.push_back(r);
  const int64_t n = static_cast<int64_t>(ids.size());
  std::mt19937 rng(5);
  const std::vector<float> a = RandomRow(&rng, n, 1.0f);
  const int64_t cuts[] = {0, 13, 14, 50, n};

  SetCpuIsa(CpuIsa::kScalar);
  std::vector<float> y_ref(rows, FromBits(kSentinelBits)), z_ref(cols, 0.0f);
  MatVecRowsIndexed(type(), p.w.data(), cols, p.xp.data(), ids.data(), n, y_ref.data());
  AxpyRowsIndexed(type(), p.w.data(), cols, ids.data(), a.data(), n, z_ref.data());

  SetCpuIsa(isa());
  std::vector<float> y(rows, FromBits(kSentinelBits));
  std::vector<std::vector<float>> z(4, std::vector<float>(cols, 0.0f));
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      const int64_t k0 = cuts[t], k1 = cuts[t + 1];
      MatVecRowsIndexed(type(), p.w.data(), cols, p.xp.data(), ids.data() + k0, k1 - k0, y.data());
      AxpyRowsIndexed(type(), p.w.data(), cols, ids.data() + k0, a.data() + k0, k1 - k0,
                      z[t].data());
    });
  }
  for (auto& th : threads) th.join();
  SetCpuIsa(DetectCpuIsa());
  for (int64_t r = 0; r < rows; ++r) {
    if (r % 3 != 0 || r == 0) {
      ASSERT_EQ(Bits(y[r]), kSentinelBits) << r;
      continue;
    }
    double abs_sum = 0;
    for (int64_t c = 0; c < cols; ++c) abs_sum += std::fabs(p.wd[r][c] * p.xd[0][c]);
    ASSERT_NEAR(y[r], y_ref[r], 2e-5 * abs_sum + 1e-30) << r;
  }
  for (int64_t c = 0; c < cols; ++c) {
    double abs_sum = 0;
    for (int64_t k = 0; k < n; ++k) abs_sum += std::fabs(a[k] * p.wd[ids[k]][c]);
    const float sum = z[0][c] + z[1][c] + z[2][c] + z[3][c];
    ASSERT_NEAR(sum, z_ref[c], (n + 4) * std::ldexp(1.0, -22) * abs_sum + 1e-30) << c;
  }
}

// Each batch column of a batched product (MatMulRows) is bit for bit the
// lone product of that column: the same sums in the same order (quantized:
// integer sums and the same float steps; float: one running sum per (row,
// column) in every tile shape). Batched decode steps (Engine::EvalBatch) and
// the sparse FFN's shared-range gate (common/compute/neuron_ffn.cpp) rely on it.
TEST(KernelBatchTest, BatchColumnsEqualLoneProducts) {
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16, DType::kQ8_0, DType::kQ4_0, DType::kQ4_1,
                  DType::kQ5_0, DType::kQ5_1, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K}) {
    // Floats: a short row (under the short-row cutoff) and a long one with a tail.
    const std::vector<int64_t> widths = IsKQuant(t)  ? std::vector<int64_t>{4096 + 256}
                                        : IsQuant(t) ? std::vector<int64_t>{4096 + 32}
                                                     : std::vector<int64_t>{1000, 4096 + 37};
    for (int64_t cols : widths) {
      for (int level = 0; level <= static_cast<int>(DetectCpuIsa()); ++level) {
        const CpuIsa isa = static_cast<CpuIsa>(level);
        SCOPED_TRACE(std::string(DTypeName(t)) + " " + CpuIsaName(isa) + " cols " +
                     std::to_string(cols));
        const int64_t rows = 19, batch = 7;
        const Problem p = MakeProblem(t, rows, cols, batch, 4242);
        SetCpuIsa(isa);
        std::vector<float> y(batch * rows), lone(rows);
        MatMulRows(t, p.w.data(), cols, p.xp.data(), batch, y.data(), rows, 0, rows);
        for (int64_t b = 0; b < batch; ++b) {
          MatVecRows(t, p.w.data(), cols, p.xp.data() + b * p.stride, lone.data(), 0, rows);
          for (int64_t r = 0; r < rows; ++r) {
            ASSERT_EQ(Bits(y[b * rows + r]), Bits(lone[r])) << "b=" << b << " r=" << r;
          }
        }
        SetCpuIsa(DetectCpuIsa());
      }
    }
  }
}

// A GemmRows column depends only on that column and row: the same bits
// alone, at another position in another batch, or over another row range
// (the engine batches prompt rows of several sequences and relies on it).
TEST(KernelBatchTest, GemmColumnsDependOnlyOnTheirColumnAndRow) {
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16, DType::kQ8_0, DType::kQ4_0, DType::kQ4_K,
                  DType::kQ5_K, DType::kQ6_K}) {
    SCOPED_TRACE(DTypeName(t));
    // (Float rows of 1024 are 4 KiB apart, which a batch copies: matmul.cpp.)
    const int64_t cols = IsQuant(t) ? 1024 - (IsKQuant(t) ? 0 : 32) : 1024, rows = 75, batch = 15;
    const Problem p = MakeProblem(t, rows, cols, batch, 77);
    std::vector<float> y(batch * rows), lone(rows);
    GemmRows(t, p.w.data(), cols, p.xp.data(), batch, y.data(), rows, 0, rows);
    for (int64_t b = 0; b < batch; ++b) {
      GemmRows(t, p.w.data(), cols, p.xp.data() + b * p.stride, 1, lone.data(), rows, 0, rows);
      for (int64_t r = 0; r < rows; ++r) {
        ASSERT_EQ(Bits(y[b * rows + r]), Bits(lone[r])) << "b=" << b << " r=" << r;
      }
      // Rows [7, 70) of columns b.. as a batch of their own.
      std::vector<float> part((batch - b) * rows);
      GemmRows(t, p.w.data(), cols, p.xp.data() + b * p.stride, batch - b, part.data(), rows, 7,
               70);
      for (int64_t r = 7; r < 70; ++r) {
        ASSERT_EQ(Bits(part[r]), Bits(lone[r])) << "b=" << b << " r=" << r << " (range)";
      }
    }
  }
}

// The block formats' GemmRows give the same bits at every SIMD level this
// CPU runs — AVX-512, AVX2 with AVX-VNNI, AVX2 with vpmaddubsw — since each
// block's integer dot is exact and is scaled and added alike. (The
// parameterized GemmRows cases check the level in use against the scalar
// reference; this reaches the AVX2 path a VNNI CPU would not take.)
TEST(KernelBatchTest, GemmLevelsAgreeBitForBit) {
  if (DetectCpuIsa() == CpuIsa::kScalar) GTEST_SKIP() << "no AVX2 on this CPU";
  for (DType t : {DType::kQ8_0, DType::kQ4_0, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K}) {
    SCOPED_TRACE(DTypeName(t));
    const int64_t cols = IsKQuant(t) ? 1280 : 1000 - 8, rows = 45, batch = 13;
    const Problem p = MakeProblem(t, rows, cols, batch, 91);
    auto run = [&](CpuIsa isa, bool vnni) {
      SetCpuIsa(isa);
      SetAvxVnni(vnni);
      std::vector<float> y(batch * rows);
      GemmRows(t, p.w.data(), cols, p.xp.data(), batch, y.data(), rows, 0, rows);
      SetCpuIsa(DetectCpuIsa());
      SetAvxVnni(true);
      return y;
    };
    struct Level {
      const char* name;
      std::vector<float> y;
    };
    std::vector<Level> levels;
    if (DetectCpuIsa() == CpuIsa::kAvx512) levels.push_back({"avx512", run(CpuIsa::kAvx512, true)});
    if (HasAvxVnni()) levels.push_back({"avx2+vnni", run(CpuIsa::kAvx2, true)});
    // Q8_0's unsigned bytes overflow vpmaddubsw's pairs: without VNNI it
    // takes the exact tiles, whose sums are in another order.
    if (t != DType::kQ8_0) levels.push_back({"avx2", run(CpuIsa::kAvx2, false)});
    // Against the scalar reference, within the GemmRows cases' tolerance.
    const std::vector<float> ref = [&] {
      SetCpuIsa(CpuIsa::kScalar);
      std::vector<float> y(batch * rows);
      MatMulRows(t, p.w.data(), cols, p.xp.data(), batch, y.data(), rows, 0, rows);
      SetCpuIsa(DetectCpuIsa());
      return y;
    }();
    for (const Level& l : levels) {
      for (int64_t i = 0; i < batch * rows; ++i) {
        ASSERT_NEAR(l.y[i], ref[i], 1e-4 * (std::fabs(ref[i]) + 1.0)) << l.name << " at " << i;
        ASSERT_EQ(Bits(l.y[i]), Bits(levels[0].y[i]))
            << l.name << " vs " << levels[0].name << " at " << i;
      }
    }
  }
}

std::string ParamName(const ::testing::TestParamInfo<KernelParam>& info) {
  return std::string(DTypeName(std::get<0>(info.param))) + "_" +
         CpuIsaName(std::get<1>(info.param));
}

// The ISA levels this CPU runs: cases exist only for those, so a level the
// CPU lacks is absent from the test list (visible there) instead of a skip
// that a run reports as passed.
std::vector<CpuIsa> AvailableIsas() {
  std::vector<CpuIsa> out;
  for (CpuIsa isa : {CpuIsa::kScalar, CpuIsa::kAvx2, CpuIsa::kAvx512}) {
    if (static_cast<int>(isa) <= static_cast<int>(DetectCpuIsa())) out.push_back(isa);
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(
    AllTypesAllIsas, KernelTest,
    ::testing::Combine(::testing::Values(DType::kF32, DType::kF16, DType::kBF16, DType::kQ8_0,
                                         DType::kQ4_0, DType::kQ4_1, DType::kQ5_0, DType::kQ5_1,
                                         DType::kQ4_K, DType::kQ5_K, DType::kQ6_K),
                       ::testing::ValuesIn(AvailableIsas())),
    ParamName);

}  // namespace
}  // namespace pi
