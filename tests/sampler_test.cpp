// Sampler against distributions computed here by hand.
#include "common/text/sampler.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <utility>
#include <vector>

namespace pi {
namespace {

SamplerParams Plain(uint32_t seed) {
  SamplerParams p;
  p.temp = 1.0f;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  p.seed = seed;
  return p;
}

std::vector<float> LogitsOf(const std::vector<double>& probs) {
  std::vector<float> l;
  for (double p : probs) l.push_back(static_cast<float>(std::log(p)));
  return l;
}

std::vector<double> Frequencies(Sampler* s, const std::vector<float>& logits, int draws) {
  std::vector<double> f(logits.size(), 0.0);
  for (int i = 0; i < draws; ++i) f[s->Sample(logits.data())] += 1.0 / draws;
  return f;
}

TEST(SamplerTest, GreedyIsArgmaxAndTiesGoToLowestId) {
  SamplerParams p;
  p.temp = 0.0f;
  Sampler s(p, 5);
  const std::vector<float> logits = {0.1f, 3.0f, -2.0f, 3.0f, 1.0f};
  EXPECT_EQ(s.Sample(logits.data()), 1);
}

// LastDistribution (post_sampling_probs): greedy, the chosen token 1 and the
// next by logit 0 (ties: the lower id), k of them; sampled, the survivors of
// top-k with their tempered probabilities, computed here, most likely
// first, and the chosen token's among them.
TEST(SamplerTest, LastDistributionIsWhatTheDrawUsed) {
  std::pair<int32_t, float> out[8];
  float chosen_p = -1;
  SamplerParams g;
  g.temp = 0.0f;
  Sampler greedy(g, 5);
  const std::vector<float> logits = {0.1f, 3.0f, -2.0f, 3.0f, 1.0f};
  const int32_t id = greedy.Sample(logits.data());
  ASSERT_EQ(greedy.LastDistribution(id, 3, out, &chosen_p), 3);
  EXPECT_EQ(chosen_p, 1.0f);
  EXPECT_EQ(out[0], std::make_pair(int32_t{1}, 1.0f));
  EXPECT_EQ(out[1], std::make_pair(int32_t{3}, 0.0f));
  EXPECT_EQ(out[2], std::make_pair(int32_t{4}, 0.0f));
  EXPECT_EQ(greedy.LastDistribution(id, 8, out, &chosen_p), 5);

  SamplerParams p = Plain(5);
  p.top_k = 3;
  p.temp = 0.5f;
  Sampler s(p, 5);
  const int32_t drawn = s.Sample(logits.data());
  // Survivors {1, 3, 4}: weights exp(l / 0.5).
  const double w1 = std::exp(3.0 / 0.5), w4 = std::exp(1.0 / 0.5), sum = 2 * w1 + w4;
  ASSERT_EQ(s.LastDistribution(drawn, 8, out, &chosen_p), 3);
  EXPECT_EQ(out[0].first, 1);
  EXPECT_EQ(out[1].first, 3);
  EXPECT_EQ(out[2].first, 4);
  EXPECT_NEAR(out[0].second, w1 / sum, 1e-6);
  EXPECT_NEAR(out[1].second, w1 / sum, 1e-6);
  EXPECT_NEAR(out[2].second, w4 / sum, 1e-6);
  EXPECT_TRUE(drawn == 1 || drawn == 3 || drawn == 4) << drawn;
  EXPECT_NEAR(chosen_p, drawn == 4 ? w4 / sum : w1 / sum, 1e-6);
  EXPECT_EQ(s.LastDistribution(drawn, 2, out, &chosen_p), 2);
}

TEST(SamplerTest, DefaultsAreLlamaCpps) {
  SamplerParams p;
  EXPECT_FLOAT_EQ(p.temp, 0.8f);
  EXPECT_EQ(p.top_k, 40);
  EXPECT_FLOAT_EQ(p.top_p, 0.95f);
  EXPECT_FLOAT_EQ(p.min_p, 0.05f);
  EXPECT_FLOAT_EQ(p.repeat_penalty, 1.0f);
  EXPECT_EQ(p.repeat_last_n, 64);
}

TEST(SamplerTest, FullDistributionMatchesSoftmax) {
  const std::vector<double> probs = {0.1, 0.2, 0.3, 0.4};
  Sampler s(Plain(7), 4);
  const std::vector<double> f = Frequencies(&s, LogitsOf(probs), 40000);
  for (size_t i = 0; i < probs.size(); ++i) EXPECT_NEAR(f[i], probs[i], 0.01) << i;
}

TEST(SamplerTest, TemperatureSharpens) {
  // p_i ∝ q_i^(1/T): with T = 0.5 and q = {0.2, 0.8}: {0.04, 0.64} / 0.68.
  SamplerParams p = Plain(3);
  p.temp = 0.5f;
  Sampler s(p, 2);
  const std::vector<double> f = Frequencies(&s, LogitsOf({0.2, 0.8}), 40000);
  EXPECT_NEAR(f[0], 0.04 / 0.68, 0.01);
}

TEST(SamplerTest, TopKKeepsTheKBest) {
  SamplerParams p = Plain(11);
  p.top_k = 2;
  Sampler s(p, 4);
  // Survivors {0.4, 0.3} renormalized: {4/7, 3/7}.
  const std::vector<double> f = Frequencies(&s, LogitsOf({0.1, 0.2, 0.3, 0.4}), 40000);
  EXPECT_EQ(f[0], 0.0);
  EXPECT_EQ(f[1], 0.0);
  EXPECT_NEAR(f[3], 4.0 / 7.0, 0.01);
}

TEST(SamplerTest, TopPKeepsTheSmallestPrefixReachingP) {
  SamplerParams p = Plain(5);
  p.top_p = 0.75f;  // 0.5 < 0.75 <= 0.5 + 0.3: keep the first two
  Sampler s(p, 3);
  const std::vector<double> f = Frequencies(&s, LogitsOf({0.3, 0.5, 0.2}), 40000);
  EXPECT_EQ(f[2], 0.0);
  EXPECT_NEAR(f[1], 0.5 / 0.8, 0.01);
}

TEST(SamplerTest, MinPDropsTokensBelowAFractionOfTheBest) {
  SamplerParams p = Plain(9);
  p.min_p = 0.4f;  // keep p >= 0.4 * 0.6 = 0.24
  Sampler s(p, 3);
  const std::vector<double> f = Frequencies(&s, LogitsOf({0.6, 0.3, 0.1}), 40000);
  EXPECT_EQ(f[2], 0.0);
  EXPECT_NEAR(f[0], 0.6 / 0.9, 0.01);
}

TEST(SamplerTest, RepeatPenaltyDividesPositiveAndMultipliesNegativeLogits) {
  SamplerParams p;
  p.temp = 0.0f;
  p.repeat_penalty = 2.0f;
  Sampler s(p, 3);
  // Token 0 (logit 3) seen: 3 / 2 = 1.5 < 2 -> token 1 wins.
  s.Accept(0);
  EXPECT_EQ(s.Sample(std::vector<float>{3.0f, 2.0f, -1.0f}.data()), 1);
  // Negative logits are multiplied: token 2 at -1 -> -2, still last.
  Sampler s2(p, 3);
  s2.Accept(2);
  s2.Accept(2);                                                             // counted once
  EXPECT_EQ(s2.Sample(std::vector<float>{-3.0f, -2.5f, -1.0f}.data()), 2);  // -2 > -2.5
}

TEST(SamplerTest, RepeatPenaltyWindowForgetsOldTokens) {
  SamplerParams p;
  p.temp = 0.0f;
  p.repeat_penalty = 10.0f;
  p.repeat_last_n = 2;
  Sampler s(p, 4);
  s.Accept(0);
  s.Accept(1);
  s.Accept(2);  // token 0 fell out of the window
  EXPECT_EQ(s.Sample(std::vector<float>{3.0f, 2.9f, 2.8f, 0.0f}.data()), 0);
}

// OpenAI's penalties, as llama.cpp applies them: each distinct token of the
// window loses frequency_penalty per occurrence and presence_penalty once,
// after the repetition penalty has scaled it.
TEST(SamplerTest, FrequencyAndPresencePenaltiesSubtractPerOccurrenceAndOnce) {
  const std::vector<float> logits = {3.0f, 2.0f, 1.0f};
  auto greedy = [&](float freq, float presence, int times) {
    SamplerParams p;
    p.temp = 0.0f;
    p.frequency_penalty = freq;
    p.presence_penalty = presence;
    Sampler s(p, 3);
    for (int i = 0; i < times; ++i) s.Accept(0);
    return s.Sample(logits.data());
  };
  EXPECT_EQ(greedy(0.4f, 0.0f, 3), 1);  // 3 - 3 * 0.4 = 1.8 < 2
  EXPECT_EQ(greedy(0.3f, 0.0f, 3), 0);  // 3 - 0.9 = 2.1
  EXPECT_EQ(greedy(0.0f, 1.1f, 3), 1);  // 3 - 1.1 = 1.9, however often it occurred
  EXPECT_EQ(greedy(0.0f, 0.9f, 3), 0);  // 2.1
  EXPECT_EQ(greedy(0.0f, 0.9f, 0), 0);  // not in the window: no penalty
  EXPECT_EQ(greedy(-2.0f, 0.0f, 0), 0);
  // A negative penalty raises a repeated token.
  {
    SamplerParams p;
    p.temp = 0.0f;
    p.frequency_penalty = -1.26f;
    Sampler s(p, 3);
    s.Accept(2);
    s.Accept(2);
    EXPECT_EQ(s.Sample(logits.data()), 2);  // 1 + 2.52 = 3.52 > 3
  }
  // The repetition penalty first, then the subtraction: (3 / 2) - 2 * 0.1 = 1.3 > 1.2, where
  // the other order would give (3 - 0.2) / 2 = 1.4 either way; with 0.2: 1.1 < 1.2.
  for (const auto& [freq, want] : {std::pair{0.1f, 0}, std::pair{0.2f, 1}}) {
    SamplerParams p;
    p.temp = 0.0f;
    p.repeat_penalty = 2.0f;
    p.frequency_penalty = freq;
    Sampler s(p, 3);
    s.Accept(0);
    s.Accept(0);
    EXPECT_EQ(s.Sample(std::vector<float>{3.0f, 1.2f, 1.1f}.data()), want) << freq;
  }
}

TEST(SamplerTest, LogitBiasComesFirstAndMinusInfinityBans) {
  SamplerParams p;
  p.temp = 0.0f;
  p.logit_bias = {{2, 2.5f}};
  EXPECT_EQ(Sampler(p, 3).Sample(std::vector<float>{3.0f, 2.0f, 1.0f}.data()), 2);  // 3.5
  // Before the penalties: (3 + 5) / 4 = 2 < 2.1, where 3 / 4 + 5 would win.
  p.logit_bias = {{0, 5.0f}};
  p.repeat_penalty = 4.0f;
  Sampler s(p, 2);
  s.Accept(0);
  EXPECT_EQ(s.Sample(std::vector<float>{3.0f, 2.1f}.data()), 1);
  // Sampled: a banned token never comes, however likely.
  SamplerParams q;
  q.temp = 1.0f;
  q.top_k = 0;
  q.top_p = 1.0f;
  q.min_p = 0.0f;
  q.seed = 7;
  q.logit_bias = {{0, -INFINITY}, {1, -INFINITY}};
  Sampler banned(q, 4);
  const std::vector<float> logits = {9.0f, 8.0f, 0.0f, 0.5f};
  int seen[4] = {0, 0, 0, 0};
  for (int i = 0; i < 2000; ++i) ++seen[banned.Sample(logits.data())];
  EXPECT_EQ(seen[0] + seen[1], 0);
  EXPECT_GT(seen[2], 0);
  EXPECT_GT(seen[3], seen[2]);
}

TEST(SamplerTest, PenaltiesAndBiasesAreChecked) {
  SamplerParams p;
  p.frequency_penalty = 2.5f;
  EXPECT_THAT(CheckSamplerParams(p).message(), ::testing::HasSubstr("frequency-penalty"));
  p.frequency_penalty = 0.0f;
  p.presence_penalty = -2.01f;
  EXPECT_THAT(CheckSamplerParams(p).message(), ::testing::HasSubstr("presence-penalty"));
  p.presence_penalty = NAN;
  EXPECT_FALSE(CheckSamplerParams(p).ok());
  p.presence_penalty = 0.0f;
  p.logit_bias = {{5, 1.0f}};
  EXPECT_TRUE(CheckLogitBias(p, 6).ok());
  EXPECT_THAT(CheckLogitBias(p, 5).message(), ::testing::HasSubstr("token 5"));
  p.logit_bias = {{-1, 1.0f}};
  EXPECT_FALSE(CheckLogitBias(p, 5).ok());
  for (float bad : {100.5f, -101.0f, NAN, INFINITY}) {
    p.logit_bias = {{1, bad}};
    EXPECT_FALSE(CheckLogitBias(p, 5).ok()) << bad;
  }
  p.logit_bias = {{1, -INFINITY}, {2, -100.0f}, {3, 100.0f}};
  EXPECT_TRUE(CheckLogitBias(p, 5).ok());
  p.logit_bias.assign(kMaxLogitBiases + 1, {1, 0.0f});
  EXPECT_FALSE(CheckLogitBias(p, 5).ok());
}

TEST(SamplerTest, SameSeedSameTokensDifferentSeedDifferentTokens) {
  std::vector<float> logits(100);
  for (int i = 0; i < 100; ++i) logits[i] = static_cast<float>(std::sin(i * 1.3));
  auto run = [&](uint32_t seed) {
    Sampler s(Plain(seed), 100);
    std::vector<int> out;
    for (int i = 0; i < 64; ++i) out.push_back(s.Sample(logits.data()));
    return out;
  };
  EXPECT_EQ(run(42), run(42));
  EXPECT_NE(run(42), run(43));
}

TEST(SamplerTest, RandomSeedIsReportedAndReproducible) {
  SamplerParams p = Plain(0xFFFFFFFFu);
  Sampler a(p, 10);
  SamplerParams q = Plain(a.seed());
  Sampler b(q, 10);
  std::vector<float> logits(10, 0.0f);
  for (int i = 0; i < 32; ++i) EXPECT_EQ(a.Sample(logits.data()), b.Sample(logits.data()));
}

}  // namespace
}  // namespace pi
