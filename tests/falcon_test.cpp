// Falcon (llama.cpp's "falcon" architecture; PowerInfer's ReluFalcon files):
// the loader's rules and errors, the new ops against scalar references,
// sparse execution against dense, the predictor's input (the layer input),
// placement's bytes and pi-quantize --down-t on falcon files. The logits
// themselves are checked against the independent numpy forward pass in
// tests/reference/check_forward.py (falcon cases).
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "common/compute/ffn_observer.h"
#include "common/format/gguf.h"
#include "common/model/llama_model.h"
#include "common/offline/synthetic_model.h"
#include "common/plan/activation_stats.h"
#include "common/plan/placement.h"
#include "common/text/tokenizer_bpe.h"
#include "coordinator/engine/engine.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/quant.h"
#include "tests/gguf_rewrite.h"
#include "tests/temp_path.h"

namespace pi {
namespace {

using ::testing::HasSubstr;

SyntheticModelOptions Falcon(const std::string& act, bool down_t, int n_head_kv, bool norm2) {
  SyntheticModelOptions o;
  o.arch = "falcon";
  o.n_vocab = 300;
  o.n_embd = 128;
  o.n_layer = 2;
  o.n_head = 4;
  o.n_head_kv = n_head_kv;
  o.n_ff = 256;
  o.n_ctx = 64;
  o.activation = act;
  o.down_t = down_t;
  o.attn_norm_2 = norm2;
  return o;
}

std::string Write(const SyntheticModelOptions& o, const std::string& name) {
  const std::string path = TempPath(name + ".gguf");
  Status s = WriteSyntheticModel(o, path);
  EXPECT_TRUE(s.ok()) << s.message();
  return path;
}

// ---- loader -----------------------------------------------------------------

TEST(FalconLoadTest, ConfigAndFusedQkvViews) {
  for (const bool norm2 : {false, true}) {
    const SyntheticModelOptions o = Falcon("relu", /*down_t=*/true, /*n_head_kv=*/1, norm2);
    const std::string path = Write(o, norm2 ? "n2" : "n1");
    RemoveOnExit cleanup{{path}};
    LlamaModel m;
    Status s = LoadLlamaModel(path, &m);
    ASSERT_TRUE(s.ok()) << s.message();
    const LlamaConfig& c = m.config;
    EXPECT_EQ(c.arch, "falcon");
    EXPECT_EQ(c.norm, NormKind::kLayer);
    EXPECT_EQ(c.rope, RopeKind::kNeox);
    EXPECT_TRUE(c.parallel_residual);
    EXPECT_EQ(c.activation, FfnActivation::kReluUp);
    EXPECT_EQ(c.n_head_kv, 1);
    EXPECT_EQ(c.head_dim, 32);
    EXPECT_EQ(c.rope_dims, 32);  // no rope.dimension_count in the file: the head size
    EXPECT_EQ(c.n_ff, 256);
    std::string why;
    EXPECT_TRUE(SupportsSparseFfn(m, &why)) << why;

    for (int l = 0; l < o.n_layer; ++l) {
      const std::string p = "blk." + std::to_string(l) + ".";
      const LlamaLayer& L = m.layers[l];
      const TensorInfo* qkv = m.file->FindTensor(p + "attn_qkv.weight");
      ASSERT_NE(qkv, nullptr);
      ASSERT_EQ(qkv->ne[1], 128 + 2 * 32);
      const int64_t rb = static_cast<int64_t>(qkv->row_bytes());
      // jploski layout: all Q rows, then K, then V.
      EXPECT_EQ(L.wq.data, qkv->data);
      EXPECT_EQ(L.wq.rows, 128);
      EXPECT_EQ(L.wk.data, qkv->data + 128 * rb);
      EXPECT_EQ(L.wk.rows, 32);
      EXPECT_EQ(L.wv.data, qkv->data + 160 * rb);
      EXPECT_EQ(L.wv.rows, 32);
      EXPECT_FALSE(L.ffn_gate.present());
      EXPECT_EQ(L.attn_norm_b.data, m.file->FindTensor(p + "attn_norm.bias")->data);
      if (norm2) {
        EXPECT_EQ(L.ffn_norm.data, m.file->FindTensor(p + "attn_norm_2.weight")->data);
        EXPECT_EQ(L.ffn_norm_b.data, m.file->FindTensor(p + "attn_norm_2.bias")->data);
      } else {
        EXPECT_EQ(L.ffn_norm.data, L.attn_norm.data);
        EXPECT_EQ(L.ffn_norm_b.data, L.attn_norm_b.data);
      }
    }
    EXPECT_EQ(m.output_norm_b.data, m.file->FindTensor("output_norm.bias")->data);
  }
}

TEST(FalconLoadTest, ActivationRules) {
  struct Case {
    const char* act;
    bool down_t;  // PWRI magic
    bool key;
    FfnActivation want;
  };
  for (const Case& k : {Case{"gelu", false, false, FfnActivation::kGeluUp},
                        Case{"relu", true, false, FfnActivation::kReluUp},
                        Case{"gelu", true, true, FfnActivation::kGeluUp},  // the key wins
                        Case{"relu", false, true, FfnActivation::kReluUp}}) {
    SyntheticModelOptions o = Falcon(k.act, k.down_t, 2, false);
    o.activation_key = k.key;
    const std::string path = Write(o, "act");
    RemoveOnExit cleanup{{path}};
    LlamaModel m;
    Status s = LoadLlamaModel(path, &m);
    ASSERT_TRUE(s.ok()) << s.message();
    EXPECT_EQ(m.config.activation, k.want) << k.act << " " << k.down_t << " " << k.key;
    EXPECT_FALSE(FfnIsGated(m.config.activation));
    std::string why;
    EXPECT_EQ(SupportsSparseFfn(m, &why), k.want == FfnActivation::kReluUp && k.down_t);
    if (k.want == FfnActivation::kGeluUp) {
      EXPECT_THAT(why, HasSubstr("gelu"));
    }
  }
}

TEST(FalconLoadTest, ActivationKeyMustFitTheArchitecture) {
  const std::string falcon = Write(Falcon("relu", false, 2, false), "f");
  const std::string bad_falcon = TempPath("bad_f.gguf");
  SyntheticModelOptions lo = Falcon("relu", false, 2, false);
  lo.arch = "llama";
  const std::string llama = Write(lo, "l");
  const std::string bad_llama = TempPath("bad_l.gguf");
  RemoveOnExit cleanup{{falcon, bad_falcon, llama, bad_llama}};
  ASSERT_TRUE(Rewrite(falcon, bad_falcon, {}, {}, [](GgufWriter* w) {
                w->Set(kFfnActivationKey, GgufValue::String("silu"));
              }).ok());
  EXPECT_THAT(LoadError(bad_falcon).message(), HasSubstr("falcon's FFN has no gate"));
  ASSERT_TRUE(Rewrite(llama, bad_llama, {}, {}, [](GgufWriter* w) {
                w->Set(kFfnActivationKey, GgufValue::String("tanh"));
              }).ok());
  EXPECT_THAT(LoadError(bad_llama).message(),
              HasSubstr("'tanh': expected silu, relu, drelu or gelu"));
}

TEST(FalconLoadTest, NffFromFfnUpWhenTheKeyIsAbsent) {
  const std::string src = Write(Falcon("gelu", false, 2, false), "src");
  const std::string no_key = TempPath("no_key.gguf");
  const std::string neither = TempPath("neither.gguf");
  RemoveOnExit cleanup{{src, no_key, neither}};
  ASSERT_TRUE(Rewrite(src, no_key, {"falcon.feed_forward_length"}, {}).ok());
  LlamaModel m;
  Status s = LoadLlamaModel(no_key, &m);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(m.config.n_ff, 256);
  ASSERT_TRUE(Rewrite(src, neither, {"falcon.feed_forward_length"}, {"blk.0.ffn_up.weight"}).ok());
  EXPECT_THAT(LoadError(neither).message(), HasSubstr("blk.0.ffn_up.weight"));
}

TEST(FalconLoadTest, ErrorsNameTheTensorOrKey) {
  const std::string src = Write(Falcon("relu", true, 2, true), "src");
  const std::string dst = TempPath("dst.gguf");
  RemoveOnExit cleanup{{src, dst}};
  struct Case {
    std::set<std::string> drop_tensors;
    std::vector<std::pair<std::string, int64_t>> extra;
    const char* layout;  // falcon.tensor_data_layout, or null to keep
    const char* want;
  };
  const std::vector<Case> cases = {
      {{"blk.1.attn_qkv.weight"}, {}, nullptr, "missing tensor 'blk.1.attn_qkv.weight'"},
      {{"output_norm.bias"}, {}, nullptr, "missing tensor 'output_norm.bias'"},
      {{"blk.0.attn_norm.bias"}, {}, nullptr, "missing tensor 'blk.0.attn_norm.bias'"},
      {{"blk.0.ffn_down_t.weight"}, {}, nullptr, "blk.0.ffn_down_t.weight"},
      {{"blk.1.attn_norm_2.weight"}, {}, nullptr, "'blk.1.attn_norm_2.bias' without"},
      {{}, {{"blk.0.attn_qkv.bias", 192}}, nullptr, "'blk.0.attn_qkv.bias' is not part"},
      {{}, {}, "interleaved", "tensor_data_layout = 'interleaved'"},
  };
  for (const Case& k : cases) {
    ASSERT_TRUE(Rewrite(
                    src, dst, {}, k.drop_tensors,
                    [&](GgufWriter* w) {
                      if (k.layout) {
                        w->Set("falcon.tensor_data_layout", GgufValue::String(k.layout));
                      }
                    },
                    k.extra)
                    .ok());
    const Status s = LoadError(dst);
    EXPECT_FALSE(s.ok()) << k.want;
    EXPECT_THAT(s.message(), HasSubstr(k.want));
  }
}

// ---- ops, against double-precision scalar references --------------------------

TEST(FalconOpsTest, RopeNeoxRotatesHalfSplitPairs) {
  const int n_heads = 3, head_dim = 10, rope_dims = 6;  // partial rotation
  std::mt19937 rng(5);
  std::normal_distribution<float> g(0.0f, 1.0f);
  for (const int pos : {0, 1, 7, 1000}) {
    std::vector<float> v(n_heads * head_dim);
    for (float& x : v) x = g(rng);
    std::vector<float> got = v;
    std::vector<float> cs(rope_dims);
    RopeAngles(rope_dims, pos, 10000.0f, cs.data());
    RopeNeox(got.data(), n_heads, head_dim, rope_dims, cs.data());
    for (int h = 0; h < n_heads; ++h) {
      const float* in = v.data() + h * head_dim;
      const float* out = got.data() + h * head_dim;
      for (int i = 0; i < rope_dims / 2; ++i) {
        const double a = pos * std::pow(10000.0, -2.0 * i / rope_dims);
        const double x0 = in[i], x1 = in[i + rope_dims / 2];
        EXPECT_NEAR(out[i], x0 * std::cos(a) - x1 * std::sin(a), 1e-5) << pos << " " << i;
        EXPECT_NEAR(out[i + rope_dims / 2], x0 * std::sin(a) + x1 * std::cos(a), 1e-5);
      }
      for (int i = rope_dims; i < head_dim; ++i) EXPECT_EQ(out[i], in[i]);
    }
  }
}

TEST(FalconOpsTest, LayerNormMatchesDoubleReference) {
  const int n = 77;
  std::mt19937 rng(9);
  std::normal_distribution<float> g(0.5f, 2.0f);
  std::vector<float> x(n), w(n), b(n);
  for (float& v : x) v = g(rng);
  for (float& v : w) v = g(rng);
  for (float& v : b) v = g(rng);
  double mean = 0, var = 0;
  for (float v : x) mean += v;
  mean /= n;
  for (float v : x) var += (v - mean) * (v - mean);
  var /= n;
  const double eps = 1e-5;
  for (const bool bias : {false, true}) {
    std::vector<float> out(n), alias = x;
    LayerNorm(x.data(), w.data(), bias ? b.data() : nullptr, n, eps, out.data());
    LayerNorm(alias.data(), w.data(), bias ? b.data() : nullptr, n, eps, alias.data());
    for (int i = 0; i < n; ++i) {
      const double want = (x[i] - mean) / std::sqrt(var + eps) * w[i] + (bias ? b[i] : 0.0);
      EXPECT_NEAR(out[i], want, 1e-5 * (1 + std::fabs(want))) << i;
      EXPECT_EQ(alias[i], out[i]) << i;
    }
  }
}

TEST(FalconOpsTest, UngatedActivations) {
  std::vector<float> x;
  for (int i = -60; i <= 60; ++i) x.push_back(i * 0.1f);
  std::vector<float> r = x, g = x;
  Relu(r.data(), static_cast<int64_t>(r.size()));
  Gelu(g.data(), static_cast<int64_t>(g.size()));
  for (size_t i = 0; i < x.size(); ++i) {
    const double v = x[i];
    EXPECT_EQ(r[i], v > 0 ? x[i] : 0.0f);
    const double want =
        0.5 * v * (1 + std::tanh(std::sqrt(2 / std::acos(-1.0)) * v * (1 + 0.044715 * v * v)));
    EXPECT_NEAR(g[i], want, 1e-6 * (1 + std::fabs(want))) << v;
  }
}

// ---- engine ------------------------------------------------------------------

// A prompt, then decode steps; returns the decode logits (and FFN neurons).
std::vector<float> DecodeLogits(const LlamaModel& m, SparseMode mode, std::optional<float> thr,
                                int threads, int64_t* neurons = nullptr,
                                FfnObserver* observer = nullptr) {
  EngineOptions opt;
  opt.n_threads = threads;
  opt.sparse = mode;
  opt.sparse_threshold = thr;
  std::unique_ptr<Engine> e;
  Status s = Engine::Create(&m, opt, &e);
  EXPECT_TRUE(s.ok()) << s.message();
  if (!s.ok()) return {};
  e->SetFfnObserver(observer);
  const int32_t prompt[4] = {1, 17, 42, 250};
  EXPECT_TRUE(e->Eval(prompt, 4).ok());
  std::vector<float> out;
  if (neurons) *neurons = 0;
  for (int i = 0; i < 6; ++i) {
    const int32_t t = (i * 37 + 5) % m.config.n_vocab;
    EXPECT_TRUE(e->Eval(&t, 1).ok());
    if (neurons) *neurons += e->last_ffn_neurons();
    out.insert(out.end(), e->logits(), e->logits() + e->n_vocab());
  }
  return out;
}

void ExpectClose(const std::vector<float>& a, const std::vector<float>& b, double rel,
                 const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  double scale = 0;
  for (float v : b) scale = std::max(scale, static_cast<double>(std::fabs(v)));
  ASSERT_GT(scale, 0.1) << what;
  for (size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], b[i], rel * scale) << what << " " << i;
}

TEST(FalconEngineTest, OracleSparseEqualsDense) {
  for (const DType type : {DType::kF32, DType::kQ8_0}) {
    SyntheticModelOptions o = Falcon("relu", /*down_t=*/true, 1, /*norm2=*/true);
    o.type = type;
    const std::string path = Write(o, DTypeName(type));
    RemoveOnExit cleanup{{path}};
    LlamaModel m;
    ASSERT_TRUE(LoadLlamaModel(path, &m).ok());
    for (const int threads : {1, 2}) {
      int64_t n_dense = 0, n_oracle = 0;
      const std::vector<float> dense = DecodeLogits(m, SparseMode::kOff, {}, threads, &n_dense);
      const std::vector<float> oracle =
          DecodeLogits(m, SparseMode::kOracle, {}, threads, &n_oracle);
      ExpectClose(oracle, dense, 1e-5, std::string(DTypeName(type)) + " oracle");
      EXPECT_EQ(n_dense, 6LL * o.n_layer * o.n_ff);
      EXPECT_GT(n_oracle, 0);
      EXPECT_LT(n_oracle, n_dense);  // relu(up x) is zero for some neurons
    }
  }
}

TEST(FalconEngineTest, PromptBatchesMatchDecodeAndThreadCountsAgree) {
  for (const char* act : {"gelu", "relu"}) {
    const std::string path = Write(Falcon(act, std::string(act) == "relu", 2, false), act);
    RemoveOnExit cleanup{{path}};
    LlamaModel m;
    ASSERT_TRUE(LoadLlamaModel(path, &m).ok());
    std::vector<int32_t> toks;
    for (int i = 0; i < 19; ++i) toks.push_back((i * 41 + 3) % 300);
    std::vector<std::vector<float>> runs;
    for (const int batch : {1, 8, 64}) {
      for (const int threads : {1, 3}) {
        EngineOptions opt;
        opt.n_threads = threads;
        opt.n_batch = batch;
        std::unique_ptr<Engine> e;
        ASSERT_TRUE(Engine::Create(&m, opt, &e).ok());
        ASSERT_TRUE(e->Eval(toks.data(), static_cast<int>(toks.size()), true).ok());
        runs.emplace_back(e->logits(), e->logits() + toks.size() * e->n_vocab());
      }
      // The thread count changes nothing, bit for bit.
      EXPECT_EQ(runs[runs.size() - 1], runs[runs.size() - 2]) << act << " batch " << batch;
    }
    for (size_t r = 2; r < runs.size(); r += 2) ExpectClose(runs[r], runs[0], 1e-5, act);
  }
}

// Records each layer's FFN input (what the predictor reads) and activations.
class Recorder : public FfnObserver {
 public:
  void OnFfnInput(int layer, int batch, const float* h) override {
    if (layer == 0) input0.assign(h + (batch - 1) * n_embd, h + batch * n_embd);
  }
  void OnFfn(int layer, int batch, const float* act) override {
    if (layer == 0) act0.assign(act + (batch - 1) * n_ff, act + batch * n_ff);
  }
  int n_embd = 0, n_ff = 0;
  std::vector<float> input0, act0;  // the last token's, layer 0
};

TEST(FalconEngineTest, FfnInputIsTheLayerInput) {
  // Layer 0's input is the token's embedding row; a sequential-residual
  // model would show the embedding plus attention's output instead.
  for (const char* arch : {"falcon", "llama"}) {
    SyntheticModelOptions o = Falcon("relu", true, 2, false);
    o.arch = arch;
    const std::string path = Write(o, arch);
    RemoveOnExit cleanup{{path}};
    LlamaModel m;
    ASSERT_TRUE(LoadLlamaModel(path, &m).ok());
    Recorder rec;
    rec.n_embd = o.n_embd;
    rec.n_ff = o.n_ff;
    DecodeLogits(m, SparseMode::kOff, {}, 1, nullptr, &rec);
    const int32_t last = (5 * 37 + 5) % o.n_vocab;
    const float* emb = reinterpret_cast<const float*>(m.token_embd.row(last));
    const std::vector<float> want(emb, emb + o.n_embd);
    if (std::string(arch) == "falcon") {
      EXPECT_EQ(rec.input0, want);
    } else {
      EXPECT_NE(rec.input0, want);
    }
  }
}

// fc1 [n_embd, rank] and fc2 [rank, n_ff] of small random F32 values.
struct Fc {
  int rank = 32;
  std::vector<std::vector<float>> w1, w2;  // per layer: [rank][d], [ff][rank]
};

std::string WriteWithPredictor(const SyntheticModelOptions& o, Fc* fc) {
  GgufWriter w;
  EXPECT_TRUE(AddSyntheticModel(o, &w).ok());
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> u(-0.5f, 0.5f);
  fc->w1.assign(o.n_layer, {});
  fc->w2.assign(o.n_layer, {});
  for (int l = 0; l < o.n_layer; ++l) {
    fc->w1[l].resize(static_cast<size_t>(fc->rank) * o.n_embd);
    fc->w2[l].resize(static_cast<size_t>(o.n_ff) * fc->rank);
    for (float& x : fc->w1[l]) x = u(rng);
    for (float& x : fc->w2[l]) x = u(rng);
    const std::string p = "blk." + std::to_string(l) + ".";
    EXPECT_TRUE(
        w.AddTensor(p + "fc1.weight", DType::kF32, {o.n_embd, fc->rank}, fc->w1[l].data()).ok());
    EXPECT_TRUE(
        w.AddTensor(p + "fc2.weight", DType::kF32, {fc->rank, o.n_ff}, fc->w2[l].data()).ok());
  }
  const std::string path = TempPath("pred.gguf");
  EXPECT_TRUE(w.Write(path).ok());
  return path;
}

TEST(FalconPredictorTest, PwriFileRunsThePredictor) {
  // A ReluFalcon-shaped file: PWRI magic, no pi.ffn_activation key (PWRI ->
  // relu), ffn_down_t, fc1/fc2.
  SyntheticModelOptions o = Falcon("relu", true, 1, true);
  o.activation_key = false;
  Fc fc;
  const std::string path = WriteWithPredictor(o, &fc);
  RemoveOnExit cleanup{{path}};
  LlamaModel m;
  Status s = LoadLlamaModel(path, &m);
  ASSERT_TRUE(s.ok()) << s.message();
  ASSERT_TRUE(m.file->is_sparse_magic());
  ASSERT_EQ(m.config.activation, FfnActivation::kReluUp);
  int64_t n_dense, n_oracle, n_all, n_none;
  const std::vector<float> dense = DecodeLogits(m, SparseMode::kOff, {}, 2, &n_dense);
  const std::vector<float> oracle = DecodeLogits(m, SparseMode::kOracle, {}, 2, &n_oracle);
  const std::vector<float> all = DecodeLogits(m, SparseMode::kPredictor, -1e30f, 2, &n_all);
  const std::vector<float> none = DecodeLogits(m, SparseMode::kPredictor, 1e30f, 2, &n_none);
  ExpectClose(all, dense, 1e-5, "predict all");
  EXPECT_EQ(n_all, n_oracle);  // up and down for exactly the neurons that fire
  EXPECT_EQ(n_none, 0);
  double diff = 0;
  for (size_t i = 0; i < dense.size(); ++i)
    diff = std::max<double>(diff, std::fabs(none[i] - dense[i]));
  EXPECT_GT(diff, 1e-3);  // predicting nothing changes the output: the predictor is used
}

TEST(FalconPredictorTest, PredictsFromTheLayerInputAndComputesRelUp) {
  // Layer 0 of the last decode step, in double from the weights: the
  // predicted set is {i : fc2 relu(fc1 e) >= t} for e the token's embedding
  // (the layer input, not normed), and the step's activations must be
  // relu(up_i . x) on that set and 0 elsewhere, x = LayerNorm(e) w + b.
  SyntheticModelOptions o = Falcon("relu", true, 2, false);
  Fc fc;
  const std::string path = WriteWithPredictor(o, &fc);
  RemoveOnExit cleanup{{path}};
  LlamaModel m;
  ASSERT_TRUE(LoadLlamaModel(path, &m).ok());
  const int d = o.n_embd, ff = o.n_ff;
  const int32_t last = (5 * 37 + 5) % o.n_vocab;
  const float* e = reinterpret_cast<const float*>(m.token_embd.row(last));
  std::vector<double> hid(fc.rank), score(ff);
  for (int j = 0; j < fc.rank; ++j) {
    double a = 0;
    for (int c = 0; c < d; ++c) a += double{fc.w1[0][j * d + c]} * e[c];
    hid[j] = std::max(a, 0.0);
  }
  for (int i = 0; i < ff; ++i) {
    double a = 0;
    for (int j = 0; j < fc.rank; ++j) a += double{fc.w2[0][i * fc.rank + j]} * hid[j];
    score[i] = a;
  }
  std::vector<double> sorted = score;
  std::sort(sorted.begin(), sorted.end());
  const double thr = (sorted[ff / 2] + sorted[ff / 2 + 1]) / 2;  // half the neurons predicted

  const float* w = reinterpret_cast<const float*>(m.layers[0].attn_norm.data);
  const float* b = reinterpret_cast<const float*>(m.layers[0].attn_norm_b.data);
  double mean = 0, var = 0;
  for (int c = 0; c < d; ++c) mean += e[c];
  mean /= d;
  for (int c = 0; c < d; ++c) var += (e[c] - mean) * (e[c] - mean);
  var /= d;
  std::vector<double> x(d);
  for (int c = 0; c < d; ++c) x[c] = (e[c] - mean) / std::sqrt(var + o.norm_eps) * w[c] + b[c];

  Recorder rec;
  rec.n_embd = d;
  rec.n_ff = ff;
  DecodeLogits(m, SparseMode::kPredictor, static_cast<float>(thr), 1, nullptr, &rec);
  ASSERT_EQ(rec.act0.size(), static_cast<size_t>(ff));
  int checked = 0, fired = 0;
  for (int i = 0; i < ff; ++i) {
    if (std::fabs(score[i] - thr) < 1e-4) continue;  // f32 rounding could flip it
    const float* up = reinterpret_cast<const float*>(m.layers[0].ffn_up.row(i));
    double u = 0;
    for (int c = 0; c < d; ++c) u += double{up[c]} * x[c];
    const double want = score[i] >= thr ? std::max(u, 0.0) : 0.0;
    EXPECT_NEAR(rec.act0[i], want, 1e-4 * (1 + std::fabs(want))) << "neuron " << i;
    ++checked;
    fired += want > 0;
  }
  EXPECT_GT(checked, ff - 4);
  EXPECT_GT(fired, 10);
}

TEST(FalconEngineTest, PlantedSparsity) {
  SyntheticModelOptions o = Falcon("relu", true, 2, true);
  o.n_vocab = 1000;
  o.n_embd = 256;
  o.n_ff = 1024;
  o.n_head = 8;
  o.n_ctx = 128;
  o.planted_sparsity = 0.9;
  const std::string path = Write(o, "planted");
  RemoveOnExit cleanup{{path}};
  LlamaModel m;
  ASSERT_TRUE(LoadLlamaModel(path, &m).ok());
  ActivationStats stats;
  InitActivationStatsFor(m, &stats);
  EngineOptions eo;
  std::unique_ptr<Engine> e;
  ASSERT_TRUE(Engine::Create(&m, eo, &e).ok());
  e->SetFfnObserver(&stats);
  std::vector<int32_t> toks(128);
  for (int i = 0; i < 128; ++i) toks[i] = (i * 7919 + 13) % o.n_vocab;
  ASSERT_TRUE(e->Eval(toks.data(), 128).ok());
  for (int l = 0; l < o.n_layer; ++l) {
    EXPECT_NEAR(stats.Sparsity(l), 0.9, 0.05) << "layer " << l;
  }
}

// ---- placement and pi-quantize -----------------------------------------------

int64_t FileBytes(const LlamaModel& m, const std::string& name) {
  const TensorInfo* t = m.file->FindTensor(name);
  return t ? static_cast<int64_t>(t->nbytes) : 0;
}

TEST(FalconPlacementTest, BytesComeFromTheFalconTensors) {
  for (const bool down_t : {false, true}) {
    for (const bool norm2 : {false, true}) {
      SyntheticModelOptions o = Falcon("relu", down_t, 1, norm2);
      o.type = DType::kQ8_0;
      const std::string path = Write(o, "place");
      RemoveOnExit cleanup{{path}};
      LlamaModel m;
      ASSERT_TRUE(LoadLlamaModel(path, &m).ok());
      const int n_ctx = 32;
      int64_t dense = FileBytes(m, "output.weight") + FileBytes(m, "output_norm.weight") +
                      FileBytes(m, "output_norm.bias");
      for (int l = 0; l < o.n_layer; ++l) {
        const std::string p = "blk." + std::to_string(l) + ".";
        for (const char* n : {"attn_norm.weight", "attn_norm.bias", "attn_norm_2.weight",
                              "attn_norm_2.bias", "attn_qkv.weight", "attn_output.weight"}) {
          dense += FileBytes(m, p + n);
        }
        dense += 2 * int64_t{n_ctx} * 32 * 2;  // K and V of one KV head, f16 (the default)
        // Two rows per neuron: up and down. A Q8_0 row of 128 is 4 blocks of
        // 34 bytes (ffn_down's column is costed as such a row too).
        const int64_t want =
            down_t ? (FileBytes(m, p + "ffn_up.weight") + FileBytes(m, p + "ffn_down_t.weight")) /
                         o.n_ff
                   : FileBytes(m, p + "ffn_up.weight") / o.n_ff + 4 * 34;
        EXPECT_EQ(NeuronBytes(m, l), want) << down_t << norm2;
        EXPECT_EQ(NeuronBytes(m, l), 2 * 4 * 34);
      }
      PlacementOptions dense_opt;
      dense_opt.n_ctx = n_ctx;
      EXPECT_EQ(DenseBytes(m, dense_opt), dense) << down_t << norm2;

      // A budget for the dense part and 10 neurons: exactly 10 are placed.
      ActivationStats stats;
      InitActivationStatsFor(m, &stats);
      stats.set_n_tokens(100);
      for (int l = 0; l < o.n_layer; ++l) {
        for (int i = 0; i < o.n_ff; ++i) stats.mutable_counts(l)[i] = (i * 7 + l) % 101;
      }
      PlacementOptions po;
      po.n_ctx = n_ctx;
      po.group = 1;
      po.vram_budget = dense + 10 * NeuronBytes(m, 0);
      Placement plan;
      Status s = Place(m, stats, po, &plan);
      ASSERT_TRUE(s.ok()) << s.message();
      EXPECT_EQ(plan.dense_bytes, dense);
      size_t placed = 0;
      for (const LayerPlacement& lp : plan.layers) placed += lp.gpu_neurons.size();
      EXPECT_EQ(placed, 10u);
    }
  }
}

// Runs pi-quantize (built next to this test); returns its exit status.
int RunQuantize(const std::string& args) {
  const std::string bin = std::string(PI_BINARY_DIR) + "/bin/pi-quantize";
  if (access(bin.c_str(), X_OK) != 0) {
    ADD_FAILURE() << bin << " is missing: build the pi-quantize target";
    return -1;
  }
  const std::string cmd = bin + " " + args + " 2>/dev/null";
  const int rc = std::system(cmd.c_str());
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

TEST(FalconQuantizeTest, DownTOnFalcon) {
  // A dense relu falcon (ffn_down, GGUF magic), F16: pi-quantize f16 --down-t
  // keeps every weight exactly and stores ffn_down transposed, so the result
  // computes the same function and can run sparse.
  SyntheticModelOptions o = Falcon("relu", false, 2, true);
  o.type = DType::kF16;
  const std::string src = Write(o, "src");
  const std::string dst = TempPath("dst.gguf");
  RemoveOnExit cleanup{{src, dst}};
  ASSERT_EQ(RunQuantize(src + " " + dst + " f16 --down-t"), 0);
  LlamaModel a, b;
  ASSERT_TRUE(LoadLlamaModel(src, &a).ok());
  Status s = LoadLlamaModel(dst, &b);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(b.config.arch, "falcon");
  EXPECT_EQ(b.config.activation, FfnActivation::kReluUp);
  for (int l = 0; l < o.n_layer; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    EXPECT_EQ(b.file->FindTensor(p + "ffn_down.weight"), nullptr);
    const TensorInfo* t = b.file->FindTensor(p + "ffn_down_t.weight");
    ASSERT_NE(t, nullptr);
    EXPECT_EQ(t->ne[0], o.n_embd);
    EXPECT_EQ(t->ne[1], o.n_ff);
    for (const char* n : {"attn_qkv.weight", "attn_norm.bias", "attn_norm_2.weight",
                          "attn_norm_2.bias", "ffn_up.weight"}) {
      const TensorInfo* x = a.file->FindTensor(p + n);
      const TensorInfo* y = b.file->FindTensor(p + n);
      ASSERT_NE(y, nullptr) << n;
      ASSERT_EQ(x->nbytes, y->nbytes) << n;
      EXPECT_EQ(std::memcmp(x->data, y->data, x->nbytes), 0) << n;
    }
  }
  std::string why;
  EXPECT_FALSE(SupportsSparseFfn(a, &why));
  EXPECT_TRUE(SupportsSparseFfn(b, &why)) << why;
  const std::vector<float> dense = DecodeLogits(a, SparseMode::kOff, {}, 1);
  ExpectClose(DecodeLogits(b, SparseMode::kOff, {}, 1), dense, 1e-5, "down_t dense");
  ExpectClose(DecodeLogits(b, SparseMode::kOracle, {}, 1), dense, 1e-5, "down_t oracle");
}

// ---- tokenizer -------------------------------------------------------------------

std::vector<std::string> FalconWords(const std::string& text) {
  std::vector<std::pair<size_t, size_t>> w;
  BpePreTokenize(BpePreTokenizer::kFalcon, text, &w);
  std::vector<std::string> out;
  for (const auto& p : w) out.push_back(text.substr(p.first, p.second - p.first));
  return out;
}

TEST(FalconTokenizerTest, PreTokenizerPasses) {
  // Expected splits worked out by hand from the three regexes (tokenizer_bpe.h);
  // tests/reference/check_tokenizer.py compares against python3-regex too.
  BpePreTokenizer pre;
  ASSERT_TRUE(ParseBpePreTokenizer("falcon", &pre).ok());
  EXPECT_EQ(pre, BpePreTokenizer::kFalcon);
  using V = std::vector<std::string>;
  // Punctuation splits first, so no "'t" contraction survives.
  EXPECT_EQ(FalconWords("don't"), (V{"don", "'", "t"}));
  EXPECT_EQ(FalconWords("hello, world"), (V{"hello", ",", " world"}));
  EXPECT_EQ(FalconWords("a+b=c"), (V{"a", "+", "b", "=", "c"}));
  // Digits: groups of three from the start of a run, the space apart.
  EXPECT_EQ(FalconWords(" 1234567"), (V{" ", "123", "456", "7"}));
  // GPT-2's whitespace rule ends at a piece's end.
  EXPECT_EQ(FalconWords("x  $$  y"), (V{"x", "  ", "$$", " ", " y"}));
  // Currency signs are symbols (Sc), not punctuation.
  EXPECT_EQ(FalconWords("\u20ac100"), (V{"\u20ac", "100"}));
  EXPECT_EQ(FalconWords(""), V{});
}

// ---- synthetic files -----------------------------------------------------------

TEST(FalconSyntheticTest, TensorSetAndValidation) {
  SyntheticModelOptions o = Falcon("gelu", false, 2, true);
  o.tied = true;
  GgufWriter w;
  ASSERT_TRUE(AddSyntheticModel(o, &w).ok());
  std::unique_ptr<GgufFile> f;
  const std::vector<uint8_t> bytes = w.Serialize();
  ASSERT_TRUE(GgufFile::OpenBuffer(bytes.data(), bytes.size(), &f).ok());
  std::vector<std::string> names;
  for (const TensorInfo& t : f->tensors()) names.push_back(t.name);
  std::vector<std::string> want = {"token_embd.weight"};
  for (int l = 0; l < 2; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    for (const char* n :
         {"attn_norm.weight", "attn_norm.bias", "attn_norm_2.weight", "attn_norm_2.bias",
          "attn_qkv.weight", "attn_output.weight", "ffn_up.weight", "ffn_down.weight"}) {
      want.push_back(p + n);
    }
  }
  want.push_back("output_norm.weight");
  want.push_back("output_norm.bias");
  EXPECT_EQ(names, want);
  EXPECT_EQ(f->FindTensor("blk.0.attn_qkv.weight")->ne[1], 128 + 2 * 64);
  std::string layout;
  ASSERT_TRUE(f->GetString("falcon.tensor_data_layout", &layout).ok());
  EXPECT_EQ(layout, "jploski");
  EXPECT_EQ(f->Find("falcon.rope.dimension_count"), nullptr);

  auto invalid = [](SyntheticModelOptions x, const char* want_msg) {
    const Status s = ValidateSyntheticModel(x);
    EXPECT_FALSE(s.ok()) << want_msg;
    EXPECT_THAT(s.message(), HasSubstr(want_msg));
  };
  invalid(Falcon("silu", false, 2, false), "no gate");
  SyntheticModelOptions l = Falcon("tanh", false, 2, false);
  l.arch = "llama";
  invalid(l, "expected silu, relu, drelu or gelu");
  l.activation = "relu";
  l.attn_norm_2 = true;
  invalid(l, "attn_norm_2 is a falcon tensor");
  SyntheticModelOptions k = Falcon("relu", false, 2, false);
  k.activation_key = false;  // GGUF magic, no key: gelu, not relu
  invalid(k, "means gelu");
  SyntheticModelOptions p = Falcon("gelu", true, 2, false);
  p.planted_sparsity = 0.5;
  invalid(p, "planted sparsity needs");
  SyntheticModelOptions a = Falcon("relu", false, 2, false);
  a.arch = "gpt2";
  invalid(a, "expected llama, qwen2, qwen3, gemma2, gemma3, phi3 or falcon");
}

}  // namespace
}  // namespace pi
