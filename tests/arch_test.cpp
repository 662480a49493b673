// Gemma 2, Gemma 3 and Phi-3 as llama.cpp writes them: the loader's rules
// (keys, defaults, the layer patterns, fused views) and its refusals. The
// logits themselves are checked against the independent numpy forward in
// tests/reference/check_forward.py (gemma2, gemma3, phi3 cases), the device
// path in device_backend_test.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "common/model/llama_model.h"
#include "common/offline/synthetic_model.h"
#include "coordinator/engine/engine.h"
#include "tests/gguf_rewrite.h"
#include "tests/temp_path.h"

namespace pi {
namespace {

using ::testing::HasSubstr;

SyntheticModelOptions Arch(const std::string& arch, int n_layer = 2) {
  SyntheticModelOptions o;
  o.arch = arch;
  o.n_vocab = 300;
  o.n_embd = 128;
  o.n_layer = n_layer;
  o.n_head = 4;
  o.n_head_kv = 2;
  o.n_ff = 256;
  o.n_ctx = 64;
  o.activation = arch == "phi3" ? "silu" : "gelu";
  o.sliding_window = 5;
  return o;
}

std::string Write(const SyntheticModelOptions& o, const std::string& name) {
  const std::string path = TempPath(name + ".gguf");
  const Status s = WriteSyntheticModel(o, path);
  EXPECT_TRUE(s.ok()) << s.message();
  return path;
}

TEST(ArchLoadTest, Gemma2) {
  SyntheticModelOptions o = Arch("gemma2", 3);
  o.attn_softcap = 20.0f;
  o.final_softcap = 10.0f;
  const std::string path = Write(o, "gemma2");
  RemoveOnExit cleanup{{path}};
  LlamaModel m;
  const Status s = LoadLlamaModel(path, &m);
  ASSERT_TRUE(s.ok()) << s.message();
  const LlamaConfig& c = m.config;
  EXPECT_EQ(c.rope, RopeKind::kNeox);
  EXPECT_EQ(c.activation, FfnActivation::kGelu);
  EXPECT_FLOAT_EQ(c.embd_scale, std::sqrt(128.0f));
  EXPECT_FLOAT_EQ(c.attn_softcap, 20.0f);
  EXPECT_FLOAT_EQ(c.final_softcap, 10.0f);
  EXPECT_FLOAT_EQ(c.QueryScale(), 1.0f / std::sqrt(32.0f));
  EXPECT_EQ(c.n_swa, 5);
  // Even layers slide (llama.cpp: il % 2 == 0), all with one RoPE base.
  EXPECT_TRUE(c.IsSlidingLayer(0));
  EXPECT_FALSE(c.IsSlidingLayer(1));
  EXPECT_TRUE(c.IsSlidingLayer(2));
  EXPECT_FALSE(c.HasLocalRope(0));
  EXPECT_TRUE(c.post_norms);
  EXPECT_TRUE(m.layers[2].attn_post_norm.present());
  EXPECT_TRUE(m.layers[2].ffn_post_norm.present());
  EXPECT_NE(c.GemmaFeature(), nullptr);
}

TEST(ArchLoadTest, Gemma2DefaultsAndThe27BScale) {
  // Without the keys: Gemma 2's caps (50, 30) and window (4096). With 46
  // layers (27B), q.k / sqrt(n_embd / n_head), as llama.cpp tells that model.
  const std::string src = Write(Arch("gemma2", 46), "src");
  const std::string dst = TempPath("dst.gguf");
  RemoveOnExit cleanup{{src, dst}};
  LlamaModel m;
  ASSERT_TRUE(Rewrite(src, dst,
                      {"gemma2.attn_logit_softcapping", "gemma2.final_logit_softcapping",
                       "gemma2.attention.sliding_window"},
                      {})
                  .ok());
  const Status s = LoadLlamaModel(dst, &m);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_FLOAT_EQ(m.config.attn_softcap, 50.0f);
  EXPECT_FLOAT_EQ(m.config.final_softcap, 30.0f);
  EXPECT_EQ(m.config.n_swa, 4096);
  EXPECT_FLOAT_EQ(m.config.QueryScale(), 1.0f / std::sqrt(128.0f / 4));
}

TEST(ArchLoadTest, Gemma3) {
  const std::string path = Write(Arch("gemma3", 12), "gemma3");
  RemoveOnExit cleanup{{path}};
  LlamaModel m;
  const Status s = LoadLlamaModel(path, &m);
  ASSERT_TRUE(s.ok()) << s.message();
  const LlamaConfig& c = m.config;
  EXPECT_FLOAT_EQ(c.attn_softcap, 0.0f);
  EXPECT_FLOAT_EQ(c.final_softcap, 0.0f);
  EXPECT_TRUE(m.layers[0].q_norm.present());
  EXPECT_TRUE(m.layers[0].k_norm.present());
  // Five of six slide, with base 10000 unscaled; layers 5 and 11 are global.
  for (int il = 0; il < 12; ++il) {
    const bool global = il % 6 == 5;
    EXPECT_EQ(c.IsSlidingLayer(il), !global) << il;
    EXPECT_EQ(c.HasLocalRope(il), !global) << il;
  }
  EXPECT_FLOAT_EQ(c.rope_theta_swa, 10000.0f);
}

TEST(ArchLoadTest, Phi3FusedViews) {
  const std::string path = Write(Arch("phi3"), "phi3");
  RemoveOnExit cleanup{{path}};
  LlamaModel m;
  const Status s = LoadLlamaModel(path, &m);
  ASSERT_TRUE(s.ok()) << s.message();
  const LlamaConfig& c = m.config;
  EXPECT_EQ(c.activation, FfnActivation::kSilu);
  EXPECT_EQ(c.n_swa, 5);
  EXPECT_TRUE(c.IsSlidingLayer(0) && c.IsSlidingLayer(1));
  const LlamaLayer& l = m.layers[1];
  // attn_qkv = [q; k; v] rows, ffn_up = [gate; up] rows, all views.
  ASSERT_TRUE(l.wqkv.present());
  EXPECT_EQ(l.wq.data, l.wqkv.data);
  EXPECT_EQ(l.wk.data, l.wqkv.data + 128 * l.wqkv.row_bytes);
  EXPECT_EQ(l.wv.data, l.wqkv.data + (128 + 64) * l.wqkv.row_bytes);
  EXPECT_EQ(l.ffn_gate.rows, 256);
  EXPECT_EQ(l.ffn_up.rows, 256);
  EXPECT_EQ(l.ffn_up.data, l.ffn_gate.data + 256 * l.ffn_gate.row_bytes);
  EXPECT_EQ(l.ffn_gate.info, l.ffn_up.info);
  // A decode step reads each fused matrix once.
  int64_t per_layer = l.attn_norm.nbytes() + l.ffn_norm.nbytes() + l.wqkv.nbytes() + l.wo.nbytes() +
                      2 * l.ffn_up.nbytes() + l.ffn_down.nbytes();
  EXPECT_EQ(m.DecodeWeightBytes(),
            2 * per_layer + m.token_embd.row_bytes + m.output_norm.nbytes() + m.output.nbytes());
}

TEST(ArchLoadTest, Phi3WindowKeyAndDefaults) {
  const std::string src = Write(Arch("phi3"), "src");
  const std::string dst = TempPath("dst.gguf");
  RemoveOnExit cleanup{{src, dst}};
  LlamaModel m;
  // No key, a shape llama.cpp has no default for: refused, naming the key.
  ASSERT_TRUE(Rewrite(src, dst, {"phi3.attention.sliding_window"}, {}).ok());
  EXPECT_THAT(LoadError(dst).message(), HasSubstr("phi3.attention.sliding_window"));
  // A 4k-context model of 32 layers (Phi-3-mini-4k) gets 2047 without it.
  SyntheticModelOptions mini = Arch("phi3", 32);
  mini.n_embd = 64;
  mini.n_ff = 64;
  mini.n_ctx = 4096;
  const std::string mini_src = Write(mini, "mini");
  cleanup.paths.push_back(mini_src);
  ASSERT_TRUE(Rewrite(mini_src, dst, {"phi3.attention.sliding_window"}, {}).ok());
  Status s = LoadLlamaModel(dst, &m);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(m.config.n_swa, 2047);
  // A window of 0 (Phi-4's): no window.
  ASSERT_TRUE(Rewrite(src, dst, {"phi3.attention.sliding_window"}, {}, [](GgufWriter* w) {
                w->Set("phi3.attention.sliding_window", GgufValue::U32(0));
              }).ok());
  LlamaModel m0;
  s = LoadLlamaModel(dst, &m0);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(m0.config.n_swa, 0);
  EXPECT_FALSE(m0.config.IsSlidingLayer(0));
}

TEST(ArchLoadTest, RefusalsNameTheKeyOrTensor) {
  const std::string gemma3 = Write(Arch("gemma3"), "gemma3");
  const std::string gemma2 = Write(Arch("gemma2"), "gemma2");
  const std::string phi3 = Write(Arch("phi3"), "phi3");
  const std::string dst = TempPath("dst.gguf");
  RemoveOnExit cleanup{{gemma3, gemma2, phi3, dst}};
  // gemma3 needs its window (llama.cpp requires the key).
  ASSERT_TRUE(Rewrite(gemma3, dst, {"gemma3.attention.sliding_window"}, {}).ok());
  EXPECT_THAT(LoadError(dst).message(), HasSubstr("gemma3.attention.sliding_window"));
  ASSERT_TRUE(Rewrite(gemma3, dst, {}, {"blk.1.attn_k_norm.weight"}).ok());
  EXPECT_THAT(LoadError(dst).message(), HasSubstr("blk.1.attn_k_norm.weight"));
  ASSERT_TRUE(Rewrite(gemma2, dst, {}, {"blk.0.post_ffw_norm.weight"}).ok());
  EXPECT_THAT(LoadError(dst).message(), HasSubstr("blk.0.post_ffw_norm.weight"));
  ASSERT_TRUE(Rewrite(gemma2, dst, {"gemma2.attention.sliding_window"}, {}, [](GgufWriter* w) {
                w->Set("gemma2.attention.sliding_window", GgufValue::U32(0));
              }).ok());
  EXPECT_THAT(LoadError(dst).message(), HasSubstr("sliding_window = 0"));
  ASSERT_TRUE(Rewrite(gemma2, dst, {"gemma2.final_logit_softcapping"}, {}, [](GgufWriter* w) {
                w->Set("gemma2.final_logit_softcapping", GgufValue::F32(-1.0f));
              }).ok());
  EXPECT_THAT(LoadError(dst).message(), HasSubstr("soft-capping"));
  // Phi-3's 128k models scale RoPE by LongRoPE's factors: refused by name.
  ASSERT_TRUE(Rewrite(phi3, dst, {}, {}, nullptr, {{"rope_factors_long.weight", 16}}).ok());
  EXPECT_THAT(LoadError(dst).message(), HasSubstr("LongRoPE"));
  // phi3's ffn_up holds gate and up: one of n_ff rows is refused.
  ASSERT_TRUE(Rewrite(phi3, dst, {"phi3.feed_forward_length"}, {}, [](GgufWriter* w) {
                w->Set("phi3.feed_forward_length", GgufValue::U32(512));
              }).ok());
  EXPECT_THAT(LoadError(dst).message(), HasSubstr("ffn_up.weight"));
}

TEST(ArchLoadTest, GeluActivationKeyRules) {
  // gelu is a gated form too (GeGLU); a llama file may name it.
  SyntheticModelOptions o = Arch("llama");
  o.activation = "gelu";
  const std::string path = Write(o, "llama_gelu");
  RemoveOnExit cleanup{{path}};
  LlamaModel m;
  const Status s = LoadLlamaModel(path, &m);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(m.config.activation, FfnActivation::kGelu);
  EXPECT_EQ(m.config.GemmaFeature(), std::string("the GELU-gated FFN"));
  FfnActivation a;
  EXPECT_TRUE(ParseFfnActivation("gelu", true, &a));
  EXPECT_EQ(a, FfnActivation::kGelu);
  EXPECT_TRUE(ParseFfnActivation("gelu", false, &a));
  EXPECT_EQ(a, FfnActivation::kGeluUp);
  EXPECT_STREQ(FfnActivationName(FfnActivation::kGelu), "gelu");
}

TEST(ArchEngineTest, PromptBatchEqualsDecodeSteps) {
  // Windows, caps and post-norms in the batched path as in single steps.
  for (const char* arch : {"gemma2", "gemma3", "phi3"}) {
    SyntheticModelOptions o = Arch(arch, 6);
    o.attn_softcap = 2.0f;
    o.final_softcap = 5.0f;
    o.rope_theta = 1e6f;
    const std::string path = Write(o, arch);
    RemoveOnExit cleanup{{path}};
    LlamaModel m;
    ASSERT_TRUE(LoadLlamaModel(path, &m).ok());
    EngineOptions opt;
    opt.n_threads = 2;
    opt.n_ctx = 32;
    opt.cache_type_k = opt.cache_type_v = DType::kF32;
    std::unique_ptr<Engine> batch, steps;
    ASSERT_TRUE(Engine::Create(&m, opt, &batch).ok());
    ASSERT_TRUE(Engine::Create(&m, opt, &steps).ok());
    std::vector<int32_t> tokens;
    for (int i = 0; i < 20; ++i) tokens.push_back((i * 37 + 11) % o.n_vocab);
    ASSERT_TRUE(batch->Eval(tokens.data(), static_cast<int>(tokens.size()), true).ok());
    const int n_vocab = m.config.n_vocab;
    for (size_t i = 0; i < tokens.size(); ++i) {
      ASSERT_TRUE(steps->Eval(&tokens[i], 1).ok());
      double diff = 0, scale = 0;
      for (int v = 0; v < n_vocab; ++v) {
        const float a = batch->logits()[i * n_vocab + v], b = steps->logits()[v];
        diff = std::max(diff, static_cast<double>(std::fabs(a - b)));
        scale = std::max(scale, static_cast<double>(std::fabs(b)));
      }
      EXPECT_LE(diff, 1e-5 * scale) << arch << " position " << i;
      // Soft-capped logits stay inside the cap.
      if (std::string(arch) == "gemma2") {
        EXPECT_LE(scale, 5.0);
      }
    }
  }
}

}  // namespace
}  // namespace pi
