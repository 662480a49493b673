// Norms, RoPE, softmax, activations and the f16 row conversion against
// double-precision loops (or the scalar conversion) written out here.
#include "kernels/cpu/ops.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/fp16.h"
#include "kernels/cpu/isa.h"

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

// Every frequency base models ship with: LLaMA-1/2's 10000, LLaMA-3's
// 500000, and 1e6 (Mistral/CodeLlama long-context variants).
TEST(OpsTest, RopeNormalRotatesAdjacentPairs) {
  const int heads = 3, head_dim = 8, rope_dims = 6, pos = 37;
  for (const float theta : {10000.0f, 500000.0f, 1000000.0f}) {
    SCOPED_TRACE(theta);
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
        const double a =
            pos * std::pow(static_cast<double>(theta), -static_cast<double>(i) / rope_dims);
        EXPECT_NEAR(r[0], o[0] * std::cos(a) - o[1] * std::sin(a), 1e-5);
        EXPECT_NEAR(r[1], o[0] * std::sin(a) + o[1] * std::cos(a), 1e-5);
      }
    }
  }
}

// NeoX layout (falcon): element i turns with element i + rope_dims / 2, at
// far positions too (angles computed in double: pos 30000 turns ~3e4 rad).
TEST(OpsTest, RopeNeoxRotatesHalvesAtEveryBase) {
  const int heads = 2, head_dim = 8, rope_dims = 8, half = rope_dims / 2;
  for (const float theta : {10000.0f, 500000.0f, 1000000.0f}) {
    for (const int pos : {5, 30000}) {
      SCOPED_TRACE(std::to_string(theta) + " pos " + std::to_string(pos));
      std::vector<float> v = Random(heads * head_dim, 11), orig = v;
      std::vector<float> cs(rope_dims);
      RopeAngles(rope_dims, pos, theta, cs.data());
      RopeNeox(v.data(), heads, head_dim, rope_dims, cs.data());
      for (int h = 0; h < heads; ++h) {
        for (int i = 0; i < half; ++i) {
          const double a = pos * std::pow(static_cast<double>(theta), -2.0 * i / rope_dims);
          const double x0 = orig[h * head_dim + i], x1 = orig[h * head_dim + i + half];
          EXPECT_NEAR(v[h * head_dim + i], x0 * std::cos(a) - x1 * std::sin(a), 1e-5);
          EXPECT_NEAR(v[h * head_dim + i + half], x0 * std::sin(a) + x1 * std::cos(a), 1e-5);
        }
      }
    }
  }
}

// llama.cpp's scaled angle: pos * freq_scale * theta^(-2i/d) / factor[i]
// (linear scaling and Llama 3.1's rope_freqs), at a far position too.
TEST(OpsTest, RopeAnglesScaleThePositionAndDivideByEachPairsFactor) {
  const int rope_dims = 8;
  const float factors[4] = {1.0f, 2.5f, 8.0f, 32.0f};
  for (const int pos : {7, 20000}) {
    for (const float scale : {1.0f, 0.25f}) {
      SCOPED_TRACE(std::to_string(pos) + " scale " + std::to_string(scale));
      std::vector<float> cs(rope_dims), plain(rope_dims);
      RopeAngles(rope_dims, pos, 500000.0f, cs.data(), scale, factors);
      RopeAngles(rope_dims, pos, 500000.0f, plain.data(), scale, nullptr);
      for (int i = 0; i < rope_dims / 2; ++i) {
        const double f = std::pow(500000.0, -2.0 * i / rope_dims);
        const double a = pos * static_cast<double>(scale) * f / factors[i];
        EXPECT_NEAR(cs[2 * i], std::cos(a), 1e-6) << i;
        EXPECT_NEAR(cs[2 * i + 1], std::sin(a), 1e-6) << i;
        const double b = pos * static_cast<double>(scale) * f;  // no factors: all 1
        EXPECT_NEAR(plain[2 * i], std::cos(b), 1e-6) << i;
        EXPECT_NEAR(plain[2 * i + 1], std::sin(b), 1e-6) << i;
      }
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

// Every ISA level's softmax against a double-precision reference, over
// lengths around the 8-wide vector and 1024-value blocks, inputs spread wide
// enough that some exps underflow to 0.
TEST(OpsTest, SoftmaxMatchesDoubleReferenceOnEveryIsa) {
  const CpuIsa best = DetectCpuIsa();
  for (CpuIsa isa : {CpuIsa::kScalar, CpuIsa::kAvx2, CpuIsa::kAvx512}) {
    if (static_cast<int>(isa) > static_cast<int>(best)) continue;
    SetCpuIsa(isa);
    for (int64_t n : {1, 3, 7, 8, 9, 16, 100, 1023, 1024, 1025, 4099}) {
      for (float spread : {1.0f, 30.0f, 200.0f}) {
        std::vector<float> x = Random(n, static_cast<uint32_t>(n) + 17);
        for (float& v : x) v *= spread;
        double mx = -1e300, z = 0;
        for (float v : x) mx = std::max(mx, static_cast<double>(v));
        std::vector<double> want(n), tol(n);
        for (int64_t i = 0; i < n; ++i) {
          z += (want[i] = std::exp(x[i] - mx));
          // x - max is rounded to float before the exp: relative error up to
          // |x - max| * 2^-24, plus a few ulps of exp and normalization.
          tol[i] = 1e-6 + 6e-8 * (mx - x[i]);
        }
        Softmax(x.data(), n);
        double total = 0;
        for (int64_t i = 0; i < n; ++i) {
          want[i] /= z;
          ASSERT_NEAR(x[i], want[i], tol[i] * want[i] + 1e-37)
              << CpuIsaName(isa) << " n " << n << " spread " << spread << " i " << i;
          total += x[i];
        }
        EXPECT_NEAR(total, 1.0, 1e-5);
      }
    }
  }
  SetCpuIsa(best);
}

// The row conversion (also QuantizeRow's F16 path) gives F32ToF16's bits
// (itself checked against all 65536 halves in kernels_test) on every ISA
// level: random bit patterns (NaNs included), halfway cases, subnormals,
// overflow to infinity, and a tail shorter than a vector.
TEST(OpsTest, F32ToF16RowMatchesScalarOnEveryIsa) {
  std::vector<float> x;
  std::mt19937 rng(9);
  std::uniform_int_distribution<uint32_t> bits(0, 0xFFFFFFFFu);
  for (int i = 0; i < 5000; ++i) {
    const uint32_t b = bits(rng);
    float f;
    std::memcpy(&f, &b, 4);
    x.push_back(f);  // NaNs too: quiet, payload's top bits kept, as F16C does
  }
  for (float f : {0.0f, -0.0f, 1.0f, 65504.0f, 65520.0f, 1e6f, -1e6f, 6.0e-8f, 2.98e-8f,
                  1.00048828125f /* halfway, rounds to even */, 1.00146484375f, 5.9604645e-8f,
                  std::numeric_limits<float>::infinity()}) {
    x.push_back(f);
  }
  x.push_back(3.0f);  // odd length: a vector tail
  const CpuIsa best = DetectCpuIsa();
  for (CpuIsa isa : {CpuIsa::kScalar, CpuIsa::kAvx2, CpuIsa::kAvx512}) {
    if (static_cast<int>(isa) > static_cast<int>(best)) continue;
    SetCpuIsa(isa);
    std::vector<uint16_t> y(x.size(), 0xDEAD);
    F32ToF16Row(x.data(), y.data(), static_cast<int64_t>(x.size()));
    for (size_t i = 0; i < x.size(); ++i) {
      ASSERT_EQ(y[i], F32ToF16(x[i])) << CpuIsaName(isa) << " x = " << x[i];
    }
  }
  SetCpuIsa(best);
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
