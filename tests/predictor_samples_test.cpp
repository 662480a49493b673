// PredictorSamples (common/offline/predictor_samples.h): what goes in comes back —
// inputs rounded to f16 as IEEE binary16 rounds them, masks bit-exact — in
// both storage modes, with the capacity respected and bad directories named.
#include "common/offline/predictor_samples.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

namespace pi {
namespace {

// Round to the nearest binary16 value (normal range), independently of
// kernels/cpu/fp16: 11 significant bits.
float RoundToHalf(float x) {
  if (x == 0.0f) return x;
  int e;
  std::frexp(x, &e);  // x = m * 2^e, 0.5 <= |m| < 1
  const float ulp = std::ldexp(1.0f, e - 11);
  return std::nearbyint(x / ulp) * ulp;  // ties to even, as the FPU rounds
}

void FillAndCheck(const std::string& dir) {
  const int layers = 3, d = 40, ff = 130, capacity = 7;  // ff: 3 words, the last partial
  PredictorSamples s;
  ASSERT_TRUE(s.Init(layers, d, ff, capacity, dir).ok());
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-50.0f, 50.0f);
  std::bernoulli_distribution fire(0.2);
  // Batches of 3, 4 and 2 tokens: the last token is beyond the capacity.
  std::vector<std::vector<float>> h(layers), act(layers);
  for (int batch : {3, 4, 2}) {
    for (int l = 0; l < layers; ++l) {
      std::vector<float> hb(static_cast<size_t>(batch) * d), ab(static_cast<size_t>(batch) * ff);
      for (float& v : hb) v = u(rng);
      for (float& v : ab) v = fire(rng) ? u(rng) + 100.0f : 0.0f;
      s.OnFfnInput(l, batch, hb.data());
      s.OnFfn(l, batch, ab.data());
      h[l].insert(h[l].end(), hb.begin(), hb.end());
      act[l].insert(act[l].end(), ab.begin(), ab.end());
    }
  }
  ASSERT_EQ(s.n_tokens(), capacity);
  std::vector<float> got(d);
  for (int l = 0; l < layers; ++l) {
    for (int t = 0; t < capacity; ++t) {
      s.Input(l, t, got.data());
      for (int j = 0; j < d; ++j) {
        const float want = h[l][static_cast<size_t>(t) * d + j];
        ASSERT_EQ(got[j], RoundToHalf(want)) << "layer " << l << " token " << t << " dim " << j;
      }
      for (int i = 0; i < ff; ++i) {
        ASSERT_EQ(s.fired(l, t, i), act[l][static_cast<size_t>(t) * ff + i] != 0.0f)
            << "layer " << l << " token " << t << " neuron " << i;
      }
    }
  }
}

TEST(PredictorSamplesTest, FileBackedRoundTrip) {
  FillAndCheck("/tmp");
}

TEST(PredictorSamplesTest, AnonymousMemoryRoundTrip) {
  FillAndCheck("");
}

TEST(PredictorSamplesTest, TokensCountOnlyWhenEveryLayerHasBoth) {
  PredictorSamples s;
  ASSERT_TRUE(s.Init(2, 8, 8, 10, "").ok());
  std::vector<float> h(16, 1.0f), a(16, 1.0f);
  s.OnFfnInput(0, 2, h.data());
  s.OnFfn(0, 2, a.data());
  s.OnFfnInput(1, 2, h.data());
  EXPECT_EQ(s.n_tokens(), 0);  // layer 1 has no masks yet
  s.OnFfn(1, 1, a.data());
  EXPECT_EQ(s.n_tokens(), 1);
}

TEST(PredictorSamplesTest, SizeAndErrors) {
  EXPECT_EQ(PredictorSamples::Bytes(32, 4096, 11008, 20000),
            32LL * 20000 * (2 * 4096 + 8 * 172));  // 172 words of 64 neurons
  PredictorSamples s;
  Status st = s.Init(2, 8, 8, 10, "/nonexistent-dir-for-pi-test");
  EXPECT_THAT(st.message(), ::testing::HasSubstr("/nonexistent-dir-for-pi-test"));
  PredictorSamples bad;
  EXPECT_FALSE(bad.Init(0, 8, 8, 10, "").ok());
}

}  // namespace
}  // namespace pi
