// NeuronFfn::AccumulateRows — several rows, each with its own candidates —
// against Accumulate run on each row alone: the sums, the fired counts and
// the activations equal bit for bit, for every weight type, gated and
// ungated activations, any thread count (each giving one thread's bits),
// candidate sets from empty to all neurons, and more rows than one call's
// scratch holds.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "common/compute/neuron_ffn.h"
#include "common/offline/synthetic_model.h"
#include "kernels/cpu/isa.h"
#include "tests/temp_path.h"

namespace pi {
namespace {

struct Case {
  DType type;
  const char* act;
  const char* arch;
  int n_embd = 256;  // above 1024 the kernels take their long-row tiles
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
  const NeuronRows rows{&L.ffn_gate, &L.ffn_up, &L.ffn_down_t};
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
                                           Case{DType::kF16, "relu", "llama", 1280}),
                         [](const auto& p) {
                           return std::string(DTypeName(p.param.type)) + "_" + p.param.act + "_" +
                                  p.param.arch + "_" + std::to_string(p.param.n_embd);
                         });

}  // namespace
}  // namespace pi
