// Engine::EvalBatch — several sequences in one step (continuous batching's
// engine half) — against the same sequences evaluated alone: sequences that
// join at different steps, prompts prefilled in -b chunks beside the others'
// decode steps, and every logit of every step equal bit for bit to the solo
// run's, so the greedy tokens are the same. For --sparse off, oracle and
// predictor (each sequence's decode rows with candidates of their own, run
// together), llama (GQA) and falcon (parallel residual), and with the
// neurons on worker processes: cold ones on pi-cpu-workers, hot ones on a
// pi-gpu-worker (one step message for all rows) or an in-process backend
// (a row at a time), and on the device path (whole layers with a KV cache per
// sequence: in process, or in a pi-gpu-worker that is killed midway — every
// sequence replayed into its successor). Then the errors.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <signal.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "common/base/thread_pool.h"
#include "common/model/weight_repack.h"
#include "common/offline/synthetic_model.h"
#include "coordinator/engine/engine.h"
#include "coordinator/workers/device_worker.h"
#include "coordinator/workers/local_workers.h"
#include "coordinator/workers/remote_shard.h"
#include "gpu_worker/host_device_backend.h"
#include "gpu_worker/host_hot_shard.h"
#include "kernels/cpu/weight_panels.h"
#include "tests/temp_path.h"

namespace pi {
namespace {

using ::testing::HasSubstr;

constexpr int kBatch = 16;  // -b: prompt chunks (Q8_0 runs of 16 take the GEMM kernels)
constexpr int kSteps = 10;  // greedy tokens per sequence

struct Sequence {
  std::vector<int32_t> prompt;
  int join_step = 0;  // the batched run's step it arrives at
};

// One sequence alone: its prompt through Eval (chunks of kBatch), then greedy
// steps; the logits after the prompt and after each token.
std::vector<std::vector<float>> Solo(const LlamaModel& m, EngineOptions opt, const Sequence& s) {
  opt.n_seq = 1;
  std::unique_ptr<Engine> e;
  EXPECT_TRUE(Engine::Create(&m, opt, &e).ok());
  std::vector<std::vector<float>> out;
  EXPECT_TRUE(e->Eval(s.prompt.data(), static_cast<int>(s.prompt.size())).ok());
  for (int step = 0; step < kSteps; ++step) {
    out.emplace_back(e->logits(), e->logits() + e->n_vocab());
    const int32_t t = static_cast<int32_t>(std::max_element(out.back().begin(), out.back().end()) -
                                           out.back().begin());
    EXPECT_TRUE(e->Eval(&t, 1).ok());
  }
  return out;
}

// Where the FFN's neurons run besides this process.
enum class Workers { kNone, kCold, kHotAndCold, kHotShardInProcess, kHostDevice, kDeviceWorker };

struct Params {
  const char* arch;
  SparseMode sparse;
  Workers workers = Workers::kNone;
  DType type = DType::kQ8_0;  // the weights'
  bool repack = false;        // Q4_0/Q8_0 matrices repacked (common/model/weight_repack.h)
};

const char* WorkersName(Workers w) {
  switch (w) {
    case Workers::kNone:
      return "inproc";
    case Workers::kCold:
      return "cpu_workers";
    case Workers::kHotAndCold:
      return "gpu_and_cpu_worker";
    case Workers::kHotShardInProcess:
      return "hot_shard_in_process";
    case Workers::kHostDevice:
      return "host_device";
    case Workers::kDeviceWorker:
      return "device_worker_killed";
  }
  return "?";
}

class EngineBatchTest : public ::testing::TestWithParam<Params> {};

TEST_P(EngineBatchTest, EachSequenceEqualsItsSoloRun) {
  SyntheticModelOptions o;
  // (A head of whole 32-row panels, so a repacked case repacks it too.)
  o.n_vocab = GetParam().repack ? 224 : 200;
  // Float rows longer than the AVX-512 kernels' short-row cutoff (1024), so
  // decode takes the long-row mat-vec whose order the batch tiles must match.
  const DType t = GetParam().type;
  // Q4_K: rows of whole super-blocks.
  o.n_embd = t == DType::kF32 || t == DType::kF16 || t == DType::kBF16 ? 1088
             : t == DType::kQ4_K || t == DType::kQ5_K                  ? 256
                                                                       : 128;
  o.n_ff = 384;
  o.n_layer = 2;
  o.n_head = 4;
  o.n_head_kv = std::string(GetParam().arch) == "falcon" ? 1 : 2;
  o.arch = GetParam().arch;
  o.type = GetParam().type;
  o.activation = "relu";
  o.down_t = true;
  o.planted_sparsity = 0.8;
  if (GetParam().sparse == SparseMode::kPredictor) o.predictor_rank = 32;
  const std::string path = TempPath("batch.gguf");
  ASSERT_TRUE(WriteSyntheticModel(o, path).ok());
  struct Unlink {
    std::string path;
    ~Unlink() { std::remove(path.c_str()); }
  } unlink_model{path};  // after the workers: they open the file by name
  LlamaModel m;
  ASSERT_TRUE(LoadLlamaModel(path, &m).ok());
  if (GetParam().repack) {
    ThreadPool pool(2);
    RepackStats stats;
    const bool ffn = GetParam().sparse == SparseMode::kOff && GetParam().workers == Workers::kNone;
    RepackScope scope;
    scope.ffn = ffn;
    ASSERT_TRUE(RepackModelWeights(&m, scope, &pool, &stats).ok());
    // Q, K, V, O, the FFN's gate and up (falcon: no gate; the model's
    // ffn_down_t is summed row by row, not repacked) and the head. Without
    // this CPU's panel kernel for the type nothing is repacked, and the case
    // runs as the unrepacked one does.
    const int ffn_matrices = !ffn ? 0 : o.arch == "falcon" ? 1 : 2;
    ASSERT_EQ(stats.matrices, WeightPanelsFast(t) ? (4 + ffn_matrices) * o.n_layer + 1 : 0);
  }

  // Prompts of 1, a chunk and a bit, exactly two chunks, and three; the
  // sequences join at different steps, one after another has finished.
  std::vector<Sequence> seqs(5);
  const int lengths[5] = {1, 21, 32, 3, 48};
  const int joins[5] = {0, 0, 2, 5, 13};
  for (int s = 0; s < 5; ++s) {
    for (int i = 0; i < lengths[s]; ++i) seqs[s].prompt.push_back((s * 37 + i * 11) % o.n_vocab);
    seqs[s].join_step = joins[s];
  }
  EngineOptions opt;
  opt.n_threads = 2;
  opt.n_ctx = 64;
  opt.n_batch = kBatch;
  opt.sparse = GetParam().sparse;
  opt.sparse_threshold = 0.0f;
  // Hot: every fourth neuron. Workers take at most 3 rows a step, so four
  // decoding sequences go as 3 + 1.
  std::vector<std::vector<int32_t>> hot(o.n_layer);
  for (int l = 0; l < o.n_layer; ++l) {
    for (int32_t i = l; i < o.n_ff; i += 4) hot[l].push_back(i);
  }
  const Workers where = GetParam().workers;
  std::vector<std::unique_ptr<RemoteShard>> workers;
  HostHotShard backend(1);
  if (where == Workers::kHotAndCold) {
    WorkerProcessOptions g;
    g.binary = std::string(PI_BINARY_DIR) + "/bin/pi-gpu-worker";
    g.role = "gpu worker";
    g.model_path = path;
    g.extra_args = {"--ffn-backend", "host"};
    workers.push_back(std::make_unique<RemoteShard>(NewShmLink(g), RemoteShardOptions{3}));
    ASSERT_TRUE(workers.back()->Open(m, hot).ok());
    opt.hot_shard = workers.back().get();
  }
  if (where == Workers::kHotShardInProcess) {
    ASSERT_TRUE(backend.Load(m, hot).ok());
    opt.hot_shard = &backend;
  }
  // The device path: layer 0 (in process) or both layers and the head (in a
  // gpu worker) with their hot neurons and a KV cache for each of 4 sequences.
  HostDeviceBackend host_device(1);
  std::unique_ptr<DeviceWorker> device_worker;
  if (where == Workers::kHostDevice || where == Workers::kDeviceWorker) {
    DevicePlan p;
    p.n_layers = where == Workers::kHostDevice ? 1 : o.n_layer;
    p.output = where == Workers::kDeviceWorker;
    p.hot.assign(o.n_layer, {});
    for (int l = 0; l < p.n_layers; ++l) p.hot[l] = hot[l];
    p.n_ctx = opt.n_ctx;
    p.n_seq = 4;
    if (opt.sparse == SparseMode::kPredictor) p.mode = SparseMode::kPredictor;
    if (where == Workers::kHostDevice) {
      ASSERT_TRUE(host_device.Load(m, p).ok());
      opt.device = &host_device;
    } else {
      DeviceWorkerOptions d;
      d.process.binary = std::string(PI_BINARY_DIR) + "/bin/pi-gpu-worker";
      d.process.role = "gpu worker";
      d.process.model_path = path;
      d.process.extra_args = {"--ffn-backend", "host"};
      device_worker = std::make_unique<DeviceWorker>(d);
      const Status loaded = device_worker->Load(m, p);
      ASSERT_TRUE(loaded.ok()) << loaded.message();
      opt.device = device_worker.get();
    }
  }
  if (where == Workers::kCold || where == Workers::kHotAndCold) {
    WorkerProcessOptions c;
    c.binary = std::string(PI_BINARY_DIR) + "/bin/pi-cpu-worker";
    c.model_path = path;
    // Two workers, and a share of the cold neurons left here.
    for (const auto& owned : SplitColdNeurons(m, opt, 2, 0.25)) {
      workers.push_back(std::make_unique<RemoteShard>(NewShmLink(c), RemoteShardOptions{3}));
      ASSERT_TRUE(workers.back()->Open(m, owned).ok());
      opt.cold_shards.push_back(workers.back().get());
    }
  }
  std::vector<std::vector<std::vector<float>>> want;
  for (const Sequence& s : seqs) want.push_back(Solo(m, opt, s));

  // Four slots; sequence 4 takes the slot sequence 0 leaves.
  opt.n_seq = 4;
  std::unique_ptr<Engine> e;
  ASSERT_TRUE(Engine::Create(&m, opt, &e).ok());
  ASSERT_EQ(e->max_batch_rows(), kBatch + 3);
  struct State {
    int slot = -1;
    size_t prefilled = 0;
    int32_t next = -1;  // the token to evaluate (decoding)
    int step = 0;       // logits seen
  };
  std::vector<State> st(seqs.size());
  std::vector<int> slot_of_row;
  int finished = 0;
  for (int step = 0; step < 60 && finished < static_cast<int>(seqs.size()); ++step) {
    // Admit into free slots.
    for (size_t s = 0; s < seqs.size(); ++s) {
      if (st[s].slot >= 0 || st[s].step == kSteps || step < seqs[s].join_step) continue;
      for (int slot = 0; slot < 4; ++slot) {
        bool taken = false;
        for (const State& o2 : st) taken |= o2.slot == slot;
        if (taken) continue;
        st[s].slot = slot;
        e->ResetSeq(slot);
        break;
      }
    }
    // Decode rows, then at most one prefill chunk (the row budget).
    std::vector<Engine::BatchRow> rows;
    std::vector<size_t> asking;  // the sequence of each logits row
    for (size_t s = 0; s < seqs.size(); ++s) {
      if (st[s].slot >= 0 && st[s].next >= 0) {
        rows.push_back({st[s].slot, st[s].next, true});
        asking.push_back(s);
      }
    }
    for (size_t s = 0; s < seqs.size(); ++s) {
      if (st[s].slot < 0 || st[s].prefilled == seqs[s].prompt.size()) continue;
      const size_t end = std::min(seqs[s].prompt.size(), st[s].prefilled + kBatch);
      for (size_t i = st[s].prefilled; i < end; ++i) {
        const bool last = i + 1 == seqs[s].prompt.size();
        rows.push_back({st[s].slot, seqs[s].prompt[i], last});
        if (last) asking.push_back(s);
      }
      st[s].prefilled = end;
      break;
    }
    if (rows.empty()) continue;
    // The gpu worker dies with four sequences under way: the next step
    // brings up another and replays them all into its KV caches.
    if (device_worker && step == 8) kill(device_worker->pid(), SIGKILL);
    const Status ok = e->EvalBatch(rows.data(), static_cast<int>(rows.size()));
    ASSERT_TRUE(ok.ok()) << ok.message();
    for (size_t k = 0; k < asking.size(); ++k) {
      State& q = st[asking[k]];
      const std::vector<float>& w = want[asking[k]][q.step];
      ASSERT_EQ(
          0, std::memcmp(e->batch_logits(static_cast<int>(k)), w.data(), sizeof(float) * w.size()))
          << "sequence " << asking[k] << " step " << q.step;
      q.next = static_cast<int32_t>(std::max_element(w.begin(), w.end()) - w.begin());
      if (++q.step == kSteps) {
        q.slot = -1;
        q.next = -1;
        ++finished;
      }
    }
  }
  EXPECT_EQ(finished, static_cast<int>(seqs.size()));
  EXPECT_EQ(e->shard_failures(), 0);
  EXPECT_EQ(e->device_failures(), device_worker ? 1 : 0);
  EXPECT_EQ(e->device_recoveries(), device_worker ? 1 : 0);
  for (auto& w : workers) EXPECT_TRUE(w->Stop().ok());
  if (device_worker) {
    EXPECT_TRUE(device_worker->Stop().ok());
  }
}

INSTANTIATE_TEST_SUITE_P(
    Cases, EngineBatchTest,
    ::testing::Values(Params{"llama", SparseMode::kOff}, Params{"llama", SparseMode::kOracle},
                      Params{"llama", SparseMode::kPredictor}, Params{"falcon", SparseMode::kOff},
                      Params{"falcon", SparseMode::kOracle},
                      Params{"falcon", SparseMode::kPredictor},
                      Params{"llama", SparseMode::kOracle, Workers::kCold},
                      Params{"llama", SparseMode::kPredictor, Workers::kCold},
                      Params{"llama", SparseMode::kPredictor, Workers::kHotAndCold},
                      Params{"falcon", SparseMode::kOracle, Workers::kHotAndCold},
                      Params{"llama", SparseMode::kPredictor, Workers::kHotShardInProcess},
                      Params{"llama", SparseMode::kOracle, Workers::kHostDevice},
                      Params{"falcon", SparseMode::kPredictor, Workers::kHostDevice},
                      Params{"llama", SparseMode::kPredictor, Workers::kDeviceWorker},
                      // Float weights: their batch tiles sum as their mat-vec does.
                      Params{"llama", SparseMode::kOff, Workers::kNone, DType::kF16},
                      Params{"llama", SparseMode::kOracle, Workers::kNone, DType::kF32},
                      Params{"falcon", SparseMode::kPredictor, Workers::kNone, DType::kBF16},
                      // Repacked weights: decode, batched decode and prompts in one kernel.
                      Params{"llama", SparseMode::kOff, Workers::kNone, DType::kQ4_0, true},
                      Params{"falcon", SparseMode::kOff, Workers::kNone, DType::kQ4_0, true},
                      Params{"llama", SparseMode::kPredictor, Workers::kCold, DType::kQ4_0, true},
                      Params{"llama", SparseMode::kOracle, Workers::kNone, DType::kF16, true},
                      Params{"llama", SparseMode::kOff, Workers::kNone, DType::kQ4_K, true},
                      Params{"llama", SparseMode::kPredictor, Workers::kCold, DType::kQ4_K, true},
                      Params{"falcon", SparseMode::kOff, Workers::kNone, DType::kQ5_K, true}),
    [](const auto& p) {
      return std::string(p.param.arch) + "_" + SparseModeName(p.param.sparse) + "_" +
             WorkersName(p.param.workers) +
             (p.param.type == DType::kQ8_0 ? "" : std::string("_") + DTypeName(p.param.type)) +
             (p.param.repack ? "_repacked" : "");
    });

// Engine::CopySeq: a sequence that takes another's first positions and
// evaluates the rest of its prompt (a -b chunk, as EvalBatch prefills it)
// gets the logits a fresh engine gets for the whole prompt, bit for bit, and
// then decodes as the sequence it copied; for each KV cache type. Refused:
// a bad sequence or count. (With a device: device_backend_test.cpp.)
TEST(EngineCopySeqTest, ACopiedPrefixGoesOnAsAFreshEvaluation) {
  SyntheticModelOptions o;
  o.activation = "relu";
  const std::string path = TempPath("copy.gguf");
  ASSERT_TRUE(WriteSyntheticModel(o, path).ok());
  LlamaModel m;
  ASSERT_TRUE(LoadLlamaModel(path, &m).ok());
  std::remove(path.c_str());
  std::vector<int32_t> prompt;
  for (int i = 0; i < 16; ++i) prompt.push_back((i * 41 + 5) % o.n_vocab);
  for (DType cache : {DType::kF32, DType::kF16, DType::kQ8_0}) {
    EngineOptions opt;
    opt.n_ctx = 64;
    opt.n_batch = 4;
    opt.cache_type_k = opt.cache_type_v = cache;
    std::unique_ptr<Engine> fresh, e;
    ASSERT_TRUE(Engine::Create(&m, opt, &fresh).ok());
    ASSERT_TRUE(fresh->Eval(prompt.data(), static_cast<int>(prompt.size())).ok());
    opt.n_seq = 3;
    ASSERT_TRUE(Engine::Create(&m, opt, &e).ok());
    ASSERT_TRUE(e->Eval(prompt.data(), static_cast<int>(prompt.size())).ok());  // sequence 0
    ASSERT_TRUE(e->CopySeq(0, 2, 12).ok());
    EXPECT_EQ(e->seq_n_past(2), 12);
    std::vector<Engine::BatchRow> rows;
    for (size_t i = 12; i < prompt.size(); ++i)
      rows.push_back({2, prompt[i], i + 1 == prompt.size()});
    ASSERT_TRUE(e->EvalBatch(rows.data(), static_cast<int>(rows.size())).ok());
    EXPECT_EQ(0, std::memcmp(e->batch_logits(0), fresh->logits(), sizeof(float) * o.n_vocab))
        << DTypeName(cache);
    // Then a decode step of each: the copy and the fresh engine agree.
    const int32_t next = 7;
    const Engine::BatchRow step[1] = {{2, next, true}};
    ASSERT_TRUE(e->EvalBatch(step, 1).ok());
    ASSERT_TRUE(fresh->Eval(&next, 1).ok());
    EXPECT_EQ(0, std::memcmp(e->batch_logits(0), fresh->logits(), sizeof(float) * o.n_vocab))
        << DTypeName(cache);
    // A whole prompt copied: the next decode step equals the source's.
    ASSERT_TRUE(e->CopySeq(0, 1, 16).ok());
    const Engine::BatchRow both[2] = {{0, next, true}, {1, next, true}};
    ASSERT_TRUE(e->EvalBatch(both, 2).ok());
    EXPECT_EQ(0, std::memcmp(e->batch_logits(0), e->batch_logits(1), sizeof(float) * o.n_vocab));
    EXPECT_EQ(0, std::memcmp(e->batch_logits(1), fresh->logits(), sizeof(float) * o.n_vocab));
    EXPECT_THAT(e->CopySeq(0, 0, 4).message(), HasSubstr("copying sequence 0 to 0"));
    EXPECT_THAT(e->CopySeq(0, 3, 4).message(), HasSubstr("copying sequence 0 to 3 of 3"));
    EXPECT_THAT(e->CopySeq(0, 1, 30).message(), HasSubstr("which holds 17"));
  }
}

TEST(EngineBatchErrorsTest, BadRowsAreRefusedAndChangeNothing) {
  SyntheticModelOptions o;
  o.activation = "relu";
  const std::string path = TempPath("m.gguf");
  ASSERT_TRUE(WriteSyntheticModel(o, path).ok());
  LlamaModel m;
  ASSERT_TRUE(LoadLlamaModel(path, &m).ok());
  std::remove(path.c_str());
  EngineOptions opt;
  opt.n_ctx = 8;
  opt.n_batch = 4;
  opt.n_seq = 2;
  std::unique_ptr<Engine> e;
  ASSERT_TRUE(Engine::Create(&m, opt, &e).ok());
  auto error = [&](std::vector<Engine::BatchRow> rows) {
    return e->EvalBatch(rows.data(), static_cast<int>(rows.size())).message();
  };
  EXPECT_THAT(error({{2, 1, true}}), HasSubstr("sequence 2 is out of range"));
  EXPECT_THAT(error({{0, -1, true}}), HasSubstr("token id -1"));
  EXPECT_THAT(error(std::vector<Engine::BatchRow>(6, {0, 1, false})), HasSubstr("6 rows"));
  EXPECT_THAT(error({{0, 1, true}, {1, 1, true}, {1, 2, true}}), HasSubstr("logits"));
  std::vector<Engine::BatchRow> fill(4, {1, 3, false});
  ASSERT_TRUE(e->EvalBatch(fill.data(), 4).ok());
  ASSERT_TRUE(e->EvalBatch(fill.data(), 4).ok());
  EXPECT_THAT(error({{1, 3, true}}), HasSubstr("context overflow: sequence 1 has 8"));
  EXPECT_EQ(e->seq_n_past(1), 8);
  EXPECT_EQ(e->seq_n_past(0), 0);
  e->ResetSeq(1);
  EXPECT_EQ(e->seq_n_past(1), 0);
  opt.n_seq = 0;
  EXPECT_THAT(Engine::Create(&m, opt, &e).message(), HasSubstr("sequence count 0"));
}

}  // namespace
}  // namespace pi
