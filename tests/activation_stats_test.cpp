// ActivationStats: firing counts through the engine's observer hook against an
// independent count, the stats file round trip and its validation, matching
// stats to models, and the concentration numbers on hand-made counts.
#include "common/plan/activation_stats.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "common/base/thread_pool.h"
#include "common/compute/attention_block.h"
#include "common/model/kv_cache.h"
#include "common/offline/synthetic_model.h"
#include "coordinator/engine/engine.h"
#include "coordinator/route/ffn_block.h"
#include "kernels/cpu/quant.h"
#include "tests/temp_path.h"

namespace pi {
namespace {

using ::testing::HasSubstr;

SyntheticModelOptions Small(const std::string& act, int n_layer, int n_ff, uint64_t seed = 1) {
  SyntheticModelOptions o;
  o.n_vocab = 300;
  o.n_embd = 64;
  o.n_layer = n_layer;
  o.n_head = 4;
  o.n_head_kv = 2;
  o.n_ff = n_ff;
  o.n_ctx = 64;
  o.type = DType::kF32;
  o.activation = act;
  o.seed = seed;
  return o;
}

void LoadSynthetic(const SyntheticModelOptions& o, const std::string& name, LlamaModel* m) {
  const std::string path = TempPath(name + ".gguf");
  Status s = WriteSyntheticModel(o, path);
  ASSERT_TRUE(s.ok()) << s.message();
  s = LoadLlamaModel(path, m);
  ASSERT_TRUE(s.ok()) << s.message();
}

std::vector<int32_t> Tokens(int n, int n_vocab) {
  std::vector<int32_t> t(n);
  for (int i = 0; i < n; ++i) t[i] = (i * 37 + 11) % n_vocab;
  return t;
}

// The reference count: the engine's forward pass re-done as a plain loop over
// AttentionBlock/FfnBlock (same batching), counting non-zero activations with
// a scalar loop. For an f32 model it also checks each firing decision against
// the gate and up products computed here in double precision: a ReLU-form
// neuron fires iff relu(gate) (and for dReLU relu(up)) is non-zero.
struct ReferenceCount {
  std::vector<std::vector<int64_t>> counts;  // [layer][neuron]
  int64_t tokens = 0;
  int64_t decisions_checked = 0;
  int64_t decisions_wrong = 0;
};

void CountByHand(const LlamaModel& m, const std::vector<std::vector<int32_t>>& chunks, int n_batch,
                 ReferenceCount* ref) {
  const LlamaConfig& c = m.config;
  const int d = c.n_embd, ff = c.n_ff, n_ctx = 64;
  ThreadPool pool(1);
  KvCache cache;
  EXPECT_TRUE(cache.Init(c.n_layer, n_ctx, c.n_head_kv, c.head_dim).ok());
  AttentionBlock attn;
  attn.Init(c, n_batch, n_ctx, 1);
  FfnBlock ffn;
  ffn.Init(m, n_batch);
  ref->counts.assign(c.n_layer, std::vector<int64_t>(ff, 0));
  std::vector<float> h(static_cast<size_t>(n_batch) * d), x(d);
  for (const std::vector<int32_t>& chunk : chunks) {
    int n_past = 0;
    for (size_t j = 0; j < chunk.size(); j += n_batch) {
      const int batch = static_cast<int>(std::min<size_t>(n_batch, chunk.size() - j));
      for (int b = 0; b < batch; ++b) {
        DequantizeRow(m.token_embd.type, m.token_embd.row(chunk[j + b]), h.data() + b * d, d);
      }
      for (int il = 0; il < c.n_layer; ++il) {
        const LlamaLayer& L = m.layers[il];
        attn.Forward(L, il, n_past, batch, h.data(), &cache, &pool);
        // Gate and up of the FFN input, in double, before FfnBlock updates h.
        std::vector<double> gate(static_cast<size_t>(batch) * ff), up(gate.size());
        const float* norm = reinterpret_cast<const float*>(L.ffn_norm.data);
        for (int b = 0; b < batch; ++b) {
          const float* hb = h.data() + b * d;
          double ss = 0;
          for (int k = 0; k < d; ++k) ss += static_cast<double>(hb[k]) * hb[k];
          const double scale = 1.0 / std::sqrt(ss / d + c.norm_eps);
          for (int k = 0; k < d; ++k) x[k] = static_cast<float>(hb[k] * scale * norm[k]);
          for (int i = 0; i < ff; ++i) {
            const float* wg = reinterpret_cast<const float*>(L.ffn_gate.row(i));
            const float* wu = reinterpret_cast<const float*>(L.ffn_up.row(i));
            double g = 0, u = 0;
            for (int k = 0; k < d; ++k) {
              g += static_cast<double>(wg[k]) * x[k];
              u += static_cast<double>(wu[k]) * x[k];
            }
            gate[b * ff + i] = g;
            up[b * ff + i] = u;
          }
        }
        ffn.Forward(il, batch, h.data(), &pool);
        const float* act = ffn.activations();
        for (int b = 0; b < batch; ++b) {
          for (int i = 0; i < ff; ++i) {
            const bool fired = act[b * ff + i] != 0.0f;
            if (fired) ++ref->counts[il][i];
            const double g = gate[b * ff + i], u = up[b * ff + i];
            bool expect = true;  // silu: fires unless exactly zero
            double margin = std::fabs(g);
            if (c.activation == FfnActivation::kRelu) {
              expect = g > 0;
            } else if (c.activation == FfnActivation::kDRelu) {
              expect = g > 0 && u > 0;
              margin = std::min(std::fabs(g), std::fabs(u));
            }
            if (margin > 1e-4) {  // far from the boundary: no rounding can flip it
              ++ref->decisions_checked;
              if (fired != expect) ++ref->decisions_wrong;
            }
          }
        }
      }
      n_past += batch;
      ref->tokens += batch;
    }
  }
}

class CountTest : public ::testing::TestWithParam<const char*> {};

TEST_P(CountTest, ObserverCountsMatchAnIndependentCount) {
  const std::string act = GetParam();
  LlamaModel m;
  ASSERT_NO_FATAL_FAILURE(LoadSynthetic(Small(act, 3, 256), "count_" + act, &m));
  const int n_batch = 16;
  const std::vector<int32_t> all = Tokens(70, m.config.n_vocab);
  // Two chunks, as pi-profile evaluates them: Reset in between.
  const std::vector<std::vector<int32_t>> chunks = {
      std::vector<int32_t>(all.begin(), all.begin() + 40),
      std::vector<int32_t>(all.begin() + 40, all.end())};

  EngineOptions opt;
  opt.n_threads = 2;
  opt.n_ctx = 64;
  opt.n_batch = n_batch;
  opt.cache_type_k = opt.cache_type_v = DType::kF32;  // as the reference's cache
  std::unique_ptr<Engine> e;
  ASSERT_TRUE(Engine::Create(&m, opt, &e).ok());
  ActivationStats stats;
  InitActivationStatsFor(m, &stats);
  e->SetFfnObserver(&stats);
  for (const auto& chunk : chunks) {
    e->Reset();
    ASSERT_TRUE(e->Eval(chunk.data(), static_cast<int>(chunk.size())).ok());
  }
  // Unset, the observer is no longer told.
  e->SetFfnObserver(nullptr);
  e->Reset();
  ASSERT_TRUE(e->Eval(all.data(), 8).ok());

  ReferenceCount ref;
  CountByHand(m, chunks, n_batch, &ref);
  EXPECT_EQ(stats.n_tokens(), 70u);
  EXPECT_EQ(ref.tokens, 70);
  EXPECT_GT(ref.decisions_checked, 3 * 256 * 70 * 9 / 10);
  EXPECT_EQ(ref.decisions_wrong, 0);
  int64_t total = 0;
  for (int il = 0; il < 3; ++il) {
    for (int i = 0; i < 256; ++i) {
      ASSERT_EQ(stats.counts(il)[i], ref.counts[il][i]) << "layer " << il << " neuron " << i;
      total += ref.counts[il][i];
    }
  }
  const double fired_share = static_cast<double>(total) / (3.0 * 256 * 70);
  if (act == "silu") {
    EXPECT_EQ(fired_share, 1.0);
    EXPECT_EQ(stats.Sparsity(0), 0.0);
  } else {
    // Random weights: about half (relu) or a quarter (drelu) of the neurons fire.
    EXPECT_GT(fired_share, 0.1);
    EXPECT_LT(fired_share, 0.9);
    EXPECT_NEAR(
        stats.Sparsity(1),
        1.0 -
            [&] {
              double f = 0;
              for (int i = 0; i < 256; ++i) f += ref.counts[1][i];
              return f / (256.0 * 70);
            }(),
        1e-12);
  }
}

INSTANTIATE_TEST_SUITE_P(Activations, CountTest, ::testing::Values("relu", "drelu", "silu"));

ActivationStats HandMade(int n_layer, int n_ff) {
  ActivationStats s;
  s.Init(n_layer, n_ff);
  s.set_n_tokens(1000);
  for (int il = 0; il < n_layer; ++il) {
    for (int i = 0; i < n_ff; ++i) s.mutable_counts(il)[i] = (il * 131 + i * 7) % 1001;
  }
  s.model_name = "hand-made";
  s.model_fingerprint = 0x0123456789abcdefull;
  s.activation = "relu";
  s.corpus = "texts/ (3 files)";
  s.n_ctx = 256;
  return s;
}

TEST(ActivationStatsFileTest, RoundTrip) {
  const ActivationStats a = HandMade(12, 40);
  const std::string path = TempPath("roundtrip.stats.gguf");
  Status s = WriteActivationStats(a, path);
  ASSERT_TRUE(s.ok()) << s.message();
  ActivationStats b;
  s = ReadActivationStats(path, &b);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(b.n_layer(), 12);
  EXPECT_EQ(b.n_ff(), 40);
  EXPECT_EQ(b.n_tokens(), 1000u);
  EXPECT_EQ(b.model_name, "hand-made");
  EXPECT_EQ(b.model_fingerprint, 0x0123456789abcdefull);
  EXPECT_EQ(b.activation, "relu");
  EXPECT_EQ(b.corpus, "texts/ (3 files)");
  EXPECT_EQ(b.n_ctx, 256);
  for (int il = 0; il < 12; ++il) {
    for (int i = 0; i < 40; ++i) ASSERT_EQ(b.counts(il)[i], (il * 131 + i * 7) % 1001);
  }
  // The documented keys, read with the generic reader.
  std::unique_ptr<GgufFile> f;
  ASSERT_TRUE(GgufFile::Open(path, &f).ok());
  std::string fp;
  ASSERT_TRUE(f->GetString("pi.stats.model_fingerprint", &fp).ok());
  EXPECT_EQ(fp, "0123456789abcdef");
  const GgufValue* nt = f->Find("pi.stats.n_tokens");
  ASSERT_NE(nt, nullptr);
  EXPECT_EQ(nt->type, GgufType::kU64);
  const TensorInfo* t = f->FindTensor("blk.11.ffn_fire_count");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->type, DType::kI32);
  EXPECT_EQ(t->ne[0], 40);
}

// A writer with every stats key set; the test adds the tensors.
GgufWriter StatsWriter(int n_layer, int n_ff, uint64_t n_tokens) {
  GgufWriter w;
  w.Set("pi.stats.version", GgufValue::U32(1));
  w.Set("pi.stats.model_name", GgufValue::String("m"));
  w.Set("pi.stats.model_fingerprint", GgufValue::String("00000000000000ff"));
  w.Set("pi.stats.n_layer", GgufValue::U32(n_layer));
  w.Set("pi.stats.n_ff", GgufValue::U32(n_ff));
  w.Set("pi.stats.n_tokens", GgufValue::U64(n_tokens));
  w.Set("pi.stats.activation", GgufValue::String("relu"));
  w.Set("pi.stats.corpus", GgufValue::String("c.txt"));
  return w;
}

void AddCounts(GgufWriter* w, const std::string& name, int n_ff, int32_t value) {
  std::vector<int32_t> v(n_ff, value);
  ASSERT_TRUE(w->AddTensor(name, DType::kI32, {n_ff}, v.data()).ok());
}

Status ReadBytes(const GgufWriter& w, ActivationStats* out) {
  const std::vector<uint8_t> bytes = w.Serialize();
  std::unique_ptr<GgufFile> f;
  PI_RETURN_IF_ERROR(GgufFile::OpenBuffer(bytes.data(), bytes.size(), &f));
  return ReadActivationStats(*f, out);
}

TEST(ActivationStatsFileTest, LayersAreMatchedByNumberNotByName) {
  // Tensors in string order: blk.0, blk.1, blk.10, blk.11, blk.2, ... blk.9.
  // Layer L's counts are all L: a reader that sorts names would give layer 2
  // the counts of blk.10.
  const int n_layer = 12;
  std::vector<std::string> names;
  for (int il = 0; il < n_layer; ++il) names.push_back("blk." + std::to_string(il));
  std::sort(names.begin(), names.end());
  ASSERT_EQ(names[2], "blk.10");
  GgufWriter w = StatsWriter(n_layer, 8, 100);
  for (const std::string& n : names) {
    AddCounts(&w, n + ".ffn_fire_count", 8, std::stoi(n.substr(4)));
  }
  ActivationStats s;
  Status st = ReadBytes(w, &s);
  ASSERT_TRUE(st.ok()) << st.message();
  for (int il = 0; il < n_layer; ++il) {
    EXPECT_EQ(s.counts(il)[0], il) << "layer " << il;
    EXPECT_EQ(s.counts(il)[7], il) << "layer " << il;
  }
}

TEST(ActivationStatsFileTest, RejectsMalformedFiles) {
  ActivationStats s;
  {  // layer 1 missing
    GgufWriter w = StatsWriter(2, 4, 10);
    AddCounts(&w, "blk.0.ffn_fire_count", 4, 1);
    EXPECT_THAT(ReadBytes(w, &s).message(), HasSubstr("'blk.1.ffn_fire_count' is missing"));
  }
  {  // a leading zero is not layer 1
    GgufWriter w = StatsWriter(2, 4, 10);
    AddCounts(&w, "blk.0.ffn_fire_count", 4, 1);
    AddCounts(&w, "blk.01.ffn_fire_count", 4, 1);
    EXPECT_THAT(ReadBytes(w, &s).message(), HasSubstr("'blk.1.ffn_fire_count' is missing"));
  }
  {  // layer beyond n_layer
    GgufWriter w = StatsWriter(2, 4, 10);
    AddCounts(&w, "blk.0.ffn_fire_count", 4, 1);
    AddCounts(&w, "blk.1.ffn_fire_count", 4, 1);
    AddCounts(&w, "blk.2.ffn_fire_count", 4, 1);
    EXPECT_THAT(ReadBytes(w, &s).message(), HasSubstr("layer 2, but pi.stats.n_layer is 2"));
  }
  {  // wrong shape
    GgufWriter w = StatsWriter(1, 4, 10);
    AddCounts(&w, "blk.0.ffn_fire_count", 5, 1);
    EXPECT_THAT(ReadBytes(w, &s).message(), HasSubstr("expected i32 [4]"));
  }
  {  // wrong type
    GgufWriter w = StatsWriter(1, 4, 10);
    std::vector<float> v(4, 1.0f);
    ASSERT_TRUE(w.AddTensor("blk.0.ffn_fire_count", DType::kF32, {4}, v.data()).ok());
    EXPECT_THAT(ReadBytes(w, &s).message(), HasSubstr("expected i32 [4]"));
  }
  {  // a count above the tokens seen
    GgufWriter w = StatsWriter(1, 4, 10);
    AddCounts(&w, "blk.0.ffn_fire_count", 4, 11);
    EXPECT_THAT(ReadBytes(w, &s).message(), HasSubstr("outside [0, n_tokens = 10]"));
  }
  {  // a missing key
    GgufWriter bad;
    bad.Set("pi.stats.version", GgufValue::U32(1));
    AddCounts(&bad, "blk.0.ffn_fire_count", 4, 1);
    EXPECT_THAT(ReadBytes(bad, &s).message(), HasSubstr("pi.stats.model_name"));
  }
  {  // absurd sizes are refused before any allocation
    GgufWriter w = StatsWriter(1, 4, 10);
    w.Set("pi.stats.n_ff", GgufValue::U32(0xffffffffu));
    EXPECT_THAT(ReadBytes(w, &s).message(), HasSubstr("pi.stats.n_ff 4294967295 out of range"));
  }
  // Not a file at all.
  EXPECT_FALSE(ReadActivationStats(TempPath("does-not-exist.gguf"), &s).ok());
}

TEST(ActivationStatsMatchTest, RejectsStatsOfAnotherModel) {
  LlamaModel a, a_again, more_layers, wider, other_seed;
  ASSERT_NO_FATAL_FAILURE(LoadSynthetic(Small("relu", 2, 128), "match_a", &a));
  ASSERT_NO_FATAL_FAILURE(LoadSynthetic(Small("relu", 2, 128), "match_a2", &a_again));
  ASSERT_NO_FATAL_FAILURE(LoadSynthetic(Small("relu", 3, 128), "match_l", &more_layers));
  ASSERT_NO_FATAL_FAILURE(LoadSynthetic(Small("relu", 2, 160), "match_f", &wider));
  ASSERT_NO_FATAL_FAILURE(LoadSynthetic(Small("relu", 2, 128, 7), "match_s", &other_seed));

  ActivationStats st;
  InitActivationStatsFor(a, &st);
  // Through the file, as a later tool would see it.
  const std::string path = TempPath("match.stats.gguf");
  ASSERT_TRUE(WriteActivationStats(st, path).ok());
  ActivationStats read;
  ASSERT_TRUE(ReadActivationStats(path, &read).ok());

  EXPECT_TRUE(CheckStatsMatchModel(read, a).ok());
  // The same bytes in another file: the same model.
  EXPECT_TRUE(CheckStatsMatchModel(read, a_again).ok());
  EXPECT_THAT(CheckStatsMatchModel(read, more_layers).message(),
              HasSubstr("with 2 layers; this model has 3 layers"));
  EXPECT_THAT(CheckStatsMatchModel(read, wider).message(),
              HasSubstr("with n_ff 128; this model has n_ff 160"));
  const Status s = CheckStatsMatchModel(read, other_seed);
  EXPECT_THAT(s.message(), HasSubstr("not this model"));
  EXPECT_THAT(s.message(), HasSubstr(FingerprintHex(ModelFingerprint(*a.file))));
  EXPECT_NE(ModelFingerprint(*a.file), ModelFingerprint(*other_seed.file));
}

// Statistics carry over to a copy of the same weights in other types (an F32
// model's to its Q8_0 and Q4_0 copies), with a note; not to other weights of
// the same shapes.
TEST(ActivationStatsMatchTest, CarryOverToCopiesInOtherTypes) {
  SyntheticModelOptions o = Small("relu", 2, 128);
  o.n_vocab = 512;  // token_embd: 512 x 64 values, the 256 blocks WeightSigns reads
  LlamaModel f32, q8, q4, other;
  ASSERT_NO_FATAL_FAILURE(LoadSynthetic(o, "carry_f32", &f32));
  o.type = DType::kQ8_0;
  ASSERT_NO_FATAL_FAILURE(LoadSynthetic(o, "carry_q8", &q8));
  o.type = DType::kQ4_0;
  ASSERT_NO_FATAL_FAILURE(LoadSynthetic(o, "carry_q4", &q4));
  o.seed = 9;
  ASSERT_NO_FATAL_FAILURE(LoadSynthetic(o, "carry_other", &other));
  EXPECT_EQ(ShapeFingerprint(*f32.file), ShapeFingerprint(*q4.file));
  EXPECT_EQ(ShapeFingerprint(*f32.file), ShapeFingerprint(*other.file));
  EXPECT_EQ(WeightSigns(*f32.file).size(), 64u);

  ActivationStats st;
  InitActivationStatsFor(f32, &st);
  const std::string path = TempPath("carry.stats.gguf");
  ASSERT_TRUE(WriteActivationStats(st, path).ok());
  ActivationStats read;
  ASSERT_TRUE(ReadActivationStats(path, &read).ok());
  EXPECT_EQ(read.weight_signs, WeightSigns(*f32.file));
  for (const LlamaModel* copy : {&q8, &q4}) {
    std::string note;
    EXPECT_TRUE(CheckStatsMatchModel(read, *copy, &note).ok());
    EXPECT_THAT(note, HasSubstr("a copy in other types?"));
  }
  std::string note;
  EXPECT_THAT(CheckStatsMatchModel(read, other, &note).message(), HasSubstr("not this model"));
  EXPECT_TRUE(note.empty());
}

TEST(ActivationStatsTest, FingerprintFollowsTheDocumentedRecipe) {
  // A two-tensor file hashed here by the recipe in the header.
  GgufWriter w;
  const float v[4] = {1, 2, 3, 4};
  ASSERT_TRUE(w.AddTensor("a", DType::kF32, {4}, v).ok());
  ASSERT_TRUE(w.AddTensor("bb", DType::kF32, {2, 2}, v).ok());
  const std::vector<uint8_t> bytes = w.Serialize();
  std::unique_ptr<GgufFile> f;
  ASSERT_TRUE(GgufFile::OpenBuffer(bytes.data(), bytes.size(), &f).ok());
  uint64_t h = 0xcbf29ce484222325ull;
  auto add = [&h](const void* p, size_t n) {
    for (size_t i = 0; i < n; ++i) {
      h ^= static_cast<const uint8_t*>(p)[i];
      h *= 0x100000001b3ull;
    }
  };
  // Little-endian host assumed for the integer fields (x86-64, aarch64).
  const uint32_t f32 = 0, one = 1, two = 2;
  const int64_t ne4 = 4, ne2 = 2;
  add("a", 2);
  add(&f32, 4);
  add(&one, 4);
  add(&ne4, 8);
  add(v, 16);
  add("bb", 3);
  add(&f32, 4);
  add(&two, 4);
  add(&ne2, 8);
  add(&ne2, 8);
  add(v, 16);
  const uint64_t size = bytes.size();
  add(&size, 8);
  EXPECT_EQ(ModelFingerprint(*f), h);
  EXPECT_EQ(FingerprintHex(0xabc), "0000000000000abc");
}

TEST(ActivationStatsTest, ConcentrationOnHandMadeCounts) {
  // 100 firings: the top neuron has 50, the top two 80, the top four 95.
  const int64_t c[10] = {0, 5, 30, 0, 10, 0, 50, 5, 0, 0};
  EXPECT_DOUBLE_EQ(FiringConcentration(c, 10, 0.5), 0.1);
  EXPECT_DOUBLE_EQ(FiringConcentration(c, 10, 0.8), 0.2);
  EXPECT_DOUBLE_EQ(FiringConcentration(c, 10, 0.95), 0.4);
  EXPECT_DOUBLE_EQ(FiringConcentration(c, 10, 0.96), 0.5);
  EXPECT_DOUBLE_EQ(FiringConcentration(c, 10, 1.0), 0.5);
  // Uniform: the share of neurons equals the share of firings (rounded up).
  const int64_t u[4] = {3, 3, 3, 3};
  EXPECT_DOUBLE_EQ(FiringConcentration(u, 4, 0.5), 0.5);
  EXPECT_DOUBLE_EQ(FiringConcentration(u, 4, 0.8), 1.0);
  const int64_t z[3] = {0, 0, 0};
  EXPECT_DOUBLE_EQ(FiringConcentration(z, 3, 0.5), 0.0);
  EXPECT_DOUBLE_EQ(FiringConcentration(c, 0, 0.5), 0.0);
}

TEST(ActivationStatsTest, CountsAndSparsityOfHandMadeActivations) {
  ActivationStats s;
  s.Init(2, 3);
  const float batch[2 * 3] = {0.0f, -1.5f,  0.0f,   // token 0
                              2.0f, 1e-30f, 0.0f};  // token 1
  s.OnFfn(0, 2, batch);
  s.OnFfn(1, 1, batch + 3);
  s.OnFfn(1, 1, batch);
  s.OnFfn(5, 1, batch);  // out of range: ignored
  EXPECT_EQ(s.n_tokens(), 2u);
  EXPECT_EQ(s.counts(0)[0], 1);
  EXPECT_EQ(s.counts(0)[1], 2);
  EXPECT_EQ(s.counts(0)[2], 0);
  EXPECT_EQ(s.counts(1)[0], 1);
  EXPECT_EQ(s.counts(1)[1], 2);
  EXPECT_DOUBLE_EQ(s.Sparsity(0), 1.0 - 3.0 / 6.0);
  ActivationStats empty;
  empty.Init(1, 4);
  EXPECT_EQ(empty.Sparsity(0), 0.0);
}

TEST(ActivationStatsTest, WriteRefusesCountsBeyondI32) {
  ActivationStats s;
  s.Init(1, 2);
  s.set_n_tokens(uint64_t{1} << 32);
  s.mutable_counts(0)[1] = int64_t{1} << 31;
  EXPECT_THAT(WriteActivationStats(s, TempPath("big.stats.gguf")).message(),
              HasSubstr("layer 0 neuron 1 count 2147483648 does not fit"));
}

}  // namespace
}  // namespace pi
