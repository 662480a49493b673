// --sparse cats through every place neurons run: the hot shard in this
// process (HostHotShard), cpu worker processes over shared memory (their
// hello carries the thresholds), both at once, and a killed worker's
// neurons computed here meanwhile. Each decode equals the one-process cats
// engine: logits within 1e-4 of the largest and the same neurons computed;
// a hot shard opened without the thresholds computes others (the check can
// fail). --sparse teal too: the host computes every neuron's gate from the
// thresholded input and the shards take their neurons' dots (a worker opened
// without them is refused).
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "common/model/weight_transpose.h"
#include "common/offline/synthetic_model.h"
#include "coordinator/engine/engine.h"
#include "coordinator/workers/local_workers.h"
#include "coordinator/workers/remote_shard.h"
#include "coordinator/workers/worker_link.h"
#include "gpu_worker/host_hot_shard.h"
#include "tests/temp_path.h"

namespace pi {
namespace {

class CatsSplitTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SyntheticModelOptions o;
    o.n_vocab = 300;
    o.n_embd = 128;
    o.n_ff = 512;
    o.n_layer = 2;
    o.n_head = 4;
    o.n_head_kv = 2;
    o.type = DType::kQ8_0;
    o.activation = "silu";
    o.down_t = true;
    path_ = TempPath("cats_split.gguf");
    ASSERT_TRUE(WriteSyntheticModel(o, path_).ok());
    ASSERT_TRUE(LoadLlamaModel(path_, &model_).ok());
    thresholds_ = {0.21f, 0.26f};  // about half of each layer's |silu(gate)|
    for (int l = 0; l < 2; ++l) {
      for (int i = l; i < o.n_ff; i += 4) hot_[l].push_back(i);
    }
    reference_ = Decode(Options());
  }
  void TearDown() override { unlink(path_.c_str()); }

  EngineOptions Options() const {
    EngineOptions opt;
    opt.n_threads = 1;
    opt.sparse = SparseMode::kCats;
    opt.gate_thresholds = thresholds_;
    opt.cache_type_k = opt.cache_type_v = DType::kF32;  // exact: sums differ in order only
    return opt;
  }
  struct Run {
    std::vector<float> logits;
    int64_t neurons = 0;
  };
  // 16 decode steps after a 3-token prompt; kill_at: SIGKILL that worker's
  // process before that step.
  Run Decode(const EngineOptions& opt, RemoteShard* victim = nullptr, int kill_at = -1,
             double* kept = nullptr) {
    Run r;
    std::unique_ptr<Engine> e;
    const Status s = Engine::Create(&model_, opt, &e);
    EXPECT_TRUE(s.ok()) << s.message();
    if (!s.ok()) return r;
    const int32_t prompt[3] = {1, 2, 3};
    EXPECT_TRUE(e->Eval(prompt, 3).ok());
    for (int32_t t = 10; t < 26; ++t) {
      if (victim && t - 10 == kill_at) ::kill(victim->pid(), SIGKILL);
      EXPECT_TRUE(e->Eval(&t, 1).ok());
      r.logits.insert(r.logits.end(), e->logits(), e->logits() + e->n_vocab());
      r.neurons += e->last_ffn_neurons();
    }
    if (kept) *kept = e->input_kept_share();
    return r;
  }
  // The largest |logit| difference against the reference, relative.
  double Differs(const Run& r) const {
    if (r.logits.size() != reference_.logits.size()) return 1e9;
    double scale = 1e-6, worst = 0;
    for (float v : reference_.logits) scale = std::max(scale, double{std::fabs(v)});
    for (size_t i = 0; i < r.logits.size(); ++i) {
      worst = std::max(worst, double{std::fabs(r.logits[i] - reference_.logits[i])});
    }
    return worst / scale;
  }
  std::unique_ptr<RemoteShard> Worker(const std::vector<std::vector<int32_t>>& owned,
                                      bool gate_dots = false) {
    WorkerProcessOptions o;
    o.binary = std::string(PI_BINARY_DIR) + "/bin/pi-cpu-worker";
    o.model_path = path_;
    o.n_threads = 1;
    auto w = std::make_unique<RemoteShard>(NewShmLink(o), RemoteShardOptions{});
    const Status s = w->Open(model_, owned, thresholds_, gate_dots);
    EXPECT_TRUE(s.ok()) << s.message();
    return w;
  }

  std::string path_;
  LlamaModel model_;
  std::vector<float> thresholds_;
  std::vector<std::vector<int32_t>> hot_{2};
  Run reference_;
};

TEST_F(CatsSplitTest, TheHotShardWithTheThresholdsGivesTheOneProcessAnswer) {
  // About half the neurons: the thresholds skip some, not all.
  EXPECT_GT(reference_.neurons, 16 * 2 * 512 / 4);
  EXPECT_LT(reference_.neurons, 16 * 2 * 512 * 3 / 4);
  HostHotShard hot(1);
  ASSERT_TRUE(hot.Load(model_, hot_, thresholds_).ok());
  EngineOptions opt = Options();
  opt.hot_shard = &hot;
  const Run split = Decode(opt);
  EXPECT_LT(Differs(split), 1e-4);
  EXPECT_EQ(split.neurons, reference_.neurons);

  HostHotShard without(1);  // every hot neuron passes: another answer
  ASSERT_TRUE(without.Load(model_, hot_, {0.0f, 0.0f}).ok());
  opt.hot_shard = &without;
  const Run wrong = Decode(opt);
  EXPECT_GT(Differs(wrong), 1e-3);
  EXPECT_GT(wrong.neurons, reference_.neurons);
}

TEST_F(CatsSplitTest, CpuWorkersAndTheHotShardTogetherGiveTheOneProcessAnswer) {
  EngineOptions opt = Options();
  HostHotShard hot(1);
  ASSERT_TRUE(hot.Load(model_, hot_, thresholds_).ok());
  opt.hot_shard = &hot;
  std::vector<std::unique_ptr<RemoteShard>> workers;
  for (const auto& owned : SplitColdNeurons(model_, opt, 2, 0.0)) {
    workers.push_back(Worker(owned));
    opt.cold_shards.push_back(workers.back().get());
  }
  const Run split = Decode(opt);
  EXPECT_LT(Differs(split), 1e-4);
  EXPECT_EQ(split.neurons, reference_.neurons);
}

TEST_F(CatsSplitTest, AKilledWorkersNeuronsRunHereWithTheThresholds) {
  EngineOptions opt = Options();
  std::vector<std::unique_ptr<RemoteShard>> workers;
  for (const auto& owned : SplitColdNeurons(model_, opt, 1, 0.0)) {
    workers.push_back(Worker(owned));
    opt.cold_shards.push_back(workers.back().get());
  }
  workers[0]->set_step_timeout_ms(2000);
  const Run split = Decode(opt, workers[0].get(), 5);
  EXPECT_LT(Differs(split), 1e-4);
  EXPECT_EQ(split.neurons, reference_.neurons);
  EXPECT_GE(workers[0]->restarts(), 1);
}

TEST_F(CatsSplitTest, HellosRefuseThresholdsThatAreNotOnePerLayerOrNotFinite) {
  EngineOptions opt = Options();
  const auto owned = SplitColdNeurons(model_, opt, 1, 0.0)[0];
  WorkerProcessOptions o;
  o.binary = std::string(PI_BINARY_DIR) + "/bin/pi-cpu-worker";
  o.model_path = path_;
  RemoteShard three(NewShmLink(o), RemoteShardOptions{});
  EXPECT_THAT(three.Open(model_, owned, {0.1f, 0.2f, 0.3f}).message(),
              ::testing::HasSubstr("gate thresholds"));
  RemoteShard nan(NewShmLink(o), RemoteShardOptions{});
  EXPECT_THAT(nan.Open(model_, owned, {0.1f, NAN}).message(),
              ::testing::HasSubstr("gate threshold"));
  // A SiLU model's neurons go to workers only with thresholds.
  RemoteShard none(NewShmLink(o), RemoteShardOptions{});
  EXPECT_THAT(none.Open(model_, owned).message(), ::testing::HasSubstr("silu"));
}

TEST_F(CatsSplitTest, TealThroughTheHotShardAndWorkersGivesTheOneProcessAnswer) {
  ThreadPool pool(1);
  int64_t bytes = 0;
  ASSERT_TRUE(AddTransposedCopies(&model_, &pool, &bytes).ok());
  EngineOptions opt = Options();
  opt.sparse = SparseMode::kTeal;
  // About half of each input's entries (the normed inputs' |x| spread
  // around 1; the heads' output is smaller).
  const float levels[kProjectionInputs] = {0.6f, 0.1f, 0.6f};
  for (int k = 0; k < kProjectionInputs; ++k) opt.input_thresholds[k].assign(2, levels[k]);
  double kept = 0;
  reference_ = Decode(opt, nullptr, -1, &kept);
  EXPECT_GT(kept, 0.2);
  EXPECT_LT(kept, 0.8);
  EXPECT_GT(reference_.neurons, 16 * 2 * 512 / 5);

  HostHotShard hot(1);
  ASSERT_TRUE(hot.Load(model_, hot_, thresholds_).ok());
  opt.hot_shard = &hot;
  std::vector<std::unique_ptr<RemoteShard>> workers;
  for (const auto& owned : SplitColdNeurons(model_, opt, 2, 0.0)) {
    workers.push_back(Worker(owned, /*gate_dots=*/true));
    opt.cold_shards.push_back(workers.back().get());
  }
  workers[0]->set_step_timeout_ms(2000);
  const Run split = Decode(opt, workers[0].get(), 5);  // its neurons here for a while
  EXPECT_LT(Differs(split), 1e-4);
  EXPECT_EQ(split.neurons, reference_.neurons);
  EXPECT_GE(workers[0]->restarts(), 1);

  // A worker that reads its own gate rows would decide from the whole input.
  std::unique_ptr<RemoteShard> plain = Worker(SplitColdNeurons(model_, opt, 1, 0.0)[0]);
  opt.cold_shards = {plain.get()};
  std::unique_ptr<Engine> e;
  const Status refused = Engine::Create(&model_, opt, &e);
  EXPECT_FALSE(refused.ok());
  EXPECT_THAT(refused.message(), ::testing::HasSubstr("without its gate dots"));
}

}  // namespace
}  // namespace pi
