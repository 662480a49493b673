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

#include "common/offline/synthetic_model.h"
#include "coordinator/engine/engine.h"
#include "coordinator/route/ffn_block.h"
#include "gpu_worker/host_device_backend.h"
#include "gpu_worker/host_hot_shard.h"
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
  HostHotShard backend(1);
  ASSERT_TRUE(backend.Load(m, hot).ok());
  FfnBlock split;
  split.Init(m, 1);
  ASSERT_TRUE(split.InitHotShard(hot, &backend).ok());
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
  HostHotShard backend;
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

// A model with ffn_down_t and hot sets of every third neuron, for the shard
// tests below.
struct HotFixture {
  std::string path;
  LlamaModel model;
  std::vector<std::vector<int32_t>> hot;
  int n_embd = 0, n_ff = 0, n_layer = 0;
};

void MakeHotFixture(const char* name, HotFixture* f) {
  SyntheticModelOptions o;
  o.n_vocab = 300;
  o.n_embd = 128;
  o.n_ff = 512;
  o.n_layer = 2;
  o.n_head = 4;
  o.type = DType::kQ8_0;
  o.activation = "relu";
  o.down_t = true;
  o.planted_sparsity = 0.85;
  f->path = TempPath(name);
  ASSERT_TRUE(WriteSyntheticModel(o, f->path).ok());
  ASSERT_TRUE(LoadLlamaModel(f->path, &f->model).ok());
  f->hot.assign(o.n_layer, {});
  for (int l = 0; l < o.n_layer; ++l) {
    for (int i = l; i < o.n_ff; i += 3) f->hot[l].push_back(i);
  }
  f->n_embd = o.n_embd;
  f->n_ff = o.n_ff;
  f->n_layer = o.n_layer;
}

std::vector<float> RandomRows(int rows, int n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(rows) * n);
  for (float& v : x) v = nd(rng);
  return x;
}

TEST(HostHotShardTest, BatchRowsEqualEachRowAloneBitForBit) {
  HotFixture f;
  MakeHotFixture("hot_batch.gguf", &f);
  HostHotShard shard(2);
  ASSERT_TRUE(shard.Load(f.model, f.hot).ok());
  EXPECT_EQ(shard.owned(), f.hot);
  EXPECT_STREQ(shard.backend(), "host");
  const int rows = 5;
  const std::vector<float> x = RandomRows(rows, f.n_embd, 3);
  for (int l = 0; l < f.n_layer; ++l) {
    ShardStep step;
    step.layer = l;
    step.batch = rows;
    step.x = x.data();
    shard.Start(step);
    const float* y = nullptr;
    int64_t fired = 0;
    ASSERT_TRUE(shard.Wait(&y, &fired).ok());
    const std::vector<float> together(y, y + rows * f.n_embd);
    int64_t fired_alone = 0;
    for (int b = 0; b < rows; ++b) {
      std::vector<float> out(f.n_embd, -1.0f);
      ShardStep one;
      one.layer = l;
      one.x = x.data() + b * f.n_embd;
      one.out = out.data();  // the sum lands where the caller asks
      shard.Start(one);
      const float* y1 = nullptr;
      int64_t n = 0;
      ASSERT_TRUE(shard.Wait(&y1, &n).ok());
      EXPECT_EQ(y1, out.data());
      fired_alone += n;
      for (int i = 0; i < f.n_embd; ++i) {
        ASSERT_EQ(together[b * f.n_embd + i], out[i]) << "layer " << l << " row " << b;
      }
    }
    EXPECT_EQ(fired, fired_alone);
    EXPECT_GT(fired, 0);
  }
  std::remove(f.path.c_str());
}

TEST(HostHotShardTest, RefusesCandidateIdsAndBadSteps) {
  HotFixture f;
  MakeHotFixture("hot_refuse.gguf", &f);
  HostHotShard shard(1);
  const std::vector<float> x = RandomRows(1, f.n_embd, 4);
  ShardStep step;
  step.x = x.data();
  const float* y = nullptr;
  int64_t fired = 0;
  shard.Start(step);
  EXPECT_THAT(shard.Wait(&y, &fired).message(), ::testing::HasSubstr("before Load"));
  ASSERT_TRUE(shard.Load(f.model, f.hot).ok());
  const int32_t ids[1] = {0};
  const int32_t row_n[1] = {1};
  step.ids = ids;
  step.row_n = row_n;
  shard.Start(step);
  EXPECT_THAT(shard.Wait(&y, &fired).message(), ::testing::HasSubstr("whole layers"));
  step.ids = nullptr;
  step.row_n = nullptr;
  step.layer = f.n_layer;
  shard.Start(step);
  EXPECT_THAT(shard.Wait(&y, &fired).message(), ::testing::HasSubstr("out of range"));
  step.layer = 0;
  step.batch = HostHotShard::kMaxBatch + 1;
  shard.Start(step);
  EXPECT_FALSE(shard.Wait(&y, &fired).ok());
  step.batch = 1;
  shard.Start(step);  // and it still serves a good step
  EXPECT_TRUE(shard.Wait(&y, &fired).ok());
  std::remove(f.path.c_str());
}

// A hot shard that fails its steps from the k-th on, as a CUDA fault does,
// and never comes back.
class FaultingShard : public Shard {
 public:
  FaultingShard(Shard* inner, int ok_steps) : inner_(inner), ok_steps_(ok_steps) {}
  const char* name() const override { return "faulting hot neurons"; }
  const char* backend() const override { return "test"; }
  const std::vector<std::vector<int32_t>>& owned() const override { return inner_->owned(); }
  int max_batch() const override { return inner_->max_batch(); }
  int64_t resident_bytes() const override { return 0; }
  void Start(const ShardStep& step) override { inner_->Start(step); }
  Status Wait(const float** y, int64_t* fired) override {
    const Status s = inner_->Wait(y, fired);
    if (steps_++ >= ok_steps_) return Status::Error("injected fault at step %d", steps_);
    return s;
  }
  Status Recover() override {
    ++recover_calls_;
    return Status::Error("a faulted device stays down");
  }
  int recover_calls_ = 0;

 private:
  Shard* inner_;
  int ok_steps_, steps_ = 0;
};

TEST(HotShardFaultTest, AFailedHotShardsNeuronsRunHereWithTheSameSums) {
  HotFixture f;
  MakeHotFixture("hot_fault.gguf", &f);
  HostHotShard healthy(1), inner(1);
  ASSERT_TRUE(healthy.Load(f.model, f.hot).ok());
  ASSERT_TRUE(inner.Load(f.model, f.hot).ok());
  FaultingShard faulting(&inner, 3);
  FfnBlock good, faulted;
  good.Init(f.model, 1);
  faulted.Init(f.model, 1);
  ASSERT_TRUE(good.InitHotShard(f.hot, &healthy).ok());
  ASSERT_TRUE(faulted.InitHotShard(f.hot, &faulting).ok());
  ThreadPool pool(2);
  const int steps = 6;
  const std::vector<float> h0 = RandomRows(steps, f.n_embd, 9);
  for (int t = 0; t < steps; ++t) {
    for (int l = 0; l < f.n_layer; ++l) {
      std::vector<float> a(h0.begin() + t * f.n_embd, h0.begin() + (t + 1) * f.n_embd), b = a;
      good.Forward(l, 1, a.data(), &pool);
      faulted.Forward(l, 1, b.data(), &pool);
      // The fallback sums the hot neurons apart and adds them as the shard's
      // sum is added; the two runs group them alike: the same bits.
      for (int i = 0; i < f.n_embd; ++i) ASSERT_EQ(a[i], b[i]) << "step " << t << " layer " << l;
      EXPECT_EQ(good.last_hot_fired() + good.last_cold_fired(),
                faulted.last_hot_fired() + faulted.last_cold_fired());
    }
  }
  EXPECT_EQ(faulted.shard_failures(), 1);
  EXPECT_THAT(faulted.shard_error(), ::testing::HasSubstr("injected fault"));
  EXPECT_EQ(good.shard_failures(), 0);
  std::remove(f.path.c_str());
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
  HostHotShard backend(1);
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
      opt.hot_shard = &backend;
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

  // The hot neurons go to a hot shard or to a device's layers, never both.
  HostDeviceBackend device(1);
  EngineOptions bad;
  bad.hot_shard = &backend;
  bad.device = &device;
  std::unique_ptr<Engine> e;
  const Status refused = Engine::Create(&m, bad, &e);
  EXPECT_THAT(refused.message(), ::testing::HasSubstr("a hot shard and a device backend at once"));
  EXPECT_EQ(refused.code(), Status::Code::kInvalid);
  std::remove(path.c_str());
}

INSTANTIATE_TEST_SUITE_P(Archs, EngineSplitTest, ::testing::Values("llama", "falcon"));

}  // namespace
}  // namespace pi
