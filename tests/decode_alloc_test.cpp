// The decode path allocates nothing: after the first token, Engine::Eval of
// one token and Sampler::Sample perform no heap allocation (counted by
// tests/allocation_counter.h).
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <new>
#include <string>

#include "common/model/weight_transpose.h"
#include "common/offline/synthetic_model.h"
#include "common/text/sampler.h"
#include "coordinator/engine/engine.h"
#include "tests/allocation_counter.h"
#include "tests/temp_path.h"

namespace pi {
namespace {

TEST(DecodeAllocTest, DecodeStepAndSamplingAllocateNothing) {
  for (const bool down_t : {false, true}) {
    SyntheticModelOptions o;
    o.n_vocab = 512;
    o.n_embd = 256;
    o.n_ff = 1024;
    o.n_head = 4;
    o.n_head_kv = 2;
    o.n_ctx = 128;
    o.type = DType::kQ8_0;
    o.activation = "relu";
    o.down_t = down_t;
    const std::string path = TempPath("decode_alloc.gguf");
    ASSERT_TRUE(WriteSyntheticModel(o, path).ok());
    LlamaModel m;
    ASSERT_TRUE(LoadLlamaModel(path, &m).ok());
    for (int threads : {1, 2}) {
      EngineOptions opt;
      opt.n_threads = threads;
      std::unique_ptr<Engine> e;
      ASSERT_TRUE(Engine::Create(&m, opt, &e).ok());
      SamplerParams sp;
      sp.seed = 1;
      sp.repeat_penalty = 1.1f;
      Sampler sampler(sp, e->n_vocab());
      const int32_t prompt[4] = {1, 2, 3, 4};
      ASSERT_TRUE(e->Eval(prompt, 4).ok());
      int32_t tok = sampler.Sample(e->logits());
      const long before = AllocationCount();
      for (int i = 0; i < 32; ++i) {
        ASSERT_TRUE(e->Eval(&tok, 1).ok());
        tok = sampler.Sample(e->logits());
        sampler.Accept(tok);
      }
      EXPECT_EQ(AllocationCount() - before, 0)
          << "allocations in 32 decode steps, threads=" << threads << " down_t=" << down_t;
    }
    std::remove(path.c_str());
  }
}

// --sparse teal's decode steps (column-sparse products, given gate dots).
TEST(DecodeAllocTest, TealDecodeStepsAllocateNothing) {
  SyntheticModelOptions o;
  o.n_vocab = 512;
  o.n_embd = 256;
  o.n_ff = 1024;
  o.n_head = 4;
  o.n_head_kv = 2;
  o.n_ctx = 128;
  o.type = DType::kQ4_0;
  o.down_t = true;
  const std::string path = TempPath("decode_alloc_teal.gguf");
  ASSERT_TRUE(WriteSyntheticModel(o, path).ok());
  LlamaModel m;
  ASSERT_TRUE(LoadLlamaModel(path, &m).ok());
  ThreadPool pool(2);
  int64_t bytes = 0;
  ASSERT_TRUE(AddTransposedCopies(&m, &pool, &bytes).ok());
  for (int threads : {1, 2}) {
    EngineOptions opt;
    opt.n_threads = threads;
    opt.sparse = SparseMode::kTeal;
    opt.gate_thresholds.assign(o.n_layer, 0.05f);
    for (auto& t : opt.input_thresholds) t.assign(o.n_layer, 0.3f);
    std::unique_ptr<Engine> e;
    ASSERT_TRUE(Engine::Create(&m, opt, &e).ok());
    const int32_t prompt[4] = {1, 2, 3, 4};
    ASSERT_TRUE(e->Eval(prompt, 4).ok());
    int32_t tok = 7;
    const long before = AllocationCount();
    for (int i = 0; i < 16; ++i) ASSERT_TRUE(e->Eval(&tok, 1).ok());
    EXPECT_EQ(AllocationCount() - before, 0) << "threads=" << threads;
    EXPECT_LT(e->input_kept_share(), 0.9);  // the thresholds dropped entries
  }
  std::remove(path.c_str());
}

}  // namespace
}  // namespace pi
