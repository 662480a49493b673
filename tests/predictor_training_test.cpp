// PredictorBatch (common/offline/predictor_training.h): one training step's loss and
// gradients, computed with transposes and GemmRows, against a scalar
// double-precision reference written from the formulas — whose own gradient
// is checked by central finite differences of its loss.
#include "common/offline/predictor_training.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "common/offline/predictor_samples.h"

namespace pi {
namespace {

// Sizes off every kernel's tile: d and rank not multiples of 16, ff ending
// in a partial mask word, a batch that is not a multiple of the GEMM's
// column tile.
constexpr int kD = 72, kFf = 130, kRank = 40, kMaxBatch = 16;
constexpr float kPosWeight = 4.0f;

struct Reference {
  double loss = 0;
  std::vector<double> g1, g2;  // [rank][d], [ff][rank], divided by the batch size
};

double Softplus(double x) {
  return x > 0 ? x + std::log1p(std::exp(-x)) : std::log1p(std::exp(x));
}

// x: [nb][d] inputs; fired: [nb][ff].
Reference ReferenceStep(const std::vector<double>& x, const std::vector<uint8_t>& fired, int nb,
                        const std::vector<double>& w1, const std::vector<double>& w2) {
  Reference out;
  out.g1.assign(w1.size(), 0.0);
  out.g2.assign(w2.size(), 0.0);
  for (int b = 0; b < nb; ++b) {
    const double* xb = x.data() + static_cast<size_t>(b) * kD;
    std::vector<double> z(kRank), r(kRank), ds(kFf), dr(kRank, 0.0);
    for (int j = 0; j < kRank; ++j) {
      for (int c = 0; c < kD; ++c) z[j] += w1[j * kD + c] * xb[c];
      r[j] = std::max(z[j], 0.0);
    }
    for (int i = 0; i < kFf; ++i) {
      double s = 0;
      for (int j = 0; j < kRank; ++j) s += w2[i * kRank + j] * r[j];
      const bool y = fired[static_cast<size_t>(b) * kFf + i];
      out.loss += y ? kPosWeight * Softplus(-s) : Softplus(s);
      const double sig = 1.0 / (1.0 + std::exp(-s));
      ds[i] = (y ? kPosWeight * (sig - 1.0) : sig) / nb;
      for (int j = 0; j < kRank; ++j) {
        out.g2[i * kRank + j] += ds[i] * r[j];
        dr[j] += ds[i] * w2[i * kRank + j];
      }
    }
    for (int j = 0; j < kRank; ++j) {
      if (z[j] <= 0) continue;
      for (int c = 0; c < kD; ++c) out.g1[j * kD + c] += dr[j] * xb[c];
    }
  }
  return out;
}

double MaxAbs(const std::vector<double>& v) {
  double m = 0;
  for (double x : v) m = std::max(m, std::fabs(x));
  return m;
}

class PredictorBatchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(samples_.Init(1, kD, kFf, kTokens, "").ok());
    std::mt19937 rng(11);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::bernoulli_distribution fire(0.3);
    std::vector<float> h(static_cast<size_t>(kTokens) * kD),
        act(static_cast<size_t>(kTokens) * kFf);
    for (float& v : h) v = 3.0f * normal(rng);
    for (float& v : act) v = fire(rng) ? 1.0f : 0.0f;
    samples_.OnFfnInput(0, kTokens, h.data());
    samples_.OnFfn(0, kTokens, act.data());
    ASSERT_EQ(samples_.n_tokens(), kTokens);
    w1_.resize(static_cast<size_t>(kRank) * kD);
    w2_.resize(static_cast<size_t>(kFf) * kRank);
    for (float& w : w1_) w = normal(rng) / std::sqrt(static_cast<float>(kD));
    for (float& w : w2_) w = normal(rng) / std::sqrt(static_cast<float>(kRank));
  }

  // The reference's inputs for tokens idx[0, nb): what the samples hold, times in_mul.
  void ReferenceInputs(const std::vector<int64_t>& idx, float in_mul, std::vector<double>* x,
                       std::vector<uint8_t>* fired) const {
    const int nb = static_cast<int>(idx.size());
    x->assign(static_cast<size_t>(nb) * kD, 0.0);
    fired->assign(static_cast<size_t>(nb) * kFf, 0);
    std::vector<float> h(kD);
    for (int b = 0; b < nb; ++b) {
      samples_.Input(0, idx[b], h.data());
      for (int c = 0; c < kD; ++c) (*x)[static_cast<size_t>(b) * kD + c] = h[c] * in_mul;
      for (int i = 0; i < kFf; ++i)
        (*fired)[static_cast<size_t>(b) * kFf + i] = samples_.fired(0, idx[b], i);
    }
  }

  static constexpr int kTokens = 100;  // more than one of PredictorScores' chunks
  PredictorSamples samples_;
  std::vector<float> w1_, w2_;
};

// The reference's gradient is its loss's derivative: central differences on
// a sample of weights of both matrices.
TEST_F(PredictorBatchTest, ReferenceGradientMatchesFiniteDifferences) {
  std::vector<int64_t> idx = {3, 17, 5, 30, 8};
  std::vector<double> x;
  std::vector<uint8_t> fired;
  ReferenceInputs(idx, 0.5f, &x, &fired);
  std::vector<double> w1(w1_.begin(), w1_.end()), w2(w2_.begin(), w2_.end());
  const int nb = static_cast<int>(idx.size());
  const Reference ref = ReferenceStep(x, fired, nb, w1, w2);
  const double eps = 1e-6;
  auto check = [&](std::vector<double>* w, const std::vector<double>& g, size_t k,
                   const char* name) {
    const double keep = (*w)[k];
    (*w)[k] = keep + eps;
    const double up = ReferenceStep(x, fired, nb, w1, w2).loss;
    (*w)[k] = keep - eps;
    const double down = ReferenceStep(x, fired, nb, w1, w2).loss;
    (*w)[k] = keep;
    const double numeric = (up - down) / (2 * eps) / nb;
    EXPECT_NEAR(g[k], numeric, 1e-6 + 1e-4 * std::fabs(numeric)) << name << "[" << k << "]";
  };
  for (size_t k = 0; k < w1.size(); k += 97) check(&w1, ref.g1, k, "w1");
  for (size_t k = 0; k < w2.size(); k += 89) check(&w2, ref.g2, k, "w2");
}

// PredictorBatch's loss and gradient equal the reference's within float
// rounding: a full batch and a short one (the epoch's tail), twice through
// the same object (buffers reused, nothing left over from the last batch).
TEST_F(PredictorBatchTest, LossAndGradientMatchReference) {
  PredictorBatch batch(kD, kFf, kRank, kMaxBatch);
  std::vector<int64_t> full(kMaxBatch), tail = {39, 0, 21, 21, 12, 7, 33};
  for (int b = 0; b < kMaxBatch; ++b) full[b] = (b * 7 + 2) % kTokens;
  std::vector<float> g1(w1_.size()), g2(w2_.size());
  const std::vector<double> w1(w1_.begin(), w1_.end()), w2(w2_.begin(), w2_.end());
  for (const std::vector<int64_t>* idx : {&full, &tail, &full}) {
    const int nb = static_cast<int>(idx->size());
    const float in_mul = 0.25f;
    std::fill(g1.begin(), g1.end(), NAN);
    std::fill(g2.begin(), g2.end(), NAN);
    batch.Load(samples_, 0, idx->data(), nb, in_mul);
    const double loss = batch.Run(w1_.data(), w2_.data(), kPosWeight, g1.data(), g2.data());
    std::vector<double> x;
    std::vector<uint8_t> fired;
    ReferenceInputs(*idx, in_mul, &x, &fired);
    const Reference ref = ReferenceStep(x, fired, nb, w1, w2);
    EXPECT_NEAR(loss, ref.loss, 1e-5 * ref.loss) << "nb " << nb;
    const double tol1 = 1e-5 * MaxAbs(ref.g1), tol2 = 1e-5 * MaxAbs(ref.g2);
    ASSERT_GT(tol1, 0);
    ASSERT_GT(tol2, 0);
    for (size_t k = 0; k < g1.size(); ++k)
      ASSERT_NEAR(g1[k], ref.g1[k], tol1) << "g1[" << k << "] nb " << nb;
    for (size_t k = 0; k < g2.size(); ++k)
      ASSERT_NEAR(g2[k], ref.g2[k], tol2) << "g2[" << k << "] nb " << nb;
    // Loss only (held-out evaluation): the same loss, gradients untouched.
    std::fill(g1.begin(), g1.end(), 7.0f);
    EXPECT_DOUBLE_EQ(batch.Run(w1_.data(), w2_.data(), kPosWeight, nullptr, nullptr), loss);
    EXPECT_EQ(*std::min_element(g1.begin(), g1.end()), 7.0f);
    EXPECT_EQ(*std::max_element(g1.begin(), g1.end()), 7.0f);
  }
}

// Calibration's scores (f32 GemmRows in chunks) equal a double-precision
// dot over the same inputs and weights within float rounding, for a token
// range that starts mid-way and spans more than one chunk.
TEST_F(PredictorBatchTest, ScoresMatchDoublePrecision) {
  const int64_t t0 = 3, n = kTokens - t0;
  std::vector<float> scores;
  PredictorScores(samples_, 0, t0, n, kD, kFf, w1_, w2_, kRank, &scores);
  ASSERT_EQ(scores.size(), static_cast<size_t>(n) * kFf);
  std::vector<int64_t> idx(n);
  for (int64_t t = 0; t < n; ++t) idx[t] = t0 + t;
  std::vector<double> x;
  std::vector<uint8_t> fired;
  ReferenceInputs(idx, 1.0f, &x, &fired);
  double max_ref = 0, max_err = 0;
  for (int64_t t = 0; t < n; ++t) {
    std::vector<double> hid(kRank);
    for (int j = 0; j < kRank; ++j) {
      for (int c = 0; c < kD; ++c) hid[j] += double{w1_[j * kD + c]} * x[t * kD + c];
      hid[j] = std::max(hid[j], 0.0);
    }
    for (int i = 0; i < kFf; ++i) {
      double ref = 0;
      for (int j = 0; j < kRank; ++j) ref += double{w2_[i * kRank + j]} * hid[j];
      max_ref = std::max(max_ref, std::fabs(ref));
      max_err = std::max(max_err, std::fabs(scores[t * kFf + i] - ref));
    }
  }
  ASSERT_GT(max_ref, 0.1);
  EXPECT_LT(max_err, 1e-5 * max_ref);
}

// ThresholdForRecall gives the largest threshold whose recall meets the
// target: at it MeasurePredictor's recall is >= target, just above it < target.
// MeasurePredictor's counts against a direct count.
TEST_F(PredictorBatchTest, ThresholdMeetsRecallTarget) {
  std::vector<float> scores;
  PredictorScores(samples_, 0, 0, kTokens, kD, kFf, w1_, w2_, kRank, &scores);
  for (double target : {0.5, 0.9, 0.95, 1.0}) {
    const float thr = ThresholdForRecall(samples_, 0, 0, kTokens, kFf, scores, target);
    const PredictorQuality at = MeasurePredictor(samples_, 0, 0, kTokens, kFf, scores, thr);
    const PredictorQuality above =
        MeasurePredictor(samples_, 0, 0, kTokens, kFf, scores, std::nextafter(thr, HUGE_VALF));
    EXPECT_GE(at.recall, target) << target;
    EXPECT_LT(above.recall, target) << target;
    int64_t tp = 0, predicted = 0, pos = 0;
    for (int64_t t = 0; t < kTokens; ++t) {
      for (int i = 0; i < kFf; ++i) {
        const bool y = samples_.fired(0, t, i), p = scores[t * kFf + i] >= thr;
        tp += y && p, predicted += p, pos += y;
      }
    }
    EXPECT_EQ(at.firing, pos);
    EXPECT_DOUBLE_EQ(at.recall, static_cast<double>(tp) / pos);
    EXPECT_DOUBLE_EQ(at.precision, static_cast<double>(tp) / predicted);
    EXPECT_DOUBLE_EQ(at.predicted_sparsity, 1.0 - static_cast<double>(predicted) / (kTokens * kFf));
    EXPECT_DOUBLE_EQ(at.true_sparsity, 1.0 - static_cast<double>(pos) / (kTokens * kFf));
  }
}

}  // namespace
}  // namespace pi
