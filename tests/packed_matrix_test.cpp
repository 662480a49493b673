// The packed weight layout of the CUDA kernels (kernels/cuda/packed_matrix.h),
// on the CPU: packing any rows of any type, in order or gathered by id,
// unpacks to exactly what DequantizeRow gives for the original rows; the
// padding is zero and the sizes are 256-byte multiples with 16-byte aligned
// blocks.
#include "kernels/cuda/packed_matrix.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "kernels/cpu/quant.h"

namespace pi {
namespace {

class PackedMatrixTest : public ::testing::TestWithParam<DType> {};

TEST_P(PackedMatrixTest, UnpacksToTheOriginalRows) {
  const DType t = GetParam();
  const int64_t rows = 13, cols = 96;
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(-2.0f, 2.0f);
  const int64_t rb = RowBytes(t, cols);
  std::vector<uint8_t> src(rows * rb);
  std::vector<float> row(cols);
  for (int64_t r = 0; r < rows; ++r) {
    for (float& v : row) v = u(rng);
    QuantizeRow(t, row.data(), src.data() + r * rb, cols);
  }
  const std::vector<int32_t> ids = {12, 0, 7, 7, 3};  // gathered, in any order
  for (bool gather : {false, true}) {
    const int64_t n = gather ? static_cast<int64_t>(ids.size()) : rows;
    const int64_t bytes = PackedMatrixBytes(t, n, cols);
    EXPECT_EQ(bytes % 256, 0);
    std::vector<uint8_t> packed(bytes + 64, 0xAB);  // sentinels past the end
    PackRows(t, src.data(), cols, gather ? ids.data() : nullptr, n, packed.data());
    std::vector<float> want(cols), got(cols);
    for (int64_t i = 0; i < n; ++i) {
      DequantizeRow(t, src.data() + (gather ? ids[i] : i) * rb, want.data(), cols);
      UnpackRow(t, packed.data(), n, cols, i, got.data());
      ASSERT_EQ(got, want) << DTypeName(t) << " row " << i << " gather " << gather;
    }
    for (int i = 0; i < 64; ++i) ASSERT_EQ(packed[bytes + i], 0xAB) << "wrote past the end";
    if (PackedQuantBytes(t) > 0) {
      const int64_t quants = n * (cols / 32) * PackedQuantBytes(t);
      const int64_t scales = PackedScalesOffset(t, n, cols);
      EXPECT_EQ(scales % 256, 0);
      for (int64_t i = quants; i < scales; ++i) ASSERT_EQ(packed[i], 0) << "padding " << i;
      for (int64_t i = scales + n * (cols / 32) * 2; i < bytes; ++i) ASSERT_EQ(packed[i], 0);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Types, PackedMatrixTest,
                         ::testing::Values(DType::kF32, DType::kF16, DType::kBF16, DType::kQ8_0,
                                           DType::kQ4_0),
                         [](const auto& p) { return std::string(DTypeName(p.param)); });

TEST(PackedMatrix, TypesAndSizes) {
  EXPECT_TRUE(PackedTypeSupported(DType::kQ4_0));
  EXPECT_FALSE(PackedTypeSupported(DType::kQ4_1));
  EXPECT_EQ(PackedQuantBytes(DType::kQ8_0), 32);
  EXPECT_EQ(PackedQuantBytes(DType::kQ4_0), 16);
  EXPECT_EQ(PackedQuantBytes(DType::kF16), 0);
  // 4096 x 4096 Q4_0: 8 MiB of quants, then 1 MiB of scales.
  EXPECT_EQ(PackedScalesOffset(DType::kQ4_0, 4096, 4096), 8 << 20);
  EXPECT_EQ(PackedMatrixBytes(DType::kQ4_0, 4096, 4096), 9 << 20);
  EXPECT_EQ(PackedMatrixBytes(DType::kF16, 3, 8), 256);
}

}  // namespace
}  // namespace pi
