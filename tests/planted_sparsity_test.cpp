// Planted-sparsity synthetic models: the firing rates the engine measures
// follow the planted ones (mean sparsity near the target, hot neurons hot).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <vector>

#include "common/compute/ffn_observer.h"
#include "common/offline/synthetic_model.h"
#include "coordinator/engine/engine.h"
#include "tests/temp_path.h"

namespace pi {
namespace {

class FiringCounter : public FfnObserver {
 public:
  FiringCounter(int n_layer, int n_ff) : n_ff_(n_ff), counts_(n_layer, std::vector<int>(n_ff)) {}
  void OnFfn(int layer, int batch, const float* act) override {
    for (int b = 0; b < batch; ++b) {
      for (int i = 0; i < n_ff_; ++i) counts_[layer][i] += act[b * n_ff_ + i] != 0.0f;
    }
    if (layer == 0) tokens_ += batch;
  }
  std::vector<double> Rates(int layer) const {
    std::vector<double> r(n_ff_);
    for (int i = 0; i < n_ff_; ++i) r[i] = static_cast<double>(counts_[layer][i]) / tokens_;
    return r;
  }

 private:
  int n_ff_;
  int tokens_ = 0;
  std::vector<std::vector<int>> counts_;
};

double Mean(const std::vector<double>& v) {
  return std::accumulate(v.begin(), v.end(), 0.0) / v.size();
}

double Correlation(const std::vector<double>& a, const std::vector<double>& b) {
  const double ma = Mean(a), mb = Mean(b);
  double sab = 0, saa = 0, sbb = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    sab += (a[i] - ma) * (b[i] - mb);
    saa += (a[i] - ma) * (a[i] - ma);
    sbb += (b[i] - mb) * (b[i] - mb);
  }
  return sab / std::sqrt(saa * sbb);
}

struct PlantCase {
  const char* activation;
  double sparsity;
};

class PlantedSparsityTest : public ::testing::TestWithParam<PlantCase> {};

TEST_P(PlantedSparsityTest, MeasuredRatesFollowThePlantedOnes) {
  SyntheticModelOptions o;
  o.n_vocab = 1000;
  o.n_embd = 512;
  o.n_ff = 2048;
  o.n_layer = 3;
  o.n_head = 8;
  o.n_ctx = 256;
  o.type = DType::kQ8_0;
  o.activation = GetParam().activation;
  o.planted_sparsity = GetParam().sparsity;
  o.down_t = true;
  const std::string path = TempPath("planted.gguf");
  ASSERT_TRUE(WriteSyntheticModel(o, path).ok());
  LlamaModel m;
  ASSERT_TRUE(LoadLlamaModel(path, &m).ok());
  EngineOptions eo;
  eo.n_ctx = 256;
  std::unique_ptr<Engine> e;
  ASSERT_TRUE(Engine::Create(&m, eo, &e).ok());
  FiringCounter counter(o.n_layer, o.n_ff);
  e->SetFfnObserver(&counter);
  std::vector<int32_t> toks(256);
  for (int i = 0; i < 256; ++i) toks[i] = (i * 7919 + 13) % o.n_vocab;
  ASSERT_TRUE(e->Eval(toks.data(), 256).ok());

  for (int l = 0; l < o.n_layer; ++l) {
    const std::vector<double> planted = PlantedFiringRates(o, l);
    const std::vector<double> measured = counter.Rates(l);
    const double sparsity = 1.0 - Mean(measured);
    EXPECT_NEAR(sparsity, o.planted_sparsity, 0.05) << "layer " << l;
    EXPECT_GT(Correlation(planted, measured), 0.8) << "layer " << l;
  }
  std::remove(path.c_str());
}

INSTANTIATE_TEST_SUITE_P(Forms, PlantedSparsityTest,
                         ::testing::Values(PlantCase{"relu", 0.9}, PlantCase{"relu", 0.5},
                                           PlantCase{"drelu", 0.95}),
                         [](const auto& p) {
                           return std::string(p.param.activation) + "_" +
                                  std::to_string(static_cast<int>(p.param.sparsity * 100));
                         });

TEST(PlantedRatesTest, PowerLawWithTheRequestedMean) {
  SyntheticModelOptions o;
  o.n_ff = 11008;
  o.activation = "relu";
  o.planted_sparsity = 0.9;
  o.planted_alpha = 1.0;
  std::vector<double> r = PlantedFiringRates(o, 0);
  EXPECT_NEAR(Mean(r), 0.1, 1e-6);
  std::sort(r.rbegin(), r.rend());
  // p(rank) = min(1, c / (rank + 1)): twice the rank, half the rate (below the cap).
  for (int rank : {1000, 2000, 4000}) EXPECT_NEAR(r[2 * rank + 1] / r[rank], 0.5, 1e-3) << rank;
  // Different layers scatter the hot neurons differently.
  EXPECT_NE(PlantedFiringRates(o, 0), PlantedFiringRates(o, 1));
}

TEST(PlantedRatesTest, RejectsSiluAndOutOfRangeSparsity) {
  SyntheticModelOptions o;
  o.planted_sparsity = 0.9;
  o.activation = "silu";
  EXPECT_FALSE(ValidateSyntheticModel(o).ok());
  o.activation = "relu";
  o.planted_sparsity = 1.5;
  EXPECT_FALSE(ValidateSyntheticModel(o).ok());
}

}  // namespace
}  // namespace pi
