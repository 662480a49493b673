// The layer router's pieces on their own: ShardRouter splits a step's
// candidates by owner, adds the shards' sums in shard order and computes a
// failed shard's share itself; ShardHealth brings a lost shard back at the
// next step, or after a growing backoff when it relapses.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "common/offline/synthetic_model.h"
#include "coordinator/route/shard_health.h"
#include "coordinator/route/shard_router.h"
#include "tests/temp_path.h"

namespace pi {
namespace {

// A shard whose sum is a constant vector; it records what each step sent it
// and fails its Wait or its Recover when told to.
class ScriptedShard : public Shard {
 public:
  ScriptedShard(std::string name, std::vector<std::vector<int32_t>> owned, int64_t n_embd,
                float value)
      : name_(std::move(name)), owned_(std::move(owned)), y_(4 * n_embd, value) {}
  const char* name() const override { return name_.c_str(); }
  const char* backend() const override { return "test"; }
  const std::vector<std::vector<int32_t>>& owned() const override { return owned_; }
  int max_batch() const override { return 4; }
  int64_t resident_bytes() const override { return 0; }
  void Start(const ShardStep& step) override {
    ++starts;
    layer = step.layer;
    row_n.assign(step.row_n, step.row_n + step.batch);
    int64_t total = 0;
    for (int32_t n : row_n) total += n;
    ids.assign(step.ids, step.ids + total);
  }
  Status Wait(const float** y, int64_t* fired) override {
    if (fail_wait) return Status::Error("%s: injected fault", name_.c_str());
    *y = y_.data();
    *fired = static_cast<int64_t>(ids.size());
    return Status::Ok();
  }
  Status Recover() override {
    ++recover_calls;
    return recover_ok ? Status::Ok() : Status::Error("still down");
  }

  bool fail_wait = false, recover_ok = false;
  int starts = 0, recover_calls = 0, layer = -1;
  std::vector<int32_t> ids, row_n;

 private:
  std::string name_;
  std::vector<std::vector<int32_t>> owned_;
  std::vector<float> y_;
};

struct RouterFixture {
  std::string path;
  LlamaModel model;
  int64_t n_embd = 32, n_ff = 64;
  int n_layer = 2;
  std::vector<std::vector<uint8_t>> is_hot;            // neurons i % 4 == 3
  std::vector<std::vector<int32_t>> a_owned, b_owned;  // i % 4 == 1, i % 4 == 2
  std::vector<int32_t> row0, row1;                     // candidates: every cold id; every other
};

void MakeRouterFixture(const char* name, RouterFixture* f) {
  SyntheticModelOptions o;
  o.n_vocab = 64;
  o.n_embd = static_cast<int>(f->n_embd);
  o.n_ff = static_cast<int>(f->n_ff);
  o.n_layer = f->n_layer;
  o.n_head = 4;
  o.type = DType::kQ8_0;
  o.activation = "relu";
  o.down_t = true;
  f->path = TempPath(name);
  ASSERT_TRUE(WriteSyntheticModel(o, f->path).ok());
  ASSERT_TRUE(LoadLlamaModel(f->path, &f->model).ok());
  f->is_hot.assign(f->n_layer, std::vector<uint8_t>(f->n_ff, 0));
  f->a_owned.assign(f->n_layer, {});
  f->b_owned.assign(f->n_layer, {});
  for (int l = 0; l < f->n_layer; ++l) {
    for (int32_t i = 0; i < f->n_ff; ++i) {
      if (i % 4 == 3) f->is_hot[l][i] = 1;
      if (i % 4 == 1) f->a_owned[l].push_back(i);
      if (i % 4 == 2) f->b_owned[l].push_back(i);
    }
  }
  for (int32_t i = 0; i < f->n_ff; ++i) {
    if (i % 4 == 3) continue;
    f->row0.push_back(i);
    if (i % 8 < 4) f->row1.push_back(i);
  }
}

std::vector<int32_t> Where(const std::vector<int32_t>& ids, int residue) {
  std::vector<int32_t> out;
  for (int32_t i : ids) {
    if (i % 4 == residue) out.push_back(i);
  }
  return out;
}

std::vector<int32_t> Cat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

TEST(ShardRouterTest, SplitsByOwnerAndAddsTheSumsInShardOrder) {
  RouterFixture f;
  ASSERT_NO_FATAL_FAILURE(MakeRouterFixture("router_split.gguf", &f));
  // Shard order shows in the bits: (-1e8 + 1) + 1e8 is 0 in float, (-1e8 + 1e8) + 1 is 1.
  ScriptedShard a("shard a", f.a_owned, f.n_embd, 1.0f), b("shard b", f.b_owned, f.n_embd, 1e8f);
  ShardEvents events;
  ShardRouter router;
  ASSERT_TRUE(router.Init(f.model, {&a, &b}, f.is_hot, 16, &events).ok());
  EXPECT_EQ(router.max_rows(), 4);  // the shards' max_batch
  const int32_t* ids[2] = {f.row0.data(), f.row1.data()};
  const int64_t n_ids[2] = {static_cast<int64_t>(f.row0.size()),
                            static_cast<int64_t>(f.row1.size())};
  std::vector<float> x(2 * f.n_embd, 0.5f), y(2 * f.n_embd, -1e8f);
  const int32_t* const* local = nullptr;
  const int64_t* local_n = nullptr;
  const int64_t routed = router.Start(1, 2, ids, n_ids, x.data(), nullptr, &local, &local_n);
  // Each shard gets its own neurons of both rows, row by row; the rest stays here.
  EXPECT_EQ(a.layer, 1);
  EXPECT_EQ(a.ids, Cat(Where(f.row0, 1), Where(f.row1, 1)));
  EXPECT_EQ(a.row_n, (std::vector<int32_t>{static_cast<int32_t>(Where(f.row0, 1).size()),
                                           static_cast<int32_t>(Where(f.row1, 1).size())}));
  EXPECT_EQ(b.ids, Cat(Where(f.row0, 2), Where(f.row1, 2)));
  EXPECT_EQ(std::vector<int32_t>(local[0], local[0] + local_n[0]), Where(f.row0, 0));
  EXPECT_EQ(std::vector<int32_t>(local[1], local[1] + local_n[1]), Where(f.row1, 0));
  EXPECT_EQ(routed, static_cast<int64_t>(a.ids.size() + b.ids.size()));

  NeuronFfn neurons;
  neurons.Init(f.model.config, 4);
  ThreadPool pool(1);
  const int64_t fired = router.Finish(1, 2, x.data(), y.data(), &neurons, &pool);
  EXPECT_EQ(fired, routed);  // the scripted shards "fire" every id they get
  for (float v : y) ASSERT_EQ(v, 0.0f);
  EXPECT_EQ(events.failures, 0);
  std::remove(f.path.c_str());
}

TEST(ShardRouterTest, AFailedShardsShareRunsHereAndItsNeuronsStayHereWhileItIsDown) {
  RouterFixture f;
  ASSERT_NO_FATAL_FAILURE(MakeRouterFixture("router_fault.gguf", &f));
  ScriptedShard a("shard a", f.a_owned, f.n_embd, 0.0f), b("shard b", f.b_owned, f.n_embd, 0.25f);
  ShardEvents events;
  ShardRouter router;
  ASSERT_TRUE(router.Init(f.model, {&a, &b}, f.is_hot, 4, &events).ok());
  NeuronFfn neurons, reference;
  neurons.Init(f.model.config, 4);
  reference.Init(f.model.config, 4);
  ThreadPool pool(1);
  std::vector<float> x(f.n_embd);
  for (int64_t i = 0; i < f.n_embd; ++i) x[i] = 0.05f * static_cast<float>(i % 7) - 0.1f;
  const int32_t* ids = f.row0.data();
  const int64_t n_ids = static_cast<int64_t>(f.row0.size());
  const int32_t* const* local = nullptr;
  const int64_t* local_n = nullptr;

  a.fail_wait = true;
  router.Start(0, 1, &ids, &n_ids, x.data(), nullptr, &local, &local_n);
  std::vector<float> y(f.n_embd, 0.0f), want(f.n_embd, 0.0f);
  router.Finish(0, 1, x.data(), y.data(), &neurons, &pool);
  // Shard a's share computed here, then b's sum added: in shard order.
  const LlamaLayer& layer = f.model.layers[0];
  const NeuronRows rows{&layer.ffn_gate, &layer.ffn_up, &layer.ffn_down_t};
  const std::vector<int32_t> a_share = Where(f.row0, 1);
  const int32_t* a_ids = a_share.data();
  const int64_t a_n = static_cast<int64_t>(a_share.size());
  int64_t a_fired = 0;
  reference.AccumulateRows(rows, 1, &a_ids, &a_n, x.data(), want.data(), &pool, &a_fired);
  for (float& v : want) v += 0.25f;
  for (int64_t i = 0; i < f.n_embd; ++i) ASSERT_EQ(y[i], want[i]) << i;
  EXPECT_GT(a_fired, 0);
  EXPECT_EQ(events.failures, 1);
  EXPECT_EQ(events.last_error, "shard a: injected fault");  // named once

  // The next step tries Recover() at once (a first failure); it fails, so
  // a's neurons are computed here with the unowned ones, in id order.
  a.fail_wait = false;
  const int a_starts = a.starts;
  router.Start(0, 1, &ids, &n_ids, x.data(), nullptr, &local, &local_n);
  EXPECT_EQ(a.recover_calls, 1);
  EXPECT_EQ(a.starts, a_starts);
  std::vector<int32_t> here;
  for (int32_t i : f.row0) {
    if (i % 4 == 0 || i % 4 == 1) here.push_back(i);
  }
  EXPECT_EQ(std::vector<int32_t>(local[0], local[0] + local_n[0]), here);
  router.Finish(0, 1, x.data(), y.data(), &neurons, &pool);
  // A failed Recover() waits 250 ms before the next: not tried at this step.
  router.Start(0, 1, &ids, &n_ids, x.data(), nullptr, &local, &local_n);
  router.Finish(0, 1, x.data(), y.data(), &neurons, &pool);
  EXPECT_EQ(a.recover_calls, 1);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  a.recover_ok = true;
  router.Start(0, 1, &ids, &n_ids, x.data(), nullptr, &local, &local_n);
  EXPECT_EQ(a.recover_calls, 2);
  EXPECT_EQ(a.starts, a_starts + 1);  // back: its neurons go to it again
  EXPECT_EQ(std::vector<int32_t>(local[0], local[0] + local_n[0]), Where(f.row0, 0));
  router.Finish(0, 1, x.data(), y.data(), &neurons, &pool);
  EXPECT_EQ(events.recoveries, 1);
  std::remove(f.path.c_str());
}

TEST(ShardRouterTest, RefusesOverlappingHotOrOutOfRangeOwners) {
  RouterFixture f;
  ASSERT_NO_FATAL_FAILURE(MakeRouterFixture("router_refuse.gguf", &f));
  ShardEvents events;
  ScriptedShard a("shard a", f.a_owned, f.n_embd, 0.0f), twin("twin", f.a_owned, f.n_embd, 0.0f);
  ShardRouter router;
  EXPECT_THAT(router.Init(f.model, {&a, &twin}, f.is_hot, 4, &events).message(),
              ::testing::HasSubstr("owned twice"));
  std::vector<std::vector<int32_t>> hot_owned = f.a_owned;
  hot_owned[1].push_back(3);  // hot
  ScriptedShard hot("hot one", hot_owned, f.n_embd, 0.0f);
  EXPECT_THAT(ShardRouter().Init(f.model, {&hot}, f.is_hot, 4, &events).message(),
              ::testing::HasSubstr("layer 1 neuron 3"));
  ScriptedShard short_list("short", {{1}}, f.n_embd, 0.0f);
  EXPECT_THAT(ShardRouter().Init(f.model, {&short_list}, f.is_hot, 4, &events).message(),
              ::testing::HasSubstr("lists 1 layers, the model has 2"));
  std::remove(f.path.c_str());
}

TEST(ShardHealthTest, ARelapseWithinAMinuteWaitsLongerEachTime) {
  ScriptedShard s("worker", {{}}, 1, 0.0f);
  s.recover_ok = true;
  ShardEvents events;
  ShardHealth health;
  health.TryRecover(&s, &events);  // up: nothing to do
  EXPECT_EQ(s.recover_calls, 0);
  health.Failed(s, Status::Error("gone"), &events);
  EXPECT_TRUE(health.down());
  EXPECT_EQ(events.last_error, "worker: gone");
  health.TryRecover(&s, &events);  // a first failure: tried at once
  EXPECT_FALSE(health.down());
  EXPECT_EQ(events.recoveries, 1);
  // Lost again soon after coming back: 250 ms, then 500 ms.
  for (int wait_ms : {250, 500}) {
    health.Failed(s, Status::Error("worker: gone again"), &events);
    const int calls = s.recover_calls;
    health.TryRecover(&s, &events);
    EXPECT_EQ(s.recover_calls, calls) << wait_ms;
    EXPECT_TRUE(health.down());
    std::this_thread::sleep_for(std::chrono::milliseconds(wait_ms + 50));
    health.TryRecover(&s, &events);
    EXPECT_EQ(s.recover_calls, calls + 1) << wait_ms;
    EXPECT_FALSE(health.down());
  }
  EXPECT_EQ(events.failures, 3);
  EXPECT_EQ(events.last_error, "worker: gone again");
}

}  // namespace
}  // namespace pi
