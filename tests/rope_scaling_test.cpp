// RoPE scaling as llama.cpp's files carry it: Llama 3.1's rope_freqs.weight
// factors (common/offline/rope_scaling.h) against Hugging Face's own
// formulation of the same scaling (the scaled inverse frequencies, computed
// here), and the loader's reading of the factors and of linear scaling, with
// the files it must refuse, by name. Logits with scaling against the numpy
// reference: check_forward (its llama3rope and ropelinear cases).
#include "common/offline/rope_scaling.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "common/format/gguf.h"
#include "common/model/llama_model.h"
#include "common/offline/synthetic_model.h"
#include "tests/temp_path.h"

namespace pi {
namespace {

using ::testing::HasSubstr;

// Hugging Face's llama3 inverse frequencies (transformers'
// _compute_llama3_parameters): the original ones, divided by `factor` past
// the low-frequency wavelength, and between the two wavelengths blended
// (1 - s) * inv / factor + s * inv.
std::vector<double> HfLlama3InvFreq(const Llama3RopeScaling& s, int dim, double base) {
  std::vector<double> out;
  for (int k = 0; k < dim; k += 2) {
    const double inv = 1.0 / std::pow(base, static_cast<double>(k) / dim);
    const double wavelen = 2 * M_PI / inv;
    const double low_wavelen = s.original_context / s.low_freq_factor;
    const double high_wavelen = s.original_context / s.high_freq_factor;
    double scaled = wavelen > low_wavelen ? inv / s.factor : inv;
    if (!(wavelen < high_wavelen) && !(wavelen > low_wavelen)) {
      const double smooth = (s.original_context / wavelen - s.low_freq_factor) /
                            (s.high_freq_factor - s.low_freq_factor);
      scaled = (1 - smooth) * scaled / s.factor + smooth * scaled;
    }
    out.push_back(scaled);
  }
  return out;
}

TEST(RopeScalingTest, Llama3FactorsGiveHuggingFacesInverseFrequencies) {
  struct Case {
    Llama3RopeScaling s;
    int dim;
    double base;
  };
  // Llama 3.1 8B (head 128, theta 500000, factor 8, original context 8192),
  // Llama 3.2's factor 32, and a small head with a short original context.
  const Case cases[] = {{{8, 1, 4, 8192}, 128, 500000.0},
                        {{32, 1, 4, 8192}, 64, 500000.0},
                        {{8, 1, 4, 64}, 16, 10000.0}};
  for (const Case& c : cases) {
    const std::vector<float> f = Llama3RopeFactors(c.s, c.dim, c.base);
    const std::vector<double> hf = HfLlama3InvFreq(c.s, c.dim, c.base);
    ASSERT_EQ(f.size(), hf.size());
    int ones = 0, full = 0;
    for (size_t i = 0; i < f.size(); ++i) {
      const double inv = std::pow(c.base, -2.0 * static_cast<double>(i) / c.dim);
      EXPECT_NEAR(inv / f[i], hf[i], 1e-6 * hf[i]) << c.dim << " pair " << i;
      ones += f[i] == 1.0f;
      full += f[i] == static_cast<float>(c.s.factor);
    }
    // Each case reaches the unscaled, the fully scaled and the blended pairs.
    EXPECT_GT(ones, 0);
    EXPECT_GT(full, 0);
    EXPECT_LT(ones + full, static_cast<int>(f.size()));
  }
}

class RopeFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    o_.n_vocab = 64;
    o_.n_embd = 32;
    o_.n_head = 2;
    o_.n_ff = 64;
    o_.n_layer = 1;
  }
  void TearDown() override { std::remove(path_.c_str()); }
  // Writes the synthetic model, `edit` applied to its writer, and loads it.
  Status Load(const std::function<void(GgufWriter*)>& edit, LlamaModel* m) {
    GgufWriter w;
    Status s = AddSyntheticModel(o_, &w);
    if (!s.ok()) return s;
    if (edit) edit(&w);
    s = w.Write(path_);
    return s.ok() ? LoadLlamaModel(path_, m) : s;
  }

  SyntheticModelOptions o_;
  std::string path_ = TempPath("rope.gguf");
};

TEST_F(RopeFileTest, TheLoaderReadsLlama3FactorsAndLinearScaling) {
  LlamaModel plain, llama3, linear;
  ASSERT_TRUE(Load(nullptr, &plain).ok());
  EXPECT_TRUE(plain.config.rope_freq_factors.empty());
  EXPECT_EQ(plain.config.rope_freq_scale, 1.0f);

  o_.rope_scaling = "llama3";
  o_.rope_original_ctx = 64;
  ASSERT_TRUE(Load(nullptr, &llama3).ok());
  const int half = llama3.config.rope_dims / 2;
  EXPECT_EQ(llama3.config.rope_freq_factors,
            Llama3RopeFactors({8, 1, 4, 64}, llama3.config.rope_dims, 10000.0));
  EXPECT_EQ(static_cast<int>(llama3.config.rope_freq_factors.size()), half);

  o_.rope_scaling = "linear";
  o_.rope_factor = 4;
  ASSERT_TRUE(Load(nullptr, &linear).ok());
  EXPECT_EQ(linear.config.rope_freq_scale, 0.25f);
  EXPECT_TRUE(linear.config.rope_freq_factors.empty());

  // RopeAnglesOf rotates by what the file says: pair i's angle at 0.25 of
  // the position, the llama3 one divided by its factor.
  std::vector<float> a(plain.config.rope_dims), b(a.size()), c(a.size());
  RopeAnglesOf(plain.config, 40, a.data());
  RopeAnglesOf(linear.config, 160, b.data());
  RopeAnglesOf(llama3.config, 40, c.data());
  for (int i = 0; i < half; ++i) {
    EXPECT_NEAR(a[2 * i + 1], b[2 * i + 1], 1e-6) << i;
    const double angle = 40 * std::pow(10000.0, -2.0 * i / plain.config.rope_dims) /
                         llama3.config.rope_freq_factors[i];
    EXPECT_NEAR(c[2 * i + 1], std::sin(angle), 1e-6) << i;
  }
}

TEST_F(RopeFileTest, ScalingTypeNoneMeansUnscaled) {
  o_.rope_scaling = "linear";
  LlamaModel m;
  ASSERT_TRUE(
      Load([](GgufWriter* w) { w->Set("llama.rope.scaling.type", GgufValue::String("none")); }, &m)
          .ok());
  EXPECT_EQ(m.config.rope_freq_scale, 1.0f);
}

TEST_F(RopeFileTest, RefusesWhatItCannotRotateByName) {
  LlamaModel m;
  Status s =
      Load([](GgufWriter* w) { w->Set("llama.rope.scaling.type", GgufValue::String("yarn")); }, &m);
  EXPECT_EQ(s.code(), Status::Code::kUnsupported);
  EXPECT_THAT(s.message(), HasSubstr("rope.scaling.type 'yarn'"));

  s = Load([](GgufWriter* w) { w->Set("llama.rope.scaling.factor", GgufValue::F32(-2)); }, &m);
  EXPECT_EQ(s.code(), Status::Code::kInvalid);
  EXPECT_THAT(s.message(), HasSubstr("rope.scaling.factor"));

  const int half = o_.n_embd / o_.n_head / 2;
  s = Load(
      [half](GgufWriter* w) {
        std::vector<float> f(half + 1, 1.0f);
        ASSERT_TRUE(w->AddTensor("rope_freqs.weight", DType::kF32, {half + 1}, f.data()).ok());
      },
      &m);
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr("rope_freqs.weight"));

  s = Load(
      [half](GgufWriter* w) {
        std::vector<float> f(half, 1.0f);
        f[1] = 0.0f;
        ASSERT_TRUE(w->AddTensor("rope_freqs.weight", DType::kF32, {half}, f.data()).ok());
      },
      &m);
  EXPECT_EQ(s.code(), Status::Code::kInvalid);
  EXPECT_THAT(s.message(), HasSubstr("rope_freqs.weight[1]"));
}

TEST(RopeScalingTest, SyntheticOptionsAreChecked) {
  SyntheticModelOptions o;
  o.rope_scaling = "yarn";
  EXPECT_THAT(ValidateSyntheticModel(o).message(), HasSubstr("linear or llama3"));
  o.rope_scaling = "llama3";
  o.arch = "falcon";
  o.activation = "gelu";
  EXPECT_THAT(ValidateSyntheticModel(o).message(), HasSubstr("llama file"));
  o.arch = "llama";
  o.activation = "silu";
  o.rope_factor = 0.5f;
  EXPECT_THAT(ValidateSyntheticModel(o).message(), HasSubstr("factor"));
}

}  // namespace
}  // namespace pi
