// NeuronFfn::AccumulateRows — several rows, each with its own candidates —
// against Accumulate run on each row alone: the sums, the fired counts and
// the activations equal bit for bit, for every weight type, gated and
// ungated activations (with --sparse cats' threshold too), any thread count (each giving one
// thread's bits), candidate sets from empty to all neurons, and more rows than one call's scratch
// holds.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "common/compute/neuron_ffn.h"
#include "common/offline/synthetic_model.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/quant.h"
#include "tests/temp_path.h"

namespace pi {
namespace {

struct Case {
  DType type;
  const char* act;
  const char* arch;
  int n_embd = 256;     // above 1024 the kernels take their long-row tiles
  float threshold = 0;  // NeuronRows::threshold (--sparse cats)
};

class NeuronFfnRowsTest : public ::testing::TestWithParam<Case> {};

TEST_P(NeuronFfnRowsTest, EachRowEqualsItsSoloSum) {
  SyntheticModelOptions o;
  o.n_vocab = 64;
  o.n_embd = GetParam().n_embd;
  o.n_ff = 1024;
  o.n_layer = 1;
  o.n_head = 4;
  o.type = GetParam().type;
  o.activation = GetParam().act;
  o.arch = GetParam().arch;
  o.down_t = true;
  const std::string path = TempPath("rows.gguf");
  ASSERT_TRUE(WriteSyntheticModel(o, path).ok());
  LlamaModel m;
  ASSERT_TRUE(LoadLlamaModel(path, &m).ok());
  std::remove(path.c_str());
  const LlamaLayer& L = m.layers[0];
  NeuronRows rows{&L.ffn_gate, &L.ffn_up, &L.ffn_down_t};
  rows.threshold = GetParam().threshold;
  const int64_t d = o.n_embd, ff = o.n_ff;

  std::normal_distribution<float> normal(0.0f, 1.0f);
  // Every kernel level this CPU has (each groups its dots its own way), at
  // 1 to 3 threads; at one level every thread count gives the bits of one
  // thread (the same inputs: the generator restarts per level).
  const CpuIsa best = DetectCpuIsa();
  std::vector<std::vector<float>> one_thread_y;  // per batch, at this level's first thread count
  for (int level = 0; level < 3 * 3; ++level) {
    std::mt19937 rng(7);
    const CpuIsa isa = static_cast<CpuIsa>(level / 3);
    const int threads = 1 + level % 3;
    if (static_cast<int>(isa) > static_cast<int>(best)) break;
    SetCpuIsa(isa);
    ThreadPool pool(threads);
    NeuronFfn solo, batched;
    solo.Init(m.config);
    batched.Init(m.config, 5);  // 12 rows: groups of 5, 5 and 2
    // Batches of 1, 2, 5 and 12 rows with candidates of their own; then 3
    // and 12 rows all with every neuron (the oracle step: a shared range).
    if (threads == 1) one_thread_y.clear();
    int case_index = 0;
    for (int batch : {1, 2, 5, 12, -3, -12}) {
      const bool all_neurons = batch < 0;
      batch = std::abs(batch);
      std::vector<std::vector<int32_t>> ids(batch);
      for (int b = 0; b < batch; ++b) {
        // Row 0 all neurons, row 1 none, the rest random shares.
        const double keep = b == 0 || all_neurons ? 1.0
                            : b == 1 && batch > 1 ? 0.0
                                                  : 0.05 + 0.1 * b;
        std::bernoulli_distribution pick(std::min(keep, 1.0));
        for (int32_t i = 0; i < ff; ++i) {
          if (pick(rng)) ids[b].push_back(i);
        }
      }
      std::vector<float> x(batch * d);
      for (float& v : x) v = normal(rng);
      std::vector<const int32_t*> lists(batch);
      std::vector<int64_t> n(batch), fired(batch, -1);
      for (int b = 0; b < batch; ++b) {
        lists[b] = ids[all_neurons ? 0 : b].data();
        n[b] = static_cast<int64_t>(ids[b].size());
      }
      std::vector<float> y(batch * d, 0.5f), act(batch * ff, 0.0f);
      batched.AccumulateRows(rows, batch, lists.data(), n.data(), x.data(), y.data(), &pool,
                             fired.data(), act.data());
      int64_t total = 0;
      for (int b = 0; b < batch; ++b) {
        std::vector<float> want(d, 0.5f), want_act(ff, 0.0f);
        const int64_t want_fired = solo.Accumulate(rows, lists[b], n[b], x.data() + b * d,
                                                   want.data(), &pool, want_act.data());
        total += want_fired;
        SCOPED_TRACE(std::string(CpuIsaName(isa)) + " threads " + std::to_string(threads) +
                     " batch " + std::to_string(batch) + " row " + std::to_string(b));
        EXPECT_EQ(fired[b], want_fired);
        EXPECT_EQ(0, std::memcmp(y.data() + b * d, want.data(), sizeof(float) * d));
        EXPECT_EQ(0, std::memcmp(act.data() + b * ff, want_act.data(), sizeof(float) * ff));
      }
      // Something fired, or the comparison above proves little.
      EXPECT_GT(total, 0);
      if (threads == 1) {
        one_thread_y.push_back(y);
      } else {
        ASSERT_LT(case_index, static_cast<int>(one_thread_y.size()));
        EXPECT_EQ(0,
                  std::memcmp(y.data(), one_thread_y[case_index].data(), sizeof(float) * y.size()))
            << CpuIsaName(isa) << " threads " << threads << " batch " << batch
            << ": not the one-thread bits";
      }
      ++case_index;
    }
  }
  SetCpuIsa(best);
}

INSTANTIATE_TEST_SUITE_P(Types, NeuronFfnRowsTest,
                         ::testing::Values(Case{DType::kQ4_0, "relu", "llama"},
                                           Case{DType::kQ8_0, "drelu", "llama"},
                                           Case{DType::kF16, "relu", "llama"},
                                           Case{DType::kF32, "relu", "llama"},
                                           Case{DType::kQ8_0, "relu", "falcon"},
                                           Case{DType::kQ4_0, "relu", "llama", 2048},
                                           Case{DType::kQ8_0, "drelu", "llama", 1536},
                                           Case{DType::kF16, "relu", "llama", 1280},
                                           Case{DType::kQ8_0, "silu", "llama", 256, 0.25f},
                                           Case{DType::kF32, "gelu", "falcon", 256, 0.2f}),
                         [](const auto& p) {
                           return std::string(DTypeName(p.param.type)) + "_" + p.param.act + "_" +
                                  p.param.arch + "_" + std::to_string(p.param.n_embd) +
                                  (p.param.threshold > 0 ? "_threshold" : "");
                         });

// A threshold: against a float64 reference from the dequantized rows, the
// neurons kept are those with |act(gate x)| > t (t picked in a wide gap of
// the reference's values, so rounding cannot move a neuron across it), and y
// is their sum. SiLU (CATS' case), ReLU with t > 0, falcon's ungated GELU.
struct ThresholdCase {
  DType type;
  const char* act;
  const char* arch;
  double keep;  // the share of candidates the threshold keeps
};

class NeuronFfnThresholdTest : public ::testing::TestWithParam<ThresholdCase> {};

double ActOf(FfnActivation a, double g) {
  switch (a) {
    case FfnActivation::kSilu:
      return g / (1.0 + std::exp(-g));
    case FfnActivation::kGeluUp:
      return 0.5 * g * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * g * (1.0 + 0.044715 * g * g)));
    default:
      return g > 0 ? g : 0.0;
  }
}

TEST_P(NeuronFfnThresholdTest, KeepsTheNeuronsAboveItAsAFloat64Reference) {
  const ThresholdCase& tc = GetParam();
  SyntheticModelOptions o;
  o.n_vocab = 64;
  o.n_embd = 256;
  o.n_ff = 1024;
  o.n_layer = 1;
  o.n_head = 4;
  o.type = tc.type;
  o.activation = tc.act;
  o.arch = tc.arch;
  o.down_t = true;
  const std::string path = TempPath("threshold.gguf");
  ASSERT_TRUE(WriteSyntheticModel(o, path).ok());
  LlamaModel m;
  ASSERT_TRUE(LoadLlamaModel(path, &m).ok());
  std::remove(path.c_str());
  const LlamaLayer& L = m.layers[0];
  const bool gated = FfnIsGated(m.config.activation);
  const int64_t d = o.n_embd, ff = o.n_ff;
  auto rows_of = [&](const Tensor& t) {
    std::vector<float> w(ff * d);
    for (int64_t i = 0; i < ff; ++i) {
      DequantizeRow(t.type, static_cast<const uint8_t*>(t.data) + i * t.row_bytes, w.data() + i * d,
                    d);
    }
    return w;
  };
  const std::vector<float> up = rows_of(L.ffn_up), down_t = rows_of(L.ffn_down_t);
  const std::vector<float> gate = gated ? rows_of(L.ffn_gate) : up;
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(d);
  for (float& v : x) v = normal(rng);
  std::vector<double> a(ff), u(ff), mag(ff);
  for (int64_t i = 0; i < ff; ++i) {
    double g = 0, uu = 0;
    for (int64_t c = 0; c < d; ++c) {
      g += double{gate[i * d + c]} * x[c];
      uu += double{up[i * d + c]} * x[c];
    }
    a[i] = ActOf(m.config.activation, g);
    u[i] = gated ? uu : 1.0;
    mag[i] = std::fabs(a[i]);
  }
  // The widest gap among the sorted magnitudes near the wanted share.
  std::vector<double> sorted = mag;
  std::sort(sorted.begin(), sorted.end());
  const int64_t at = static_cast<int64_t>((1.0 - tc.keep) * ff);
  int64_t best = at;
  for (int64_t j = std::max<int64_t>(1, at - 40); j < std::min<int64_t>(ff, at + 40); ++j) {
    if (sorted[j] - sorted[j - 1] > sorted[best] - sorted[best - 1]) best = j;
  }
  const float t = static_cast<float>((sorted[best] + sorted[best - 1]) / 2);
  ASSERT_GT(sorted[best] - sorted[best - 1], 1e-5 * sorted[best]) << "no gap to put t in";
  std::vector<double> want(d, 0.0);
  int64_t kept = 0;
  for (int64_t i = 0; i < ff; ++i) {
    if (mag[i] <= t) continue;
    ++kept;
    for (int64_t c = 0; c < d; ++c) want[c] += a[i] * u[i] * down_t[i * d + c];
  }
  ASSERT_GT(kept, 0);
  ASSERT_LT(kept, ff);

  std::vector<int32_t> ids(ff);
  for (int32_t i = 0; i < ff; ++i) ids[i] = i;
  NeuronRows rows{&L.ffn_gate, &L.ffn_up, &L.ffn_down_t};
  rows.threshold = t;
  ThreadPool pool(2);
  NeuronFfn ffn;
  ffn.Init(m.config);
  std::vector<float> y(d, 0.0f), act(ff, 0.0f);
  ffn.Accumulate(rows, ids.data(), ff, x.data(), y.data(), &pool, act.data());
  int64_t got_kept = 0;
  for (int64_t i = 0; i < ff; ++i) {
    // A kept neuron has its activation recorded (drelu may make it 0).
    const bool passed = mag[i] > t;
    if (!passed) {
      EXPECT_EQ(act[i], 0.0f) << "neuron " << i << " is below t";
    }
    if (passed && act[i] != 0.0f) ++got_kept;
  }
  EXPECT_EQ(got_kept, kept);
  double scale = 0;
  for (double v : want) scale = std::max(scale, std::fabs(v));
  for (int64_t c = 0; c < d; ++c)
    EXPECT_NEAR(y[c], want[c], 1e-4 * scale + 1e-6) << "y[" << c << "]";
}

INSTANTIATE_TEST_SUITE_P(Types, NeuronFfnThresholdTest,
                         ::testing::Values(ThresholdCase{DType::kF32, "silu", "llama", 0.5},
                                           ThresholdCase{DType::kF16, "silu", "llama", 0.3},
                                           ThresholdCase{DType::kF32, "relu", "llama", 0.2},
                                           ThresholdCase{DType::kF32, "gelu", "falcon", 0.6}),
                         [](const auto& p) {
                           return std::string(DTypeName(p.param.type)) + "_" + p.param.act + "_" +
                                  p.param.arch;
                         });

}  // namespace
}  // namespace pi
