// Engine invariants on small synthetic models. (The logits themselves are
// checked against the independent numpy forward pass in
// tests/reference/check_forward.py.)
#include "coordinator/engine/engine.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "common/format/gguf.h"
#include "common/model/kv_cache.h"
#include "common/offline/synthetic_model.h"
#include "tests/fuzz/regression_files.h"
#include "tests/temp_path.h"

namespace pi {
namespace {

using ::testing::HasSubstr;

std::string WriteModel(const std::string& name, SyntheticModelOptions o) {
  const std::string path = TempPath(name + ".gguf");
  Status s = WriteSyntheticModel(o, path);
  EXPECT_TRUE(s.ok()) << s.message();
  return path;
}

SyntheticModelOptions Small(DType type, const std::string& act, bool down_t) {
  SyntheticModelOptions o;
  o.n_vocab = 300;
  o.n_embd = 128;
  o.n_layer = 2;
  o.n_head = 4;
  o.n_head_kv = 2;
  o.n_ff = 256;
  o.n_ctx = 64;
  o.type = type;
  o.activation = act;
  o.down_t = down_t;
  return o;
}

// Logits of every position, fed one token at a time or as prompt batches.
std::vector<float> RunLogits(const LlamaModel& m, const std::vector<int32_t>& toks, bool decode,
                             int threads, int batch) {
  EngineOptions opt;
  opt.n_threads = threads;
  opt.n_batch = batch;
  std::unique_ptr<Engine> e;
  Status s = Engine::Create(&m, opt, &e);
  EXPECT_TRUE(s.ok()) << s.message();
  const int nv = e->n_vocab();
  std::vector<float> out(toks.size() * nv);
  if (decode) {
    for (size_t i = 0; i < toks.size(); ++i) {
      s = e->Eval(&toks[i], 1);
      EXPECT_TRUE(s.ok()) << s.message();
      std::copy(e->logits(), e->logits() + nv, out.begin() + i * nv);
    }
  } else {
    s = e->Eval(toks.data(), static_cast<int>(toks.size()), /*all_logits=*/true);
    EXPECT_TRUE(s.ok()) << s.message();
    std::copy(e->logits(), e->logits() + out.size(), out.begin());
  }
  return out;
}

struct Case {
  DType type;
  const char* act;
  bool down_t;
};

class EngineCaseTest : public ::testing::TestWithParam<Case> {};

TEST_P(EngineCaseTest, PromptBatchesMatchTokenByTokenDecode) {
  const Case c = GetParam();
  const std::string path =
      WriteModel(std::string(DTypeName(c.type)) + c.act + (c.down_t ? "_t" : ""),
                 Small(c.type, c.act, c.down_t));
  LlamaModel m;
  ASSERT_TRUE(LoadLlamaModel(path, &m).ok());
  std::vector<int32_t> toks;
  for (int i = 0; i < 21; ++i) toks.push_back((i * 37 + 5) % 300);
  const std::vector<float> dec = RunLogits(m, toks, true, 1, 8);
  const std::vector<float> pp = RunLogits(m, toks, false, 2, 8);    // 3 batches: 8 + 8 + 5
  const std::vector<float> pp1 = RunLogits(m, toks, false, 1, 64);  // one batch
  float max_abs = 0;
  for (float v : dec) max_abs = std::max(max_abs, std::fabs(v));
  // Q8_0/Q4_0 weights read Q8_0 activations: the batch kernels' f32 sums in
  // another order may round an activation near a Q8_0 boundary to the
  // neighbouring quantum (one 127th of its block's largest value), which
  // moves the logits ~1e-4 relative (measured 1.1e-4 for q4_0 relu down_t on
  // an AVX2-only AMD EPYC); check_forward bounds such flips against numpy.
  const bool quantized = c.type == DType::kQ8_0 || c.type == DType::kQ4_0;
  const float tol = (quantized ? 1e-3f : 1e-4f) * max_abs;
  for (size_t i = 0; i < dec.size(); ++i) {
    ASSERT_NEAR(pp[i], dec[i], tol) << i;
    ASSERT_NEAR(pp1[i], dec[i], tol) << i;
  }
  std::remove(path.c_str());
}

TEST_P(EngineCaseTest, ResultsAreBitIdenticalForAnyThreadCount) {
  const Case c = GetParam();
  // Wide enough that every matrix is split into several chunks.
  SyntheticModelOptions o = Small(c.type, c.act, c.down_t);
  o.n_embd = 256;
  o.n_ff = 1024;
  const std::string path = WriteModel(std::string("t_") + DTypeName(c.type) + c.act, o);
  LlamaModel m;
  ASSERT_TRUE(LoadLlamaModel(path, &m).ok());
  std::vector<int32_t> toks = {1, 7, 99, 250, 3, 3, 42};
  const std::vector<float> t1 = RunLogits(m, toks, true, 1, 8);
  for (int threads : {2, 3}) {
    const std::vector<float> tn = RunLogits(m, toks, true, threads, 8);
    ASSERT_EQ(t1, tn) << threads << " threads";
  }
  std::remove(path.c_str());
}

INSTANTIATE_TEST_SUITE_P(Forms, EngineCaseTest,
                         ::testing::Values(Case{DType::kF32, "silu", false},
                                           Case{DType::kF16, "relu", true},
                                           Case{DType::kQ8_0, "drelu", false},
                                           Case{DType::kQ4_0, "relu", true},
                                           Case{DType::kBF16, "silu", true}),
                         [](const auto& p) {
                           return std::string(DTypeName(p.param.type)) + "_" + p.param.act +
                                  (p.param.down_t ? "_down_t" : "");
                         });

class EngineErrorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = WriteModel("errors", Small(DType::kF32, "silu", false));
    ASSERT_TRUE(LoadLlamaModel(path_, &m_).ok());
  }
  void TearDown() override { std::remove(path_.c_str()); }
  std::string path_;
  LlamaModel m_;
};

TEST_F(EngineErrorTest, ContextOverflowIsAnErrorAndChangesNothing) {
  EngineOptions opt;
  opt.n_ctx = 16;
  std::unique_ptr<Engine> e;
  ASSERT_TRUE(Engine::Create(&m_, opt, &e).ok());
  std::vector<int32_t> toks(10, 5);
  ASSERT_TRUE(e->Eval(toks.data(), 10).ok());
  Status s = e->Eval(toks.data(), 7);
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr("context overflow"));
  EXPECT_EQ(e->n_past(), 10);
  EXPECT_TRUE(e->Eval(toks.data(), 6).ok());  // exactly fills the context
}

// head_dim here is 32: Q8_0 rows fit; BF16 is not a cache type.
TEST_F(EngineErrorTest, KvCacheTypesAreCheckedAtCreate) {
  EngineOptions opt;
  opt.cache_type_k = DType::kQ8_0;
  opt.cache_type_v = DType::kF16;
  std::unique_ptr<Engine> e;
  ASSERT_TRUE(Engine::Create(&m_, opt, &e).ok());
  EXPECT_EQ(e->kv_cache_bytes(), 2LL * 64 * 2 * (34 + 64));  // layers x ctx x heads x rows
  opt.cache_type_v = DType::kBF16;
  Status s = Engine::Create(&m_, opt, &e);
  EXPECT_THAT(s.message(), HasSubstr("KV cache type bf16 is not supported"));
}

TEST(EngineKvCacheTest, Q8_0RowsNeedWholeBlocks) {
  SyntheticModelOptions o = Small(DType::kF32, "silu", false);
  o.n_head = 8;  // head_dim 16
  o.n_head_kv = 8;
  const std::string path = WriteModel("kv_q8", o);
  LlamaModel m;
  ASSERT_TRUE(LoadLlamaModel(path, &m).ok());
  EngineOptions opt;
  opt.cache_type_k = DType::kQ8_0;
  std::unique_ptr<Engine> e;
  Status s = Engine::Create(&m, opt, &e);
  EXPECT_THAT(s.message(), HasSubstr("multiple of 32, got 16"));
  std::remove(path.c_str());
}

TEST_F(EngineErrorTest, OutOfRangeTokenIsAnError) {
  std::unique_ptr<Engine> e;
  ASSERT_TRUE(Engine::Create(&m_, EngineOptions(), &e).ok());
  const int32_t bad[2] = {3, 300};
  Status s = e->Eval(bad, 2);
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr("out of range"));
  EXPECT_EQ(e->n_past(), 0);
}

// A model file whose tensors disagree with its own metadata.
class ModelValidationTest : public ::testing::Test {
 protected:
  // Writes the Small model, then lets `edit` change the writer before writing.
  Status LoadEdited(const std::function<void(GgufWriter*)>& edit) {
    GgufWriter w;
    Status s = AddSyntheticModel(Small(DType::kF32, "silu", false), &w);
    if (!s.ok()) return s;
    edit(&w);
    const std::string path = TempPath("edited.gguf");
    s = w.Write(path);
    if (!s.ok()) return s;
    LlamaModel m;
    s = LoadLlamaModel(path, &m);
    std::remove(path.c_str());
    return s;
  }
};

TEST_F(ModelValidationTest, UnsupportedArchitectureIsNamed) {
  Status s = LoadEdited(
      [](GgufWriter* w) { w->Set("general.architecture", GgufValue::String("gptneox")); });
  EXPECT_THAT(s.message(), HasSubstr("unsupported architecture 'gptneox'"));
}

TEST_F(ModelValidationTest, WrongHyperParameterShowsAsTensorShapeMismatch) {
  Status s =
      LoadEdited([](GgufWriter* w) { w->Set("llama.feed_forward_length", GgufValue::U32(512)); });
  EXPECT_THAT(s.message(), HasSubstr("blk.0.ffn_gate.weight' has shape [128, 256], expected "
                                     "[128, 512]"));
}

TEST_F(ModelValidationTest, MissingHyperParameterIsNamed) {
  Status s = LoadEdited(
      [](GgufWriter* w) { w->Set("llama.embedding_length", GgufValue::String("wide")); });
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr("llama.embedding_length"));
}

TEST_F(ModelValidationTest, HeadCountMustDivide) {
  Status s =
      LoadEdited([](GgufWriter* w) { w->Set("llama.attention.head_count_kv", GgufValue::U32(3)); });
  EXPECT_THAT(s.message(), HasSubstr("not a multiple of head_count_kv 3"));
}

TEST_F(ModelValidationTest, BadActivationKeyIsNamed) {
  Status s =
      LoadEdited([](GgufWriter* w) { w->Set(kFfnActivationKey, GgufValue::String("swiglu")); });
  EXPECT_THAT(s.message(), HasSubstr("pi.ffn_activation = 'swiglu'"));
}

TEST(ModelLoadTest, MissingFileIsAnError) {
  LlamaModel m;
  Status s = LoadLlamaModel("/nonexistent/model.gguf", &m);
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr("/nonexistent/model.gguf"));
}

}  // namespace
}  // namespace pi

namespace pi {
namespace {

// --sparse oracle: up and down only for the neurons whose gate fires. The
// logits equal dense ones to float rounding, and fewer neurons are computed.
class OracleSparseTest : public ::testing::TestWithParam<Case> {};

TEST_P(OracleSparseTest, MatchesDenseAndSkipsSilentNeurons) {
  const Case c = GetParam();
  SyntheticModelOptions o = Small(c.type, c.act, /*down_t=*/true);
  o.n_embd = 256;
  o.n_ff = 1024;
  o.planted_sparsity = 0.85;  // most neurons silent, as in a real ReLU model
  const std::string path = WriteModel(std::string("oracle_") + DTypeName(c.type) + c.act, o);
  LlamaModel m;
  ASSERT_TRUE(LoadLlamaModel(path, &m).ok());
  std::string why;
  ASSERT_TRUE(SupportsSparseFfn(m, &why)) << why;

  std::vector<int32_t> toks;
  for (int i = 0; i < 24; ++i) toks.push_back((i * 53 + 11) % 300);
  std::vector<float> logits[2];
  int64_t neurons[2] = {0, 0};
  for (int k = 0; k < 2; ++k) {
    EngineOptions opt;
    opt.n_threads = 2;
    opt.sparse = k == 0 ? SparseMode::kOff : SparseMode::kOracle;
    std::unique_ptr<Engine> e;
    ASSERT_TRUE(Engine::Create(&m, opt, &e).ok());
    for (int32_t t : toks) {
      ASSERT_TRUE(e->Eval(&t, 1).ok());
      logits[k].insert(logits[k].end(), e->logits(), e->logits() + e->n_vocab());
      neurons[k] += e->last_ffn_neurons();
    }
  }
  float max_abs = 0;
  for (float v : logits[0]) max_abs = std::max(max_abs, std::fabs(v));
  // Quantized weights dot a Q8_0 copy of each input: a last-bit difference
  // upstream (the sparse path sums in another order) can flip the rounding
  // of one element, a step of max|x| / 254 that moves the logits by ~1e-3
  // of their scale at most.
  const bool quantized = c.type == DType::kQ8_0 || c.type == DType::kQ4_0;
  const float tol = (quantized ? 2e-3f : 1e-4f) * max_abs;
  for (size_t i = 0; i < logits[0].size(); ++i) {
    ASSERT_NEAR(logits[1][i], logits[0][i], tol) << i;
  }
  const int64_t all = static_cast<int64_t>(toks.size()) * o.n_layer * o.n_ff;
  EXPECT_EQ(neurons[0], all);
  // relu computes up for the ~15% that fire; drelu for the ~39% whose gate
  // fires (its planted gate and up each fire with sqrt(0.15)).
  EXPECT_LT(neurons[1], all / 2) << "oracle computed " << neurons[1] << " of " << all;
  EXPECT_GT(neurons[1], 0);
  std::remove(path.c_str());
}

INSTANTIATE_TEST_SUITE_P(
    Forms, OracleSparseTest,
    ::testing::Values(Case{DType::kF32, "relu", true}, Case{DType::kF16, "drelu", true},
                      Case{DType::kQ8_0, "relu", true}, Case{DType::kQ4_0, "relu", true},
                      Case{DType::kBF16, "drelu", true}),
    [](const auto& p) { return std::string(DTypeName(p.param.type)) + "_" + p.param.act; });

TEST(OracleSparseFallbackTest, ModelsWithoutDownTRunDense) {
  SyntheticModelOptions o = Small(DType::kF32, "relu", /*down_t=*/false);
  const std::string path = WriteModel("oracle_fallback", o);
  LlamaModel m;
  ASSERT_TRUE(LoadLlamaModel(path, &m).ok());
  std::string why;
  EXPECT_FALSE(SupportsSparseFfn(m, &why));
  EXPECT_THAT(why, HasSubstr("ffn_down_t"));
  EngineOptions opt;
  opt.sparse = SparseMode::kOracle;
  std::unique_ptr<Engine> e;
  ASSERT_TRUE(Engine::Create(&m, opt, &e).ok());
  const int32_t t = 5;
  ASSERT_TRUE(e->Eval(&t, 1).ok());
  EXPECT_EQ(e->last_ffn_neurons(), static_cast<int64_t>(o.n_layer) * o.n_ff);
  std::remove(path.c_str());
}

// NaN or infinite logits are an error naming where the first non-finite
// value appeared: a whole tensor set to NaN makes that part the first.
TEST(EngineNonFiniteTest, NamesTheFirstPartThatProducedThem) {
  const struct {
    const char* tensor;
    const char* where;
  } cases[] = {
      {"token_embd.weight", "first appeared in the token embedding rows"},
      {"blk.0.attn_output.weight", "first appeared in layer 0's attention"},
      {"blk.1.ffn_down.weight", "first appeared in layer 1's FFN"},
      {"output.weight", "first appeared in the output head"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.tensor);
    GgufWriter w;
    ASSERT_TRUE(AddSyntheticModel(Small(DType::kF32, "silu", false), &w).ok());
    std::vector<uint8_t> bytes = w.Serialize();
    std::unique_ptr<GgufFile> f;
    ASSERT_TRUE(GgufFile::OpenBuffer(bytes.data(), bytes.size(), &f).ok());
    const TensorInfo* t = f->FindTensor(c.tensor);
    ASSERT_NE(t, nullptr);
    float* values = reinterpret_cast<float*>(bytes.data() + (t->data - bytes.data()));
    std::fill(values, values + t->nbytes / sizeof(float), std::nanf(""));
    LlamaModel m;
    ASSERT_TRUE(LoadLlamaModel(std::move(f), &m).ok());
    EngineOptions opt;
    opt.n_threads = 2;
    std::unique_ptr<Engine> e;
    ASSERT_TRUE(Engine::Create(&m, opt, &e).ok());
    const std::vector<int32_t> prompt = {1, 2, 3};
    const Status s = e->Eval(prompt.data(), 3);
    ASSERT_FALSE(s.ok());
    EXPECT_THAT(s.message(), HasSubstr("the logits hold NaN or infinite values"));
    EXPECT_THAT(s.message(), HasSubstr(c.where));
  }
}

// The KV cache and buffers are checked against the memory available before
// they are allocated; the error names -c and -b.
TEST(EngineMemoryTest, RefusesAContextThatCannotFit) {
  GgufWriter w;
  ASSERT_TRUE(AddSyntheticModel(Small(DType::kF32, "silu", false), &w).ok());
  const std::vector<uint8_t> bytes = w.Serialize();
  std::unique_ptr<GgufFile> f;
  ASSERT_TRUE(GgufFile::OpenBuffer(bytes.data(), bytes.size(), &f).ok());
  LlamaModel m;
  ASSERT_TRUE(LoadLlamaModel(std::move(f), &m).ok());
  EngineOptions opt;
  opt.n_ctx = 2000000000;
  std::unique_ptr<Engine> e;
  const Status s = Engine::Create(&m, opt, &e);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.message(),
              HasSubstr("for a context of 2000000000 tokens (-c) and batches of 64 (-b) needs"));
  EXPECT_THAT(s.message(), HasSubstr("is available"));
  // The estimate covers the KV cache exactly and the buffers from above.
  const LlamaConfig& c = m.config;
  EXPECT_GE(Engine::WorkingBytes(c, 100, 8, 2, DType::kF32, DType::kF16),
            KvCache::BytesFor(c.n_layer, 100, c.n_head_kv, c.head_dim, DType::kF32, DType::kF16));
  EXPECT_EQ(KvCache::BytesFor(c.n_layer, 100, c.n_head_kv, c.head_dim, DType::kF32, DType::kF16),
            int64_t{c.n_layer} * c.n_head_kv * 100 * c.head_dim * (4 + 2));
}

// Every input model_fuzz once flagged (tests/fuzz/regressions/model-*.gguf)
// is refused by the loader, promptly and without a large allocation.
TEST(ModelLoadTest, FuzzRegressions) {
  const std::vector<std::string> files = FuzzRegressionFiles(/*model=*/true);
  EXPECT_GE(files.size(), 1u);
  for (const std::string& path : files) {
    LlamaModel m;
    EXPECT_FALSE(LoadLlamaModel(path, &m).ok()) << path;
  }
}

}  // namespace
}  // namespace pi
