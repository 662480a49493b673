// --sparse teal's parts: the transposed copies (weight_transpose.h), the
// column-sparse product (column_sparse.h) against a double-precision
// reference and across thread counts, the input statistics through the
// stats file, and the engine's refusals. The logits are checked against the
// numpy reference in tests/reference/check_forward.py (teal cases).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "common/compute/column_sparse.h"
#include "common/model/weight_transpose.h"
#include "common/offline/synthetic_model.h"
#include "common/plan/activation_stats.h"
#include "coordinator/engine/engine.h"
#include "kernels/cpu/quant.h"
#include "tests/gguf_rewrite.h"
#include "tests/temp_path.h"

namespace pi {
namespace {

using ::testing::HasSubstr;

SyntheticModelOptions Small(DType type) {
  SyntheticModelOptions o;
  o.n_vocab = 300;
  o.n_embd = 256;
  o.n_layer = 2;
  o.n_head = 4;
  o.n_head_kv = 2;
  o.n_ff = 512;
  o.n_ctx = 64;
  o.type = type;
  o.down_t = true;
  o.activation = "silu";
  return o;
}

// Element (r, c) of a matrix view, dequantized.
float At(const Tensor& t, int64_t r, int64_t c) {
  std::vector<float> row(static_cast<size_t>(t.cols));
  DequantizeRow(t.type, t.row(r), row.data(), t.cols);
  return row[static_cast<size_t>(c)];
}

TEST(TealTransposeTest, CopiesAreTheTransposesExactForFloatsCloseForBlocks) {
  for (DType type :
       {DType::kF32, DType::kF16, DType::kQ8_0, DType::kQ4_0, DType::kQ4_K, DType::kQ6_K}) {
    const std::string path = TempPath(std::string(DTypeName(type)) + ".gguf");
    RemoveOnExit cleanup{{path}};
    ASSERT_TRUE(WriteSyntheticModel(Small(type), path).ok());
    LlamaModel m;
    ASSERT_TRUE(LoadLlamaModel(path, &m).ok());
    ThreadPool pool(3);
    int64_t bytes = 0;
    ASSERT_TRUE(AddTransposedCopies(&m, &pool, &bytes).ok());
    EXPECT_GT(bytes, 0);
    const LlamaLayer& l = m.layers[1];
    for (const auto& [w, t] : {std::pair{&l.wq, &l.wq_t}, std::pair{&l.wk, &l.wk_t},
                               std::pair{&l.wo, &l.wo_t}, std::pair{&l.ffn_gate, &l.ffn_gate_t}}) {
      ASSERT_TRUE(t->present());
      ASSERT_EQ(t->rows, w->cols);
      ASSERT_EQ(t->cols, w->rows);
      // The copy keeps the type — Q4_K as Q4_0, Q6_K as Q8_0, whose products
      // run faster — where a row of outputs is whole blocks of it, else F16.
      const DType kept = type == DType::kQ4_K   ? DType::kQ4_0
                         : type == DType::kQ6_K ? DType::kQ8_0
                                                : type;
      const int64_t block = GetDTypeInfo(static_cast<uint32_t>(kept)).block_elems;
      EXPECT_EQ(t->type, w->rows % block == 0 ? kept : DType::kF16) << DTypeName(type);
      double worst = 0, scale = 0;
      for (int64_t r = 0; r < w->rows; r += 7) {
        for (int64_t c = 0; c < w->cols; c += 5) {
          const double a = At(*w, r, c), b = At(*t, c, r);
          worst = std::max(worst, std::fabs(a - b));
          scale = std::max(scale, std::fabs(a));
        }
      }
      // Floats copied exactly; a block type rounded a second time, along the
      // other axis: within its own step (Q4_0: a 16th of a block's range).
      const double tol = type == DType::kF32 || type == DType::kF16  ? 0.0
                         : type == DType::kQ8_0 || type == DType::kQ6_K ? scale / 60
                                                                        : scale / 6;
      EXPECT_LE(worst, tol) << DTypeName(type);
    }
  }
}

TEST(ColumnSparseTest, KeptColumnsOnlyAgainstADoubleReferenceAndThreadCountsAgree) {
  const std::string path = TempPath("m.gguf");
  RemoveOnExit cleanup{{path}};
  ASSERT_TRUE(WriteSyntheticModel(Small(DType::kQ4_0), path).ok());
  LlamaModel m;
  ASSERT_TRUE(LoadLlamaModel(path, &m).ok());
  ThreadPool build(2);
  int64_t bytes = 0;
  ASSERT_TRUE(AddTransposedCopies(&m, &build, &bytes).ok());
  const LlamaLayer& l = m.layers[0];
  const int64_t d = m.config.n_embd;
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(d));
  for (float& v : x) v = nd(rng);
  const float t = 0.6f;
  std::vector<std::vector<float>> outs;
  for (int threads : {1, 2, 3}) {
    ThreadPool pool(threads);
    ColumnSparseProduct p;
    p.Init(d, l.wq.rows + l.wk.rows);
    const int64_t kept = p.Keep(x.data(), d, t);
    int64_t expect_kept = 0;
    for (float v : x) expect_kept += std::fabs(v) > t;
    ASSERT_EQ(kept, expect_kept);
    std::vector<float> q(static_cast<size_t>(l.wq.rows), -1.0f), k(static_cast<size_t>(l.wk.rows));
    const ColumnSparseJob jobs[2] = {{&l.wq_t, q.data()}, {&l.wk_t, k.data()}};
    p.Run(jobs, 2, &pool);
    // Against the copy read in double: only kept entries count.
    for (int64_t r = 0; r < l.wq.rows; r += 11) {
      double want = 0, mag = 0;
      for (int64_t j = 0; j < d; ++j) {
        if (std::fabs(x[j]) <= t) continue;
        want += static_cast<double>(x[j]) * At(l.wq_t, j, r);
        mag += std::fabs(x[j] * At(l.wq_t, j, r));
      }
      ASSERT_NEAR(q[r], want, 1e-5 * mag + 1e-30) << "output " << r;
    }
    q.insert(q.end(), k.begin(), k.end());
    outs.push_back(q);
  }
  // Each output adds the kept rows in the same order whatever the slices.
  for (size_t i = 1; i < outs.size(); ++i) {
    ASSERT_EQ(0, std::memcmp(outs[i].data(), outs[0].data(), outs[0].size() * sizeof(float)));
  }
}

TEST(TealStatsTest, InputQuantilesRoundTripAndAreTheProfiledMagnitudes) {
  ActivationStats s;
  s.Init(2, 4);
  std::vector<float> x(100);
  for (int i = 0; i < 100; ++i) x[i] = (i % 2 ? -1.0f : 1.0f) * (i + 1) / 100.0f;
  s.OnProjectionInput(1, ProjectionInput::kAttentionOutput, 2, x.data(), 50);
  s.OnProjectionInput(0, ProjectionInput::kAttentionOutput, 1, x.data(), 100);
  s.OnProjectionInput(0, ProjectionInput::kFfn, 1, x.data(), 100);
  s.OnProjectionInput(1, ProjectionInput::kFfn, 1, x.data(), 100);
  s.FinishGateQuantiles();
  EXPECT_TRUE(s.input_quantiles[0].empty());  // nothing counted for the attention input
  ASSERT_EQ(s.input_quantiles[1].size(), 2u * kGateQuantilePoints);
  // |x| runs 0.01 .. 1.00: the median is about 0.5 (a bin is 1.1 %).
  EXPECT_NEAR(s.input_quantiles[1][50], 0.5, 0.02);
  EXPECT_NEAR(s.input_quantiles[1][kGateQuantilePoints + 100], 1.0, 0.02);
  const std::string path = TempPath("stats.gguf");
  RemoveOnExit cleanup{{path}};
  ASSERT_TRUE(WriteActivationStats(s, path).ok());
  ActivationStats r;
  ASSERT_TRUE(ReadActivationStats(path, &r).ok());
  EXPECT_TRUE(r.input_quantiles[0].empty());
  EXPECT_EQ(r.input_quantiles[1], s.input_quantiles[1]);
  EXPECT_EQ(r.input_quantiles[2], s.input_quantiles[2]);
  // Their RMS magnitudes too (--sparse-allocation greedy's weights): sqrt of
  // the mean of ((i + 1) / 100)^2 over i < 100 (layer 1's as two rows of 50).
  double sq = 0;
  for (int i = 0; i < 100; ++i) sq += (i + 1) * (i + 1) / 1e4;
  ASSERT_EQ(s.input_rms[1].size(), 2u);
  EXPECT_NEAR(s.input_rms[1][0], std::sqrt(sq / 100), 1e-6);
  EXPECT_NEAR(s.input_rms[1][1], std::sqrt(sq / 100), 1e-6);
  EXPECT_TRUE(r.input_rms[0].empty());
  EXPECT_EQ(r.input_rms[1], s.input_rms[1]);
  EXPECT_EQ(r.input_rms[2], s.input_rms[2]);
  // One layer's table without the other's: refused, naming it.
  const std::string cut = TempPath("cut.gguf");
  cleanup.paths.push_back(cut);
  ASSERT_TRUE(Rewrite(path, cut, {}, {"blk.1.ffn_in_quantiles"}).ok());
  EXPECT_THAT(ReadActivationStats(cut, &r).message(), HasSubstr("blk.1.ffn_in_quantiles"));
}

TEST(TealEngineTest, ZeroThresholdsEqualCatsAndBadThresholdsAreRefused) {
  const std::string path = TempPath("m.gguf");
  RemoveOnExit cleanup{{path}};
  ASSERT_TRUE(WriteSyntheticModel(Small(DType::kF32), path).ok());
  LlamaModel m;
  ASSERT_TRUE(LoadLlamaModel(path, &m).ok());
  EngineOptions opt;
  opt.n_threads = 2;
  opt.n_ctx = 32;
  opt.cache_type_k = opt.cache_type_v = DType::kF32;
  opt.sparse = SparseMode::kTeal;
  opt.gate_thresholds.assign(2, 0.05f);
  for (auto& t : opt.input_thresholds) t.assign(2, 0.0f);
  std::unique_ptr<Engine> teal;
  // No transposed copies yet: refused by name.
  EXPECT_THAT(Engine::Create(&m, opt, &teal).message(), HasSubstr("transposed copies"));
  ThreadPool pool(2);
  int64_t bytes = 0;
  ASSERT_TRUE(AddTransposedCopies(&m, &pool, &bytes).ok());
  ASSERT_TRUE(Engine::Create(&m, opt, &teal).ok());
  EngineOptions cats_opt = opt;
  cats_opt.sparse = SparseMode::kCats;
  std::unique_ptr<Engine> cats;
  ASSERT_TRUE(Engine::Create(&m, cats_opt, &cats).ok());
  // Thresholds of 0 keep every nonzero entry: the products read every
  // column, so teal's decode steps equal cats' (the sums in another order).
  const int n_vocab = m.config.n_vocab;
  for (int32_t token : {1, 17, 42, 99, 5}) {
    ASSERT_TRUE(teal->Eval(&token, 1).ok());
    ASSERT_TRUE(cats->Eval(&token, 1).ok());
    double diff = 0, scale = 0;
    for (int v = 0; v < n_vocab; ++v) {
      diff = std::max(diff, static_cast<double>(std::fabs(teal->logits()[v] - cats->logits()[v])));
      scale = std::max(scale, static_cast<double>(std::fabs(cats->logits()[v])));
    }
    EXPECT_LE(diff, 1e-5 * scale);
  }
  EXPECT_GT(teal->input_kept_share(), 0.99);
  // A bad threshold or a wrong count: refused by name.
  EngineOptions bad = opt;
  bad.input_thresholds[1][0] = std::nanf("");
  EXPECT_THAT(Engine::Create(&m, bad, &teal).message(), HasSubstr("input threshold"));
  bad = opt;
  bad.input_thresholds[2].pop_back();
  EXPECT_THAT(Engine::Create(&m, bad, &teal).message(), HasSubstr("1 input thresholds"));
}

}  // namespace
}  // namespace pi
