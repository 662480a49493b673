// The activation predictor (common/compute/predictor.h, SparseMode::kPredictor) and
// pi-train-predictor, against references computed here: double-precision
// fc2 · relu(fc1 · h) from the weights as written, dense engine logits, and
// for the trained demo predictor the neurons that really fire on text it was
// not trained on.
//
// Built twice (tests/CMakeLists.txt): predictor_test, the fast tests, and
// with PI_PREDICTOR_TRAIN_TEST predictor_train_test (label "slow"), the one
// that trains a predictor for the demo model (about a minute on 2 cores).
#include "common/compute/predictor.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "common/compute/ffn_observer.h"
#include "common/format/gguf.h"
#include "common/offline/synthetic_model.h"
#include "common/text/tokenizer.h"
#include "coordinator/engine/engine.h"
#include "coordinator/route/ffn_block.h"
#include "gpu_worker/host_hot_shard.h"
#include "kernels/cpu/quant.h"
#include "tests/temp_path.h"

#ifndef PI_PREDICTOR_TRAIN_TEST
#include "tests/allocation_counter.h"
#endif

namespace pi {
namespace {

#ifdef PI_PREDICTOR_TRAIN_TEST
// IEEE half -> float, written out here (not the library's converter).
float HalfToFloat(uint16_t h) {
  const int sign = h >> 15, exp = (h >> 10) & 31, mant = h & 1023;
  double v;
  if (exp == 0) {
    v = std::ldexp(mant, -24);
  } else if (exp == 31) {
    v = mant ? NAN : INFINITY;
  } else {
    v = std::ldexp(1024 + mant, exp - 25);
  }
  return static_cast<float>(sign ? -v : v);
}

// Matrix elements as float, from F32 or F16 tensor bytes.
std::vector<float> ReadMatrix(const Tensor& t) {
  std::vector<float> out(static_cast<size_t>(t.rows * t.cols));
  for (size_t i = 0; i < out.size(); ++i) {
    if (t.type == DType::kF32) {
      std::memcpy(&out[i], t.data + 4 * i, 4);
    } else {
      uint16_t h;
      std::memcpy(&h, t.data + 2 * i, 2);
      out[i] = HalfToFloat(h);
    }
  }
  return out;
}

#endif  // PI_PREDICTOR_TRAIN_TEST

// scores = w2 · relu(w1 · h) in double; w1 [rank][d], w2 [ff][rank].
std::vector<double> RefScores(const std::vector<float>& w1, const std::vector<float>& w2, int d,
                              int rank, int ff, const float* h) {
  std::vector<double> hid(rank), s(ff);
  for (int j = 0; j < rank; ++j) {
    double a = 0;
    for (int c = 0; c < d; ++c) a += static_cast<double>(w1[j * d + c]) * h[c];
    hid[j] = a > 0 ? a : 0;
  }
  for (int i = 0; i < ff; ++i) {
    double a = 0;
    for (int j = 0; j < rank; ++j) a += static_cast<double>(w2[i * rank + j]) * hid[j];
    s[i] = a;
  }
  return s;
}

// Removes scratch files when a test ends, passed or not.
struct RemoveOnExit {
  std::vector<std::string> paths;
  ~RemoveOnExit() {
    for (const std::string& p : paths) std::remove(p.c_str());
  }
};

#ifndef PI_PREDICTOR_TRAIN_TEST
struct TinyModel {
  int d = 64, ff = 128, rank = 32, layers = 2;
  std::vector<std::vector<float>> w1, w2;  // per layer, as intended (before the file's rounding)
};

// A relu model with ffn_down_t (synthetic weights) plus hand-set predictors
// of type `type`. F16 weights are multiples of 2^-10 in [-0.5, 0.5], exact in
// F16.
std::string WriteTinyModel(DType type, TinyModel* m, bool with_predictor = true) {
  SyntheticModelOptions o;
  o.n_vocab = 256;
  o.n_embd = m->d;
  o.n_ff = m->ff;
  o.n_layer = m->layers;
  o.n_head = 4;
  o.n_ctx = 64;
  o.activation = "relu";
  o.down_t = true;
  GgufWriter w;
  EXPECT_TRUE(AddSyntheticModel(o, &w).ok());
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> q(-512, 512);
  m->w1.assign(m->layers, {});
  m->w2.assign(m->layers, {});
  for (int l = 0; l < m->layers && with_predictor; ++l) {
    std::vector<float>& a = m->w1[l];
    std::vector<float>& b = m->w2[l];
    a.resize(static_cast<size_t>(m->rank) * m->d);
    b.resize(static_cast<size_t>(m->ff) * m->rank);
    for (float& x : a) x = q(rng) / 1024.0f;
    for (float& x : b) x = q(rng) / 1024.0f;
    const auto add = [&](const std::string& name, const std::vector<float>& v, int64_t cols,
                         int64_t rows) {
      std::vector<uint8_t> bytes(RowBytes(type, cols) * rows);
      for (int64_t r = 0; r < rows; ++r) {
        QuantizeRow(type, v.data() + r * cols, bytes.data() + r * RowBytes(type, cols), cols);
      }
      EXPECT_TRUE(w.AddTensor(name, type, {cols, rows}, bytes.data()).ok());
    };
    add("blk." + std::to_string(l) + ".fc1.weight", a, m->d, m->rank);
    add("blk." + std::to_string(l) + ".fc2.weight", b, m->rank, m->ff);
  }
  const std::string path = TempPath("tiny_" + std::string(DTypeName(type)) + ".gguf");
  EXPECT_TRUE(w.Write(path).ok());
  return path;  // callers load it and remove it (the mapping outlives the name)
}

TEST(PredictorTest, ScoresMatchDoublePrecisionReference) {
  for (DType type : {DType::kF32, DType::kF16, DType::kQ8_0}) {
    TinyModel tm;
    LlamaModel model;
    const std::string path = WriteTinyModel(type, &tm);
    RemoveOnExit cleanup{{path}};
    ASSERT_TRUE(LoadLlamaModel(path, &model).ok());
    ASSERT_EQ(MaxPredictorRank(model), tm.rank);
    ThreadPool pool(2);
    // Both ways of computing fc2: dot products over its rows, and (float
    // types) the axpy over a transposed copy.
    for (const bool transposed : {false, true}) {
      Predictor p;
      p.Init(tm.d, tm.ff, tm.rank);
      if (transposed) p.PrepareLayers(model);
      std::mt19937 rng(3);
      std::normal_distribution<float> g(0.0f, 2.0f);
      std::vector<float> h(tm.d), scores(tm.ff);
      std::vector<int32_t> ids(tm.ff);
      for (int l = 0; l < tm.layers; ++l) {
        for (float& x : h) x = g(rng);
        const std::vector<double> ref =
            RefScores(tm.w1[l], tm.w2[l], tm.d, tm.rank, tm.ff, h.data());
        double scale = 0;
        for (double s : ref) scale = std::max(scale, std::fabs(s));
        ASSERT_GT(scale, 0.1);
        // F32 and F16 (exact weights): f32 rounding only. Q8_0 rounds weights
        // and activations to 8 bits: about 1% of the largest score.
        const double tol = type == DType::kQ8_0 ? 0.03 * scale : 1e-5 * scale;
        p.Scores(model.layers[l], h.data(), scores.data(), &pool);
        for (int i = 0; i < tm.ff; ++i) {
          EXPECT_NEAR(scores[i], ref[i], tol) << DTypeName(type) << " transposed " << transposed
                                              << " layer " << l << " neuron " << i;
        }
        // Predict: exactly the neurons whose score clears the threshold (away
        // from the rounding band around it).
        const float thr = 0.1f * static_cast<float>(scale);
        const int64_t n = p.Predict(model.layers[l], h.data(), thr, ids.data(), &pool);
        std::vector<bool> chosen(tm.ff, false);
        for (int64_t k = 0; k < n; ++k) {
          if (k > 0) {
            EXPECT_LT(ids[k - 1], ids[k]);
          }
          chosen[ids[k]] = true;
        }
        for (int i = 0; i < tm.ff; ++i) {
          if (std::fabs(ref[i] - thr) > tol) {
            EXPECT_EQ(chosen[i], ref[i] >= thr) << DTypeName(type) << " neuron " << i;
          }
        }
      }
    }
  }
}

// Runs a prompt and 8 decode steps; returns all decode logits.
std::vector<float> DecodeLogits(const LlamaModel& m, SparseMode mode, std::optional<float> thr,
                                int threads, int64_t* ffn_neurons, int64_t* gate_rows = nullptr) {
  EngineOptions opt;
  opt.n_threads = threads;
  opt.sparse = mode;
  opt.sparse_threshold = thr;
  std::unique_ptr<Engine> e;
  Status s = Engine::Create(&m, opt, &e);
  EXPECT_TRUE(s.ok()) << s.message();
  if (!s.ok()) return {};
  const int32_t prompt[3] = {1, 17, 42};
  EXPECT_TRUE(e->Eval(prompt, 3).ok());
  std::vector<float> out;
  *ffn_neurons = 0;
  if (gate_rows) *gate_rows = 0;
  for (int i = 0; i < 8; ++i) {
    const int32_t t = (i * 37 + 5) % m.config.n_vocab;
    EXPECT_TRUE(e->Eval(&t, 1).ok());
    *ffn_neurons += e->last_ffn_neurons();
    if (gate_rows) *gate_rows += e->last_ffn_gate_rows();
    out.insert(out.end(), e->logits(), e->logits() + e->n_vocab());
  }
  return out;
}

TEST(PredictorTest, PredictingEveryNeuronEqualsDenseAndOracle) {
  TinyModel tm;
  LlamaModel model;
  const std::string path = WriteTinyModel(DType::kF32, &tm);
  RemoveOnExit cleanup{{path}};
  ASSERT_TRUE(LoadLlamaModel(path, &model).ok());
  for (int threads : {1, 2}) {
    int64_t n_dense, n_oracle, n_all, n_none, gates_all, gates_none;
    const std::vector<float> dense = DecodeLogits(model, SparseMode::kOff, {}, threads, &n_dense);
    const std::vector<float> oracle =
        DecodeLogits(model, SparseMode::kOracle, {}, threads, &n_oracle);
    const std::vector<float> all =
        DecodeLogits(model, SparseMode::kPredictor, -1e30f, threads, &n_all, &gates_all);
    const std::vector<float> none =
        DecodeLogits(model, SparseMode::kPredictor, 1e30f, threads, &n_none, &gates_none);
    ASSERT_EQ(dense.size(), all.size());
    EXPECT_EQ(n_dense, 8LL * tm.layers * tm.ff);
    EXPECT_EQ(gates_all, n_dense);  // every gate row read ...
    EXPECT_EQ(n_all, n_oracle);     // ... and up/down for exactly the ones that fire
    EXPECT_EQ(n_none, 0);
    EXPECT_EQ(gates_none, 0);
    EXPECT_LT(n_oracle, n_dense);
    double max_diff = 0, none_diff = 0;
    for (size_t i = 0; i < dense.size(); ++i) {
      EXPECT_NEAR(all[i], dense[i], 1e-4 * (1 + std::fabs(dense[i]))) << i;
      EXPECT_NEAR(all[i], oracle[i], 1e-4 * (1 + std::fabs(dense[i]))) << i;
      max_diff = std::max(max_diff, static_cast<double>(std::fabs(all[i] - dense[i])));
      none_diff = std::max(none_diff, static_cast<double>(std::fabs(none[i] - dense[i])));
    }
    // Predicting nothing must change the output (the predictor is really used).
    EXPECT_GT(none_diff, 100 * max_diff + 1e-3);
  }
}

// The predictor with the hot/cold split: the backend computes every hot
// neuron, the CPU the predicted cold ones. One FFN step against a double
// reference over exactly that set: sum over fired i in hot U predicted of
// relu(gate_i.x) (up_i.x) down_t[i], x = rmsnorm(h).
TEST(PredictorTest, SplitComputesHotAndPredictedColdNeurons) {
  TinyModel tm;
  LlamaModel model;
  const std::string path = WriteTinyModel(DType::kF32, &tm);
  RemoveOnExit cleanup{{path}};
  ASSERT_TRUE(LoadLlamaModel(path, &model).ok());
  const LlamaConfig& c = model.config;
  std::vector<std::vector<int32_t>> hot(c.n_layer);
  for (int l = 0; l < c.n_layer; ++l) {
    for (int32_t i = l; i < c.n_ff; i += 3) hot[l].push_back(i);
  }
  HostHotShard backend(1);
  ASSERT_TRUE(backend.Load(model, hot).ok());
  ThreadPool pool(2);
  Predictor predictor;
  predictor.Init(c.n_embd, c.n_ff, tm.rank);
  std::mt19937 rng(11);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (float threshold : {-1e30f, 0.0f, 1e30f}) {
    FfnBlock block;
    block.Init(model, 1, SparseMode::kPredictor);
    block.InitPredictor(threshold);
    ASSERT_TRUE(block.InitHotShard(hot, &backend).ok());
    for (int l = 0; l < c.n_layer; ++l) {
      std::vector<float> h(c.n_embd);
      for (float& v : h) v = nd(rng);
      std::vector<int32_t> ids(c.n_ff);
      const int64_t n = predictor.Predict(model.layers[l], h.data(), threshold, ids.data(), &pool);
      std::vector<bool> computed(c.n_ff, false);
      for (int64_t k = 0; k < n; ++k) computed[ids[k]] = true;
      for (int32_t i : hot[l]) computed[i] = true;

      const LlamaLayer& L = model.layers[l];
      const float* norm = reinterpret_cast<const float*>(L.ffn_norm.data);
      double ss = 0;
      for (float v : h) ss += static_cast<double>(v) * v;
      const double scale = 1.0 / std::sqrt(ss / c.n_embd + c.norm_eps);
      std::vector<double> x(c.n_embd), want(h.begin(), h.end());
      for (int k = 0; k < c.n_embd; ++k) x[k] = h[k] * scale * norm[k];
      int64_t fired = 0, hot_fired = 0;
      for (int32_t i = 0; i < c.n_ff; ++i) {
        if (!computed[i]) continue;
        const float* g = reinterpret_cast<const float*>(L.ffn_gate.row(i));
        const float* u = reinterpret_cast<const float*>(L.ffn_up.row(i));
        const float* dt = reinterpret_cast<const float*>(L.ffn_down_t.row(i));
        double gi = 0, ui = 0;
        for (int k = 0; k < c.n_embd; ++k) {
          gi += g[k] * x[k];
          ui += u[k] * x[k];
        }
        if (gi <= 0 || ui == 0) continue;
        ++fired;
        hot_fired += (i - l) % 3 == 0 && i >= l;
        for (int k = 0; k < c.n_embd; ++k) want[k] += gi * ui * dt[k];
      }
      block.Forward(l, 1, h.data(), &pool);
      for (int k = 0; k < c.n_embd; ++k) {
        ASSERT_NEAR(h[k], want[k], 1e-4 * (1 + std::fabs(want[k])))
            << "threshold " << threshold << " layer " << l << " dim " << k;
      }
      EXPECT_EQ(block.last_computed_neurons(), fired) << threshold;
      EXPECT_EQ(block.last_hot_fired(), hot_fired) << threshold;
      if (threshold > 1e29f) {
        EXPECT_EQ(block.last_cold_fired(), 0);
      }
    }
  }
}

TEST(PredictorTest, DecodeWithPredictorAllocatesNothing) {
  TinyModel tm;
  LlamaModel model;
  const std::string path = WriteTinyModel(DType::kF16, &tm);
  RemoveOnExit cleanup{{path}};
  ASSERT_TRUE(LoadLlamaModel(path, &model).ok());
  for (int threads : {1, 2}) {
    EngineOptions opt;
    opt.n_threads = threads;
    opt.sparse = SparseMode::kPredictor;
    opt.sparse_threshold = 0.0f;
    std::unique_ptr<Engine> e;
    ASSERT_TRUE(Engine::Create(&model, opt, &e).ok());
    int32_t t = 3;
    ASSERT_TRUE(e->Eval(&t, 1).ok());
    const long before = AllocationCount();
    for (int i = 0; i < 16; ++i) {
      t = (t * 13 + 1) % 256;
      ASSERT_TRUE(e->Eval(&t, 1).ok());
    }
    EXPECT_EQ(AllocationCount() - before, 0) << "threads=" << threads;
  }
}

TEST(PredictorTest, CreateFailsWithoutPredictorTensors) {
  TinyModel tm;
  LlamaModel model;
  const std::string path = WriteTinyModel(DType::kF32, &tm, false);
  RemoveOnExit cleanup{{path}};
  ASSERT_TRUE(LoadLlamaModel(path, &model).ok());
  EngineOptions opt;
  opt.sparse = SparseMode::kPredictor;
  std::unique_ptr<Engine> e;
  const Status s = Engine::Create(&model, opt, &e);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("fc1"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("pi-train-predictor"), std::string::npos) << s.message();
  opt.sparse = SparseMode::kOracle;  // oracle needs no predictor
  EXPECT_TRUE(Engine::Create(&model, opt, &e).ok());
}

TEST(PredictorTest, ThresholdPrecedenceFlagThenEnvThenFile) {
  LlamaConfig c;
  c.sparse_threshold = 0.25f;
  float t = 0;
  std::string src;
  unsetenv(kPredictorThresholdEnv);
  ASSERT_TRUE(ResolvePredictorThreshold(c, {}, &t, &src).ok());
  EXPECT_EQ(t, 0.25f);
  setenv(kPredictorThresholdEnv, "-1.5", 1);
  ASSERT_TRUE(ResolvePredictorThreshold(c, {}, &t, &src).ok());
  EXPECT_EQ(t, -1.5f);
  EXPECT_EQ(src, kPredictorThresholdEnv);
  ASSERT_TRUE(ResolvePredictorThreshold(c, 2.0f, &t, &src).ok());
  EXPECT_EQ(t, 2.0f);
  setenv(kPredictorThresholdEnv, "abc", 1);
  EXPECT_FALSE(ResolvePredictorThreshold(c, {}, &t).ok());
  unsetenv(kPredictorThresholdEnv);
  // A file's non-finite threshold is refused, unless the flag overrides it.
  for (float bad : {std::nanf(""), INFINITY, -INFINITY}) {
    c.sparse_threshold = bad;
    const Status s = ResolvePredictorThreshold(c, {}, &t);
    EXPECT_FALSE(s.ok());
    EXPECT_NE(s.message().find("powerinfer.sparse_threshold"), std::string::npos) << s.message();
    EXPECT_TRUE(ResolvePredictorThreshold(c, 0.5f, &t).ok());
  }
}

#else  // PI_PREDICTOR_TRAIN_TEST

// Records, per layer, the FFN input and which neurons fired.
class Recorder : public FfnObserver {
 public:
  Recorder(int layers, int d, int ff) : d_(d), ff_(ff), h(layers), fired(layers) {}
  void OnFfnInput(int layer, int batch, const float* x) override {
    h[layer].insert(h[layer].end(), x, x + static_cast<size_t>(batch) * d_);
  }
  void OnFfn(int layer, int batch, const float* act) override {
    for (int64_t i = 0; i < static_cast<int64_t>(batch) * ff_; ++i) {
      fired[layer].push_back(act[i] != 0.0f);
    }
  }
  int d_, ff_;
  std::vector<std::vector<float>> h;
  std::vector<std::vector<uint8_t>> fired;
};

std::string ReadText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Recall on text never seen: train on the first 80% of kjv-valid.txt; on
// the last 20%, which training never saw, >= 95% of the neurons that fire
// must be predicted at the file's threshold.
TEST(PredictorTest, TrainedDemoPredictorRecallOnUnseenText) {
  const std::string src = std::string(PI_SOURCE_DIR) + "/models/demo-kjv-f16.gguf";
  const std::string text = ReadText(std::string(PI_SOURCE_DIR) + "/models/kjv-valid.txt");
  ASSERT_GT(text.size(), 10000u);
  size_t cut = text.size() * 8 / 10;
  cut = text.find('\n', cut) + 1;
  const std::string train_path = TempPath("train.txt");
  std::ofstream(train_path, std::ios::binary) << text.substr(0, cut);
  const std::string out = TempPath("demo.powerinfer.gguf");
  RemoveOnExit cleanup{{train_path, out, TempPath("train.log")}};
  const std::string cmd = std::string(PI_BINARY_DIR) + "/bin/pi-train-predictor -m " + src +
                          " -f " + train_path + " -o " + out + " -t 2 > " + TempPath("train.log") +
                          " 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd << "\n" << ReadText(TempPath("train.log"));

  // The PWRI file reads back: predictors, ffn_down_t, the threshold key.
  LlamaModel orig, m;
  ASSERT_TRUE(LoadLlamaModel(src, &orig).ok());
  Status s = LoadLlamaModel(out, &m);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_TRUE(m.file->is_sparse_magic());
  ASSERT_NE(m.file->Find("powerinfer.sparse_threshold"), nullptr);
  EXPECT_EQ(m.file->Find("powerinfer.sparse_threshold")->type, GgufType::kF32);
  std::string act;
  ASSERT_TRUE(m.file->GetString(kFfnActivationKey, &act).ok());
  EXPECT_EQ(act, "relu");
  const LlamaConfig& c = m.config;
  const float thr = c.sparse_threshold;
  const int d = c.n_embd, ff = c.n_ff;
  std::vector<std::vector<float>> w1(c.n_layer), w2(c.n_layer);
  std::vector<int> rank(c.n_layer);
  for (int l = 0; l < c.n_layer; ++l) {
    const LlamaLayer& L = m.layers[l];
    ASSERT_TRUE(L.fc1.present() && L.fc2.present() && L.ffn_down_t.present()) << l;
    EXPECT_FALSE(L.ffn_down.present()) << l;
    // Default ranks: per layer, multiples of 16 in [32, n_embd / 2].
    EXPECT_EQ(L.fc1.cols, d);
    EXPECT_EQ(L.fc1.rows % 16, 0);
    EXPECT_GE(L.fc1.rows, 32);
    EXPECT_LE(L.fc1.rows, d / 2);
    EXPECT_EQ(L.fc2.cols, L.fc1.rows);
    EXPECT_EQ(L.fc2.rows, ff);
    rank[l] = static_cast<int>(L.fc1.rows);
    w1[l] = ReadMatrix(L.fc1);
    w2[l] = ReadMatrix(L.fc2);
    // ffn_down_t is the transpose of the source's ffn_down, or (the bundled
    // demo is sparse-ready) the source's own ffn_down_t.
    const std::vector<float> down_t = ReadMatrix(L.ffn_down_t);  // [ff][d]
    if (!orig.layers[l].ffn_down.present()) {
      ASSERT_TRUE(orig.layers[l].ffn_down_t.present()) << l;
      ASSERT_EQ(ReadMatrix(orig.layers[l].ffn_down_t), down_t) << l;
      continue;
    }
    const std::vector<float> down = ReadMatrix(orig.layers[l].ffn_down);  // [d][ff]
    for (int i = 0; i < ff; i += 7) {
      for (int j = 0; j < d; j += 5) ASSERT_EQ(down_t[i * d + j], down[j * ff + i]);
    }
  }

  // Dense run over the unseen 20%, in chunks of 256 with bos, as trained.
  std::unique_ptr<Tokenizer> tok;
  ASSERT_TRUE(Tokenizer::FromGguf(*m.file, &tok).ok());
  std::vector<int32_t> ids;
  ASSERT_TRUE(tok->Encode(text.substr(cut), false, &ids).ok());
  EngineOptions opt;
  opt.n_threads = 2;
  opt.n_ctx = 256;
  std::unique_ptr<Engine> e;
  ASSERT_TRUE(Engine::Create(&m, opt, &e).ok());
  Recorder rec(c.n_layer, d, ff);
  e->SetFfnObserver(&rec);
  std::vector<int32_t> chunk;
  for (size_t i = 0; i < ids.size(); i += 255) {
    chunk.assign(1, tok->bos());
    chunk.insert(chunk.end(), ids.begin() + i, ids.begin() + std::min(ids.size(), i + 255));
    e->Reset();
    ASSERT_TRUE(e->Eval(chunk.data(), static_cast<int>(chunk.size())).ok());
  }
  const int64_t n = static_cast<int64_t>(rec.h[0].size() / d);
  ASSERT_GT(n, 3000);
  int64_t tp_all = 0, pos_all = 0;
  for (int l = 0; l < c.n_layer; ++l) {
    int64_t tp = 0, fp = 0, pos = 0;
    for (int64_t t = 0; t < n; ++t) {
      const std::vector<double> sc =
          RefScores(w1[l], w2[l], d, rank[l], ff, rec.h[l].data() + t * d);
      for (int i = 0; i < ff; ++i) {
        const bool y = rec.fired[l][t * ff + i], p = sc[i] >= thr;
        tp += y && p, fp += !y && p, pos += y;
      }
    }
    tp_all += tp, pos_all += pos;
    printf("layer %d: recall %.4f precision %.4f predicted sparsity %.2f%% true sparsity %.2f%%\n",
           l, static_cast<double>(tp) / pos, static_cast<double>(tp) / (tp + fp),
           100.0 * (1.0 - static_cast<double>(tp + fp) / (n * ff)),
           100.0 * (1.0 - static_cast<double>(pos) / (n * ff)));
    EXPECT_GE(static_cast<double>(tp) / pos, 0.90) << "layer " << l;
  }
  const double recall = static_cast<double>(tp_all) / pos_all;
  printf("all layers: recall %.4f over %lld unseen tokens (threshold %g)\n", recall,
         static_cast<long long>(n), thr);
  EXPECT_GE(recall, 0.95);
}

// --predictor-type q8_0: fc1 and fc2 are Q8_0, every rank a multiple of 32
// (whole blocks), and the file runs --sparse predictor; a rank that is not
// is refused by name. A short run (a few hundred tokens, 2 epochs).
TEST(PredictorTest, Q8_0PredictorsHaveWholeBlocks) {
  const std::string src = std::string(PI_SOURCE_DIR) + "/models/demo-kjv-f16.gguf";
  const std::string text_path = std::string(PI_SOURCE_DIR) + "/models/kjv-valid.txt";
  const std::string out = TempPath("demo.q8p.gguf"), log = TempPath("train_q8.log");
  RemoveOnExit cleanup{{out, log}};
  const std::string tool = std::string(PI_BINARY_DIR) + "/bin/pi-train-predictor -m " + src +
                           " -f " + text_path + " -o " + out + " -t 2 --max-tokens 600 --epochs 2";
  ASSERT_EQ(std::system((tool + " --predictor-type q8_0 > " + log + " 2>&1").c_str()), 0)
      << ReadText(log);
  LlamaModel m;
  Status s = LoadLlamaModel(out, &m);
  ASSERT_TRUE(s.ok()) << s.message();
  for (const LlamaLayer& l : m.layers) {
    EXPECT_EQ(l.fc1.type, DType::kQ8_0);
    EXPECT_EQ(l.fc2.type, DType::kQ8_0);
    EXPECT_EQ(l.fc2.cols % 32, 0) << "rank " << l.fc2.cols;
  }
  EngineOptions opt;
  opt.sparse = SparseMode::kPredictor;
  std::unique_ptr<Engine> e;
  ASSERT_TRUE(Engine::Create(&m, opt, &e).ok());
  const int32_t t[3] = {1, 100, 200};
  for (int32_t tok : t) ASSERT_TRUE(e->Eval(&tok, 1).ok());
  EXPECT_GT(e->last_ffn_neurons(), 0);

  EXPECT_NE(std::system((tool + " --predictor-type q8_0 --rank 48 > " + log + " 2>&1").c_str()), 0);
  EXPECT_NE(ReadText(log).find("multiples of 32"), std::string::npos) << ReadText(log);
  EXPECT_NE(std::system((tool + " --predictor-type q4_1 > " + log + " 2>&1").c_str()), 0);
  EXPECT_NE(ReadText(log).find("expected f16, f32 or q8_0"), std::string::npos) << ReadText(log);
}

#endif  // PI_PREDICTOR_TRAIN_TEST

}  // namespace
}  // namespace pi
