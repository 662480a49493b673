// Speculative decoding (coordinator/engine/speculative.h) on the two demo
// models, which share a vocabulary: the 6-layer ReLU model as the target and
// as its own draft, and the 4-layer SiLU model as a smaller draft. The
// drafter's proposals against a greedy run of the draft model computed here
// token by token (probabilities in double); generation with a drafter
// against the same generation without one: the same greedy tokens, stops,
// lengths, context shifts and positions held; the vocabulary check.
#include "coordinator/engine/speculative.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "common/offline/synthetic_model.h"
#include "coordinator/engine/generation.h"
#include "tests/in_memory_model.h"

namespace pi {
namespace {

using ::testing::HasSubstr;

struct Loaded {
  LlamaModel model;
  std::unique_ptr<Tokenizer> tok;
};

void Load(const char* name, Loaded* out) {
  const std::string path = std::string(PI_SOURCE_DIR) + "/models/" + name;
  ASSERT_TRUE(LoadLlamaModel(path, &out->model).ok()) << path;
  ASSERT_TRUE(Tokenizer::FromGguf(*out->model.file, &out->tok).ok()) << path;
}

std::unique_ptr<Engine> MakeEngine(const LlamaModel& m, int n_ctx) {
  EngineOptions opt;
  opt.n_threads = 2;
  opt.n_ctx = n_ctx;
  opt.n_batch = 16;
  opt.sparse = SparseMode::kOff;
  std::unique_ptr<Engine> e;
  EXPECT_TRUE(Engine::Create(&m, opt, &e).ok());
  return e;
}

class SpeculativeTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    target_ = new Loaded;
    silu_ = new Loaded;
    Load("demo-kjv-f16.gguf", target_);
    Load("demo-silu-kjv-f16.gguf", silu_);
  }
  static void TearDownTestSuite() {
    delete target_;
    delete silu_;
  }
  std::vector<int32_t> Encode(const std::string& text) {
    std::vector<int32_t> ids;
    EXPECT_TRUE(target_->tok->Encode(text, true, &ids).ok());
    return ids;
  }
  // Greedy generation on a fresh target engine, with a drafter of `draft`
  // (null: none).
  GenerationResult Run(GenerationRequest req, const LlamaModel* draft, DraftOptions o,
                       int n_ctx = 256, int* n_past = nullptr, Drafter** used = nullptr) {
    std::unique_ptr<Engine> e = MakeEngine(target_->model, n_ctx);
    std::unique_ptr<Engine> d = draft ? MakeEngine(*draft, n_ctx) : nullptr;
    drafter_ = d ? std::make_unique<Drafter>(d.get(), e->n_vocab(), o) : nullptr;
    SamplerParams sp;
    sp.temp = 0;
    Sampler sampler(sp, e->n_vocab());
    GenerationResult g;
    Generate(e.get(), *target_->tok, &sampler, req, nullptr, &g, 0, nullptr, drafter_.get());
    if (n_past) *n_past = e->n_past();
    if (used) *used = drafter_.get();
    draft_engine_ = std::move(d);
    return g;
  }
  static Loaded* target_;
  static Loaded* silu_;
  std::unique_ptr<Engine> draft_engine_;
  std::unique_ptr<Drafter> drafter_;
};
Loaded* SpeculativeTest::target_ = nullptr;
Loaded* SpeculativeTest::silu_ = nullptr;

// The draft's greedy run from `context`, token by token on a fresh engine,
// while the most likely token's probability is at least p_min.
std::vector<int32_t> ReferenceProposals(const LlamaModel& draft,
                                        const std::vector<int32_t>& context, int most,
                                        float p_min) {
  std::unique_ptr<Engine> e = MakeEngine(draft, 256);
  EXPECT_TRUE(e->Eval(context.data(), static_cast<int>(context.size())).ok());
  std::vector<int32_t> out;
  while (static_cast<int>(out.size()) < most) {
    const float* l = e->logits();
    const int n = e->n_vocab();
    int32_t best = 0;
    for (int i = 1; i < n; ++i) best = l[i] > l[best] ? i : best;
    double z = 0;
    for (int i = 0; i < n; ++i) z += std::exp(static_cast<double>(l[i]) - l[best]);
    if (1.0 / z < p_min) break;
    out.push_back(best);
    EXPECT_TRUE(e->Eval(&best, 1).ok());
  }
  return out;
}

TEST_F(SpeculativeTest, ProposalsAreTheDraftsGreedyRunWhileLikely) {
  std::unique_ptr<Engine> d = MakeEngine(silu_->model, 256);
  DraftOptions o;
  o.n_max = 8;
  o.p_min = 0.3f;
  Drafter drafter(d.get(), target_->model.config.n_vocab, o);
  std::vector<int32_t> context = Encode("And God said");
  std::vector<int32_t> got;
  ASSERT_TRUE(drafter.Propose(context, 100, &got).ok());
  EXPECT_EQ(got, ReferenceProposals(silu_->model, context, 8, 0.3f));
  ASSERT_FALSE(got.empty());
  // The context goes on with the first proposal and another token: the
  // draft keeps what it holds of it and evaluates the rest.
  context.push_back(got[0]);
  context.push_back(got.size() > 1 && got[1] == 11 ? 12 : 11);
  ASSERT_TRUE(drafter.Propose(context, 3, &got).ok());
  EXPECT_EQ(got, ReferenceProposals(silu_->model, context, 3, 0.3f));
  // A different context altogether; p_min 0: always the most (the cap).
  Drafter always(d.get(), target_->model.config.n_vocab, {5, 0, 0.0f});
  context = Encode("In the beginning");
  ASSERT_TRUE(always.Propose(context, 100, &got).ok());
  EXPECT_EQ(got, ReferenceProposals(silu_->model, context, 5, 0.0f));
  EXPECT_EQ(got.size(), 5u);
  ASSERT_TRUE(always.Propose(context, 2, &got).ok());
  EXPECT_EQ(got.size(), 2u);
  // Fewer than n_min: none; p_min 1: none.
  Drafter picky(d.get(), target_->model.config.n_vocab, {16, 16, 0.3f});
  ASSERT_TRUE(picky.Propose(context, 100, &got).ok());
  EXPECT_TRUE(got.empty());
  Drafter sure(d.get(), target_->model.config.n_vocab, {16, 0, 1.0f});
  ASSERT_TRUE(sure.Propose(context, 100, &got).ok());
  EXPECT_TRUE(got.empty());
  EXPECT_EQ(sure.proposed(), 0);
}

TEST_F(SpeculativeTest, GreedyTokensEqualDecodingWithoutADraft) {
  const LlamaModel* drafts[2] = {&target_->model, &silu_->model};
  const DraftOptions options[2] = {{4, 0, 0.0f}, {16, 0, 0.5f}};
  for (const char* text : {"And God said", "In the beginning God created", "The LORD is my"}) {
    GenerationRequest req;
    req.prompt = Encode(text);
    req.n_predict = 64;
    req.ignore_eos = true;
    int n_past_plain = 0;
    const GenerationResult plain = Run(req, nullptr, {}, 256, &n_past_plain);
    ASSERT_EQ(plain.ids.size(), 64u);
    for (const LlamaModel* draft : drafts) {
      for (const DraftOptions& o : options) {
        SCOPED_TRACE(std::string(text) + (draft == drafts[0] ? " self" : " silu") + " n_max " +
                     std::to_string(o.n_max));
        int n_past = 0;
        Drafter* d = nullptr;
        const GenerationResult g = Run(req, draft, o, 256, &n_past, &d);
        EXPECT_EQ(g.ids, plain.ids);
        EXPECT_EQ(g.text, plain.text);
        EXPECT_STREQ(g.stop_reason, "length");
        EXPECT_EQ(g.n_eval, plain.n_eval);
        EXPECT_EQ(n_past, n_past_plain);  // the prompt and all but the last token
        EXPECT_LE(d->accepted(), d->proposed());
        if (draft == drafts[0] && o.p_min == 0.0f) {
          EXPECT_GT(d->accepted(), 40);
        }
        EXPECT_EQ(d->failures(), 0);
      }
    }
  }
}

TEST_F(SpeculativeTest, StopsInsideARunKeepOnlyWhatWasSampled) {
  GenerationRequest req;
  req.prompt = Encode("And God said");
  req.ignore_eos = true;
  req.n_predict = 40;
  const GenerationResult plain = Run(req, nullptr, {});
  // n_predict ending inside a run of 16 proposals.
  for (int n : {1, 5, 13}) {
    GenerationRequest r = req;
    r.n_predict = n;
    int n_past = 0;
    const GenerationResult g = Run(r, &target_->model, {16, 0, 0.0f}, 256, &n_past);
    ASSERT_EQ(g.ids.size(), static_cast<size_t>(n));
    EXPECT_TRUE(std::equal(g.ids.begin(), g.ids.end(), plain.ids.begin()));
    EXPECT_EQ(n_past, static_cast<int>(req.prompt.size()) + n - 1);
  }
  // A stop string met inside a run.
  const std::string stop = plain.text.substr(plain.text.size() / 2, 4);
  GenerationRequest r = req;
  r.stops = {stop};
  GenerationRequest r_plain = r;
  const GenerationResult want = Run(r_plain, nullptr, {});
  const GenerationResult g = Run(r, &target_->model, {16, 0, 0.0f});
  EXPECT_STREQ(want.stop_reason, "stop");
  EXPECT_STREQ(g.stop_reason, "stop");
  EXPECT_EQ(g.text, want.text);
  EXPECT_EQ(g.ids, want.ids);
  // A full context: the run stops where the context ends; with a shift
  // (llama-cli's) it goes on as without a draft.
  GenerationRequest full = req;
  full.n_predict = 100;
  int n_past = 0, n_past_plain = 0;
  const GenerationResult cut_plain = Run(full, nullptr, {}, 48, &n_past_plain);
  const GenerationResult cut = Run(full, &silu_->model, {16, 0, 0.0f}, 48, &n_past);
  EXPECT_STREQ(cut.stop_reason, "context");
  EXPECT_EQ(cut.ids, cut_plain.ids);
  EXPECT_EQ(n_past, n_past_plain);
  full.context_keep = 0;
  const GenerationResult shifted_plain = Run(full, nullptr, {}, 48);
  const GenerationResult shifted = Run(full, &silu_->model, {16, 0, 0.0f}, 48);
  EXPECT_GT(shifted.context_shifts, 0);
  EXPECT_EQ(shifted.context_shifts, shifted_plain.context_shifts);
  EXPECT_EQ(shifted.ids, shifted_plain.ids);
}

TEST(DraftVocabularyTest, ADraftMustShareTheModelsVocabulary) {
  Loaded target, silu;
  ASSERT_NO_FATAL_FAILURE(Load("demo-kjv-f16.gguf", &target));
  ASSERT_NO_FATAL_FAILURE(Load("demo-silu-kjv-f16.gguf", &silu));
  EXPECT_TRUE(CheckDraftVocabulary(*target.tok, *silu.tok).ok());
  SyntheticModelOptions o;
  o.n_vocab = 4096;
  o.n_embd = 32;
  o.n_layer = 1;
  o.n_head = 2;
  o.n_ff = 64;
  o.byte_tokenizer = true;
  InMemoryModel bytes;
  ASSERT_TRUE(bytes.Build(o).ok());
  EXPECT_THAT(
      CheckDraftVocabulary(*target.tok, *bytes.tok).message(),
      ::testing::AnyOf(HasSubstr("must share the model's vocabulary"), HasSubstr("BOS/EOS")));
  o.n_vocab = 300;
  InMemoryModel small;
  ASSERT_TRUE(small.Build(o).ok());
  EXPECT_THAT(CheckDraftVocabulary(*target.tok, *small.tok).message(),
              HasSubstr("has 300 tokens, the model's 4096 (at most 128 apart)"));
}

}  // namespace
}  // namespace pi
