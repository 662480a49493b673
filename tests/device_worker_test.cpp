// A gpu_worker holding whole layers (coordinator/workers/device_worker.h driving
// gpu_worker/device_shard.h over shared memory, the host backend standing
// in for the GPU): killed or stopped mid-generation it is restarted, its KV
// cache rebuilt from the tokens, and the greedy tokens equal those of the
// same plan in one process; gone for good, it is a clear error naming it.
// Two chained workers (--gpus): either one killed, the same tokens.
// Malformed or out-of-order device messages get error replies and the
// worker stays up; hellos that do not fit are refused with their reason.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/format/fingerprint.h"
#include "common/offline/synthetic_model.h"
#include "common/transport/device_message.h"
#include "common/transport/hello_message.h"
#include "coordinator/engine/engine.h"
#include "coordinator/route/device_chain.h"
#include "coordinator/workers/device_worker.h"
#include "gpu_worker/host_device_backend.h"
#include "tests/temp_path.h"

namespace pi {
namespace {

using ::testing::HasSubstr;

constexpr int kCtx = 64;

class DeviceWorkerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SyntheticModelOptions o;
    o.n_vocab = 300;
    o.n_embd = 128;
    o.n_ff = 384;
    o.n_layer = 3;
    o.n_head = 4;
    o.n_head_kv = 2;
    o.type = DType::kF16;
    o.activation = "relu";
    o.down_t = true;
    o.planted_sparsity = 0.8;
    path_ = TempPath("device-worker.gguf");
    ASSERT_TRUE(WriteSyntheticModel(o, path_).ok());
    ASSERT_TRUE(LoadLlamaModel(path_, &model_).ok());
  }
  void TearDown() override { std::remove(path_.c_str()); }

  // Every layer and the head on the device, 30 % of each layer's neurons
  // hot: every layer has a cold part, so every layer crosses.
  DevicePlan Plan() const {
    const LlamaConfig& c = model_.config;
    DevicePlan p;
    p.n_layers = c.n_layer;
    p.output = true;
    p.n_ctx = kCtx;
    p.hot.assign(c.n_layer, {});
    for (int il = 0; il < c.n_layer; ++il) {
      for (int i = 0; i < c.n_ff; ++i) {
        if (i % 10 < 3) p.hot[il].push_back(i);
      }
    }
    return p;
  }

  DeviceWorkerOptions Options(const std::string& binary = "pi-gpu-worker") const {
    DeviceWorkerOptions o;
    o.process.binary = std::string(PI_BINARY_DIR) + "/bin/" + binary;
    o.process.role = "gpu worker";
    o.process.model_path = path_;
    o.process.n_threads = 2;
    o.process.extra_args = {"--ffn-backend", "host"};
    o.step_timeout_ms = 500;
    return o;
  }

  // Greedy tokens after a short prompt; before_step(i) runs before step i.
  std::vector<int32_t> Greedy(DeviceBackend* device, int n,
                              const std::function<void(int)>& before_step,
                              Engine** kept = nullptr) {
    EngineOptions opt;
    opt.n_threads = 2;
    opt.n_ctx = kCtx;
    opt.sparse = SparseMode::kOracle;
    opt.device = device;
    const Status created = Engine::Create(&model_, opt, &engine_);
    EXPECT_TRUE(created.ok()) << created.message();
    if (!created.ok()) return {};
    const int32_t prompt[5] = {1, 17, 42, 99, 5};
    std::vector<int32_t> out;
    Status s = engine_->Eval(prompt, 5);
    for (int i = 0; i < n && s.ok(); ++i) {
      const float* l = engine_->logits();
      const int32_t t = static_cast<int32_t>(std::max_element(l, l + engine_->n_vocab()) - l);
      out.push_back(t);
      before_step(i);
      s = engine_->Eval(&t, 1);
    }
    EXPECT_TRUE(s.ok()) << s.message();
    if (kept) *kept = engine_.get();
    return out;
  }

  std::string path_;
  LlamaModel model_;
  std::unique_ptr<Engine> engine_;
};

TEST_F(DeviceWorkerTest, KilledOrStoppedWorkerLeavesTheTokensUnchanged) {
  HostDeviceBackend local(2);
  ASSERT_TRUE(local.Load(model_, Plan()).ok());
  const std::vector<int32_t> want = Greedy(&local, 24, [](int) {});
  ASSERT_EQ(want.size(), 24u);

  DeviceWorker worker(Options());
  const Status loaded = worker.Load(model_, Plan());
  ASSERT_TRUE(loaded.ok()) << loaded.message();
  EXPECT_EQ(worker.backend(), "host");
  std::vector<pid_t> pids = {worker.pid()};
  pid_t stopped = -1;
  Engine* engine = nullptr;
  const std::vector<int32_t> got = Greedy(
      &worker, 24,
      [&](int step) {
        if (step == 4 || step == 18) kill(worker.pid(), SIGKILL);
        if (step == 11) {
          stopped = worker.pid();
          kill(stopped, SIGSTOP);  // past its deadline it is lost, then killed
        }
        if (worker.pid() != pids.back()) pids.push_back(worker.pid());
      },
      &engine);
  EXPECT_EQ(got, want);
  ASSERT_NE(engine, nullptr);
  EXPECT_EQ(engine->device_failures(), 3);
  EXPECT_EQ(engine->device_recoveries(), 3);
  EXPECT_EQ(worker.restarts(), 3);
  EXPECT_THAT(engine->device_error(), HasSubstr("killed by signal 9"));
  EXPECT_THAT(engine->device_error(), HasSubstr("gpu worker"));
  EXPECT_NE(kill(stopped, 0), 0) << "the stopped worker was killed and reaped";
  EXPECT_EQ(kill(worker.pid(), 0), 0) << "a fresh worker runs";
  EXPECT_TRUE(worker.Stop().ok());
}

// Sequences kept on the worker (Engine::SaveSeq with a device: the prompt
// store on the device path): one loaded into another sequence goes on as
// the original; the worker killed after the load, the recovery replays the
// loaded sequence from its tokens (the same logits as one process); what
// the lost worker kept is refused by name (kNotFound), nothing changed, and
// what the new one keeps loads again. After Stop, letting go of a kept
// sequence does not wait on the stopped worker.
TEST_F(DeviceWorkerTest, KeptSequencesGoWithTheWorkerAndLoadedOnesReplay) {
  const int32_t prompt[6] = {1, 17, 42, 99, 5, 8};
  const int32_t next = 33;
  DevicePlan plan = Plan();
  plan.n_seq = 2;
  auto make = [&](DeviceBackend* device, std::unique_ptr<Engine>* e) {
    EngineOptions opt;
    opt.n_threads = 2;
    opt.n_ctx = kCtx;
    opt.n_seq = 2;
    opt.sparse = SparseMode::kOracle;
    opt.device = device;
    ASSERT_TRUE(Engine::Create(&model_, opt, e).ok());
  };
  HostDeviceBackend local(2);
  ASSERT_TRUE(local.Load(model_, plan).ok());
  std::unique_ptr<Engine> ref;
  ASSERT_NO_FATAL_FAILURE(make(&local, &ref));
  ASSERT_TRUE(ref->Eval(prompt, 6).ok());
  ASSERT_TRUE(ref->Eval(&next, 1).ok());
  const std::vector<float> want(ref->logits(), ref->logits() + ref->n_vocab());

  DeviceWorker worker(Options());
  ASSERT_TRUE(worker.Load(model_, plan).ok());
  std::unique_ptr<Engine> e;
  ASSERT_NO_FATAL_FAILURE(make(&worker, &e));
  SavedSeq saved, again;
  ASSERT_TRUE(e->Eval(prompt, 6).ok());
  ASSERT_TRUE(e->SaveSeq(0, 6, &saved).ok());
  e->Reset();
  ASSERT_TRUE(e->LoadSeq(1, saved, 6).ok());
  kill(worker.pid(), SIGKILL);
  const Engine::BatchRow row{1, next, true};
  const Status stepped = e->EvalBatch(&row, 1);  // recovered: sequence 1 replayed
  ASSERT_TRUE(stepped.ok()) << stepped.message();
  EXPECT_EQ(e->device_recoveries(), 1);
  EXPECT_EQ(0, std::memcmp(e->batch_logits(0), want.data(), sizeof(float) * want.size()));
  const Status lost = e->LoadSeq(0, saved, 6);
  EXPECT_EQ(lost.code(), Status::Code::kNotFound);
  EXPECT_THAT(lost.message(), HasSubstr("before it was restarted"));
  EXPECT_EQ(e->seq_n_past(0), 0);
  ASSERT_TRUE(e->SaveSeq(1, 7, &again).ok());
  ASSERT_TRUE(e->LoadSeq(0, again, 6).ok());
  ASSERT_TRUE(e->EvalBatch(std::vector<Engine::BatchRow>{{0, next, true}}.data(), 1).ok());
  EXPECT_EQ(0, std::memcmp(e->batch_logits(0), want.data(), sizeof(float) * want.size()));
  EXPECT_TRUE(worker.Stop().ok());
  const auto start = std::chrono::steady_clock::now();
  again = SavedSeq();  // dropped: the stopped worker is not asked
  EXPECT_THAT(worker.DropSeq(1).message(), HasSubstr("was stopped"));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(50));
}

// Two workers chained by layer (--gpus): either one killed mid-generation is
// the one restarted, the context replayed through the chain, and the greedy
// tokens stay those of one device holding every layer.
TEST_F(DeviceWorkerTest, KilledMemberOfAChainLeavesTheTokensUnchanged) {
  HostDeviceBackend local(2);
  ASSERT_TRUE(local.Load(model_, Plan()).ok());
  const std::vector<int32_t> want = Greedy(&local, 20, [](int) {});
  ASSERT_EQ(want.size(), 20u);

  DevicePlan first = Plan(), second = Plan();
  first.n_layers = 1;
  first.output = false;
  for (size_t il = 1; il < first.hot.size(); ++il) first.hot[il].clear();
  second.first_layer = 1;
  second.hot[0].clear();
  DeviceWorker a(Options()), b(Options());
  ASSERT_TRUE(a.Load(model_, first).ok());
  ASSERT_TRUE(b.Load(model_, second).ok());
  DeviceChain chain;
  ASSERT_TRUE(chain.Init(model_, {&a, &b}).ok());
  const pid_t a_pid = a.pid(), b_pid = b.pid();
  Engine* engine = nullptr;
  const std::vector<int32_t> got = Greedy(
      &chain, 20,
      [&](int step) {
        if (step == 5) kill(b.pid(), SIGKILL);
        if (step == 12) kill(a.pid(), SIGKILL);
      },
      &engine);
  EXPECT_EQ(got, want);
  ASSERT_NE(engine, nullptr);
  EXPECT_EQ(engine->device_failures(), 2);
  EXPECT_EQ(engine->device_recoveries(), 2);
  EXPECT_EQ(a.restarts(), 1);
  EXPECT_EQ(b.restarts(), 1);
  EXPECT_NE(a.pid(), a_pid);
  EXPECT_NE(b.pid(), b_pid);
  EXPECT_TRUE(a.Stop().ok());
  EXPECT_TRUE(b.Stop().ok());
}

TEST_F(DeviceWorkerTest, WorkerGoneForGoodIsAClearErrorNamingIt) {
  // The model the worker restarts from is gone: it cannot come back.
  const std::string copy = TempPath("copy.gguf");
  ASSERT_EQ(std::system(("cp " + path_ + " " + copy).c_str()), 0);
  DeviceWorkerOptions o = Options();
  o.process.model_path = copy;
  DeviceWorker worker(o);
  ASSERT_TRUE(worker.Load(model_, Plan()).ok());
  std::remove(copy.c_str());
  EngineOptions opt;
  opt.n_threads = 2;
  opt.n_ctx = kCtx;
  opt.device = &worker;
  std::unique_ptr<Engine> e;
  ASSERT_TRUE(Engine::Create(&model_, opt, &e).ok());
  const int32_t prompt[3] = {1, 2, 3};
  ASSERT_TRUE(e->Eval(prompt, 3).ok());
  kill(worker.pid(), SIGKILL);
  const auto start = std::chrono::steady_clock::now();
  Status s = e->Eval(prompt, 1);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr("gpu worker"));
  EXPECT_THAT(s.message(), HasSubstr("killed by signal 9"));
  EXPECT_THAT(s.message(), HasSubstr("bringing it back failed"));
  EXPECT_LT(seconds, 5.0);
  // The next request tries again and fails the same clear way.
  e->Reset();
  s = e->Eval(prompt, 3);
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr("bringing it back failed"));
}

// Sends `message` over the worker's link and returns the reply's status.
Status Exchange(DeviceWorker* w, const std::vector<uint8_t>& message, uint64_t step_id,
                const DeviceLayout& layout, DeviceReply* reply = nullptr) {
  memcpy(w->link()->request(message.size()), message.data(), message.size());
  const uint8_t* bytes = nullptr;
  size_t n = 0;
  w->link()->Send(message.size());
  PI_RETURN_IF_ERROR(w->link()->Await(5000, "test message", 1, &bytes, &n));
  DeviceReply r;
  return ParseDeviceReply(bytes, n, step_id, DeviceOut::kNothing, layout, reply ? reply : &r);
}

TEST_F(DeviceWorkerTest, MalformedMessagesGetErrorsAndTheWorkerStaysUp) {
  DeviceWorker worker(Options());
  ASSERT_TRUE(worker.Load(model_, Plan()).ok());
  const LlamaConfig& c = model_.config;
  DeviceLayout layout;
  layout.n_layer = layout.n_layers = c.n_layer;
  layout.output = true;
  layout.n_embd = c.n_embd;
  layout.n_ff = c.n_ff;
  layout.n_vocab = c.n_vocab;
  layout.n_ctx = kCtx;
  layout.cold.assign(c.n_layer, 1);
  auto request = [&](StepKind op, int pos, int layer,
                     const std::function<void(StepRequestHeader*)>& edit = nullptr) {
    std::vector<uint8_t> m(DeviceRequestBytes(c.n_embd), 0);
    WriteDeviceRequest(77, op, 0, pos, false, layer, c.n_embd, DeviceOut::kNothing, m.data());
    for (int i = 0; i < c.n_embd; ++i) DeviceRequestPayload(m.data())[i] = 0.01f * (i % 7);
    if (edit) {
      StepRequestHeader h;
      memcpy(&h, m.data(), sizeof h);
      edit(&h);
      memcpy(m.data(), &h, sizeof h);
    }
    return m;
  };
  auto error_of = [&](const std::vector<uint8_t>& m) {
    const Status s = Exchange(&worker, m, m.size() >= sizeof(StepRequestHeader) ? 77 : 0, layout);
    EXPECT_FALSE(s.ok());
    return s.message();
  };
  const std::vector<uint8_t> good = request(StepKind::kBegin, 0, 0);
  EXPECT_THAT(error_of({1, 2, 3}), HasSubstr("shorter than its"));
  EXPECT_THAT(error_of(request(StepKind::kBegin, 0, 0, [](auto* h) { h->magic = 5; })),
              HasSubstr("bad magic"));
  EXPECT_THAT(error_of(request(StepKind::kBegin, 0, 0, [](auto* h) { h->version = 99; })),
              HasSubstr("protocol version 99"));
  EXPECT_THAT(error_of(request(StepKind::kBegin, 0, 0, [](auto* h) { h->kind = 10; })),
              HasSubstr("kind 10, not a device's"));
  EXPECT_THAT(error_of(request(StepKind::kBegin, 0, 0, [](auto* h) { h->kind = 0; })),
              HasSubstr("kind 0, not a device's"));
  EXPECT_THAT(error_of(request(StepKind::kBegin, 0, 0, [](auto* h) { h->batch = 2; })),
              HasSubstr("batch 2"));
  EXPECT_THAT(error_of(request(StepKind::kBegin, 0, 0, [](auto* h) { h->n_embd = 64; })),
              HasSubstr("n_embd 64"));
  std::vector<uint8_t> longer = good;
  longer.resize(longer.size() + 4);
  EXPECT_THAT(error_of(longer), HasSubstr("bytes, expected"));
  EXPECT_THAT(error_of(request(StepKind::kBegin, kCtx, 0)), HasSubstr("outside the context"));
  EXPECT_THAT(error_of(request(StepKind::kBegin, -1, 0)), HasSubstr("outside the context"));
  EXPECT_THAT(error_of(request(StepKind::kBegin, 0, 0, [](auto* h) { h->seq = 1; })),
              HasSubstr("sequence 1 is out of range [0, 1)"));
  EXPECT_THAT(error_of(request(StepKind::kBegin, 0, 0, [](auto* h) { h->out = 5; })),
              HasSubstr("unknown output 5"));
  EXPECT_THAT(error_of(request(StepKind::kResume, 0, 0)), HasSubstr("none is due"));
  EXPECT_THAT(error_of(request(StepKind::kResume, 0, 9)), HasSubstr("out of the device's"));
  // A sequence's cache (kSeq*): the key is the payload's first 8 bytes.
  EXPECT_THAT(error_of(request(StepKind::kSeqCopy, 4, 0)),
              HasSubstr("copying sequence 0 to 0 of 1"));
  EXPECT_THAT(error_of(request(StepKind::kSeqSave, kCtx + 1, 0)),
              HasSubstr("65 positions of a context of 64"));
  EXPECT_THAT(error_of(request(StepKind::kSeqSave, 4, 2)),
              HasSubstr("layer 2 (0 for a sequence's cache)"));
  EXPECT_THAT(error_of(request(StepKind::kSeqSave, 4, 0, [](auto* h) { h->out = 1; })),
              HasSubstr("output 1 for a sequence's cache"));
  EXPECT_THAT(error_of(request(StepKind::kSeqLoad, 4, 0)),
              HasSubstr("no sequence is kept under key"));
  // Kept bytes (kSeqRead, kSeqWrite): the range after the key, a chunk at most.
  auto kept = [&](StepKind kind, int64_t offset, int64_t size) {
    std::vector<uint8_t> m(DeviceRequestBytes(layout.n_embd));
    const std::vector<uint8_t> data(static_cast<size_t>(std::max<int64_t>(size, 0)));
    const int64_t room = DeviceKeptWriteChunk(layout.n_embd);
    WriteDeviceKeptRequest(77, kind, 4, 9, offset,
                           kind == StepKind::kSeqWrite ? std::min(size, room) : size, data.data(),
                           layout.n_embd, m.data());
    if (kind == StepKind::kSeqWrite && size > room) {  // the size field says more than fits
      memcpy(m.data() + sizeof(StepRequestHeader) + 16, &size, sizeof size);
    }
    return m;
  };
  EXPECT_THAT(error_of(kept(StepKind::kSeqRead, 0, DeviceKeptReadChunk(layout) + 1)),
              HasSubstr("at most"));
  EXPECT_THAT(error_of(kept(StepKind::kSeqWrite, 0, DeviceKeptWriteChunk(layout.n_embd) + 1)),
              HasSubstr("at most"));
  EXPECT_THAT(error_of(kept(StepKind::kSeqRead, -1, 4)), HasSubstr("kept bytes [-1"));
  EXPECT_THAT(error_of(kept(StepKind::kSeqRead, 0, 4)),
              HasSubstr("no sequence is kept under key 9"));
  EXPECT_THAT(error_of(kept(StepKind::kSeqWrite, 8, 4)), HasSubstr("which nothing is writing"));
  // A token under way: layer 0's cold part comes back; then out-of-order messages.
  DeviceReply reply;
  const Status begun = Exchange(&worker, good, 77, layout, &reply);
  ASSERT_TRUE(begun.ok()) << begun.message();
  EXPECT_EQ(reply.kind, StepReplyKind::kCold);
  EXPECT_EQ(reply.layer, 0);
  EXPECT_THAT(error_of(request(StepKind::kResume, 0, 1)), HasSubstr("while layer 0's is due"));
  EXPECT_THAT(error_of(request(StepKind::kHead, 0, 0)), HasSubstr("under way"));
  // Still up: a whole generation through the same worker matches one
  // through a fresh one (the abandoned token is dropped at the next begin).
  Engine* engine = nullptr;
  const std::vector<int32_t> got = Greedy(
      &worker, 8, [](int) {}, &engine);
  ASSERT_NE(engine, nullptr);
  EXPECT_EQ(engine->device_failures(), 0);
  DeviceWorker fresh(Options());
  ASSERT_TRUE(fresh.Load(model_, Plan()).ok());
  EXPECT_EQ(Greedy(&fresh, 8, [](int) {}), got);
}

TEST_F(DeviceWorkerTest, HellosThatDoNotFitAreRefusedWithTheirReason) {
  auto refusal = [&](const DeviceWorkerOptions& o, const DevicePlan& plan) {
    DeviceWorker w(o);
    const Status s = w.Load(model_, plan);
    EXPECT_FALSE(s.ok());
    return s.message();
  };
  // A cpu_worker takes FFN shards, not whole layers.
  DeviceWorkerOptions cpu = Options("pi-cpu-worker");
  cpu.process.extra_args.clear();
  EXPECT_THAT(refusal(cpu, Plan()), HasSubstr("a device's hello"));
  DevicePlan p = Plan();
  p.hot[1].push_back(model_.config.n_ff + 5);
  EXPECT_THAT(refusal(Options(), p), HasSubstr("layer 1"));
  p = Plan();
  p.n_layers = 1;  // hot neurons in layer 1, whose attention is not on the device
  EXPECT_THAT(refusal(Options(), p), HasSubstr("gives layer 1 hot neurons outside its layers"));
  p = Plan();
  p.first_layer = 1;  // a range of a chain (--gpus) whose layer 0 has hot neurons
  EXPECT_THAT(refusal(Options(), p), HasSubstr("layer 0 hot neurons outside its layers [1, 3)"));
  p = Plan();
  p.n_ctx = 0;
  EXPECT_THAT(refusal(Options(), p), HasSubstr("not one a coordinator sends"));
  p = Plan();
  p.mode = SparseMode::kPredictor;  // the synthetic model has no predictor
  EXPECT_THAT(refusal(Options(), p), HasSubstr("predictor"));
  // Another model: the fingerprint differs.
  const std::vector<uint8_t> hello = WriteDeviceHello(ModelFingerprint(*model_.file) ^ 1, Plan());
  DevicePlan parsed;
  EXPECT_THAT(ParseDeviceHello(hello.data(), hello.size(), ModelFingerprint(*model_.file), &parsed)
                  .message(),
              HasSubstr("is not this worker's"));
  // A chain's range (--gpus) crosses the hello; a range that ends before it
  // starts, or a reserved word set, does not.
  DevicePlan range = Plan();
  range.first_layer = 1;
  range.hot[0].clear();
  const uint64_t fp = ModelFingerprint(*model_.file);
  std::vector<uint8_t> bytes = WriteDeviceHello(fp, range);
  ASSERT_TRUE(ParseDeviceHello(bytes.data(), bytes.size(), fp, &parsed).ok());
  EXPECT_EQ(parsed.first_layer, 1);
  EXPECT_EQ(parsed.n_layers, range.n_layers);
  EXPECT_EQ(parsed.hot, range.hot);
  range.first_layer = range.n_layers + 1;
  bytes = WriteDeviceHello(fp, range);
  EXPECT_THAT(ParseDeviceHello(bytes.data(), bytes.size(), fp, &parsed).message(),
              HasSubstr("not one a coordinator sends"));
  range.first_layer = 0;
  bytes = WriteDeviceHello(fp, range);
  const size_t reserved = sizeof(HelloHeader) + offsetof(DeviceHelloPlan, reserved);
  bytes[reserved] = 1;
  EXPECT_THAT(ParseDeviceHello(bytes.data(), bytes.size(), fp, &parsed).message(),
              HasSubstr("not one a coordinator sends"));
}

// --sparse teal's device hello: the gate thresholds, then each input's per
// layer (kHelloInputThresholds); every count and value is checked.
TEST_F(DeviceWorkerTest, TealHelloCarriesTheInputThresholds) {
  const int n_layer = model_.config.n_layer;
  const uint64_t fp = ModelFingerprint(*model_.file);
  DevicePlan teal = Plan();
  teal.mode = SparseMode::kTeal;
  teal.gate_thresholds.assign(n_layer, 0.25f);
  for (int k = 0; k < kProjectionInputs; ++k) {
    for (int il = 0; il < n_layer; ++il) teal.input_thresholds[k].push_back(0.5f * k + 0.1f * il);
  }
  DevicePlan parsed;
  std::vector<uint8_t> bytes = WriteDeviceHello(fp, teal);
  ASSERT_TRUE(ParseDeviceHello(bytes.data(), bytes.size(), fp, &parsed).ok());
  EXPECT_EQ(parsed.mode, SparseMode::kTeal);
  EXPECT_EQ(parsed.gate_thresholds, teal.gate_thresholds);
  for (int k = 0; k < kProjectionInputs; ++k) {
    EXPECT_EQ(parsed.input_thresholds[k], teal.input_thresholds[k]) << k;
  }
  // A cats plan parsed into the same plan leaves no input thresholds behind.
  DevicePlan cats = teal;
  cats.mode = SparseMode::kCats;
  for (std::vector<float>& t : cats.input_thresholds) t.clear();
  bytes = WriteDeviceHello(fp, cats);
  ASSERT_TRUE(ParseDeviceHello(bytes.data(), bytes.size(), fp, &parsed).ok());
  EXPECT_TRUE(parsed.input_thresholds[0].empty() && parsed.input_thresholds[2].empty());

  DevicePlan bad = teal;
  bad.input_thresholds[1][2] = -1.0f;
  bytes = WriteDeviceHello(fp, bad);
  EXPECT_THAT(ParseDeviceHello(bytes.data(), bytes.size(), fp, &parsed).message(),
              HasSubstr("layer 2's input threshold (attention output) -1"));
  bad = teal;
  bad.input_thresholds[2].pop_back();
  bytes = WriteDeviceHello(fp, bad);
  EXPECT_THAT(ParseDeviceHello(bytes.data(), bytes.size(), fp, &parsed).message(),
              HasSubstr("gate and input thresholds, flags 2"));
  bad = teal;
  bad.mode = SparseMode::kCats;  // cats takes no input thresholds
  bytes = WriteDeviceHello(fp, bad);
  EXPECT_THAT(ParseDeviceHello(bytes.data(), bytes.size(), fp, &parsed).message(),
              HasSubstr("cats takes one per layer, teal four"));
  // A shard's hello has no such flag.
  std::vector<uint8_t> shard = WriteHello(fp, 1, teal.hot, teal.gate_thresholds, true);
  shard[offsetof(HelloHeader, flags)] = kHelloInputThresholds;
  ShardLayout layout;
  EXPECT_THAT(ParseHello(shard.data(), shard.size(), fp, &layout).message(), HasSubstr("flags 2"));
  // A backend refuses a teal plan without input thresholds, and a cats plan with them.
  HostDeviceBackend host(1);
  bad = teal;
  bad.input_thresholds[0].clear();
  EXPECT_THAT(host.Load(model_, bad).message(),
              HasSubstr("input thresholds go with --sparse teal"));
  bad = teal;
  bad.mode = SparseMode::kCats;
  EXPECT_THAT(host.Load(model_, bad).message(), HasSubstr("and only with it (mode cats"));
  EXPECT_TRUE(host.Load(model_, cats).ok());
}

}  // namespace
}  // namespace pi
