// CUDA matvec against a double-precision dot over the CPU-dequantized rows.
// Label "gpu": skipped (with the reason) where no CUDA device exists.
#include "kernels/cuda/matvec.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "kernels/cpu/quant.h"

namespace pi {
namespace {

class CudaMatVecTest : public ::testing::TestWithParam<DType> {
 protected:
  void SetUp() override {
    std::string why;
    if (!cuda::DeviceAvailable(&why)) GTEST_SKIP() << why;
  }
};

TEST_P(CudaMatVecTest, MatchesDequantizedReference) {
  const DType type = GetParam();
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{1, 32}, {37, 96}, {1024, 4096}}) {
    std::mt19937 rng(static_cast<uint32_t>(rows * 31 + cols));
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    const int64_t rb = RowBytes(type, cols);
    std::vector<uint8_t> w(rows * rb);
    std::vector<float> row(cols), x(cols), deq(rows * cols);
    for (int64_t r = 0; r < rows; ++r) {
      for (float& v : row) v = u(rng);
      QuantizeRow(type, row.data(), w.data() + r * rb, cols);
      DequantizeRow(type, w.data() + r * rb, deq.data() + r * cols, cols);
    }
    for (float& v : x) v = u(rng);

    void *dw = nullptr, *dx = nullptr, *dy = nullptr;
    std::string err;
    ASSERT_TRUE(cuda::Malloc(&dw, w.size(), &err)) << err;
    ASSERT_TRUE(cuda::Malloc(&dx, cols * sizeof(float), &err)) << err;
    ASSERT_TRUE(cuda::Malloc(&dy, (rows + 1) * sizeof(float), &err)) << err;
    std::vector<float> y(rows + 1, 1234.5f);  // one sentinel past the end
    ASSERT_TRUE(cuda::CopyToDevice(dw, w.data(), w.size(), &err)) << err;
    ASSERT_TRUE(cuda::CopyToDevice(dx, x.data(), cols * sizeof(float), &err)) << err;
    ASSERT_TRUE(cuda::CopyToDevice(dy, y.data(), y.size() * sizeof(float), &err)) << err;
    ASSERT_TRUE(
        cuda::MatVec(type, dw, rows, cols, static_cast<float*>(dx), static_cast<float*>(dy), &err))
        << err;
    ASSERT_TRUE(cuda::CopyToHost(y.data(), dy, y.size() * sizeof(float), &err)) << err;
    for (int64_t r = 0; r < rows; ++r) {
      double ref = 0, mag = 0;
      for (int64_t c = 0; c < cols; ++c) {
        ref += static_cast<double>(deq[r * cols + c]) * x[c];
        mag += std::fabs(static_cast<double>(deq[r * cols + c]) * x[c]);
      }
      ASSERT_NEAR(y[r], ref, 1e-5 * mag + 1e-6) << DTypeName(type) << " row " << r;
    }
    EXPECT_EQ(y[rows], 1234.5f);
    cuda::Free(dw);
    cuda::Free(dx);
    cuda::Free(dy);
  }
}

INSTANTIATE_TEST_SUITE_P(AllTypes, CudaMatVecTest,
                         ::testing::Values(DType::kF32, DType::kF16, DType::kBF16, DType::kQ8_0,
                                           DType::kQ4_0),
                         [](const auto& p) { return std::string(DTypeName(p.param)); });

}  // namespace
}  // namespace pi
