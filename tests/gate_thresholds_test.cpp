// CATS' thresholds: the histogram's quantiles against exact ones of the same
// values, the per-layer thresholds a target takes from them, the stats
// file's gate quantiles through a round trip and its validation, and
// profiling's magnitudes against act(gate x) computed here for a SiLU model.
#include "common/plan/gate_thresholds.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "common/format/gguf.h"
#include "common/offline/synthetic_model.h"
#include "common/plan/activation_stats.h"
#include "coordinator/engine/engine.h"
#include "tests/temp_path.h"

namespace pi {
namespace {

using ::testing::HasSubstr;

TEST(GateHistogram, QuantilesWithinABinOfTheExactOnes) {
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> v(200000);
  for (float& x : v) x = normal(rng) * 0.3f;
  v[7] = 0.0f;  // zeros count too, as the smallest magnitudes
  GateHistogram h;
  h.Init(2);
  h.Add(1, v.data(), static_cast<int64_t>(v.size()));
  EXPECT_EQ(h.total(0), 0u);
  EXPECT_EQ(h.total(1), v.size());
  std::vector<float> mag(v.size());
  for (size_t i = 0; i < v.size(); ++i) mag[i] = std::fabs(v[i]);
  std::sort(mag.begin(), mag.end());
  float q[kGateQuantilePoints];
  h.Quantiles(1, q);
  for (int k = 1; k < kGateQuantilePoints - 1; ++k) {
    const float exact = mag[static_cast<size_t>(k / 100.0 * (mag.size() - 1))];
    EXPECT_NEAR(q[k], exact, 0.011 * exact) << "quantile " << k;
  }
  EXPECT_NEAR(q[100], mag.back(), 0.011 * mag.back());
  float empty[kGateQuantilePoints];
  h.Quantiles(0, empty);
  for (float e : empty) EXPECT_EQ(e, 0.0f);
}

TEST(GateHistogram, NaNsAreNotCountedAndHugeValuesClampToTheTop) {
  GateHistogram h;
  h.Init(1);
  const float v[4] = {NAN, 1e30f, -2.0f, 0.5f};
  h.Add(0, v, 4);
  EXPECT_EQ(h.total(0), 3u);
  float q[kGateQuantilePoints];
  h.Quantiles(0, q);
  EXPECT_TRUE(CheckGateQuantiles(q, 0).ok());
  EXPECT_LE(q[100], 0x1p24f * 1.02f);
}

TEST(GateThresholdsFor, InterpolatesEachLayersQuantiles) {
  std::vector<float> q(2 * kGateQuantilePoints);
  for (int k = 0; k < kGateQuantilePoints; ++k) {
    q[k] = static_cast<float>(k);                            // layer 0: k
    q[kGateQuantilePoints + k] = static_cast<float>(2 * k);  // layer 1: 2k
  }
  std::vector<float> t;
  ASSERT_TRUE(GateThresholdsFor(q, 2, 0.5, &t).ok());
  EXPECT_THAT(t, ::testing::ElementsAre(50.0f, 100.0f));
  ASSERT_TRUE(GateThresholdsFor(q, 2, 0.255, &t).ok());
  EXPECT_NEAR(t[0], 25.5f, 1e-4);
  EXPECT_NEAR(t[1], 51.0f, 1e-4);
  ASSERT_TRUE(GateThresholdsFor(q, 2, 0.0, &t).ok());
  EXPECT_EQ(t[0], 0.0f);

  EXPECT_THAT(GateThresholdsFor(q, 2, 1.0, &t).message(), HasSubstr("target sparsity 1"));
  EXPECT_THAT(GateThresholdsFor(q, 3, 0.5, &t).message(), HasSubstr("for 3 layers"));
  q[kGateQuantilePoints + 10] = 1000.0f;  // layer 1 decreasing after point 10
  EXPECT_THAT(GateThresholdsFor(q, 2, 0.5, &t).message(), HasSubstr("layer 1's gate quantile 11"));
  q[kGateQuantilePoints + 10] = NAN;
  EXPECT_THAT(GateThresholdsFor(q, 2, 0.5, &t).message(), HasSubstr("not finite"));
}

// kGreedy against TEAL's greedy loop run directly on samples: one point of
// sparsity at a time to the layer whose share of its squared magnitudes
// skipped grows least, until the layers' mean share is the target.
TEST(GateThresholdsFor, GreedyMatchesTheGreedyLoopOnSamples) {
  std::mt19937 rng(7);
  const int n = 200000;
  std::vector<std::vector<float>> layers(3, std::vector<float>(n));
  std::uniform_real_distribution<float> uniform(0.0f, 1.0f);
  std::lognormal_distribution<float> heavy(0.0f, 1.2f);
  std::exponential_distribution<float> expo(2.0f);
  for (int i = 0; i < n; ++i) {
    layers[0][i] = uniform(rng);  // even magnitudes
    layers[1][i] = heavy(rng);    // a heavy tail
    layers[2][i] = expo(rng);
  }
  GateHistogram h;
  h.Init(3);
  std::vector<float> q(3 * kGateQuantilePoints), rms(3);
  for (int l = 0; l < 3; ++l) {
    h.Add(l, layers[l].data(), n);
    h.Quantiles(l, q.data() + l * kGateQuantilePoints);
    double sq = 0;
    for (float v : layers[l]) sq += double{v} * v;
    rms[l] = static_cast<float>(h.Rms(l));
    EXPECT_NEAR(rms[l], std::sqrt(sq / n), 1e-4 * rms[l]);
    std::sort(layers[l].begin(), layers[l].end());
  }
  for (double target : {0.4, 0.5}) {
    // The loop, on the sorted samples: a^2 skipped over the total, per step.
    std::vector<double> total(3, 0), cum;
    std::vector<std::vector<double>> prefix(3, std::vector<double>(n + 1, 0));
    for (int l = 0; l < 3; ++l) {
      for (int i = 0; i < n; ++i) {
        prefix[l][i + 1] = prefix[l][i] + double{layers[l][i]} * layers[l][i];
      }
      total[l] = prefix[l][n];
    }
    const int step = n / 100;
    std::vector<int> at(3, 0);
    while ((at[0] + at[1] + at[2]) / 3.0 < target * n) {
      int best = 0;
      double best_cost = 1e300;
      for (int l = 0; l < 3; ++l) {
        if (at[l] + step > n) continue;
        const double cost = (prefix[l][at[l] + step] - prefix[l][at[l]]) / total[l];
        if (cost < best_cost) best_cost = cost, best = l;
      }
      at[best] += step;
    }
    std::vector<float> t;
    ASSERT_TRUE(GateThresholdsFor(q, 3, target, &t, SparsityAllocation::kGreedy, rms).ok());
    double mean = 0;
    for (int l = 0; l < 3; ++l) {
      const auto& v = layers[l];
      const double share = double(std::upper_bound(v.begin(), v.end(), t[l]) - v.begin()) / n;
      mean += share / 3;
      EXPECT_NEAR(share, double(at[l]) / n, 0.03) << "layer " << l << " at " << target;
    }
    EXPECT_NEAR(mean, target, 0.01);
    // The heavy-tailed layer skips more than the even one; uniform has each at the target.
    const double even =
        double(std::upper_bound(layers[0].begin(), layers[0].end(), t[0]) - layers[0].begin()) / n;
    EXPECT_LT(even, target - 0.05);
  }
}

TEST(GateThresholdsFor, ReluLayersSparserThanTheTargetKeepTheirZerosAndTheRestMakeItUp) {
  // Layer 0: 80 % exact zeros, then 1 .. 20; layer 1: no zeros, k + 1 at point k.
  std::vector<float> q(2 * kGateQuantilePoints);
  for (int k = 0; k < kGateQuantilePoints; ++k) {
    q[k] = k <= 80 ? 0.0f : static_cast<float>(k - 80);
    q[kGateQuantilePoints + k] = k == 0 ? 0.0f : static_cast<float>(k + 1);
  }
  EXPECT_DOUBLE_EQ(ZeroShare(q.data()), 0.805);
  EXPECT_DOUBLE_EQ(ZeroShare(q.data() + kGateQuantilePoints), 0.0);
  // mean(max(0.805, s), s) = 0.6: s = 0.395; layer 0 stays at its zeros.
  EXPECT_NEAR(CommonLevel({0.805, 0.0}, 0.6), 0.395, 1e-12);
  std::vector<float> t;
  ASSERT_TRUE(GateThresholdsFor(q, 2, 0.6, &t).ok());
  EXPECT_EQ(t[0], 0.0f);
  EXPECT_NEAR(t[1], 40.5f, 1e-4);  // point 39.5: between 40 and 41
  // Above every layer's zeros: one level, the target.
  ASSERT_TRUE(GateThresholdsFor(q, 2, 0.9, &t).ok());
  EXPECT_NEAR(t[0], 10.0f, 1e-4);
  EXPECT_NEAR(t[1], 91.0f, 1e-4);
  // Below the zeros' mean: nothing but zeros is skipped in layer 0, and layer 1
  // makes up the rest.
  EXPECT_NEAR(CommonLevel({0.805, 0.0}, 0.3), 0.0, 1e-12);     // 0.4025 > 0.3 already
  EXPECT_NEAR(CommonLevel({0.9, 0.5, 0.1}, 0.6), 0.4, 1e-12);  // (0.9 + 0.5 + 0.4) / 3
}

SyntheticModelOptions SiluModel() {
  SyntheticModelOptions o;
  o.n_vocab = 300;
  o.n_embd = 64;
  o.n_layer = 2;
  o.n_head = 4;
  o.n_ff = 128;
  o.n_ctx = 64;
  o.type = DType::kF32;
  o.activation = "silu";
  o.down_t = true;
  return o;
}

// An observer keeping every layer's OnGate rows and FFN inputs.
struct GateRecorder : public FfnObserver {
  std::vector<std::vector<float>> gates, inputs;  // [layer] all rows
  void OnFfnInput(int layer, int batch, const float* h) override {
    if (inputs.size() <= static_cast<size_t>(layer)) inputs.resize(layer + 1);
    inputs[layer].insert(inputs[layer].end(), h, h + static_cast<int64_t>(batch) * 64);
  }
  void OnFfn(int, int, const float*) override {}
  void OnGate(int layer, int batch, const float* a) override {
    if (gates.size() <= static_cast<size_t>(layer)) gates.resize(layer + 1);
    gates[layer].insert(gates[layer].end(), a, a + static_cast<int64_t>(batch) * 128);
  }
};

TEST(GateQuantiles, ProfiledGatesAreSiluOfTheGateDotsAndRoundTripThroughTheFile) {
  const SyntheticModelOptions o = SiluModel();
  const std::string path = TempPath("gates.gguf");
  ASSERT_TRUE(WriteSyntheticModel(o, path).ok());
  LlamaModel m;
  ASSERT_TRUE(LoadLlamaModel(path, &m).ok());
  std::remove(path.c_str());
  EngineOptions opt;
  opt.n_ctx = 64;
  opt.n_batch = 8;
  std::unique_ptr<Engine> e;
  ASSERT_TRUE(Engine::Create(&m, opt, &e).ok());
  GateRecorder rec;
  ActivationStats stats;
  InitActivationStatsFor(m, &stats);
  struct Both : public FfnObserver {
    FfnObserver *a, *b;
    void OnFfnInput(int l, int n, const float* h) override { a->OnFfnInput(l, n, h); }
    void OnFfn(int l, int n, const float* x) override { a->OnFfn(l, n, x), b->OnFfn(l, n, x); }
    void OnGate(int l, int n, const float* x) override { a->OnGate(l, n, x), b->OnGate(l, n, x); }
  } both;
  both.a = &rec;
  both.b = &stats;
  e->SetFfnObserver(&both);
  std::vector<int32_t> toks(40);
  for (int i = 0; i < 40; ++i) toks[i] = (i * 37 + 11) % 300;
  ASSERT_TRUE(e->Eval(toks.data(), 40).ok());
  ASSERT_EQ(rec.gates.size(), 2u);
  ASSERT_EQ(rec.gates[0].size(), 40u * 128);
  // Every layer's recorded gates against silu(gate · rmsnorm(h) * ffn_norm)
  // computed here in double from the FFN input h the observer saw.
  const LlamaConfig& c = m.config;
  int negative = 0;
  for (int l = 0; l < 2; ++l) {
    const float* wg = reinterpret_cast<const float*>(m.layers[l].ffn_gate.data);
    const float* wn = reinterpret_cast<const float*>(m.layers[l].ffn_norm.data);
    for (int t = 0; t < 40; ++t) {
      const float* h = rec.inputs[l].data() + t * 64;
      double ss = 0;
      for (int i = 0; i < 64; ++i) ss += double{h[i]} * h[i];
      const double inv = 1.0 / std::sqrt(ss / 64 + c.norm_eps);
      for (int n = 0; n < 128; ++n) {
        double g = 0;
        for (int i = 0; i < 64; ++i) g += double{wg[n * 64 + i]} * h[i] * inv * wn[i];
        const double want = g / (1.0 + std::exp(-g));
        const float got = rec.gates[l][t * 128 + n];
        ASSERT_NEAR(got, want, 1e-4 * (1 + std::fabs(want))) << "layer " << l << " token " << t;
        negative += got < 0;
      }
    }
  }
  EXPECT_GT(negative, 0);  // SiLU's, not a ReLU's
  stats.FinishGateQuantiles();
  ASSERT_EQ(stats.gate_quantiles.size(), 2u * kGateQuantilePoints);
  // Layer 1's quantiles against the exact ones of the recorded magnitudes.
  std::vector<float> mag;
  for (float g : rec.gates[1]) mag.push_back(std::fabs(g));
  std::sort(mag.begin(), mag.end());
  for (int k : {10, 40, 50, 90}) {
    const float exact = mag[static_cast<size_t>(k / 100.0 * (mag.size() - 1))];
    EXPECT_NEAR(stats.gate_quantiles[kGateQuantilePoints + k], exact, 0.02 * exact) << k;
  }

  const std::string file = TempPath("gates.stats.gguf");
  ASSERT_TRUE(WriteActivationStats(stats, file).ok());
  ActivationStats back;
  Status s = ReadActivationStats(file, &back);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(back.gate_quantiles, stats.gate_quantiles);

  // Quantiles for some layers only, or out of order: refused by name.
  std::unique_ptr<GgufFile> f;
  ASSERT_TRUE(GgufFile::Open(file, &f).ok());
  auto rewrite = [&](bool drop_layer1, bool decreasing) {
    GgufWriter w;
    for (const auto& kv : f->metadata()) w.Set(kv.first, kv.second);
    for (const TensorInfo& t : f->tensors()) {
      if (drop_layer1 && t.name == "blk.1.ffn_gate_quantiles") continue;
      std::vector<uint8_t> bytes(t.data, t.data + t.nbytes);
      if (decreasing && t.name == "blk.0.ffn_gate_quantiles") {
        const float big = 1e9f;
        std::memcpy(bytes.data() + 4 * 20, &big, 4);
      }
      std::vector<int64_t> ne(t.ne, t.ne + t.n_dims);
      EXPECT_TRUE(w.AddTensor(t.name, t.type, ne, bytes.data()).ok());
    }
    const std::string bad = TempPath("bad.stats.gguf");
    EXPECT_TRUE(w.Write(bad).ok());
    ActivationStats st;
    const Status r = ReadActivationStats(bad, &st);
    std::remove(bad.c_str());
    return r.message();
  };
  EXPECT_THAT(rewrite(true, false), HasSubstr("blk.1.ffn_gate_quantiles' is missing"));
  EXPECT_THAT(rewrite(false, true), HasSubstr("layer 0's gate quantile 21"));
  std::remove(file.c_str());
}

}  // namespace
}  // namespace pi
