// The worker step protocol (common/transport/), the cold shard and its step
// handler (cpu_worker/), the shared-memory channel, and a real pi-cpu-worker
// process driven through RemoteShard over the shared-memory link (coordinator/workers/): same sums
// as in process, bad messages refused with the worker staying up, a killed worker named.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "common/format/fingerprint.h"
#include "common/offline/synthetic_model.h"
#include "common/transport/hello_message.h"
#include "common/transport/shard_server.h"
#include "common/transport/shm_channel.h"
#include "common/transport/step_message.h"
#include "coordinator/engine/engine.h"
#include "coordinator/workers/local_workers.h"
#include "coordinator/workers/remote_shard.h"
#include "cpu_worker/cold_shard.h"
#include "kernels/cpu/quant.h"
#include "tests/in_memory_model.h"
#include "tests/temp_path.h"

namespace pi {
namespace {

using ::testing::HasSubstr;

SyntheticModelOptions ReluModel(DType type) {
  SyntheticModelOptions o;
  o.n_vocab = 64;
  o.n_embd = 64;
  o.n_layer = 2;
  o.n_head = 2;
  o.n_ff = 96;
  o.type = type;
  o.activation = "relu";
  o.down_t = true;
  o.seed = 11;
  return o;
}

// Odd neurons of every layer: the worker's shard in these tests.
std::vector<std::vector<int32_t>> OddNeurons(const LlamaConfig& c) {
  std::vector<std::vector<int32_t>> owned(c.n_layer);
  for (int l = 0; l < c.n_layer; ++l) {
    for (int i = 1; i < c.n_ff; i += 2) owned[l].push_back(i);
  }
  return owned;
}

ShardLayout Layout(const LlamaConfig& c, int max_batch) {
  ShardLayout s;
  s.n_layer = c.n_layer;
  s.n_embd = c.n_embd;
  s.n_ff = c.n_ff;
  s.max_batch = max_batch;
  s.owned = OddNeurons(c);
  EXPECT_TRUE(s.Finish().ok());
  return s;
}

std::vector<float> RandomRows(int rows, int d, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> n(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(rows) * d);
  for (float& v : x) v = n(rng);
  return x;
}

// The reference: y = sum over ids of relu(gate_i.x) * (up_i.x) * down_t[i],
// from dequantized rows, in double.
std::vector<double> Reference(const LlamaModel& m, int layer, const float* x,
                              const std::vector<int32_t>& ids) {
  const LlamaLayer& L = m.layers[layer];
  const int d = m.config.n_embd;
  std::vector<float> g(d), u(d), dn(d);
  std::vector<double> y(d, 0.0);
  for (int32_t i : ids) {
    DequantizeRow(L.ffn_gate.type, L.ffn_gate.row(i), g.data(), d);
    DequantizeRow(L.ffn_up.type, L.ffn_up.row(i), u.data(), d);
    DequantizeRow(L.ffn_down_t.type, L.ffn_down_t.row(i), dn.data(), d);
    double gx = 0, ux = 0;
    for (int k = 0; k < d; ++k) {
      gx += static_cast<double>(g[k]) * x[k];
      ux += static_cast<double>(u[k]) * x[k];
    }
    if (gx <= 0) continue;
    for (int k = 0; k < d; ++k) y[k] += gx * ux * dn[k];
  }
  return y;
}

class StepProtocolTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(built_.Build(ReluModel(DType::kF32)).ok());
    layout_ = Layout(model_.config, 2);
  }
  // Every row with the candidates `ids` (null: all owned neurons).
  std::vector<uint8_t> Request(int layer, int batch, const std::vector<int32_t>* ids,
                               const std::vector<float>& x) {
    if (!ids) return Rows(layer, batch, nullptr, x);
    const std::vector<std::vector<int32_t>> rows(batch, *ids);
    return Rows(layer, batch, &rows, x);
  }
  // Row b with the candidates rows[b].
  std::vector<uint8_t> Rows(int layer, int batch, const std::vector<std::vector<int32_t>>* rows,
                            const std::vector<float>& x) {
    std::vector<int32_t> row_n, ids;
    for (int b = 0; rows && b < batch; ++b) {
      row_n.push_back(static_cast<int32_t>((*rows)[b].size()));
      ids.insert(ids.end(), (*rows)[b].begin(), (*rows)[b].end());
    }
    const int32_t* counts = rows ? row_n.data() : nullptr;
    std::vector<uint8_t> out(
        StepRequestBytes(batch, model_.config.n_embd, StepIdCount(batch, counts)));
    WriteStepRequest(7, layer, batch, model_.config.n_embd, x.data(), ids.data(), counts,
                     out.data());
    return out;
  }
  InMemoryModel built_;
  LlamaModel& model_ = built_.model;
  ShardLayout layout_;
};

TEST_F(StepProtocolTest, ValidRequestsParse) {
  const std::vector<float> x = RandomRows(2, 64, 1);
  const std::vector<int32_t> ids = {1, 5, 95};
  StepRequest r;
  std::vector<uint8_t> m = Request(1, 2, &ids, x);
  ASSERT_TRUE(ParseStepRequest(m.data(), m.size(), layout_, &r).ok());
  EXPECT_EQ(r.step_id, 7u);
  EXPECT_EQ(r.layer, 1);
  EXPECT_EQ(r.batch, 2);
  EXPECT_EQ(r.n_ids, 6);  // each row's three
  EXPECT_EQ(r.row_n[1], 3);
  EXPECT_EQ(r.ids[2], 95);
  EXPECT_EQ(r.x[64], x[64]);
  m = Request(0, 1, nullptr, x);
  ASSERT_TRUE(ParseStepRequest(m.data(), m.size(), layout_, &r).ok());
  EXPECT_EQ(r.ids, nullptr);
  EXPECT_EQ(r.n_ids, 48);  // every odd neuron
}

// Each malformed field gets its own error; nothing is read beyond the message.
TEST_F(StepProtocolTest, MalformedRequestsNameTheField) {
  const std::vector<float> x = RandomRows(2, 64, 2);
  const std::vector<int32_t> ids = {1, 3, 5};
  auto error_of = [&](std::vector<uint8_t> m, void (*edit)(StepRequestHeader*)) {
    StepRequestHeader h;
    memcpy(&h, m.data(), sizeof h);
    if (edit) edit(&h);
    memcpy(m.data(), &h, sizeof h);
    StepRequest r;
    return ParseStepRequest(m.data(), m.size(), layout_, &r).message();
  };
  const std::vector<uint8_t> good = Request(1, 1, &ids, x);
  EXPECT_THAT(error_of(good, [](StepRequestHeader* h) { h->magic = 1; }), HasSubstr("bad magic"));
  EXPECT_THAT(error_of(good, [](StepRequestHeader* h) { h->version = 9; }),
              HasSubstr("protocol version 9"));
  EXPECT_THAT(error_of(good, [](StepRequestHeader* h) { h->kind = 4; }), HasSubstr("kind 4"));
  EXPECT_THAT(error_of(good, [](StepRequestHeader* h) { h->kind = 1; }),
              HasSubstr("kind 1, this worker takes FFN steps"));
  EXPECT_THAT(error_of(good, [](StepRequestHeader* h) { h->layer = 2; }),
              HasSubstr("layer 2 is out of range [0, 2)"));
  EXPECT_THAT(error_of(good, [](StepRequestHeader* h) { h->layer = -1; }), HasSubstr("layer -1"));
  EXPECT_THAT(error_of(good, [](StepRequestHeader* h) { h->batch = 3; }),
              HasSubstr("batch 3 is out of range [1, 2]"));
  EXPECT_THAT(error_of(good, [](StepRequestHeader* h) { h->batch = 0; }), HasSubstr("batch 0"));
  EXPECT_THAT(error_of(good, [](StepRequestHeader* h) { h->n_embd = 32; }), HasSubstr("n_embd 32"));
  EXPECT_THAT(error_of(good, [](StepRequestHeader* h) { h->n_ids = 49; }), HasSubstr("49 ids"));
  EXPECT_THAT(error_of(good, [](StepRequestHeader* h) { h->n_ids = 2; }), HasSubstr("bytes"));
  std::vector<uint8_t> shorter(good.begin(), good.end() - 1);
  EXPECT_THAT(error_of(shorter, nullptr), HasSubstr("bytes, its header says"));
  std::vector<uint8_t> tiny(good.begin(), good.begin() + 8);
  StepRequest r;
  EXPECT_THAT(ParseStepRequest(tiny.data(), tiny.size(), layout_, &r).message(),
              HasSubstr("shorter than its 48-byte header"));
  for (const auto& bad : std::vector<std::pair<std::vector<int32_t>, std::string>>{
           {{1, 2, 5}, "id 2 at position 1 is not in this worker's shard"},
           {{3, 1, 5}, "id 1 at position 1 is not strictly increasing"},
           {{3, 3, 5}, "id 3 at position 1 is not strictly increasing"},
           {{1, 3, 97}, "id 97 at position 2 is out of range"},
           {{-1, 3, 5}, "id -1 at position 0 is out of range"}}) {
    const std::vector<uint8_t> m = Request(0, 1, &bad.first, x);
    EXPECT_THAT(ParseStepRequest(m.data(), m.size(), layout_, &r).message(), HasSubstr(bad.second));
  }
  // Each row's list is checked on its own; the counts must add up.
  const std::vector<std::vector<int32_t>> two = {{1, 5}, {3, 7, 9}};
  std::vector<uint8_t> m = Rows(0, 2, &two, x);
  ASSERT_TRUE(ParseStepRequest(m.data(), m.size(), layout_, &r).ok());
  EXPECT_EQ(r.row_n[0], 2);
  EXPECT_EQ(r.ids[2], 3);  // row 1 starts over: no ordering across rows
  const std::vector<std::vector<int32_t>> repeat = {{1, 5}, {7, 7}};
  m = Rows(0, 2, &repeat, x);
  EXPECT_THAT(ParseStepRequest(m.data(), m.size(), layout_, &r).message(),
              HasSubstr("row 1's id 7 at position 1 is not strictly increasing"));
  auto edit_count = [&](int row, int32_t v) {
    std::vector<uint8_t> e = Rows(0, 2, &two, x);
    memcpy(e.data() + sizeof(StepRequestHeader) + 2 * 64 * sizeof(float) + row * 4, &v, 4);
    return ParseStepRequest(e.data(), e.size(), layout_, &r).message();
  };
  EXPECT_THAT(edit_count(0, 3), HasSubstr("add up to 6, the header says 5"));
  EXPECT_THAT(edit_count(1, -1), HasSubstr("row 1 has -1 ids"));
  EXPECT_THAT(edit_count(0, 49), HasSubstr("row 0 has 49 ids, the shard owns 48"));
}

// The shard's sums against the reference in double, for several id sets and
// a batch of two rows; through the handler, a bad message is an error reply.
TEST_F(StepProtocolTest, ShardSumsMatchTheReferenceAndBadMessagesGetErrors) {
  std::unique_ptr<WorkerShard> server = NewColdShardServer();
  ShardServer& shard = static_cast<ShardServer&>(*server);
  ASSERT_TRUE(shard.Init(model_, Layout(model_.config, 2), 2).ok());
  EXPECT_EQ(shard.resident_bytes(), 2 * 48 * 3 * 64 * 4);  // 2 layers x 48 neurons x 3 f32 rows
  const std::vector<float> x = RandomRows(2, 64, 3);
  std::vector<uint8_t> reply(StepReplyCapacity(shard.layout()));
  for (const std::vector<int32_t>& ids :
       {std::vector<int32_t>{}, std::vector<int32_t>{5}, std::vector<int32_t>{1, 7, 9, 51, 95},
        layout_.owned[1]}) {
    const std::vector<uint8_t> m = Request(1, 2, &ids, x);
    const size_t n = shard.Handle(m.data(), m.size(), reply.data(), reply.size());
    const float* y = nullptr;
    int64_t fired = 0, ns = 0;
    ASSERT_TRUE(ParseStepReply(reply.data(), n, 7, 2, 64, &y, &fired, &ns).ok());
    for (int b = 0; b < 2; ++b) {
      const std::vector<double> want = Reference(model_, 1, x.data() + b * 64, ids);
      double scale = 1e-6;
      for (double v : want) scale = std::max(scale, std::fabs(v));
      for (int k = 0; k < 64; ++k) ASSERT_NEAR(y[b * 64 + k], want[k], 1e-5 * scale) << ids.size();
    }
    EXPECT_LE(fired, 2 * static_cast<int64_t>(ids.size()));
  }
  // Rows with candidates of their own: each row's sum is its own reference.
  const std::vector<std::vector<int32_t>> own = {{1, 7, 9}, {5, 51, 95}};
  {
    const std::vector<uint8_t> m = Rows(1, 2, &own, x);
    const size_t n = shard.Handle(m.data(), m.size(), reply.data(), reply.size());
    const float* y = nullptr;
    int64_t fired = 0, ns = 0;
    ASSERT_TRUE(ParseStepReply(reply.data(), n, 7, 2, 64, &y, &fired, &ns).ok());
    for (int b = 0; b < 2; ++b) {
      const std::vector<double> want = Reference(model_, 1, x.data() + b * 64, own[b]);
      double scale = 1e-6;
      for (double v : want) scale = std::max(scale, std::fabs(v));
      for (int k = 0; k < 64; ++k) ASSERT_NEAR(y[b * 64 + k], want[k], 1e-5 * scale) << b;
    }
  }
  const std::vector<int32_t> unsorted = {5, 3};
  const std::vector<uint8_t> m = Request(0, 1, &unsorted, x);
  const size_t n = shard.Handle(m.data(), m.size(), reply.data(), reply.size());
  const float* y = nullptr;
  int64_t fired = 0, ns = 0;
  const Status refused = ParseStepReply(reply.data(), n, 7, 1, 64, &y, &fired, &ns);
  EXPECT_THAT(refused.message(), AllOf(HasSubstr("worker refused step 7 (invalid)"),
                                       HasSubstr("not strictly increasing")));
  EXPECT_EQ(refused.code(), Status::Code::kInvalid);
}

TEST_F(StepProtocolTest, HelloCarriesTheShardAndRefusesAnotherModel) {
  const uint64_t fp = ModelFingerprint(*model_.file);
  const std::vector<uint8_t> hello = WriteHello(fp, 4, layout_.owned);
  ShardLayout got;
  ASSERT_TRUE(ParseHello(hello.data(), hello.size(), fp, &got).ok());
  EXPECT_EQ(got.owned, layout_.owned);
  EXPECT_EQ(got.max_batch, 4);
  EXPECT_THAT(ParseHello(hello.data(), hello.size(), fp + 1, &got).message(),
              HasSubstr("is not this worker's"));
  // A layer with no neurons (step_fuzz found its copy read from a null pointer).
  std::vector<std::vector<int32_t>> sparse = layout_.owned;
  sparse[0].clear();
  const std::vector<uint8_t> some = WriteHello(fp, 1, sparse);
  ASSERT_TRUE(ParseHello(some.data(), some.size(), fp, &got).ok());
  EXPECT_TRUE(got.owned[0].empty());
  EXPECT_EQ(got.owned[1], layout_.owned[1]);
  std::vector<uint8_t> cut(hello.begin(), hello.end() - 4);
  EXPECT_THAT(ParseHello(cut.data(), cut.size(), fp, &got).message(), HasSubstr("add up to"));
  EXPECT_TRUE(got.gate_thresholds.empty());
  // --sparse cats' thresholds, one per layer, between the counts and the ids.
  const std::vector<float> levels = {0.25f, 0.5f};
  const std::vector<uint8_t> cats = WriteHello(fp, 4, layout_.owned, levels);
  ASSERT_EQ(cats.size(), hello.size() + 2 * sizeof(float));
  ASSERT_TRUE(ParseHello(cats.data(), cats.size(), fp, &got).ok());
  EXPECT_EQ(got.gate_thresholds, levels);
  EXPECT_EQ(got.owned, layout_.owned);
  std::vector<uint8_t> one_short(cats.begin(), cats.end() - 4);
  EXPECT_THAT(ParseHello(one_short.data(), one_short.size(), fp, &got).message(),
              HasSubstr("add up to"));
  const std::vector<uint8_t> three = WriteHello(fp, 4, layout_.owned, {0.1f, 0.2f, 0.3f});
  EXPECT_THAT(ParseHello(three.data(), three.size(), fp, &got).message(),
              HasSubstr("3 gate thresholds"));
  ShardLayout bad = layout_;
  bad.gate_thresholds = {0.1f, -1.0f};
  EXPECT_THAT(bad.Finish().message(), HasSubstr("layer 1's gate threshold -1"));
  // --sparse teal's flag: the steps carry gate dots; no other flag exists.
  EXPECT_FALSE(got.gate_dots);
  std::vector<uint8_t> teal = WriteHello(fp, 4, layout_.owned, levels, true);
  ASSERT_TRUE(ParseHello(teal.data(), teal.size(), fp, &got).ok());
  EXPECT_TRUE(got.gate_dots);
  teal[offsetof(HelloHeader, flags)] = 3;
  EXPECT_THAT(ParseHello(teal.data(), teal.size(), fp, &got).message(), HasSubstr("flags 3"));
}

// A --sparse teal session's step carries one gate dot per candidate after the
// ids (every owned neuron's with n_ids -1): sizes without them are refused.
TEST_F(StepProtocolTest, TealStepsCarryTheirCandidatesGateDots) {
  ShardLayout teal = layout_;
  teal.gate_dots = true;
  const int d = teal.n_embd;
  std::vector<float> x(d, 0.5f);
  const std::vector<int32_t> ids = {teal.owned[1][0], teal.owned[1][2]};
  const int32_t row_n[1] = {2};
  std::vector<uint8_t> m(StepRequestBytes(1, d, 2, 2));
  float* gates = WriteStepRequest(7, 1, 1, d, x.data(), ids.data(), row_n, m.data());
  ASSERT_EQ(reinterpret_cast<uint8_t*>(gates + 2), m.data() + m.size());
  gates[0] = 1.5f;
  gates[1] = -2.5f;
  StepRequest r;
  ASSERT_TRUE(ParseStepRequest(m.data(), m.size(), teal, &r).ok());
  ASSERT_NE(r.gate_dots, nullptr);
  EXPECT_EQ(r.gate_dots[0], 1.5f);
  EXPECT_EQ(r.gate_dots[1], -2.5f);
  EXPECT_THAT(ParseStepRequest(m.data(), m.size() - 8, teal, &r).message(),
              HasSubstr("2 gate dots"));
  // The plain session takes the message without them only.
  EXPECT_THAT(ParseStepRequest(m.data(), m.size(), layout_, &r).message(),
              HasSubstr("0 gate dots"));
  std::vector<uint8_t> all(StepRequestBytes(1, d, -1, teal.owned[1].size()));
  WriteStepRequest(8, 1, 1, d, x.data(), nullptr, nullptr, all.data());
  ASSERT_TRUE(ParseStepRequest(all.data(), all.size(), teal, &r).ok());
  EXPECT_EQ(r.gate_dots,
            reinterpret_cast<const float*>(all.data() + all.size()) - teal.owned[1].size());
}

// Two threads as the two processes: every message arrives once, in order,
// whether the waiter spins or sleeps; a wait with nobody publishing times out.
TEST(ShmChannelTest, PingPongAndTimeout) {
  ShmChannel a;
  ASSERT_TRUE(a.Create(64, 64).ok());
  ShmChannel b;
  ASSERT_TRUE(b.Attach(dup(a.fd())).ok());
  constexpr int kRounds = 2000;
  std::thread worker([&] {
    for (int i = 0; i < kRounds; ++i) {
      size_t n = 0;
      ASSERT_TRUE(b.WaitFor(ShmChannel::kRequest, 5000, i % 2 ? 50 : 0, &n).ok());
      uint32_t v;
      memcpy(&v, b.slot(ShmChannel::kRequest), 4);
      v += 1;
      memcpy(b.slot(ShmChannel::kReply), &v, 4);
      b.Publish(ShmChannel::kReply, 4);
    }
  });
  for (uint32_t i = 0; i < kRounds; ++i) {
    memcpy(a.slot(ShmChannel::kRequest), &i, 4);
    a.Publish(ShmChannel::kRequest, 4);
    size_t n = 0;
    ASSERT_TRUE(a.WaitFor(ShmChannel::kReply, 5000, i % 3 ? 50 : 0, &n).ok());
    uint32_t v;
    memcpy(&v, a.slot(ShmChannel::kReply), 4);
    ASSERT_EQ(v, i + 1);
    ASSERT_EQ(n, 4u);
  }
  worker.join();
  size_t n = 0;
  const auto t0 = std::chrono::steady_clock::now();
  const Status s = a.WaitFor(ShmChannel::kReply, 50, 10, &n);
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.code(), Status::Code::kTimeout) << s.message();
  EXPECT_GE(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(50));
  // A region of another kind, or an unsealed one, is refused.
  EXPECT_FALSE(ShmChannel().Attach(dup(STDIN_FILENO)).ok());
}

// A step's reply from a worker, waited for at most timeout_ms.
Status WaitWithin(RemoteShard* w, int timeout_ms, const float** y, int64_t* fired) {
  w->set_step_timeout_ms(timeout_ms);
  return w->Wait(y, fired);
}

// A real pi-cpu-worker process over shared memory.
class ShmWorkerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = TempPath("relu.gguf");
    ASSERT_TRUE(WriteSyntheticModel(ReluModel(DType::kQ8_0), path_).ok());
    ASSERT_TRUE(LoadLlamaModel(path_, &model_).ok());
    opt_.binary = std::string(PI_BINARY_DIR) + "/bin/pi-cpu-worker";
    opt_.model_path = path_;
    opt_.n_threads = 2;
    shard_opt_.max_batch = 2;
  }
  void TearDown() override { unlink(path_.c_str()); }
  // A one-process engine (ref_) and one whose cold neurons are in
  // `n_workers` worker processes (split_), both oracle-sparse, one thread;
  // with `share`, split_ computes that fraction of them itself.
  void StartEngines(int n_workers, double share = 0.0) {
    EngineOptions plain;
    plain.n_threads = 1;
    plain.sparse = SparseMode::kOracle;
    ASSERT_TRUE(Engine::Create(&model_, plain, &ref_).ok());
    EngineOptions with = plain;
    WorkerProcessOptions o = opt_;
    o.n_threads = 1;
    for (const auto& owned : SplitColdNeurons(model_, with, n_workers, share)) {
      workers_.push_back(std::make_unique<RemoteShard>(NewShmLink(o), RemoteShardOptions{}));
      ASSERT_TRUE(workers_.back()->Open(model_, owned).ok());
      with.cold_shards.push_back(workers_.back().get());
    }
    ASSERT_TRUE(Engine::Create(&model_, with, &split_).ok());
  }
  // One greedy step of both engines from their last tokens *a and *b.
  void GreedyStep(int32_t* a, int32_t* b) {
    ASSERT_TRUE(ref_->Eval(a, 1).ok());
    ASSERT_TRUE(split_->Eval(b, 1).ok());
    const int n_vocab = model_.config.n_vocab;
    const float* la = ref_->logits();
    const float* lb = split_->logits();
    *a = static_cast<int32_t>(std::max_element(la, la + n_vocab) - la);
    *b = static_cast<int32_t>(std::max_element(lb, lb + n_vocab) - lb);
  }
  std::string path_;
  LlamaModel model_;
  WorkerProcessOptions opt_;
  RemoteShardOptions shard_opt_;
  std::vector<std::unique_ptr<RemoteShard>> workers_;  // outlive the engines
  std::unique_ptr<Engine> ref_, split_;
};

TEST_F(ShmWorkerTest, SameSumsAsInProcessThenBadMessagesThenStop) {
  RemoteShard w(NewShmLink(opt_), shard_opt_);
  ASSERT_TRUE(w.Open(model_, OddNeurons(model_.config)).ok());
  EXPECT_STREQ(w.backend(), "cpu");
  ColdShard local;
  ASSERT_TRUE(local.Init(model_, Layout(model_.config, 2), 1).ok());
  EXPECT_EQ(w.resident_bytes(), local.resident_bytes());
  std::vector<float> want(2 * 64);
  for (int step = 0; step < 20; ++step) {
    const int layer = step % 2, batch = 1 + step % 2;
    const std::vector<float> x = RandomRows(batch, 64, 100 + step);
    // Each row its own candidates.
    std::vector<int32_t> ids;
    int32_t row_n[2] = {0, 0};
    for (int b = 0; b < batch; ++b) {
      for (int32_t i : local.layout().owned[layer]) {
        if ((i * 7 + step + b) % 3 != 0) {
          ids.push_back(i);
          ++row_n[b];
        }
      }
    }
    const bool all = step % 4 == 0;
    w.Start(ShardStep{layer, batch, x.data(), all ? nullptr : ids.data(), all ? nullptr : row_n});
    local.Start(ShardStep{layer, batch, x.data(), all ? nullptr : ids.data(), all ? nullptr : row_n,
                          want.data()});
    const float* local_y = nullptr;
    int64_t want_fired = 0;
    ASSERT_TRUE(local.Wait(&local_y, &want_fired).ok());
    ASSERT_EQ(local_y, want.data());
    const float* y = nullptr;
    int64_t fired = 0;
    ASSERT_TRUE(WaitWithin(&w, 5000, &y, &fired).ok());
    EXPECT_EQ(fired, want_fired);
    // The same kernels at any thread count: bit for bit.
    ASSERT_EQ(memcmp(y, want.data(), sizeof(float) * batch * 64), 0) << "step " << step;
  }
  // A malformed message gets an error; the worker stays up for the next step.
  const std::vector<int32_t> unsorted = {5, 3};
  const std::vector<float> x = RandomRows(1, 64, 9);
  const int32_t two = 2;
  w.Start(ShardStep{0, 1, x.data(), unsorted.data(), &two});
  const float* y = nullptr;
  int64_t fired = 0;
  EXPECT_THAT(WaitWithin(&w, 5000, &y, &fired).message(), HasSubstr("not strictly increasing"));
  w.Start(ShardStep{0, 1, x.data(), nullptr, nullptr});
  EXPECT_TRUE(WaitWithin(&w, 5000, &y, &fired).ok());
  const pid_t pid = w.pid();
  EXPECT_TRUE(w.Stop().ok());
  EXPECT_NE(kill(pid, 0), 0);  // reaped, gone
}

TEST_F(ShmWorkerTest, AKilledWorkerIsNamedWithinASecond) {
  RemoteShard w(NewShmLink(opt_), shard_opt_);
  ASSERT_TRUE(w.Open(model_, OddNeurons(model_.config)).ok());
  kill(w.pid(), SIGKILL);
  const std::vector<float> x = RandomRows(1, 64, 4);
  const auto t0 = std::chrono::steady_clock::now();
  w.Start(ShardStep{0, 1, x.data(), nullptr, nullptr});
  const float* y = nullptr;
  int64_t fired = 0;
  const Status s = WaitWithin(&w, 10000, &y, &fired);
  EXPECT_THAT(s.message(), HasSubstr("killed by signal 9"));
  EXPECT_EQ(s.code(), Status::Code::kLost);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(1));
}

TEST_F(ShmWorkerTest, AStoppedWorkerIsATimeout) {
  RemoteShard w(NewShmLink(opt_), shard_opt_);
  ASSERT_TRUE(w.Open(model_, OddNeurons(model_.config)).ok());
  kill(w.pid(), SIGSTOP);
  const std::vector<float> x = RandomRows(1, 64, 4);
  w.Start(ShardStep{0, 1, x.data(), nullptr, nullptr});
  const float* y = nullptr;
  int64_t fired = 0;
  const Status s = WaitWithin(&w, 300, &y, &fired);
  EXPECT_EQ(s.code(), Status::Code::kTimeout) << s.message();
  EXPECT_THAT(s.message(), HasSubstr("did not answer step 1 within 300 ms"));
  kill(w.pid(), SIGKILL);
}

TEST_F(ShmWorkerTest, WrongModelIsRefusedAtHello) {
  // The worker maps another model: its fingerprint differs from the coordinator's.
  const std::string other = TempPath("other.gguf");
  SyntheticModelOptions o = ReluModel(DType::kQ8_0);
  o.seed = 12;
  ASSERT_TRUE(WriteSyntheticModel(o, other).ok());
  opt_.model_path = other;
  RemoteShard w(NewShmLink(opt_), shard_opt_);
  EXPECT_THAT(w.Open(model_, OddNeurons(model_.config)).message(),
              HasSubstr("is not this worker's"));
  opt_.model_path = "/nonexistent/model.gguf";
  RemoteShard missing(NewShmLink(opt_), shard_opt_);
  EXPECT_THAT(missing.Open(model_, OddNeurons(model_.config)).message(),
              HasSubstr("/nonexistent/model.gguf"));
  unlink(other.c_str());
}

// An engine whose cold neurons are in two worker processes gives the tokens
// of the one-process engine; a worker killed (SIGKILL) and one stopped
// (SIGSTOP) mid-generation are covered by the engine's own computation for
// that step, restarted at the next, and the tokens do not change; a worker
// lost again soon after its restart is restarted only after a backoff.
TEST_F(ShmWorkerTest, EngineWithWorkersSurvivesKilledAndStoppedWorkers) {
  ASSERT_NO_FATAL_FAILURE(StartEngines(2));
  for (auto& w : workers_) w->set_step_timeout_ms(300);
  int32_t a = 1, b = 1;
  const int n_vocab = model_.config.n_vocab;
  for (int step = 0; step < 16; ++step) {
    if (step == 5) kill(workers_[0]->pid(), SIGKILL);
    if (step == 7) kill(workers_[0]->pid(), SIGKILL);  // again, soon after its restart
    if (step == 9) kill(workers_[1]->pid(), SIGSTOP);
    ASSERT_NO_FATAL_FAILURE(GreedyStep(&a, &b));
    // The shards' sums are added in another order than one process adds its
    // neurons: the logits agree to rounding, the tokens exactly.
    const float* la = ref_->logits();
    const float* lb = split_->logits();
    float scale = 1e-6f;
    for (int i = 0; i < n_vocab; ++i) scale = std::max(scale, std::fabs(la[i]));
    for (int i = 0; i < n_vocab; ++i) ASSERT_NEAR(la[i], lb[i], 1e-4f * scale) << step;
    ASSERT_EQ(a, b) << "step " << step;
    // Lost again within a minute of its restart, worker 0 is not restarted
    // at the next step but after a backoff (250 ms: the stopped worker's
    // 300 ms deadline at step 9 outlasts it).
    if (step == 6 || step == 8) {
      EXPECT_EQ(workers_[0]->restarts(), 1) << "step " << step;
    }
  }
  // Each lost worker was restarted and served on.
  EXPECT_EQ(split_->shard_failures(), 3);
  EXPECT_EQ(split_->shard_recoveries(), 3);
  EXPECT_EQ(workers_[0]->restarts(), 2);
  EXPECT_EQ(workers_[1]->restarts(), 1);
  EXPECT_THAT(split_->shard_error(), HasSubstr("did not answer"));  // the stopped one, last
  for (auto& w : workers_) EXPECT_EQ(kill(w->pid(), 0), 0);         // the new processes run
}

// --coordinator-share: the coordinator keeps an evenly spread fraction of
// the cold neurons (owned by no worker) and computes them while the workers
// compute theirs; the tokens do not change.
TEST_F(ShmWorkerTest, CoordinatorShareKeepsPartOfTheColdNeuronsHere) {
  const LlamaConfig& c = model_.config;
  const auto shards = SplitColdNeurons(model_, EngineOptions(), 2, 0.5);
  ASSERT_EQ(shards.size(), 2u);
  for (int l = 0; l < c.n_layer; ++l) {
    std::vector<int> owner(c.n_ff, -1);
    for (int k = 0; k < 2; ++k) {
      for (int32_t id : shards[k][l]) {
        ASSERT_EQ(owner[id], -1) << "owned twice";
        owner[id] = k;
      }
    }
    // Every other neuron stays here; the rest alternate between the workers.
    for (int i = 0; i < c.n_ff; ++i) EXPECT_EQ(owner[i] == -1, i % 2 == 1) << "neuron " << i;
    EXPECT_EQ(shards[0][l].size(), shards[1][l].size());
  }
  ASSERT_NO_FATAL_FAILURE(StartEngines(1, 0.5));
  int32_t a = 3, b = 3;
  for (int step = 0; step < 12; ++step) {
    ASSERT_NO_FATAL_FAILURE(GreedyStep(&a, &b));
    ASSERT_EQ(a, b) << "step " << step;
    EXPECT_EQ(split_->last_ffn_neurons(), ref_->last_ffn_neurons()) << "step " << step;
  }
  EXPECT_EQ(split_->shard_failures(), 0);
}

// A worker that cannot come back (its model file is gone: the coordinator
// still has its own mapping) leaves its neurons here; tokens unchanged.
TEST_F(ShmWorkerTest, AWorkerThatCannotComeBackLeavesItsNeuronsHere) {
  ASSERT_NO_FATAL_FAILURE(StartEngines(1));
  ASSERT_EQ(unlink(path_.c_str()), 0);
  kill(workers_[0]->pid(), SIGKILL);
  int32_t a = 2, b = 2;
  for (int step = 0; step < 8; ++step) {
    ASSERT_NO_FATAL_FAILURE(GreedyStep(&a, &b));
    ASSERT_EQ(a, b) << "step " << step;
  }
  EXPECT_EQ(split_->shard_failures(), 1);
  EXPECT_EQ(split_->shard_recoveries(), 0);
  EXPECT_GE(workers_[0]->restarts(), 1);  // tried, and refused: the file is gone
}

}  // namespace
}  // namespace pi
