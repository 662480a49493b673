// Norms, RoPE, softmax, activations and one attention head against
// double-precision loops written out here.
#include "kernels/cpu/ops.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

namespace pi {
namespace {

std::vector<float> Random(int n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-2.0f, 2.0f);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

TEST(OpsTest, RmsNorm) {
  const int n = 4096 + 7;
  std::vector<float> x = Random(n, 1), w = Random(n, 2), out(n + 1, 123.0f);
  RmsNorm(x.data(), w.data(), n, 1e-5f, out.data());
  double ss = 0;
  for (float v : x) ss += static_cast<double>(v) * v;
  const double scale = 1.0 / std::sqrt(ss / n + 1e-5);
  for (int i = 0; i < n; ++i) ASSERT_NEAR(out[i], x[i] * scale * w[i], 1e-5) << i;
  EXPECT_EQ(out[n], 123.0f);  // sentinel
}

TEST(OpsTest, RopeNormalRotatesAdjacentPairs) {
  const int heads = 3, head_dim = 8, rope_dims = 6, pos = 37;
  const float theta = 10000.0f;
  std::vector<float> v = Random(heads * head_dim, 3), orig = v;
  std::vector<float> cs(rope_dims);
  RopeAngles(rope_dims, pos, theta, cs.data());
  RopeNormal(v.data(), heads, head_dim, rope_dims, cs.data());
  for (int h = 0; h < heads; ++h) {
    for (int i = 0; i < head_dim; i += 2) {
      const float* o = &orig[h * head_dim + i];
      const float* r = &v[h * head_dim + i];
      if (i >= rope_dims) {  // beyond rope_dims: untouched
        EXPECT_EQ(r[0], o[0]);
        EXPECT_EQ(r[1], o[1]);
        continue;
      }
      const double a = pos * std::pow(10000.0, -static_cast<double>(i) / rope_dims);
      EXPECT_NEAR(r[0], o[0] * std::cos(a) - o[1] * std::sin(a), 1e-5);
      EXPECT_NEAR(r[1], o[0] * std::sin(a) + o[1] * std::cos(a), 1e-5);
    }
  }
}

TEST(OpsTest, SoftmaxSumsToOneAndHandlesLargeValues) {
  std::vector<float> x = {1000.0f, 1001.0f, 999.0f};
  Softmax(x.data(), 3);
  const double e0 = std::exp(-1.0), e2 = std::exp(-2.0), z = e0 + 1.0 + e2;
  EXPECT_NEAR(x[0], e0 / z, 1e-6);
  EXPECT_NEAR(x[1], 1.0 / z, 1e-6);
  EXPECT_NEAR(x[2], e2 / z, 1e-6);
}

TEST(OpsTest, GatedActivations) {
  std::vector<float> g = {-1.0f, 0.0f, 2.0f, 3.0f}, u = {5.0f, 5.0f, -1.5f, 2.0f};
  std::vector<float> a = g;
  GatedRelu(a.data(), u.data(), 4);
  EXPECT_EQ(a, (std::vector<float>{0.0f, 0.0f, -3.0f, 6.0f}));
  a = g;
  GatedDRelu(a.data(), u.data(), 4);
  EXPECT_EQ(a, (std::vector<float>{0.0f, 0.0f, 0.0f, 6.0f}));
  a = g;
  GatedSilu(a.data(), u.data(), 4);
  for (int i = 0; i < 4; ++i) {
    EXPECT_NEAR(a[i], g[i] / (1.0 + std::exp(-static_cast<double>(g[i]))) * u[i], 1e-6);
  }
}

}  // namespace
}  // namespace pi
