// The engine with a DeviceBackend (a prefix of the layers, their hot neurons
// and the head on the device; the cold neurons and the other layers on the
// host) against the same engine without one: logits of prompt tokens and
// greedy decode steps, for every weight type, llama (normal RoPE, GQA, gated
// relu/drelu) and falcon (NeoX RoPE, parallel residual, LayerNorm with
// biases, ungated relu), f16 and f32 KV caches, and plans from everything on
// the device down to the head alone; and --sparse cats (SiLU, GELU and ReLU
// forms with gate thresholds, the prompt dense and the decode steps
// thresholded on both sides), and --sparse teal (the attention's and the
// gate's inputs thresholded too, on the device's layers as on the host's).
// Built twice: for the host backend
// (device_backend_test, CI) and the CUDA backend (cuda_device_backend_test,
// label "gpu": skipped, with the reason, without a device), and for the
// host backend in a pi-gpu-worker process over shared memory
// (shm_device_backend_test: coordinator/workers/device_worker.h, every call a
// message), and the CUDA backend in one (cuda_shm_device_backend_test,
// label "gpu"); PI_TEST_DEVICE names the backend.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <numeric>
#include <string>
#include <tuple>
#include <vector>

#include "common/model/weight_transpose.h"
#include "common/offline/synthetic_model.h"
#include "coordinator/engine/engine.h"
#include "coordinator/engine/prompt_cache.h"
#include "coordinator/engine/slot_file.h"
#include "coordinator/route/device_chain.h"
#include "coordinator/workers/device_worker.h"
#include "gpu_worker/host_device_backend.h"
#include "gpu_worker/layer_range_device.h"
#include "tests/temp_path.h"
#ifdef PI_HAVE_CUDA
#include "gpu_worker/cuda_model_backend.h"
#include "kernels/cuda/matvec.h"
#endif

namespace pi {
namespace {

using ::testing::HasSubstr;

enum class Plan {
  kAll,       // every layer and every neuron on the device, and the head
  kSplit,     // every layer, 30 % of each layer's neurons (the most frequent), the head
  kNoHot,     // every layer's attention, no neuron: the FFN is all host
  kPrefix,    // the first layer (30 % hot) and the head; the second layer on the host
  kHeadOnly,  // the head alone
  kNoHead,    // every layer split, the head on the host
};

const char* PlanName(Plan p) {
  switch (p) {
    case Plan::kAll:
      return "all";
    case Plan::kSplit:
      return "split";
    case Plan::kNoHot:
      return "nohot";
    case Plan::kPrefix:
      return "prefix";
    case Plan::kHeadOnly:
      return "headonly";
    case Plan::kNoHead:
      return "nohead";
  }
  return "?";
}

struct Case {
  const char* backend;  // host | cuda | shm | cuda-shm
  DType type;
  const char* act;
  const char* arch;
  Plan plan;
  DType kv = DType::kF16;
  const char* rope = "";  // RoPE scaling (SyntheticModelOptions::rope_scaling)
  bool cats = false;      // --sparse cats on both engines (CatsThreshold)
  bool teal = false;      // --sparse teal (cats, and TealLevels) on both engines
};

// The median |x| of each input --sparse teal thresholds over a dense run of
// the prompt: levels that drop about half of each input's entries.
class InputMedians : public FfnObserver {
 public:
  void OnFfn(int, int, const float*) override {}
  void OnProjectionInput(int, ProjectionInput which, int batch, const float* x,
                         int width) override {
    std::vector<float>& v = seen_[static_cast<int>(which)];
    for (int64_t i = 0; i < int64_t{batch} * width; ++i) v.push_back(std::fabs(x[i]));
  }
  float Median(int k) {
    std::vector<float>& v = seen_[k];
    if (v.empty()) return 0.0f;
    std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
    return v[v.size() / 2];
  }

 private:
  std::vector<float> seen_[kProjectionInputs];
};

// Sets --sparse teal on `opt` (whose gate thresholds are set): each input's
// threshold its median over the prompt, in every layer.
void TealLevels(const LlamaModel& m, const std::vector<int32_t>& prompt, EngineOptions* opt) {
  EngineOptions dense;
  dense.n_ctx = 64;
  std::unique_ptr<Engine> e;
  InputMedians medians;
  ASSERT_TRUE(Engine::Create(&m, dense, &e).ok());
  e->SetFfnObserver(&medians);
  ASSERT_TRUE(e->Eval(prompt.data(), static_cast<int>(prompt.size())).ok());
  opt->sparse = SparseMode::kTeal;
  for (int k = 0; k < kProjectionInputs; ++k) {
    opt->input_thresholds[k].assign(m.config.n_layer, medians.Median(k));
  }
}

// A gate threshold, the same for every layer, under which a decode step of
// the one-process cats engine skips about half of the model's neurons (the
// synthetic models' |act(gate x)| spread differs by architecture).
float CatsThreshold(const LlamaModel& m, const std::vector<int32_t>& prompt) {
  const int64_t all = int64_t{m.config.n_layer} * m.config.n_ff;
  float t = 1e-3f;
  for (int k = 0; k < 16; ++k, t *= 1.5f) {
    EngineOptions opt;
    opt.n_ctx = 64;
    opt.sparse = SparseMode::kCats;
    opt.gate_thresholds.assign(m.config.n_layer, t);
    std::unique_ptr<Engine> e;
    if (!Engine::Create(&m, opt, &e).ok()) return 0.0f;
    const int32_t next = 7;
    if (!e->Eval(prompt.data(), static_cast<int>(prompt.size())).ok() || !e->Eval(&next, 1).ok()) {
      return 0.0f;
    }
    if (e->last_ffn_neurons() <= all / 2) return t;
  }
  return t;
}

// Removes a file when the test ends (a worker process opens the model by
// its path when the device loads).
struct RemoveAtExit {
  std::string path;
  ~RemoveAtExit() { std::remove(path.c_str()); }
};

// `model_path`: the model the device will load (a worker process opens it).
std::unique_ptr<DeviceBackend> MakeBackend(const std::string& kind, std::string* skip,
                                           const std::string& model_path = "") {
  if (kind == "host") return std::make_unique<HostDeviceBackend>(2);
  if (kind == "shm" || kind == "cuda-shm") {
#ifdef PI_HAVE_CUDA
    if (kind == "cuda-shm" && !cuda::DeviceAvailable(skip)) return nullptr;
#else
    if (kind == "cuda-shm") {
      *skip = "this build has no CUDA support";
      return nullptr;
    }
#endif
    DeviceWorkerOptions o;
    o.process.binary = std::string(PI_BINARY_DIR) + "/bin/pi-gpu-worker";
    o.process.role = "gpu worker";
    o.process.model_path = model_path;
    o.process.n_threads = 2;
    o.process.extra_args = {"--ffn-backend", kind == "shm" ? "host" : "cuda"};
    o.step_timeout_ms = 10000;
    return std::make_unique<DeviceWorker>(o);
  }
#ifdef PI_HAVE_CUDA
  if (!cuda::DeviceAvailable(skip)) return nullptr;
  return std::make_unique<CudaModelBackend>();
#else
  *skip = "this build has no CUDA support";
  return nullptr;
#endif
}

// The 30 % most frequently firing neurons by the planted rates (what a
// placement from a profile would pick), sorted.
std::vector<int32_t> Hottest(const SyntheticModelOptions& o, int layer, double share) {
  // Unplanted models (gemma, phi3): every third neuron, a share as any.
  const std::vector<double> rates = o.planted_sparsity > 0
                                        ? PlantedFiringRates(o, layer)
                                        : std::vector<double>(static_cast<size_t>(o.n_ff), 0.0);
  if (o.planted_sparsity == 0) {
    std::vector<int32_t> ids;
    for (int32_t i = 0; i < o.n_ff && ids.size() < share * o.n_ff; i += 3) ids.push_back(i);
    return ids;
  }
  std::vector<int32_t> order(o.n_ff);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int32_t a, int32_t b) { return rates[a] > rates[b]; });
  order.resize(static_cast<size_t>(share * o.n_ff));
  std::sort(order.begin(), order.end());
  return order;
}

DevicePlan MakePlan(const SyntheticModelOptions& o, Plan p, int n_ctx, DType kv) {
  DevicePlan dp;
  dp.n_ctx = n_ctx;
  dp.cache_type_k = dp.cache_type_v = kv;
  dp.hot.assign(o.n_layer, {});
  dp.output = p != Plan::kNoHead;
  dp.n_layers = p == Plan::kHeadOnly ? 0 : p == Plan::kPrefix ? 1 : o.n_layer;
  for (int il = 0; il < dp.n_layers; ++il) {
    if (p == Plan::kAll) {
      dp.hot[il].resize(o.n_ff);
      std::iota(dp.hot[il].begin(), dp.hot[il].end(), 0);
    } else if (p != Plan::kNoHot) {
      dp.hot[il] = Hottest(o, il, 0.3);
    }
  }
  return dp;
}

// max |a - b| over max |b|.
double RelativeError(const float* a, const float* b, int n) {
  double diff = 0, scale = 0;
  for (int i = 0; i < n; ++i) {
    diff = std::max(diff, static_cast<double>(std::fabs(a[i] - b[i])));
    scale = std::max(scale, static_cast<double>(std::fabs(b[i])));
  }
  return diff / std::max(scale, 1e-30);
}

class DeviceBackendTest : public ::testing::TestWithParam<Case> {};

TEST_P(DeviceBackendTest, MatchesHostEngine) {
  const Case tc = GetParam();
  std::string skip;
  if (!MakeBackend(tc.backend, &skip)) GTEST_SKIP() << skip;

  SyntheticModelOptions o;
  o.n_vocab = 300;
  o.n_embd = 256;
  o.n_ff = 768;
  o.n_layer = 2;
  o.n_head = 8;
  o.n_head_kv = std::string(tc.arch) == "falcon" ? 1 : 2;  // GQA (falcon: multi-query)
  o.type = tc.type;
  o.activation = tc.act;
  o.arch = tc.arch;
  o.down_t = true;
  // Planted sparsity is written for llama and falcon layers; the others run
  // their gated ReLU's own zeros.
  const bool planted = (o.arch == "llama" || o.arch == "falcon") && std::string(tc.act) != "silu";
  o.planted_sparsity = planted ? 0.8 : 0.0;
  o.sliding_window = 3;  // gemma, phi3: shorter than the test's positions
  o.attn_softcap = 2.0f;
  o.final_softcap = 5.0f;
  if (o.arch == "gemma3") o.rope_theta = 1e6f;  // its sliding layers rotate with 1e4
  o.rope_scaling = tc.rope;
  o.rope_original_ctx = 16;  // the test's positions reach every kind of llama3 factor
  const std::string path = TempPath("device.gguf");
  const RemoveAtExit remove{path};
  ASSERT_TRUE(WriteSyntheticModel(o, path).ok());
  LlamaModel m;
  ASSERT_TRUE(LoadLlamaModel(path, &m).ok());
  std::unique_ptr<DeviceBackend> device = MakeBackend(tc.backend, &skip, path);

  const int n_ctx = 64;
  DevicePlan plan_in = MakePlan(o, tc.plan, n_ctx, tc.kv);
  const std::vector<int32_t> prompt = {1, 17, 42, 99, 5, 250};
  const bool gated = tc.cats || tc.teal;
  const std::vector<float> thresholds(o.n_layer, gated ? CatsThreshold(m, prompt) : 0.0f);
  EngineOptions opt;
  opt.n_threads = 2;
  opt.n_ctx = n_ctx;
  opt.sparse = SparseMode::kOracle;
  if (gated) {
    opt.sparse = SparseMode::kCats;
    opt.gate_thresholds = thresholds;
  }
  if (tc.teal) {
    // The one-process engine's copies; a worker process makes its own.
    ThreadPool pool(2);
    int64_t copy_bytes = 0;
    ASSERT_TRUE(AddTransposedCopies(&m, &pool, &copy_bytes).ok());
    TealLevels(m, prompt, &opt);
  }
  plan_in.mode = gated ? opt.sparse : plan_in.mode;
  plan_in.gate_thresholds = opt.gate_thresholds;
  for (int k = 0; k < kProjectionInputs; ++k) plan_in.input_thresholds[k] = opt.input_thresholds[k];
  const Status load = device->Load(m, plan_in);
  const bool gpu = std::string(tc.backend).rfind("cuda", 0) == 0;
  if (gpu && m.config.GemmaFeature()) {  // no kernels for them: refused by name
    EXPECT_FALSE(load.ok());
    EXPECT_NE(load.message().find(m.config.GemmaFeature()), std::string::npos) << load.message();
    return;
  }
  ASSERT_TRUE(load.ok()) << load.message();
  if (gpu && tc.teal && (tc.type == DType::kQ8_0 || tc.type == DType::kQ4_0)) {
    GTEST_SKIP() << "CUDA's teal reads the file's quantized weights, one process its transposed "
                    "copies (rounded twice): float files are compared";
  }
  opt.cache_type_k = opt.cache_type_v = tc.kv;
  std::unique_ptr<Engine> ref, dev;
  ASSERT_TRUE(Engine::Create(&m, opt, &ref).ok());
  if (tc.teal) {  // the inputs' thresholds move the logits: the device must apply them
    EngineOptions cats = opt;
    cats.sparse = SparseMode::kCats;
    for (std::vector<float>& t : cats.input_thresholds) t.clear();
    std::unique_ptr<Engine> plain;
    ASSERT_TRUE(Engine::Create(&m, cats, &plain).ok());
    const std::vector<int32_t> step = {prompt[0], prompt[1]};
    ASSERT_TRUE(ref->Eval(step.data(), 1).ok());
    ASSERT_TRUE(plain->Eval(step.data(), 1).ok());
    ASSERT_TRUE(ref->Eval(step.data() + 1, 1).ok());
    ASSERT_TRUE(plain->Eval(step.data() + 1, 1).ok());
    EXPECT_GT(RelativeError(ref->logits(), plain->logits(), m.config.n_vocab), 1e-2);
    EXPECT_GT(ref->input_kept_share(), 0.3);
    EXPECT_LT(ref->input_kept_share(), 0.7);
    ASSERT_TRUE(Engine::Create(&m, opt, &ref).ok());
  }
  opt.device = device.get();
  const Status created = Engine::Create(&m, opt, &dev);
  ASSERT_TRUE(created.ok()) << created.message();

  // Float weights: exact up to float rounding (the GPU sums in other
  // orders). Quantized weights dot a Q8_0 copy of each input, a rounding a
  // last-bit difference upstream can flip for one element: a step of
  // max|x| / 254 there moves the logits by up to ~1e-3 of their scale.
  const bool quantized = tc.type == DType::kQ8_0 || tc.type == DType::kQ4_0;
  const double tol = quantized ? 1e-2 : gpu ? 1e-3 : 1e-4;
  const int n_vocab = m.config.n_vocab;
  ASSERT_TRUE(ref->Eval(prompt.data(), static_cast<int>(prompt.size()), true).ok());
  std::vector<float> ref_rows(ref->logits(), ref->logits() + prompt.size() * n_vocab);
  ASSERT_TRUE(dev->Eval(prompt.data(), static_cast<int>(prompt.size()), true).ok());
  for (size_t i = 0; i < prompt.size(); ++i) {
    EXPECT_LE(RelativeError(dev->logits() + i * n_vocab, ref_rows.data() + i * n_vocab, n_vocab),
              tol)
        << "prompt token " << i;
  }
  int64_t hot_fired = 0, fired = 0;
  double max_err = 0;
  // A decode step hands the host one cold part per device layer with cold neurons.
  const DevicePlan& plan = device->plan();
  int64_t cold_layers = 0;
  for (int il = 0; il < plan.n_layers; ++il) {
    cold_layers += plan.hot[il].size() < static_cast<size_t>(o.n_ff);
  }
  for (int step = 0; step < 8; ++step) {
    const float* r = ref->logits();
    const float* d = dev->logits();
    const int32_t t_ref = static_cast<int32_t>(std::max_element(r, r + n_vocab) - r);
    const int32_t t_dev = static_cast<int32_t>(std::max_element(d, d + n_vocab) - d);
    max_err = std::max(max_err, RelativeError(d, r, n_vocab));
    ASSERT_LE(RelativeError(d, r, n_vocab), tol) << "decode step " << step;
    EXPECT_EQ(t_dev, t_ref) << "decode step " << step;
    ASSERT_TRUE(ref->Eval(&t_ref, 1).ok());
    ASSERT_TRUE(dev->Eval(&t_ref, 1).ok());
    hot_fired += dev->last_ffn_hot_fired();
    fired += dev->last_ffn_neurons();
    EXPECT_EQ(dev->last_cold_layers(), cold_layers) << "decode step " << step;
    EXPECT_EQ(dev->last_cold_seconds() > 0, cold_layers > 0) << "decode step " << step;
    EXPECT_EQ(dev->last_device_wait_seconds() > 0, plan.n_layers > 0 || plan.output)
        << "decode step " << step;
    EXPECT_EQ(ref->last_device_wait_seconds() + ref->last_cold_seconds(), 0.0);
    EXPECT_EQ(ref->last_cold_layers(), 0);
    // Both count the neurons that fired; float rounding may flip one near 0.
    EXPECT_NEAR(dev->last_ffn_neurons(), ref->last_ffn_neurons(),
                2 + ref->last_ffn_neurons() / 100);
  }
  printf("max relative logit error %.3g (tolerance %.0e); %lld of %lld neurons computed\n", max_err,
         tol, static_cast<long long>(fired), 8LL * o.n_layer * o.n_ff);
  if (gated) {  // the thresholds skip neurons, on the device as on the host
    EXPECT_GT(thresholds[0], 0.0f);
    EXPECT_LT(fired, 8LL * o.n_layer * o.n_ff * 3 / 4);
    EXPECT_GT(fired, 8LL * o.n_layer * o.n_ff / 10);
  }
  if (tc.plan == Plan::kAll) {
    EXPECT_EQ(hot_fired, fired);
  } else if (tc.plan == Plan::kNoHot || tc.plan == Plan::kHeadOnly) {
    EXPECT_EQ(hot_fired, 0);
  } else if (planted && (tc.plan == Plan::kSplit || tc.plan == Plan::kNoHead)) {
    // The hottest 30 % serve most of the firings (power-law planted rates).
    EXPECT_GT(hot_fired, fired / 2);
    EXPECT_LT(hot_fired, fired);
  }
}

std::vector<Case> AllCases() {
  std::vector<Case> cases;
  for (const char* backend : {PI_TEST_DEVICE}) {
    for (DType t : {DType::kF32, DType::kF16, DType::kBF16, DType::kQ8_0, DType::kQ4_0}) {
      cases.push_back({backend, t, "relu", "llama", Plan::kSplit});
      cases.push_back({backend, t, "relu", "llama", Plan::kAll});
    }
    for (Plan p : {Plan::kNoHot, Plan::kPrefix, Plan::kHeadOnly, Plan::kNoHead}) {
      cases.push_back({backend, DType::kQ4_0, "relu", "llama", p});
    }
    cases.push_back({backend, DType::kF16, "drelu", "llama", Plan::kSplit});
    cases.push_back({backend, DType::kQ8_0, "drelu", "llama", Plan::kAll});
    cases.push_back({backend, DType::kF16, "relu", "falcon", Plan::kSplit});
    cases.push_back({backend, DType::kQ4_0, "relu", "falcon", Plan::kAll});
    cases.push_back({backend, DType::kQ8_0, "relu", "falcon", Plan::kPrefix});
    cases.push_back({backend, DType::kF16, "relu", "llama", Plan::kSplit, DType::kF32});
    cases.push_back({backend, DType::kQ4_0, "relu", "falcon", Plan::kAll, DType::kF32});
    // The device rotates by the host's angles: Llama 3.1's factors, linear scaling.
    cases.push_back({backend, DType::kF16, "relu", "llama", Plan::kSplit, DType::kF16, "llama3"});
    cases.push_back({backend, DType::kQ8_0, "relu", "llama", Plan::kPrefix, DType::kF16, "linear"});
    // Post-norms, soft-caps, windows, gemma3's local RoPE, phi3's fused views.
    cases.push_back({backend, DType::kF16, "relu", "gemma2", Plan::kSplit});
    cases.push_back({backend, DType::kF32, "relu", "gemma2", Plan::kHeadOnly});
    cases.push_back({backend, DType::kQ8_0, "relu", "gemma3", Plan::kAll});
    cases.push_back({backend, DType::kQ4_0, "relu", "phi3", Plan::kSplit});
    // --sparse cats: SiLU and GELU FFNs split by neuron, ReLU ones thresholded.
    const DType f16 = DType::kF16;
    cases.push_back({backend, DType::kF16, "silu", "llama", Plan::kSplit, f16, "", true});
    cases.push_back({backend, DType::kQ4_0, "silu", "llama", Plan::kAll, f16, "", true});
    cases.push_back({backend, DType::kQ8_0, "silu", "llama", Plan::kPrefix, f16, "", true});
    cases.push_back({backend, DType::kF32, "relu", "llama", Plan::kSplit, f16, "", true});
    cases.push_back({backend, DType::kQ4_0, "silu", "phi3", Plan::kSplit, f16, "", true});
    cases.push_back({backend, DType::kF16, "gelu", "gemma2", Plan::kSplit, f16, "", true});
    // --sparse teal: q, k, v, o and the gate read the inputs' kept entries.
    cases.push_back({backend, DType::kF32, "silu", "llama", Plan::kSplit, f16, "", false, true});
    cases.push_back({backend, DType::kF16, "silu", "llama", Plan::kPrefix, f16, "", false, true});
    cases.push_back({backend, DType::kQ4_0, "silu", "llama", Plan::kAll, f16, "", false, true});
    cases.push_back({backend, DType::kF16, "silu", "phi3", Plan::kNoHead, f16, "", false, true});
    cases.push_back(
        {backend, DType::kF16, "gelu", "gemma2", Plan::kHeadOnly, f16, "", false, true});
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Cases, DeviceBackendTest, ::testing::ValuesIn(AllCases()),
                         [](const auto& p) {
                           const Case& c = p.param;
                           std::string name = std::string(c.backend) + "_" + c.arch + "_" +
                                              DTypeName(c.type) + "_" + c.act + "_" +
                                              PlanName(c.plan) + "_kv" + DTypeName(c.kv) +
                                              (*c.rope ? std::string("_rope_") + c.rope : "") +
                                              (c.cats ? "_cats" : "") + (c.teal ? "_teal" : "");
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name;
                         });

// The demo model, stored with ffn_down_t (pi-quantize --down-t): the same 32
// greedy tokens as the host engine with everything on the device, and with
// 30 % of each layer's neurons there.
TEST(DeviceBackendDemoTest, GreedyTokensEqualHost) {
  for (const char* kind : {PI_TEST_DEVICE}) {
    std::string skip;
    std::unique_ptr<DeviceBackend> probe = MakeBackend(kind, &skip);
    if (!probe) GTEST_SKIP() << skip;
    const std::string demo_t = TempPath("demo-down-t.gguf");
    const RemoveAtExit remove{demo_t};
    const std::string cmd = std::string(PI_BINARY_DIR) + "/bin/pi-quantize " + PI_SOURCE_DIR +
                            "/models/demo-kjv-f16.gguf " + demo_t + " f16 --down-t 2>/dev/null";
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
    LlamaModel m;
    ASSERT_TRUE(LoadLlamaModel(demo_t, &m).ok());
    const LlamaConfig& c = m.config;
    for (double share : {1.0, 0.3}) {
      std::unique_ptr<DeviceBackend> device = MakeBackend(kind, &skip, demo_t);
      DevicePlan dp;
      dp.n_layers = c.n_layer;
      dp.output = true;
      dp.n_ctx = 64;
      dp.hot.assign(c.n_layer, {});
      for (int il = 0; il < c.n_layer; ++il) {
        for (int i = 0; i < c.n_ff; ++i) {
          if (i % 10 < share * 10) dp.hot[il].push_back(i);
        }
      }
      ASSERT_TRUE(device->Load(m, dp).ok());
      std::vector<int32_t> tokens[2];
      for (int k = 0; k < 2; ++k) {
        EngineOptions opt;
        opt.n_threads = 2;
        opt.n_ctx = 64;
        if (k == 1) opt.device = device.get();
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
        }
      }
      EXPECT_EQ(tokens[1], tokens[0]) << kind << " share " << share;
    }
  }
}

// Several sequences on one device (-np): a KV cache each there. Three
// sequences' tokens interleaved through one engine and device (each step a
// token of each, EvalBatch) give every sequence the logits it gets alone on
// a device of one sequence: the same backend, the same kernels, its own
// cache rows read and written, no other's.
// A small Q8_0 ReLU llama (GQA, down_t, 80 % planted sparsity) of n_vocab
// tokens and n_layer layers: the model of the sequence, prompt cache and
// chain tests.
SyntheticModelOptions SmallQ8Relu(int n_vocab, int n_layer) {
  SyntheticModelOptions o;
  o.n_vocab = n_vocab;
  o.n_embd = 256;
  o.n_ff = 512;
  o.n_layer = n_layer;
  o.n_head = 4;
  o.n_head_kv = 2;
  o.type = DType::kQ8_0;
  o.activation = "relu";
  o.down_t = true;
  o.planted_sparsity = 0.8;
  return o;
}

TEST(DeviceBackendSequencesTest, InterleavedSequencesEqualEachAlone) {
  std::string skip;
  if (!MakeBackend(PI_TEST_DEVICE, &skip)) GTEST_SKIP() << skip;
  const SyntheticModelOptions o = SmallQ8Relu(256, 2);
  const std::string path = TempPath("seqs.gguf");
  const RemoveAtExit remove{path};
  ASSERT_TRUE(WriteSyntheticModel(o, path).ok());
  LlamaModel m;
  ASSERT_TRUE(LoadLlamaModel(path, &m).ok());
  constexpr int kSeqs = 3, kSteps = 12, kCtx = 32;
  auto token_of = [](int seq, int step) { return (seq * 61 + step * 17 + 5) % 256; };
  std::vector<std::vector<float>> alone[kSeqs];
  for (int seq = 0; seq < kSeqs; ++seq) {
    std::unique_ptr<DeviceBackend> device = MakeBackend(PI_TEST_DEVICE, &skip, path);
    ASSERT_TRUE(device->Load(m, MakePlan(o, Plan::kPrefix, kCtx, DType::kF16)).ok());
    EngineOptions opt;
    opt.n_threads = 2;
    opt.n_ctx = kCtx;
    opt.device = device.get();
    std::unique_ptr<Engine> e;
    ASSERT_TRUE(Engine::Create(&m, opt, &e).ok());
    for (int step = 0; step < kSteps; ++step) {
      const int32_t t = token_of(seq, step);
      ASSERT_TRUE(e->Eval(&t, 1).ok());
      alone[seq].emplace_back(e->logits(), e->logits() + e->n_vocab());
    }
  }
  std::unique_ptr<DeviceBackend> device = MakeBackend(PI_TEST_DEVICE, &skip, path);
  DevicePlan plan = MakePlan(o, Plan::kPrefix, kCtx, DType::kF16);
  plan.n_seq = kSeqs;
  ASSERT_TRUE(device->Load(m, plan).ok());
  EngineOptions opt;
  opt.n_threads = 2;
  opt.n_ctx = kCtx;
  opt.n_seq = kSeqs;
  opt.device = device.get();
  std::unique_ptr<Engine> e;
  ASSERT_TRUE(Engine::Create(&m, opt, &e).ok());
  for (int step = 0; step < kSteps; ++step) {
    // Sequence 2 starts two steps late: the sequences sit at different positions.
    std::vector<Engine::BatchRow> rows;
    for (int seq = 0; seq < kSeqs; ++seq) {
      if (seq == 2 && step < 2) continue;
      rows.push_back({seq, token_of(seq, seq == 2 ? step - 2 : step), true});
    }
    ASSERT_TRUE(e->EvalBatch(rows.data(), static_cast<int>(rows.size())).ok());
    for (size_t k = 0; k < rows.size(); ++k) {
      const int seq = rows[k].seq;
      const std::vector<float>& want = alone[seq][seq == 2 ? step - 2 : step];
      ASSERT_EQ(0, std::memcmp(e->batch_logits(static_cast<int>(k)), want.data(),
                               sizeof(float) * want.size()))
          << PI_TEST_DEVICE << " sequence " << seq << " step " << step;
    }
  }
  // A device of fewer sequences than the engine's is refused.
  opt.n_seq = kSeqs + 1;
  EXPECT_THAT(Engine::Create(&m, opt, &e).message(),
              ::testing::HasSubstr("loaded for 3 sequences, the engine has 4 (-np)"));
}

// Prompt caching (prompt_cache.h): a second prompt evaluated after the
// prefix the first left in the KV cache, with decode steps in between (their
// positions overwritten), gives the logits a fresh engine gives it, bit for
// bit: with and without the device, oracle and dense, chunks of 4 (the kept
// prefix ends on a multiple of them).
TEST(DeviceBackendPromptCacheTest, KeptPrefixEqualsTheWholePrompt) {
  std::string skip;
  if (!MakeBackend(PI_TEST_DEVICE, &skip)) GTEST_SKIP() << skip;
  const SyntheticModelOptions o = SmallQ8Relu(256, 2);
  const std::string path = TempPath("cache.gguf");
  const RemoveAtExit remove{path};
  ASSERT_TRUE(WriteSyntheticModel(o, path).ok());
  LlamaModel m;
  ASSERT_TRUE(LoadLlamaModel(path, &m).ok());
  constexpr int kCtx = 64;
  std::vector<int32_t> first, second;
  for (int i = 0; i < 19; ++i) first.push_back((i * 37 + 11) % 256);
  second = first;
  second.resize(14);  // shares 14 tokens: 12 are kept (a multiple of 4)
  for (int i = 0; i < 17; ++i) second.push_back((i * 53 + 7) % 256);
  EXPECT_EQ(ReusablePrefix(first, second, 4), 12u);
  EXPECT_EQ(ReusablePrefix(first, first, 4), 16u);   // never the last token
  EXPECT_EQ(ReusablePrefix(first, second, 64), 0u);  // no whole chunk cached
  EXPECT_EQ(ReusablePrefix({}, second, 4), 0u);
  for (bool with_device : {false, true}) {
    for (SparseMode mode : {SparseMode::kOracle, SparseMode::kOff}) {
      auto make = [&](std::unique_ptr<DeviceBackend>* device, std::unique_ptr<Engine>* e) {
        EngineOptions opt;
        opt.n_threads = 2;
        opt.n_ctx = kCtx;
        opt.n_batch = 4;
        opt.sparse = mode;
        if (with_device) {
          *device = MakeBackend(PI_TEST_DEVICE, &skip, path);
          ASSERT_TRUE((*device)->Load(m, MakePlan(o, Plan::kPrefix, kCtx, DType::kF16)).ok());
          opt.device = device->get();
        }
        ASSERT_TRUE(Engine::Create(&m, opt, e).ok());
      };
      std::unique_ptr<DeviceBackend> d1, d2;
      std::unique_ptr<Engine> cached, fresh;
      ASSERT_NO_FATAL_FAILURE(make(&d1, &cached));
      ASSERT_NO_FATAL_FAILURE(make(&d2, &fresh));
      ASSERT_TRUE(EvalPromptFrom(cached.get(), first, 0).ok());
      for (int32_t t : {3, 9, 27}) ASSERT_TRUE(cached->Eval(&t, 1).ok());  // decode steps
      const size_t keep = ReusablePrefix(first, second, cached->n_batch());
      ASSERT_EQ(keep, 12u);
      ASSERT_TRUE(EvalPromptFrom(cached.get(), second, keep).ok());
      ASSERT_TRUE(EvalPromptFrom(fresh.get(), second, 0).ok());
      EXPECT_EQ(cached->n_past(), fresh->n_past());
      EXPECT_EQ(0, std::memcmp(cached->logits(), fresh->logits(), sizeof(float) * o.n_vocab))
          << PI_TEST_DEVICE << (with_device ? " with the device" : " host only") << " mode "
          << static_cast<int>(mode);
      // And a decode step after it.
      const int32_t next = 77;
      ASSERT_TRUE(cached->Eval(&next, 1).ok());
      ASSERT_TRUE(fresh->Eval(&next, 1).ok());
      EXPECT_EQ(0, std::memcmp(cached->logits(), fresh->logits(), sizeof(float) * o.n_vocab));
    }
  }
}

// Sequences kept and shared with a device (Engine::SaveSeq, LoadSeq,
// CopySeq: the prompt store and n choices on the device path): a prompt
// saved, its sequence overwritten, the first 12 positions loaded into
// another sequence and the rest evaluated there, then copied to a third:
// every logit equals a fresh engine's, bit for bit, on plans with layers on
// both sides, all on the device, and the head alone. The device's own
// checks: a key kept twice, a dropped or unknown key (kNotFound), a load
// longer than what was kept.
TEST(DeviceBackendSavedSeqTest, SavedAndCopiedSequencesGoOnAsFreshEvaluations) {
  std::string skip;
  if (!MakeBackend(PI_TEST_DEVICE, &skip)) GTEST_SKIP() << skip;
  const SyntheticModelOptions o = SmallQ8Relu(256, 2);
  const std::string path = TempPath("saved.gguf");
  const RemoveAtExit remove{path};
  ASSERT_TRUE(WriteSyntheticModel(o, path).ok());
  LlamaModel m;
  ASSERT_TRUE(LoadLlamaModel(path, &m).ok());
  constexpr int kCtx = 32;
  std::vector<int32_t> p, q;
  for (int i = 0; i < 16; ++i) p.push_back((i * 37 + 11) % 256);
  for (int i = 0; i < 9; ++i) q.push_back((i * 53 + 7) % 256);
  const int32_t next = 77;
  for (Plan plan : {Plan::kPrefix, Plan::kAll, Plan::kHeadOnly}) {
    SCOPED_TRACE(std::string(PI_TEST_DEVICE) + " plan " + PlanName(plan));
    auto make = [&](int n_seq, std::unique_ptr<DeviceBackend>* device, std::unique_ptr<Engine>* e) {
      *device = MakeBackend(PI_TEST_DEVICE, &skip, path);
      DevicePlan dp = MakePlan(o, plan, kCtx, DType::kF16);
      dp.n_seq = n_seq;
      ASSERT_TRUE((*device)->Load(m, dp).ok());
      EngineOptions opt;
      opt.n_threads = 2;
      opt.n_ctx = kCtx;
      opt.n_batch = 4;
      opt.n_seq = n_seq;
      opt.sparse = SparseMode::kOracle;
      opt.device = device->get();
      ASSERT_TRUE(Engine::Create(&m, opt, e).ok());
    };
    std::unique_ptr<DeviceBackend> fresh_device, device;
    std::unique_ptr<Engine> fresh, e;
    ASSERT_NO_FATAL_FAILURE(make(1, &fresh_device, &fresh));
    ASSERT_NO_FATAL_FAILURE(make(3, &device, &e));
    ASSERT_TRUE(fresh->Eval(p.data(), static_cast<int>(p.size())).ok());
    const std::vector<float> after_prompt(fresh->logits(), fresh->logits() + o.n_vocab);
    ASSERT_TRUE(fresh->Eval(&next, 1).ok());
    const std::vector<float> after_next(fresh->logits(), fresh->logits() + o.n_vocab);
    {
      SavedSeq saved;
      ASSERT_TRUE(e->Eval(p.data(), static_cast<int>(p.size())).ok());
      ASSERT_TRUE(e->SaveSeq(0, 16, &saved).ok());
      EXPECT_EQ(saved.device_bytes,
                plan == Plan::kHeadOnly ? 0 : SavedSeqBytes(m.config, device->plan(), 16));
      e->Reset();  // sequence 0 overwritten by another prompt
      ASSERT_TRUE(e->Eval(q.data(), static_cast<int>(q.size())).ok());
      ASSERT_TRUE(e->LoadSeq(1, saved, 12).ok());
      EXPECT_EQ(e->seq_n_past(1), 12);
      std::vector<Engine::BatchRow> rows;
      for (int i = 12; i < 16; ++i) rows.push_back({1, p[i], i == 15});
      ASSERT_TRUE(e->EvalBatch(rows.data(), 4).ok());
      EXPECT_EQ(0, std::memcmp(e->batch_logits(0), after_prompt.data(), sizeof(float) * o.n_vocab));
      ASSERT_TRUE(e->CopySeq(1, 2, 16).ok());
      const Engine::BatchRow both[2] = {{1, next, true}, {2, next, true}};
      ASSERT_TRUE(e->EvalBatch(both, 2).ok());
      EXPECT_EQ(0, std::memcmp(e->batch_logits(0), after_next.data(), sizeof(float) * o.n_vocab));
      EXPECT_EQ(0, std::memcmp(e->batch_logits(1), after_next.data(), sizeof(float) * o.n_vocab));
      EXPECT_THAT(e->LoadSeq(1, saved, 17).message(), HasSubstr("loading 17 of 16"));
      // Its device part out as bytes and back in under a new key (a slot
      // file's), written in uneven ranges: the same sequence again.
      std::vector<uint8_t> bytes;
      ASSERT_TRUE(e->ReadSavedDevicePart(saved, &bytes).ok());
      EXPECT_EQ(static_cast<int64_t>(bytes.size()), saved.device_bytes);
      SavedSeq back;
      back.tokens = saved.tokens;
      back.dense = saved.dense;
      back.host_kv = saved.host_kv;
      ASSERT_TRUE(e->WriteSavedDevicePart(bytes, &back).ok());
      EXPECT_NE(back.key, saved.key);
      std::vector<uint8_t> again;
      ASSERT_TRUE(e->ReadSavedDevicePart(back, &again).ok());
      EXPECT_EQ(again, bytes);
      ASSERT_TRUE(e->LoadSeq(2, back, 16).ok());
      const Engine::BatchRow from_bytes = {2, next, true};
      ASSERT_TRUE(e->EvalBatch(&from_bytes, 1).ok());
      EXPECT_EQ(0, std::memcmp(e->batch_logits(0), after_next.data(), sizeof(float) * o.n_vocab));
      bytes.push_back(0);
      SavedSeq too_long;
      too_long.tokens = saved.tokens;
      too_long.dense = saved.dense;
      EXPECT_THAT(e->WriteSavedDevicePart(bytes, &too_long).message(),
                  HasSubstr("for the device part of 16 positions"));
      SavedSeq host_only;  // saved without a device: not this engine's kind
      host_only.tokens.assign(4, 1);
      host_only.dense.assign(4, 1);
      host_only.host_kv.resize(saved.host_kv.size() / 4);
      EXPECT_THAT(e->LoadSeq(1, host_only, 4).message(), HasSubstr("saved without one"));
    }                                       // (saved goes: the device drops what it kept)
    if (plan == Plan::kHeadOnly) continue;  // the head keeps no cache
    ASSERT_TRUE(device->SaveSeq(2, 8, 1000).ok());
    EXPECT_THAT(device->SaveSeq(2, 8, 1000).message(), HasSubstr("kept under key 1000"));
    EXPECT_THAT(device->LoadSeq(1000, 0, 9).message(), HasSubstr("9 positions of the 8"));
    ASSERT_TRUE(device->LoadSeq(1000, 0, 8).ok());
    ASSERT_TRUE(device->DropSeq(1000).ok());
    EXPECT_EQ(device->LoadSeq(1000, 0, 8).code(), Status::Code::kNotFound);
    EXPECT_EQ(device->LoadSeq(1, 0, 8).code(), Status::Code::kNotFound);  // dropped with `saved`
    // Kept bytes a range at a time: read back as written, in order only,
    // loaded once whole, each range inside the entry.
    const int64_t total = SavedSeqBytes(m.config, device->plan(), 8);
    std::vector<uint8_t> kept(static_cast<size_t>(total)), half(static_cast<size_t>(total));
    ASSERT_TRUE(device->SaveSeq(2, 8, 1500).ok());
    ASSERT_TRUE(device->ReadKept(1500, 8, 0, total, kept.data()).ok());
    EXPECT_THAT(device->ReadKept(1500, 7, 0, 1, kept.data()).message(),
                HasSubstr("of 7 positions"));
    EXPECT_THAT(device->ReadKept(1500, 8, total - 1, 2, kept.data()).message(),
                HasSubstr("reading bytes"));
    ASSERT_TRUE(device->WriteKept(2000, 8, 0, kept.data(), total / 3).ok());
    EXPECT_THAT(device->WriteKept(2000, 8, total / 2, kept.data(), 1).message(),
                HasSubstr("writing bytes"));
    EXPECT_THAT(device->LoadSeq(2000, 0, 8).message(), HasSubstr("of its"));
    EXPECT_THAT(device->WriteKept(2000, 8, 0, kept.data(), 1).message(), HasSubstr("key 2000"));
    ASSERT_TRUE(
        device->WriteKept(2000, 8, total / 3, kept.data() + total / 3, total - total / 3).ok());
    ASSERT_TRUE(device->ReadKept(2000, 8, total / 2, total - total / 2, half.data()).ok());
    EXPECT_EQ(0, std::memcmp(half.data(), kept.data() + total / 2, total - total / 2));
    ASSERT_TRUE(device->LoadSeq(2000, 0, 8).ok());
    std::vector<uint8_t> longer = kept;  // one byte more than the entry holds
    longer.push_back(0);
    EXPECT_THAT(device->WriteKept(2001, 8, 0, longer.data(), total + 1).message(),
                HasSubstr("writing bytes"));
    EXPECT_EQ(device->LoadSeq(2001, 0, 8).code(), Status::Code::kNotFound);  // not left half made
    EXPECT_EQ(device->ReadKept(2002, 8, 0, 1, kept.data()).code(), Status::Code::kNotFound);
    ASSERT_TRUE(device->DropSeq(2000).ok());
    ASSERT_TRUE(device->WriteKept(2003, 0, 0, nullptr, 0).ok());  // no positions
    ASSERT_TRUE(device->LoadSeq(2003, 1, 0).ok());
    ASSERT_TRUE(device->SaveSeq(2, 0, 1001).ok());  // none of the positions: nothing to copy
    ASSERT_TRUE(device->LoadSeq(1001, 0, 0).ok());
    ASSERT_TRUE(device->CopySeq(0, 1, 0).ok());
    EXPECT_THAT(device->CopySeq(0, 3, 4).message(), HasSubstr("sequence 3 is out of range"));
    EXPECT_THAT(device->SaveSeq(0, kCtx + 1, 7).message(), HasSubstr("33 positions"));
  }
}

// A slot file on the device path: the host's layers and the device's kept
// bytes saved, then restored into a fresh engine and device of the same
// placement, which goes on exactly as a fresh evaluation of the prompt; a
// server with other device layers, other hot neurons or no device refuses
// the file, saying which.
TEST(DeviceBackendSlotFileTest, SlotRestoredIntoAFreshDeviceGoesOnAsTheFirst) {
  std::string skip;
  if (!MakeBackend(PI_TEST_DEVICE, &skip)) GTEST_SKIP() << skip;
  const SyntheticModelOptions o = SmallQ8Relu(256, 2);
  const std::string path = TempPath("slotdev.gguf"), slot = TempPath("slotdev.slot");
  const RemoveAtExit remove{path}, remove_slot{slot};
  ASSERT_TRUE(WriteSyntheticModel(o, path).ok());
  LlamaModel m;
  ASSERT_TRUE(LoadLlamaModel(path, &m).ok());
  constexpr int kCtx = 32;
  std::vector<int32_t> p;
  for (int i = 0; i < 13; ++i) p.push_back((i * 41 + 5) % 256);
  const int32_t next = 99;
  std::vector<std::unique_ptr<DeviceBackend>> devices;
  auto make = [&](Plan plan, bool with_device, std::unique_ptr<Engine>* e) {
    EngineOptions opt;
    opt.n_threads = 2;
    opt.n_ctx = kCtx;
    opt.n_batch = 4;
    opt.n_seq = 2;
    opt.sparse = SparseMode::kOracle;
    if (with_device) {
      devices.push_back(MakeBackend(PI_TEST_DEVICE, &skip, path));
      DevicePlan dp = MakePlan(o, plan, kCtx, DType::kF16);
      dp.n_seq = 2;
      ASSERT_TRUE(devices.back()->Load(m, dp).ok());
      opt.device = devices.back().get();
    }
    ASSERT_TRUE(Engine::Create(&m, opt, e).ok());
  };
  for (Plan plan : {Plan::kSplit, Plan::kPrefix}) {
    SCOPED_TRACE(std::string(PI_TEST_DEVICE) + " plan " + PlanName(plan));
    std::unique_ptr<Engine> first, fresh;
    ASSERT_NO_FATAL_FAILURE(make(plan, true, &first));
    ASSERT_TRUE(first->Eval(p.data(), static_cast<int>(p.size())).ok());
    const std::vector<float> after_prompt(first->logits(), first->logits() + o.n_vocab);
    int64_t written = 0;
    const Status saved = SaveSlot(first.get(), 0, p, after_prompt.data(), slot, &written);
    ASSERT_TRUE(saved.ok()) << saved.message();
    ASSERT_NE(first->device_plan(), nullptr);
    EXPECT_GT(written, SavedSeqBytes(m.config, *first->device_plan(), 13));  // the device's part
    ASSERT_TRUE(first->Eval(&next, 1).ok());
    const std::vector<float> after_next(first->logits(), first->logits() + o.n_vocab);

    ASSERT_NO_FATAL_FAILURE(make(plan, true, &fresh));
    std::vector<int32_t> prompt;
    std::vector<float> logits;
    int64_t read = 0;
    const Status restored = RestoreSlot(fresh.get(), 1, slot, &prompt, &logits, &read);
    ASSERT_TRUE(restored.ok()) << restored.message();
    EXPECT_EQ(prompt, p);
    EXPECT_EQ(logits, after_prompt);
    EXPECT_EQ(read, written);
    EXPECT_EQ(fresh->seq_n_past(1), 13);
    const Engine::BatchRow row = {1, next, true};
    ASSERT_TRUE(fresh->EvalBatch(&row, 1).ok());
    EXPECT_EQ(0, std::memcmp(fresh->batch_logits(0), after_next.data(), sizeof(float) * o.n_vocab));
  }
  // The file now holds plan kPrefix's: layer 0 on the device, 30 % of its neurons.
  for (const auto& [plan, with_device, words] :
       {std::tuple<Plan, bool, std::string>{Plan::kSplit, true, "; this one has GPU layers "},
        {Plan::kPrefix, false, "; this one has no layers on a GPU"}}) {
    std::unique_ptr<Engine> e;
    ASSERT_NO_FATAL_FAILURE(make(plan, with_device, &e));
    std::vector<int32_t> prompt;
    std::vector<float> logits;
    int64_t read = 0;
    EXPECT_THAT(RestoreSlot(e.get(), 0, slot, &prompt, &logits, &read).message(), HasSubstr(words));
    EXPECT_EQ(e->seq_n_past(0), 0);
  }
  // The same layers with other hot neurons: kAll holds every neuron of both
  // layers, kSplit 30 % of each.
  std::unique_ptr<Engine> split, all;
  ASSERT_NO_FATAL_FAILURE(make(Plan::kSplit, true, &split));
  ASSERT_TRUE(split->Eval(p.data(), static_cast<int>(p.size())).ok());
  int64_t written = 0;
  ASSERT_TRUE(SaveSlot(split.get(), 0, p, nullptr, slot, &written).ok());
  ASSERT_NO_FATAL_FAILURE(make(Plan::kAll, true, &all));
  std::vector<int32_t> prompt;
  std::vector<float> logits;
  int64_t read = 0;
  EXPECT_THAT(RestoreSlot(all.get(), 0, slot, &prompt, &logits, &read).message(),
              HasSubstr("other hot neurons on the GPU"));
}

// Predictor mode: the device evaluates each layer's predictor and hands the
// host the cold neurons it predicts. Against the same plan on the host
// backend (the reference for these semantics: hot neurons exact, cold ones
// as predicted), on the demo model with a predictor trained here, at three
// thresholds: everything predicted (also equal to the plain engine's
// oracle), nothing predicted, and a calibrated one (where a score within
// rounding of the threshold may go either way, so only the greedy tokens
// are compared, most of them). The predictor's matrices in `predictor_type`
// (pi-train-predictor --predictor-type: f16, or q8_0, whose input the device
// quantizes first).
void CheckPredictorAgainstHostBackend(const std::string& predictor_type) {
  std::string skip;
  if (!MakeBackend(PI_TEST_DEVICE, &skip)) GTEST_SKIP() << skip;
  const std::string demo_t = TempPath("demo-down-t.gguf"), pred = TempPath("demo-pred.gguf");
  const RemoveAtExit remove{pred};
  const std::string bin = std::string(PI_BINARY_DIR) + "/bin/";
  std::string cmd = bin + "pi-quantize " + PI_SOURCE_DIR + "/models/demo-kjv-f16.gguf " + demo_t +
                    " f16 --down-t 2>/dev/null";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  cmd = bin + "pi-train-predictor -m " + demo_t + " -f " + PI_SOURCE_DIR +
        "/models/kjv-valid.txt -o " + pred +
        " --max-tokens 1500 --epochs 3 --rank 64 -t 2 --predictor-type " + predictor_type +
        " >/dev/null 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  std::remove(demo_t.c_str());
  LlamaModel m;
  ASSERT_TRUE(LoadLlamaModel(pred, &m).ok());
  const LlamaConfig& c = m.config;
  for (float threshold : {-1e30f, 1e30f, 0.0f}) {
    DevicePlan dp;
    dp.n_layers = c.n_layer;
    dp.output = true;
    dp.n_ctx = 64;
    dp.mode = SparseMode::kPredictor;
    dp.threshold = threshold;
    dp.hot.assign(c.n_layer, {});
    for (int il = 0; il < c.n_layer; ++il) {
      for (int i = 0; i < c.n_ff; ++i) {
        if (i % 10 < 3) dp.hot[il].push_back(i);
      }
    }
    std::unique_ptr<DeviceBackend> devices[2] = {std::make_unique<HostDeviceBackend>(2),
                                                 MakeBackend(PI_TEST_DEVICE, &skip, pred)};
    std::vector<int32_t> tokens[3];
    std::vector<float> last_logits[3];
    for (int k = 0; k < 3; ++k) {  // host backend, the backend tested, no backend (oracle)
      if (k == 2 && threshold != -1e30f) continue;
      EngineOptions opt;
      opt.n_threads = 2;
      opt.n_ctx = 64;
      opt.sparse = k == 2 ? SparseMode::kOracle : SparseMode::kPredictor;
      opt.sparse_threshold = threshold;
      if (k < 2) {
        const Status s = devices[k]->Load(m, dp);
        ASSERT_TRUE(s.ok()) << s.message();
        opt.device = devices[k].get();
      }
      std::unique_ptr<Engine> e;
      const Status s = Engine::Create(&m, opt, &e);
      ASSERT_TRUE(s.ok()) << s.message();
      const int32_t prompt[4] = {1, 100, 200, 300};
      ASSERT_TRUE(e->Eval(prompt, 4).ok());
      for (int step = 0; step < 24; ++step) {
        const float* logits = e->logits();
        const int32_t t =
            static_cast<int32_t>(std::max_element(logits, logits + e->n_vocab()) - logits);
        tokens[k].push_back(t);
        ASSERT_TRUE(e->Eval(&t, 1).ok());
      }
      last_logits[k].assign(e->logits(), e->logits() + e->n_vocab());
    }
    int agree = 0;
    for (size_t i = 0; i < tokens[0].size(); ++i) agree += tokens[0][i] == tokens[1][i];
    printf("threshold %g: %d of %zu greedy tokens agree, last logits' relative error %.3g\n",
           threshold, agree, tokens[0].size(),
           RelativeError(last_logits[1].data(), last_logits[0].data(), c.n_vocab));
    if (threshold == 0.0f) {
      EXPECT_GE(agree, 20) << "threshold 0";
      continue;
    }
    EXPECT_EQ(tokens[1], tokens[0]) << "threshold " << threshold;
    EXPECT_LE(RelativeError(last_logits[1].data(), last_logits[0].data(), c.n_vocab), 1e-3);
    if (threshold == -1e30f) {
      EXPECT_EQ(tokens[2], tokens[0]) << "all predicted = oracle";
    }
  }
}

TEST(DeviceBackendPredictorTest, PredictedColdNeuronsMatchHostBackend) {
  CheckPredictorAgainstHostBackend("f16");
}

// q8_0 predictors take half of f16's memory: on a GPU, half the VRAM they
// would take from hot neurons.
TEST(DeviceBackendPredictorTest, Q8_0PredictorMatchesHostBackend) {
  CheckPredictorAgainstHostBackend("q8_0");
}

// Several devices chained by layer range (coordinator/route/device_chain.h, what
// --gpus runs): layers [0, a) on one, [a, b) on the next, maybe the rest on
// the host, the head on any of them or a member of its own. Each layout
// gives the logits of one device holding the same layers and hot neurons
// (bit for bit on the host backend: the same arithmetic, only h crossing
// between members) and the plain engine's greedy tokens.
TEST(DeviceChainTest, TwoDevicesEqualOne) {
  std::string skip;
  if (!MakeBackend(PI_TEST_DEVICE, &skip)) GTEST_SKIP() << skip;
  const SyntheticModelOptions o = SmallQ8Relu(300, 4);
  const std::string path = TempPath("chain.gguf");
  const RemoveAtExit remove{path};
  ASSERT_TRUE(WriteSyntheticModel(o, path).ok());
  LlamaModel m;
  ASSERT_TRUE(LoadLlamaModel(path, &m).ok());
  const int n_ctx = 48;
  // A member's plan: layers [first, end) with their 30 % hottest neurons.
  auto range_plan = [&](int first, int end, bool head) {
    DevicePlan dp = MakePlan(o, Plan::kSplit, n_ctx, DType::kF16);
    dp.first_layer = first;
    dp.n_layers = end;
    dp.output = head;
    for (int il = 0; il < o.n_layer; ++il) {
      if (il < first || il >= end) dp.hot[il].clear();
    }
    return dp;
  };
  // In this process a range runs on LayerRangeDevice; a worker process does
  // the same on its side.
  const bool in_process =
      std::string(PI_TEST_DEVICE) == "host" || std::string(PI_TEST_DEVICE) == "cuda";
  auto member = [&]() -> std::unique_ptr<DeviceBackend> {
    std::unique_ptr<DeviceBackend> b = MakeBackend(PI_TEST_DEVICE, &skip, path);
    if (in_process) return std::make_unique<LayerRangeDevice>(std::move(b));
    return b;
  };
  struct Layout {
    const char* name;
    std::vector<DevicePlan> members;
  };
  const Layout layouts[] = {
      {"0-1 | 2-3 + head", {range_plan(0, 2, false), range_plan(2, 4, true)}},
      {"0 + head | 1-2 | host 3", {range_plan(0, 1, true), range_plan(1, 3, false)}},
      {"0-1 | 2-3 | head alone",
       {range_plan(0, 2, false), range_plan(2, 4, false), range_plan(4, 4, true)}},
  };
  const int32_t prompt[5] = {1, 17, 42, 99, 5};
  auto greedy = [&](DeviceBackend* device, std::vector<int32_t>* tokens,
                    std::vector<std::vector<float>>* logits) {
    EngineOptions opt;
    opt.n_threads = 2;
    opt.n_ctx = n_ctx;
    opt.sparse = SparseMode::kOracle;
    opt.device = device;
    std::unique_ptr<Engine> e;
    const Status s = Engine::Create(&m, opt, &e);
    ASSERT_TRUE(s.ok()) << s.message();
    ASSERT_TRUE(e->Eval(prompt, 5).ok());
    for (int step = 0; step < 12; ++step) {
      const float* l = e->logits();
      logits->emplace_back(l, l + e->n_vocab());
      const int32_t t = static_cast<int32_t>(std::max_element(l, l + e->n_vocab()) - l);
      tokens->push_back(t);
      ASSERT_TRUE(e->Eval(&t, 1).ok());
    }
  };
  std::vector<int32_t> plain_tokens;
  std::vector<std::vector<float>> plain_logits;
  greedy(nullptr, &plain_tokens, &plain_logits);
  for (const Layout& layout : layouts) {
    SCOPED_TRACE(layout.name);
    // The one device holding what the members hold together.
    DevicePlan whole = range_plan(0, 0, false);
    std::vector<std::unique_ptr<DeviceBackend>> members;
    std::vector<DeviceBackend*> raw;
    for (const DevicePlan& p : layout.members) {
      whole.n_layers = std::max(whole.n_layers, p.n_layers);
      whole.output = whole.output || p.output;
      for (int il = p.first_layer; il < p.n_layers; ++il) whole.hot[il] = p.hot[il];
      members.push_back(member());
      const Status s = members.back()->Load(m, p);
      ASSERT_TRUE(s.ok()) << s.message();
      raw.push_back(members.back().get());
    }
    DeviceChain chain;
    const Status s = chain.Init(m, raw);
    ASSERT_TRUE(s.ok()) << s.message();
    EXPECT_EQ(chain.plan().n_layers, whole.n_layers);
    EXPECT_EQ(chain.plan().hot, whole.hot);
    std::unique_ptr<DeviceBackend> one = MakeBackend(PI_TEST_DEVICE, &skip, path);
    ASSERT_TRUE(one->Load(m, whole).ok());
    std::vector<int32_t> tokens[2];
    std::vector<std::vector<float>> logits[2];
    greedy(&chain, &tokens[0], &logits[0]);
    greedy(one.get(), &tokens[1], &logits[1]);
    EXPECT_EQ(tokens[0], tokens[1]);
    EXPECT_EQ(tokens[0], plain_tokens);
    const bool exact = std::string(PI_TEST_DEVICE).find("cuda") == std::string::npos;
    for (size_t i = 0; i < logits[0].size(); ++i) {
      if (exact) {
        EXPECT_EQ(logits[0][i], logits[1][i]) << "step " << i;
      } else {
        EXPECT_LE(RelativeError(logits[0][i].data(), logits[1][i].data(), o.n_vocab), 1e-5);
      }
      EXPECT_LE(RelativeError(logits[0][i].data(), plain_logits[i].data(), o.n_vocab), 1e-2);
    }
    // Kept bytes: the members' one after the other, written back in ranges
    // that cross from one member to the next.
    ASSERT_TRUE(chain.SaveSeq(0, 5, 77).ok());
    std::string want_layout;
    std::vector<uint8_t> joined;
    for (const auto& d : members) {
      const int64_t part = SavedSeqBytes(m.config, d->plan(), 5);
      if (part == 0) continue;                             // the head alone
      const std::string format = exact ? "host" : "cuda";  // the model's layer numbers
      EXPECT_EQ(d->KeptLayout(), format + "[" + std::to_string(d->plan().first_layer) + "," +
                                     std::to_string(d->plan().n_layers) + ")");
      want_layout += (want_layout.empty() ? "" : "+") + d->KeptLayout();
      std::vector<uint8_t> bytes(static_cast<size_t>(part));
      ASSERT_TRUE(d->ReadKept(77, 5, 0, part, bytes.data()).ok());
      joined.insert(joined.end(), bytes.begin(), bytes.end());
    }
    EXPECT_EQ(chain.KeptLayout(), want_layout);
    const int64_t total = static_cast<int64_t>(joined.size());
    EXPECT_EQ(total, SavedSeqBytes(m.config, chain.plan(), 5));
    std::vector<uint8_t> out(joined.size());
    ASSERT_TRUE(chain.ReadKept(77, 5, 0, total, out.data()).ok());
    EXPECT_EQ(out, joined);
    const int64_t cut = total / 2 + 3;
    ASSERT_TRUE(chain.WriteKept(78, 5, 0, joined.data(), cut).ok());
    ASSERT_TRUE(chain.WriteKept(78, 5, cut, joined.data() + cut, total - cut).ok());
    std::fill(out.begin(), out.end(), 0);
    ASSERT_TRUE(chain.ReadKept(78, 5, 0, total, out.data()).ok());
    EXPECT_EQ(out, joined);
    ASSERT_TRUE(chain.LoadSeq(78, 0, 5).ok());
    EXPECT_THAT(chain.ReadKept(78, 5, total, 1, out.data()).message(), HasSubstr("device chain"));
  }
  // Members that leave a gap, or overlap, are refused.
  std::unique_ptr<DeviceBackend> a = member(), b = member();
  ASSERT_TRUE(a->Load(m, range_plan(0, 1, false)).ok());
  ASSERT_TRUE(b->Load(m, range_plan(2, 4, true)).ok());
  DeviceChain chain;
  EXPECT_THAT(chain.Init(m, {a.get(), b.get()}).message(),
              ::testing::HasSubstr("the chain's next layer is 1"));
}

TEST(DeviceBackendErrorsTest, EngineRejectsMismatchedDevice) {
  SyntheticModelOptions o;
  o.activation = "relu";
  o.down_t = true;
  const std::string path = TempPath("m.gguf");
  ASSERT_TRUE(WriteSyntheticModel(o, path).ok());
  LlamaModel m;
  ASSERT_TRUE(LoadLlamaModel(path, &m).ok());
  std::remove(path.c_str());
  HostDeviceBackend device(1);
  DevicePlan dp;
  dp.n_layers = o.n_layer;
  dp.output = true;
  dp.n_ctx = 32;
  dp.hot.assign(o.n_layer, {});
  ASSERT_TRUE(device.Load(m, dp).ok());
  EngineOptions opt;
  opt.n_ctx = 64;  // the device holds 32 positions
  opt.device = &device;
  std::unique_ptr<Engine> e;
  EXPECT_THAT(Engine::Create(&m, opt, &e).message(), ::testing::HasSubstr("context of 32"));
  opt.n_ctx = 32;
  opt.cache_type_k = DType::kF32;
  EXPECT_THAT(Engine::Create(&m, opt, &e).message(), ::testing::HasSubstr("-ctk f16"));
  // Hot neurons in a layer whose attention is not on the device.
  dp.n_layers = 1;
  dp.hot[1] = {0, 1};
  EXPECT_THAT(device.Load(m, dp).message(), ::testing::HasSubstr("layer 1 has hot neurons"));
  // A range of layers needs LayerRangeDevice around a backend.
  dp.hot[1].clear();
  dp.first_layer = 1;
  dp.n_layers = 2;
  EXPECT_THAT(device.Load(m, dp).message(), ::testing::HasSubstr("runs a prefix of the layers"));
  LayerRangeDevice range(std::make_unique<HostDeviceBackend>(1));
  dp.hot[0] = {3};
  EXPECT_THAT(range.Load(m, dp).message(),
              ::testing::HasSubstr("gives layer 0 hot neurons outside its layers [1, 2)"));
}

// --sparse teal on a chain: each member thresholds its own layers' inputs
// (LayerRangeDevice slices the thresholds, and in a worker process makes the
// transposed copies of its range), giving the one-process teal engine's
// tokens and logits.
TEST(DeviceChainTest, TealRangesEqualOneProcess) {
  std::string skip;
  if (!MakeBackend(PI_TEST_DEVICE, &skip)) GTEST_SKIP() << skip;
  SyntheticModelOptions o = SmallQ8Relu(300, 4);
  o.type = DType::kF16;
  o.activation = "silu";
  o.planted_sparsity = 0.0;
  const std::string path = TempPath("chain-teal.gguf");
  const RemoveAtExit remove{path};
  ASSERT_TRUE(WriteSyntheticModel(o, path).ok());
  LlamaModel m;
  ASSERT_TRUE(LoadLlamaModel(path, &m).ok());
  const std::vector<int32_t> prompt = {1, 17, 42, 99, 5};
  EngineOptions opt;
  opt.n_threads = 2;
  opt.n_ctx = 48;
  opt.sparse = SparseMode::kCats;
  opt.gate_thresholds.assign(o.n_layer, CatsThreshold(m, prompt));
  ThreadPool pool(2);
  int64_t copy_bytes = 0;
  ASSERT_TRUE(AddTransposedCopies(&m, &pool, &copy_bytes).ok());
  TealLevels(m, prompt, &opt);
  const bool in_process =
      std::string(PI_TEST_DEVICE) == "host" || std::string(PI_TEST_DEVICE) == "cuda";
  const bool gpu = std::string(PI_TEST_DEVICE).find("cuda") != std::string::npos;
  std::vector<std::unique_ptr<DeviceBackend>> members;
  std::vector<DeviceBackend*> raw;
  // Layers 0 | 1-2 | the head alone; layer 3 on the host.
  for (const auto& [first, end, head] :
       {std::tuple{0, 1, false}, std::tuple{1, 3, false}, std::tuple{3, 3, true}}) {
    DevicePlan dp = MakePlan(o, Plan::kSplit, opt.n_ctx, DType::kF16);
    dp.first_layer = first;
    dp.n_layers = end;
    dp.output = head;
    for (int il = 0; il < o.n_layer; ++il) {
      if (il < first || il >= end) dp.hot[il].clear();
    }
    dp.mode = SparseMode::kTeal;
    dp.gate_thresholds = opt.gate_thresholds;
    for (int k = 0; k < kProjectionInputs; ++k) dp.input_thresholds[k] = opt.input_thresholds[k];
    std::unique_ptr<DeviceBackend> b = MakeBackend(PI_TEST_DEVICE, &skip, path);
    if (in_process) b = std::make_unique<LayerRangeDevice>(std::move(b));
    const Status s = b->Load(m, dp);
    ASSERT_TRUE(s.ok()) << s.message();
    raw.push_back(b.get());
    members.push_back(std::move(b));
  }
  DeviceChain chain;
  ASSERT_TRUE(chain.Init(m, raw).ok());
  std::unique_ptr<Engine> ref, dev;
  ASSERT_TRUE(Engine::Create(&m, opt, &ref).ok());
  opt.device = &chain;
  const Status created = Engine::Create(&m, opt, &dev);
  ASSERT_TRUE(created.ok()) << created.message();
  ASSERT_TRUE(ref->Eval(prompt.data(), static_cast<int>(prompt.size())).ok());
  ASSERT_TRUE(dev->Eval(prompt.data(), static_cast<int>(prompt.size())).ok());
  const int n_vocab = m.config.n_vocab;
  for (int step = 0; step < 10; ++step) {
    const float* r = ref->logits();
    // The GPU sums in other orders: a neuron near its threshold may flip.
    ASSERT_LE(RelativeError(dev->logits(), r, n_vocab), gpu ? 1e-3 : 1e-4) << "step " << step;
    const int32_t t = static_cast<int32_t>(std::max_element(r, r + n_vocab) - r);
    ASSERT_TRUE(ref->Eval(&t, 1).ok());
    ASSERT_TRUE(dev->Eval(&t, 1).ok());
    EXPECT_NEAR(dev->last_ffn_neurons(), ref->last_ffn_neurons(),
                gpu ? 2 + ref->last_ffn_neurons() / 100 : 0)
        << "step " << step;
  }
  EXPECT_GT(ref->input_kept_share(), 0.3);
  EXPECT_LT(ref->input_kept_share(), 0.7);
  // A member loaded with other input thresholds does not join the chain.
  DevicePlan other = members[1]->plan();
  other.input_thresholds[2][1] *= 2;
  std::unique_ptr<DeviceBackend> odd = MakeBackend(PI_TEST_DEVICE, &skip, path);
  if (in_process) odd = std::make_unique<LayerRangeDevice>(std::move(odd));
  ASSERT_TRUE(odd->Load(m, other).ok());
  DeviceChain mixed;
  EXPECT_THAT(mixed.Init(m, {raw[0], odd.get(), raw[2]}).message(), HasSubstr("sparse settings"));
}

}  // namespace
}  // namespace pi
