// CudaHotShard against a scalar double-precision evaluation of the hot FFN
// formula over the CPU-dequantized rows, with x rounded through Q8_0 for
// quantized rows as the kernels read it (not against HostHotShard), for
// every weight type x relu/drelu x hot share 0 / 20 / 100 %, a batch of rows
// against each row alone, and the engine with the split on this shard
// against the dense engine (greedy tokens of the demo model). Label "gpu":
// skipped, with the reason, without a device.
#include "gpu_worker/cuda_hot_shard.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "common/offline/synthetic_model.h"
#include "coordinator/engine/engine.h"
#include "kernels/cpu/quant.h"
#include "kernels/cuda/matvec.h"
#include "tests/temp_path.h"

namespace pi {
namespace {

bool NoDevice(std::string* why) {
  return !cuda::DeviceAvailable(why);
}

std::vector<float> RowF32(const Tensor& t, int64_t r) {
  std::vector<float> v(static_cast<size_t>(t.cols));
  DequantizeRow(t.type, t.row(r), v.data(), t.cols);
  return v;
}

// y = sum over ids of act_i * down_t[i], act_i = relu(g_i) * u_i (drelu:
// relu(u_i)), in double over the dequantized rows, with a per-column error
// bound for a float evaluation, and the fired count's range: a neuron whose
// gate (or drelu's up) is within float rounding of 0 may go either way in
// float, and its act is then ~0, so only the count is affected.
struct Reference {
  std::vector<double> y, tol;
  int64_t fired_min = 0, fired_max = 0;
};

Reference Evaluate(const LlamaModel& m, int layer, const std::vector<int32_t>& ids,
                   const std::vector<float>& x_in) {
  const LlamaLayer& l = m.layers[layer];
  // Quantized rows dot x's Q8_0 copy (as the CPU kernels do): the
  // reference uses x rounded the same way.
  std::vector<float> x = x_in;
  if (l.ffn_up.type == DType::kQ8_0 || l.ffn_up.type == DType::kQ4_0) {
    std::vector<BlockQ8_0> q(x.size() / 32);
    QuantizeRowQ8_0(x_in.data(), q.data(), static_cast<int64_t>(x.size()));
    DequantizeRow(DType::kQ8_0, q.data(), x.data(), static_cast<int64_t>(x.size()));
  }
  const int64_t d = m.config.n_embd;
  const bool drelu = m.config.activation == FfnActivation::kDRelu;
  // Ungated (falcon): act = relu(u); computed below as g = u, u = 1.
  const bool gated = FfnIsGated(m.config.activation);
  constexpr double kRel = 1e-5;  // ~170 float epsilons: a sum of a few hundred products
  Reference r;
  r.y.assign(d, 0.0);
  r.tol.assign(d, 1e-6);
  for (int32_t id : ids) {
    const std::vector<float> up = RowF32(l.ffn_up, id);
    const std::vector<float> gate = gated ? RowF32(l.ffn_gate, id) : up;
    double g = 0, g_mag = 0, u = 0, u_mag = 0;
    for (int64_t c = 0; c < d; ++c) {
      g += static_cast<double>(gate[c]) * x[c];
      g_mag += std::fabs(static_cast<double>(gate[c]) * x[c]);
      u += static_cast<double>(up[c]) * x[c];
      u_mag += std::fabs(static_cast<double>(up[c]) * x[c]);
    }
    if (!gated) {
      u = 1.0;
      u_mag = 0.0;
    }
    const bool g_sure = std::fabs(g) > kRel * g_mag;
    const bool u_sure = std::fabs(u) > kRel * u_mag;
    double act = 0;
    if (g > 0) act = drelu ? (u > 0 ? g * u : 0.0) : g * u;
    const bool fired = act != 0;
    const bool sure = g_sure && (g < 0 || u_sure);
    r.fired_min += fired && sure;
    r.fired_max += fired || !sure;
    // Error of the float act: from g, from u, and the ~0 act of an unsure neuron.
    const double act_err = kRel * (g_mag * std::fabs(u) + std::fabs(g) * u_mag + std::fabs(act)) +
                           (sure ? 0.0 : std::fabs(act));
    if (act == 0 && sure) continue;
    const std::vector<float> down = RowF32(l.ffn_down_t, id);
    for (int64_t c = 0; c < d; ++c) {
      r.y[c] += act * down[c];
      r.tol[c] += (act_err + kRel * std::fabs(act)) * std::fabs(down[c]);
    }
  }
  return r;
}

std::vector<int32_t> RandomHotSet(int n_ff, double share, uint32_t seed) {
  std::vector<int32_t> all(n_ff);
  std::iota(all.begin(), all.end(), 0);
  std::mt19937 rng(seed);
  std::shuffle(all.begin(), all.end(), rng);
  all.resize(static_cast<size_t>(std::lround(share * n_ff)));
  std::sort(all.begin(), all.end());
  return all;
}

struct Case {
  DType type;
  const char* act;
  double hot_share;
  const char* arch = "llama";  // falcon: ungated relu(up)
};

// One step of `batch` rows of x into y; returns the neurons that fired.
int64_t Step(CudaHotShard* shard, int layer, int batch, const float* x, float* y) {
  ShardStep step;
  step.layer = layer;
  step.batch = batch;
  step.x = x;
  step.out = y;
  shard->Start(step);
  const float* sum = nullptr;
  int64_t fired = 0;
  const Status s = shard->Wait(&sum, &fired);
  EXPECT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(sum, y);
  return fired;
}

class CudaHotShardTest : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    std::string why;
    if (NoDevice(&why)) GTEST_SKIP() << why;
  }
};

TEST_P(CudaHotShardTest, MatchesScalarReference) {
  const Case tc = GetParam();
  SyntheticModelOptions o;
  o.n_vocab = 300;
  o.n_embd = 320;  // two 256-column blocks of the down kernel, the second one partial
  o.n_ff = 736;    // 20 %: 147 rows, not a multiple of the 4 rows of a gate/up block
  o.n_layer = 2;
  o.n_head = 4;
  o.type = tc.type;
  o.activation = tc.act;
  o.arch = tc.arch;
  o.down_t = true;
  const std::string path = TempPath("cuda_ffn.gguf");
  ASSERT_TRUE(WriteSyntheticModel(o, path).ok());
  LlamaModel m;
  ASSERT_TRUE(LoadLlamaModel(path, &m).ok());
  std::remove(path.c_str());  // mapped: the data stays readable

  std::vector<std::vector<int32_t>> hot(o.n_layer);
  for (int l = 0; l < o.n_layer; ++l) hot[l] = RandomHotSet(o.n_ff, tc.hot_share, 7 + l);
  CudaHotShard backend;
  const Status s = backend.Load(m, hot);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_STREQ(backend.backend(), "cuda");
  int64_t expect_bytes = 0;
  for (int l = 0; l < o.n_layer; ++l) {
    // gate (not for falcon), up and down_t rows of n_embd
    const int row_sets = std::string(tc.arch) == "falcon" ? 2 : 3;
    expect_bytes += static_cast<int64_t>(hot[l].size()) * (RowBytes(tc.type, o.n_embd) * row_sets);
  }
  EXPECT_EQ(backend.resident_bytes(), expect_bytes);

  std::mt19937 rng(11);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  int64_t total_fired = 0;
  for (int trial = 0; trial < 3; ++trial) {
    std::vector<float> x(o.n_embd);
    for (float& v : x) v = nd(rng);
    for (int l = 0; l < o.n_layer; ++l) {
      // NaN first: y must be overwritten, every column.
      std::vector<float> y(o.n_embd, std::numeric_limits<float>::quiet_NaN());
      const int64_t fired = Step(&backend, l, 1, x.data(), y.data());
      const Reference ref = Evaluate(m, l, hot[l], x);
      for (int64_t c = 0; c < o.n_embd; ++c) {
        ASSERT_NEAR(y[c], ref.y[c], ref.tol[c]) << "layer " << l << " column " << c;
      }
      EXPECT_GE(fired, ref.fired_min) << "layer " << l;
      EXPECT_LE(fired, ref.fired_max) << "layer " << l;
      total_fired += fired;

      // Deterministic: the same step again gives the same bits.
      std::vector<float> y2(o.n_embd, -1.0f);
      EXPECT_EQ(Step(&backend, l, 1, x.data(), y2.data()), fired);
      EXPECT_EQ(std::memcmp(y.data(), y2.data(), sizeof(float) * o.n_embd), 0) << "layer " << l;

      // A batch of three rows (x, -x, x): each row's sum as it is alone.
      std::vector<float> xs(3 * o.n_embd), ys(3 * o.n_embd, -1.0f), neg(o.n_embd);
      for (int64_t c = 0; c < o.n_embd; ++c) {
        xs[c] = xs[2 * o.n_embd + c] = x[c];
        xs[o.n_embd + c] = -x[c];
      }
      const int64_t fired_neg = Step(&backend, l, 1, xs.data() + o.n_embd, neg.data());
      EXPECT_EQ(Step(&backend, l, 3, xs.data(), ys.data()), 2 * fired + fired_neg);
      EXPECT_EQ(std::memcmp(ys.data(), y.data(), sizeof(float) * o.n_embd), 0);
      EXPECT_EQ(std::memcmp(ys.data() + o.n_embd, neg.data(), sizeof(float) * o.n_embd), 0);
      EXPECT_EQ(std::memcmp(ys.data() + 2 * o.n_embd, y.data(), sizeof(float) * o.n_embd), 0);
    }
  }
  if (tc.hot_share > 0) {
    EXPECT_GT(total_fired, 0);  // random gates: about half fire (relu), a quarter (drelu)
  } else {
    EXPECT_EQ(total_fired, 0);
  }
}

std::vector<Case> AllCases() {
  std::vector<Case> cases;
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16, DType::kQ8_0, DType::kQ4_0}) {
    for (const char* act : {"relu", "drelu"}) {
      for (double share : {0.0, 0.2, 1.0}) cases.push_back({t, act, share});
    }
    cases.push_back({t, "relu", 0.2, "falcon"});
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Cases, CudaHotShardTest, ::testing::ValuesIn(AllCases()),
                         [](const auto& p) {
                           return std::string(p.param.arch) + "_" + DTypeName(p.param.type) + "_" +
                                  p.param.act + "_hot" +
                                  std::to_string(static_cast<int>(p.param.hot_share * 100));
                         });

// Rejected before any device memory is touched, device or not.
TEST(CudaHotShardErrorsTest, LoadRejectsBadInput) {
  SyntheticModelOptions o;
  o.n_ff = 256;
  o.activation = "relu";
  const std::string path = TempPath("nodownt.gguf");
  ASSERT_TRUE(WriteSyntheticModel(o, path).ok());
  LlamaModel m;
  ASSERT_TRUE(LoadLlamaModel(path, &m).ok());
  std::remove(path.c_str());
  CudaHotShard backend;
  EXPECT_THAT(backend.Load(m, std::vector<std::vector<int32_t>>(o.n_layer)).message(),
              ::testing::HasSubstr("ffn_down_t"));

  o.down_t = true;
  ASSERT_TRUE(WriteSyntheticModel(o, path).ok());
  LlamaModel m2;
  ASSERT_TRUE(LoadLlamaModel(path, &m2).ok());
  std::remove(path.c_str());
  std::vector<std::vector<int32_t>> bad(o.n_layer);
  bad[1] = {5, 3};
  EXPECT_THAT(backend.Load(m2, bad).message(), ::testing::HasSubstr("sorted"));
  bad[1] = {256};
  EXPECT_FALSE(backend.Load(m2, bad).ok());
  EXPECT_FALSE(backend.Load(m2, std::vector<std::vector<int32_t>>(1)).ok());

  // Rows the kernels do not take (they read 8 weights at a time, 16-byte aligned).
  SyntheticModelOptions narrow = o;
  narrow.n_embd = 48;
  ASSERT_TRUE(WriteSyntheticModel(narrow, path).ok());
  LlamaModel m3;
  ASSERT_TRUE(LoadLlamaModel(path, &m3).ok());
  std::remove(path.c_str());
  EXPECT_THAT(backend.Load(m3, std::vector<std::vector<int32_t>>(o.n_layer)).message(),
              ::testing::HasSubstr("n_embd 48 is not a multiple of 32"));

  // Without a device, a valid request fails and says so.
  std::string why;
  if (NoDevice(&why)) {
    const Status s = backend.Load(m2, std::vector<std::vector<int32_t>>(o.n_layer));
    EXPECT_THAT(s.message(), ::testing::HasSubstr("CUDA device"));
  }
}

// The demo model stored with ffn_down_t (pi-quantize --down-t), ~30 % of each
// layer's neurons on the CUDA backend: the same 32 greedy tokens as dense.
TEST(CudaHotShardEngineTest, DemoGreedyTokensEqualDense) {
  std::string why;
  if (NoDevice(&why)) GTEST_SKIP() << why;
  const std::string demo_t = TempPath("demo-down-t.gguf");
  const std::string cmd = std::string(PI_BINARY_DIR) + "/bin/pi-quantize " + PI_SOURCE_DIR +
                          "/models/demo-kjv-f16.gguf " + demo_t + " f16 --down-t 2>/dev/null";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  LlamaModel m;
  ASSERT_TRUE(LoadLlamaModel(demo_t, &m).ok());
  std::remove(demo_t.c_str());

  std::vector<std::vector<int32_t>> hot(m.config.n_layer);
  for (int l = 0; l < m.config.n_layer; ++l) hot[l] = RandomHotSet(m.config.n_ff, 0.3, 100 + l);
  CudaHotShard backend;
  const Status s = backend.Load(m, hot);
  ASSERT_TRUE(s.ok()) << s.message();

  std::vector<int32_t> tokens[2];
  int64_t neurons[2] = {0, 0};
  for (int k = 0; k < 2; ++k) {
    EngineOptions opt;
    opt.n_threads = 2;
    if (k == 1) {
      opt.hot_shard = &backend;
    }
    std::unique_ptr<Engine> e;
    ASSERT_TRUE(Engine::Create(&m, opt, &e).ok());
    const int32_t prompt[4] = {1, 100, 200, 300};
    ASSERT_TRUE(e->Eval(prompt, 4).ok());
    for (int step = 0; step < 32; ++step) {
      const float* logits = e->logits();
      const int32_t t =
          static_cast<int32_t>(std::max_element(logits, logits + e->n_vocab()) - logits);
      tokens[k].push_back(t);
      ASSERT_TRUE(e->Eval(&t, 1).ok());
      neurons[k] += e->last_ffn_neurons();
    }
  }
  EXPECT_EQ(tokens[1], tokens[0]);
  // The split computes only neurons that fire (the demo is ~90 % sparse).
  EXPECT_LT(neurons[1], neurons[0] / 2);
}

}  // namespace
}  // namespace pi
