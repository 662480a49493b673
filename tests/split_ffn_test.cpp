// The hot/cold split (hot neurons on the host backend, cold ones on the CPU,
// concurrently, partial sums added) equals the unsplit dense FFN.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "common/ffn_block.h"
#include "common/synthetic_model.h"
#include "coordinator/engine.h"
#include "gpu_worker/host_ffn_backend.h"
#include "tests/temp_path.h"

namespace pi {
namespace {

struct SplitCase {
  DType type;
  const char* act;
  double hot_share;            // share of each layer's neurons placed on the backend
  const char* arch = "llama";  // falcon: ungated relu(up), up rows decide
};

class SplitFfnTest : public ::testing::TestWithParam<SplitCase> {};

TEST_P(SplitFfnTest, SplitEqualsUnsplit) {
  const SplitCase sc = GetParam();
  SyntheticModelOptions o;
  o.n_vocab = 300;
  o.n_embd = 256;
  o.n_ff = 1024;
  o.n_layer = 2;
  o.n_head = 4;
  o.type = sc.type;
  o.activation = sc.act;
  o.arch = sc.arch;
  o.down_t = true;
  o.planted_sparsity = 0.85;
  const std::string path = TempPath("split.gguf");
  ASSERT_TRUE(WriteSyntheticModel(o, path).ok());
  LlamaModel m;
  ASSERT_TRUE(LoadLlamaModel(path, &m).ok());

  // Hot = the most frequently firing neurons by the planted rates (what a
  // placement from a profile would pick).
  std::vector<std::vector<int32_t>> hot(o.n_layer);
  for (int l = 0; l < o.n_layer; ++l) {
    const std::vector<double> rates = PlantedFiringRates(o, l);
    std::vector<int32_t> order(o.n_ff);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(),
                     [&](int32_t a, int32_t b) { return rates[a] > rates[b]; });
    hot[l].assign(order.begin(), order.begin() + static_cast<int64_t>(sc.hot_share * o.n_ff));
    std::sort(hot[l].begin(), hot[l].end());
  }
  HostFfnBackend backend(1);
  ASSERT_TRUE(backend.Load(m, hot).ok());
  FfnBlock split;
  split.Init(m, 1);
  ASSERT_TRUE(split.InitSplit(hot, &backend).ok());
  FfnBlock dense;
  dense.Init(m, 1);
  ThreadPool pool(2);

  std::mt19937 rng(5);
  // Residuals as the planted model makes them: the rest about as large as
  // the bias channel h[0] = 1 (see synthetic_model.h).
  std::normal_distribution<float> nd(0.0f, 1.0f / std::sqrt(static_cast<float>(o.n_embd)));
  int64_t fired = 0, hot_fired = 0;
  for (int trial = 0; trial < 8; ++trial) {
    std::vector<float> h(o.n_embd);
    for (float& v : h) v = nd(rng);
    h[0] = 1.0f;  // the planted bias channel, as in every residual of this model
    for (int l = 0; l < o.n_layer; ++l) {
      std::vector<float> a = h, b = h;
      split.Forward(l, 1, a.data(), &pool);
      dense.Forward(l, 1, b.data(), &pool);
      float scale = 0;
      for (int i = 0; i < o.n_embd; ++i) scale = std::max(scale, std::fabs(b[i] - h[i]));
      for (int i = 0; i < o.n_embd; ++i) {
        ASSERT_NEAR(a[i], b[i], 1e-5f * scale + 1e-6f) << "layer " << l << " dim " << i;
      }
      // Both halves report their firing neurons; together they are the dense count.
      int64_t dense_fired = 0;
      for (int i = 0; i < o.n_ff; ++i) dense_fired += dense.activations()[i] != 0.0f;
      EXPECT_EQ(split.last_hot_fired() + split.last_cold_fired(), dense_fired);
      fired += dense_fired;
      hot_fired += split.last_hot_fired();
    }
  }
  if (sc.hot_share > 0 && sc.hot_share < 1) {
    // The hot 20% of neurons serve most of the firings (power-law rates).
    EXPECT_GT(static_cast<double>(hot_fired) / fired, 0.5);
  }
  std::remove(path.c_str());
}

INSTANTIATE_TEST_SUITE_P(
    Cases, SplitFfnTest,
    ::testing::Values(SplitCase{DType::kF32, "relu", 0.2}, SplitCase{DType::kF16, "drelu", 0.2},
                      SplitCase{DType::kQ8_0, "relu", 0.2}, SplitCase{DType::kQ4_0, "relu", 0.2},
                      SplitCase{DType::kF32, "relu", 0.0}, SplitCase{DType::kF32, "relu", 1.0},
                      SplitCase{DType::kF16, "relu", 0.2, "falcon"},
                      SplitCase{DType::kQ8_0, "relu", 0.2, "falcon"}),
    [](const auto& p) {
      return std::string(p.param.arch) + "_" + DTypeName(p.param.type) + "_" + p.param.act +
             "_hot" + std::to_string(static_cast<int>(p.param.hot_share * 100));
    });

TEST(SplitFfnErrorsTest, NeedsDownTAndValidIds) {
  SyntheticModelOptions o;
  o.n_ff = 256;
  o.activation = "relu";
  const std::string path = TempPath("nodownt.gguf");
  ASSERT_TRUE(WriteSyntheticModel(o, path).ok());
  LlamaModel m;
  ASSERT_TRUE(LoadLlamaModel(path, &m).ok());
  HostFfnBackend backend;
  Status s = backend.Load(m, std::vector<std::vector<int32_t>>(o.n_layer));
  EXPECT_THAT(s.message(), ::testing::HasSubstr("ffn_down_t"));
  std::remove(path.c_str());

  o.down_t = true;
  ASSERT_TRUE(WriteSyntheticModel(o, path).ok());
  LlamaModel m2;
  ASSERT_TRUE(LoadLlamaModel(path, &m2).ok());
  std::vector<std::vector<int32_t>> bad(o.n_layer);
  bad[1] = {5, 3};
  EXPECT_THAT(backend.Load(m2, bad).message(), ::testing::HasSubstr("sorted"));
  bad[1] = {300};
  EXPECT_FALSE(backend.Load(m2, bad).ok());
  EXPECT_FALSE(backend.Load(m2, std::vector<std::vector<int32_t>>(1)).ok());
  std::remove(path.c_str());
}

}  // namespace
}  // namespace pi

namespace pi {
namespace {

// The engine with the split wired in: decode logits equal the unsplit ones.
class EngineSplitTest : public ::testing::TestWithParam<const char*> {};

TEST_P(EngineSplitTest, DecodeWithSplitEqualsWithout) {
  SyntheticModelOptions o;
  o.arch = GetParam();
  o.n_vocab = 300;
  o.n_embd = 256;
  o.n_ff = 1024;
  o.n_layer = 2;
  o.n_head = 4;
  o.n_head_kv = 2;
  o.type = DType::kQ8_0;
  o.activation = "relu";
  o.down_t = true;
  o.planted_sparsity = 0.85;
  const std::string path = TempPath("engine_split.gguf");
  ASSERT_TRUE(WriteSyntheticModel(o, path).ok());
  LlamaModel m;
  ASSERT_TRUE(LoadLlamaModel(path, &m).ok());
  std::vector<std::vector<int32_t>> hot(o.n_layer);
  for (int l = 0; l < o.n_layer; ++l) {
    for (int i = l; i < o.n_ff; i += 3) hot[l].push_back(i);  // any set will do
  }
  HostFfnBackend backend(1);
  ASSERT_TRUE(backend.Load(m, hot).ok());

  std::vector<float> logits[2];
  int64_t neurons[2] = {0, 0};
  for (int k = 0; k < 2; ++k) {
    EngineOptions opt;
    opt.n_threads = 2;
    // An exact cache: with f16 rows a last-bit difference of the two FFN
    // sums can round a K/V value the other way and grow through the layers.
    opt.cache_type_k = opt.cache_type_v = DType::kF32;
    if (k == 1) {
      opt.hot_backend = &backend;
      opt.hot_neurons = &hot;
    }
    std::unique_ptr<Engine> e;
    ASSERT_TRUE(Engine::Create(&m, opt, &e).ok());
    const int32_t prompt[3] = {1, 2, 3};
    ASSERT_TRUE(e->Eval(prompt, 3).ok());  // a prompt batch: runs unsplit
    for (int32_t t = 10; t < 30; ++t) {
      ASSERT_TRUE(e->Eval(&t, 1).ok());
      logits[k].insert(logits[k].end(), e->logits(), e->logits() + e->n_vocab());
      neurons[k] += e->last_ffn_neurons();
    }
  }
  float max_abs = 0;
  for (float v : logits[0]) max_abs = std::max(max_abs, std::fabs(v));
  for (size_t i = 0; i < logits[0].size(); ++i) {
    ASSERT_NEAR(logits[1][i], logits[0][i], 1e-4f * max_abs) << i;
  }
  EXPECT_LT(neurons[1], neurons[0] / 3);  // the split skips silent neurons on both sides

  EngineOptions bad;
  bad.hot_backend = &backend;
  std::unique_ptr<Engine> e;
  EXPECT_THAT(Engine::Create(&m, bad, &e).message(), ::testing::HasSubstr("hot neuron sets"));
  std::remove(path.c_str());
}

INSTANTIATE_TEST_SUITE_P(Archs, EngineSplitTest, ::testing::Values("llama", "falcon"));

}  // namespace
}  // namespace pi
