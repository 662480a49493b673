// Repacked weights (kernels/cpu/weight_panels.h): the AVX-512 and AVX2
// kernels against the scalar reference (bit for bit: the same sums in the
// same order), all
// against GemmRows over the file's layout (bit for bit: the same arithmetic,
// packed independently) and against double-precision dots of the decoded
// weights and activations; sentinels after every buffer; a column's bits
// independent of the batch around it and of the row range.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "kernels/cpu/fp16.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/quant.h"
#include "kernels/cpu/weight_panels.h"
#include "kernels/dtype.h"

namespace pi {
namespace {

constexpr uint32_t kSentinelBits = 0x7FA5A5A5;  // a NaN no kernel would produce
constexpr uint8_t kSentinelByte = 0xA7;

uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
float Sentinel() {
  float f;
  std::memcpy(&f, &kSentinelBits, 4);
  return f;
}

bool IsFloat(DType t) {
  return t == DType::kF32 || t == DType::kF16 || t == DType::kBF16;
}
bool IsK(DType t) {  // super-blocks of 256
  return t == DType::kQ4_K || t == DType::kQ5_K || t == DType::kQ6_K;
}

struct Problem {
  DType type;
  int64_t rows, cols, batch;
  std::vector<uint8_t> w;       // the file's layout
  std::vector<uint8_t> panels;  // repacked, 64-byte aligned at panel(), sentinels after
  std::vector<uint8_t> xp;      // prepared activations
  size_t stride;                // bytes per prepared activation
  std::vector<double> wd, xd;   // decoded weights [rows, cols], activations [batch, cols]
  const uint8_t* panel() const { return Aligned(panels.data()); }
  static const uint8_t* Aligned(const uint8_t* p) {
    return p + (64 - reinterpret_cast<uintptr_t>(p) % 64) % 64;
  }
};

Problem Make(DType t, int64_t rows, int64_t cols, int64_t batch, unsigned seed) {
  Problem p{t, rows, cols, batch, {}, {}, {}, 0, {}, {}};
  std::mt19937 rng(seed);
  std::normal_distribution<float> n(0.0f, 1.0f);
  const size_t rb = RowBytes(t, cols);
  p.w.resize(rows * rb);
  std::vector<float> v(cols), dec(cols);
  for (int64_t r = 0; r < rows; ++r) {
    const float scale = r % 5 == 0 ? 0.01f : 1.0f;  // rows of very different scales
    for (float& f : v) f = scale * n(rng);
    QuantizeRow(t, v.data(), p.w.data() + r * rb, cols);
    DequantizeRow(t, p.w.data() + r * rb, dec.data(), cols);
    p.wd.insert(p.wd.end(), dec.begin(), dec.end());
  }
  p.stride = PreparedActivationBytes(t, cols);
  p.xp.resize(batch * p.stride);
  for (int64_t b = 0; b < batch; ++b) {
    for (float& f : v) f = (b % 2 ? 3.0f : 0.2f) * n(rng);
    PrepareActivation(t, v.data(), cols, p.xp.data() + b * p.stride);
    // Block formats: the kernels see the activation's Q8_0 copy (the
    // prepared row's head); floats the f32 row itself.
    if (IsFloat(t)) {
      p.xd.insert(p.xd.end(), v.begin(), v.end());
    } else {
      DequantizeRow(DType::kQ8_0, p.xp.data() + b * p.stride, dec.data(), cols);
      p.xd.insert(p.xd.end(), dec.begin(), dec.end());
    }
  }
  const size_t bytes = WeightPanelBytes(t, rows, cols);
  p.panels.assign(bytes + 64 + 64, kSentinelByte);
  RepackWeights(t, p.w.data(), cols, 0, rows, const_cast<uint8_t*>(p.panel()));
  return p;
}

void ExpectPanelSentinels(const Problem& p) {
  const size_t bytes = WeightPanelBytes(p.type, p.rows, p.cols);
  const uint8_t* end = p.panel() + bytes;
  for (const uint8_t* q = end; q < p.panels.data() + p.panels.size(); ++q) {
    ASSERT_EQ(*q, kSentinelByte) << "repack wrote past its end";
  }
}

// Rows [r0, r1) of every column into a sentinel-filled buffer (ldy = rows + 3).
// `vnni`: the AVX2 level's AVX-VNNI kernels, else its vpmaddubsw ones.
std::vector<float> RunPanels(const Problem& p, CpuIsa isa, int64_t r0, int64_t r1,
                             bool vnni = true) {
  const int64_t ldy = p.rows + 3;
  std::vector<float> y(p.batch * ldy + 16, Sentinel());
  SetCpuIsa(isa);
  SetAvxVnni(vnni);
  WeightPanelRows(p.type, p.panel(), p.cols, p.xp.data(), p.batch, y.data(), ldy, r0, r1);
  SetCpuIsa(DetectCpuIsa());
  SetAvxVnni(true);
  return y;
}

void CheckProblem(const Problem& p, int64_t r0, int64_t r1) {
  const int64_t ldy = p.rows + 3;
  const std::string where = std::string(DTypeName(p.type)) + " rows=" + std::to_string(p.rows) +
                            " cols=" + std::to_string(p.cols) +
                            " batch=" + std::to_string(p.batch) + " range=[" + std::to_string(r0) +
                            "," + std::to_string(r1) + ")";
  const std::vector<float> ref = RunPanels(p, CpuIsa::kScalar, r0, r1);
  // Every SIMD level this CPU runs (AVX2 with and without AVX-VNNI).
  std::vector<std::pair<std::string, std::vector<float>>> levels;
  if (DetectCpuIsa() != CpuIsa::kScalar) {
    if (HasAvxVnni()) levels.emplace_back("avx2+vnni", RunPanels(p, CpuIsa::kAvx2, r0, r1, true));
    levels.emplace_back("avx2", RunPanels(p, CpuIsa::kAvx2, r0, r1, false));
  }
  std::vector<float> fast = ref, gemm(ref.size(), Sentinel());
  const bool avx512 = DetectCpuIsa() == CpuIsa::kAvx512;
  if (avx512) {
    fast = RunPanels(p, CpuIsa::kAvx512, r0, r1);
    GemmRows(p.type, p.w.data(), p.cols, p.xp.data(), p.batch, gemm.data(), ldy, r0, r1);
  }
  for (int64_t i = 0; i < static_cast<int64_t>(ref.size()); ++i) {
    const int64_t b = i / ldy, r = i % ldy;
    if (b >= p.batch || r < r0 || r >= r1) {
      ASSERT_EQ(Bits(ref[i]), kSentinelBits) << where << ": reference wrote outside at " << i;
      ASSERT_EQ(Bits(fast[i]), kSentinelBits) << where << ": kernel wrote outside at " << i;
      for (const auto& [name, y] : levels) {
        ASSERT_EQ(Bits(y[i]), kSentinelBits) << where << ": " << name << " wrote outside at " << i;
      }
      continue;
    }
    double exact = 0, abs_sum = 0;
    for (int64_t c = 0; c < p.cols; ++c) {
      const double t = p.wd[r * p.cols + c] * p.xd[b * p.cols + c];
      exact += t;
      abs_sum += std::fabs(t);
    }
    // Block formats: each block's dot is exact; what remains is f32 rounding
    // of the scaled block sums and of the f32 products of two scales. Floats:
    // f32 rounding of a running sum over k.
    const double tol = (IsFloat(p.type) ? 1e-6 * std::sqrt(static_cast<double>(p.cols)) : 1e-5);
    ASSERT_NEAR(ref[i], exact, tol * abs_sum + 1e-30) << where << " b=" << b << " r=" << r;
    ASSERT_EQ(Bits(fast[i]), Bits(ref[i])) << where << " b=" << b << " r=" << r;
    for (const auto& [name, y] : levels) {
      ASSERT_EQ(Bits(y[i]), Bits(ref[i])) << where << " " << name << " b=" << b << " r=" << r;
    }
    if (avx512) {
      ASSERT_EQ(Bits(gemm[i]), Bits(ref[i])) << where << " (GemmRows) b=" << b << " r=" << r;
    }
  }
}

class WeightPanelsTest : public ::testing::TestWithParam<DType> {};

// Shapes that cut the kernel's pieces: one panel and several, block counts
// odd and past a chunk (16 blocks), batches of one call (<= 8 columns) and
// several, balanced or not.
TEST_P(WeightPanelsTest, MatchesReferenceAndGemm) {
  unsigned seed = 1;
  // Floats: chunks of 128 k, calls of 12; past 36 columns, blocks of 2048 k
  // (the last one short) x 3 calls.
  // K formats: also a batch past WeightPanelsMaxBatch, where callers take
  // GemmRows instead (its bits are checked equal below).
  const std::vector<int64_t> batches =
      IsFloat(GetParam()) ? std::vector<int64_t>{1, 5, 12, 13, 30, 40}
      : IsK(GetParam())   ? std::vector<int64_t>{1, 3, 8, 9, 13, 40, 130}
                          : std::vector<int64_t>{1, 3, 8, 9, 13, 40};
  // K formats: super-blocks of 256, chunks of 2.
  const std::vector<int64_t> cols_list =
      IsFloat(GetParam()) ? std::vector<int64_t>{1, 33, 300, 1024, 2048 + 300}
      : IsK(GetParam())   ? std::vector<int64_t>{256, 768, 1280, 4096 + 256}
                          : std::vector<int64_t>{32, 96, 544, 4096 + 32};
  for (int64_t batch : batches) {
    for (int64_t cols : cols_list) {
      for (int64_t rows : {32, 96}) {
        const Problem p = Make(GetParam(), rows, cols, batch, seed++);
        ExpectPanelSentinels(p);
        CheckProblem(p, 0, rows);
        if (rows > 32) CheckProblem(p, 32, rows);
        if (HasFatalFailure()) return;
      }
    }
  }
}

// Repacking disjoint row ranges (as threads do) gives the whole repack.
TEST_P(WeightPanelsTest, RepackByRangesEqualsWhole) {
  const Problem p = Make(GetParam(), 128, IsK(GetParam()) ? 768 : 800, 1, 7);
  std::vector<uint8_t> parts(p.panels.size() + 64, 0);
  uint8_t* dst = const_cast<uint8_t*>(Problem::Aligned(parts.data()));
  for (int64_t r0 : {96, 0, 64, 32}) RepackWeights(p.type, p.w.data(), p.cols, r0, r0 + 32, dst);
  const size_t bytes = WeightPanelBytes(p.type, p.rows, p.cols);
  ASSERT_EQ(std::memcmp(dst, p.panel(), bytes), 0);
  // The same bytes as the file, in another order: every weight is kept
  // (Q4_K, Q5_K: their packed 6-bit scales and mins unpacked, 4736 bytes
  // for 4608, 5760 for 5632).
  const size_t expect = GetParam() == DType::kQ4_K   ? p.w.size() / 4608 * 4736
                        : GetParam() == DType::kQ5_K ? p.w.size() / 5632 * 5760
                                                     : p.w.size();
  EXPECT_EQ(bytes, expect);
}

// A column's bits depend only on that column and row: alone, in a larger
// batch at another position, or over another row range.
TEST_P(WeightPanelsTest, ColumnsDependOnlyOnTheirColumnAndRow) {
  // Wide and narrow calls; floats: a batch in column blocks over two k
  // blocks and two blocks of 8 panels.
  const bool fl = IsFloat(GetParam());
  const Problem p =
      Make(GetParam(), fl ? 288 : 96, IsK(GetParam()) ? 1024 + 256 : 2048 + 64, 37, 11);
  for (CpuIsa isa : {CpuIsa::kScalar, DetectCpuIsa()}) {
    SetCpuIsa(isa);
    std::vector<float> all(p.batch * p.rows), lone(p.rows), part(p.batch * p.rows);
    WeightPanelRows(p.type, p.panel(), p.cols, p.xp.data(), p.batch, all.data(), p.rows, 0, p.rows);
    for (int64_t b = 0; b < p.batch; b += 4) {
      WeightPanelRows(p.type, p.panel(), p.cols, p.xp.data() + b * p.stride, 1, lone.data(), p.rows,
                      0, p.rows);
      WeightPanelRows(p.type, p.panel(), p.cols, p.xp.data() + b * p.stride, p.batch - b,
                      part.data(), p.rows, 32, 64);
      for (int64_t r = 0; r < p.rows; ++r) {
        ASSERT_EQ(Bits(all[b * p.rows + r]), Bits(lone[r])) << CpuIsaName(isa) << " b=" << b;
        if (r >= 32 && r < 64) {
          ASSERT_EQ(Bits(part[r]), Bits(lone[r])) << "range, b=" << b;
        }
      }
    }
    SetCpuIsa(DetectCpuIsa());
  }
}

TEST(WeightPanelsShapeTest, WhatCanBeRepacked) {
  EXPECT_TRUE(CanRepackWeights(DType::kQ4_0, 4096, 4096));
  EXPECT_TRUE(CanRepackWeights(DType::kQ8_0, 32, 32));
  EXPECT_FALSE(CanRepackWeights(DType::kQ4_0, 32001, 4096));  // rows not whole panels
  EXPECT_FALSE(CanRepackWeights(DType::kQ4_0, 0, 4096));
  EXPECT_TRUE(CanRepackWeights(DType::kF16, 4096, 4100));    // float rows of any length
  EXPECT_FALSE(CanRepackWeights(DType::kQ8_0, 4096, 4100));  // blocks of 32
  EXPECT_TRUE(CanRepackWeights(DType::kQ4_K, 4096, 4096));
  EXPECT_FALSE(CanRepackWeights(DType::kQ4_K, 4096, 4096 + 32));  // super-blocks of 256
  EXPECT_TRUE(CanRepackWeights(DType::kQ6_K, 4096, 4096));
  EXPECT_TRUE(CanRepackWeights(DType::kQ5_K, 4096, 4096));
  EXPECT_FALSE(CanRepackWeights(DType::kQ4_1, 4096, 4096));  // no panel layout
}

std::string TypeName(const ::testing::TestParamInfo<DType>& p) {
  return DTypeName(p.param);
}

INSTANTIATE_TEST_SUITE_P(Types, WeightPanelsTest,
                         ::testing::Values(DType::kQ4_0, DType::kQ8_0, DType::kQ4_K, DType::kQ5_K,
                                           DType::kQ6_K, DType::kF32, DType::kF16, DType::kBF16),
                         TypeName);

}  // namespace
}  // namespace pi
