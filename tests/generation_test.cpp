// Generate (coordinator/engine/generation.h): each stop reason on a small model
// with a byte tokenizer, the streamed text against the result, and the
// stop-string search.
#include "coordinator/engine/generation.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "common/offline/synthetic_model.h"
#include "tests/in_memory_model.h"

namespace pi {
namespace {

using ::testing::HasSubstr;

class GenerationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SyntheticModelOptions o;
    o.n_vocab = 300;
    o.n_embd = 64;
    o.n_layer = 2;
    o.n_head = 2;
    o.n_ff = 128;
    o.n_ctx = 64;
    o.byte_tokenizer = true;
    ASSERT_TRUE(built_.Build(o).ok());
  }
  // Greedy generation (ignoring end of text) on a fresh engine of n_ctx.
  GenerationResult Run(GenerationRequest req, int n_ctx, const TokenCallback& cb = nullptr) {
    EngineOptions opt;
    opt.n_threads = 1;
    opt.n_ctx = n_ctx;
    std::unique_ptr<Engine> e;
    EXPECT_TRUE(Engine::Create(&model_, opt, &e).ok());
    SamplerParams sp;
    sp.temp = 0;
    Sampler sampler(sp, e->n_vocab());
    GenerationResult g;
    Generate(e.get(), *tok_, &sampler, req, cb, &g);
    return g;
  }
  GenerationRequest Prompt() {
    GenerationRequest r;
    EXPECT_TRUE(tok_->Encode("In the", true, &r.prompt).ok());
    r.ignore_eos = true;
    return r;
  }
  InMemoryModel built_;
  LlamaModel& model_ = built_.model;
  std::unique_ptr<Tokenizer>& tok_ = built_.tok;
};

TEST_F(GenerationTest, LengthContextAndStreamedText) {
  GenerationRequest req = Prompt();
  req.n_predict = 6;
  std::string streamed;
  std::vector<int32_t> ids;
  const GenerationResult g = Run(req, 64, [&](int32_t id, const std::string& t) {
    if (id >= 0) ids.push_back(id);
    streamed += t;
    return true;
  });
  EXPECT_EQ(ids, g.ids);  // each token told once, in order
  EXPECT_STREQ(g.stop_reason, "length");
  EXPECT_EQ(g.ids.size(), 6u);
  EXPECT_EQ(g.n_eval, 5);  // the last token is sampled, not evaluated
  // Streamed as whole UTF-8: what a stream of the result's bytes gives
  // (random byte tokens make invalid sequences, streamed as U+FFFD).
  Utf8Stream whole;
  std::string expected = whole.Push(g.text);
  expected += whole.Flush();
  EXPECT_EQ(streamed, expected);
  std::string decoded;
  for (int32_t id : g.ids) decoded += tok_->TokenToPiece(id);
  EXPECT_EQ(decoded, g.text);

  req.n_predict = -1;
  const int n_ctx = static_cast<int>(req.prompt.size()) + 8;
  const GenerationResult full = Run(req, n_ctx);
  EXPECT_STREQ(full.stop_reason, "context");
  ASSERT_EQ(req.prompt.size() + full.ids.size(), n_ctx + 1u);  // one more sampled than evaluated
  // The same greedy prefix either way.
  EXPECT_EQ(std::vector<int32_t>(full.ids.begin(), full.ids.begin() + 6), g.ids);
}

// Each token's log-probability and its most likely alternatives, against a
// log-softmax and a full stable sort written here (ties: the lower id first).
TEST_F(GenerationTest, LogprobsTopListsMatchAFullSort) {
  const int n = tok_->n_vocab();
  std::vector<float> logits(n);
  for (int i = 0; i < n; ++i) logits[i] = static_cast<float>((i * 7919) % 97) * 0.25f;  // ties
  for (int k : {0, 1, 5, 20}) {
    GenerationRequest req = Prompt();
    req.logprobs = k;
    SamplerParams sp;
    sp.temp = 0;
    Sampler sampler(sp, n);
    GenerationResult g;
    Generation gen(*tok_, &sampler, req, 64, n, &g);
    gen.PromptDone(0);
    int32_t next = -1;
    gen.Next(logits.data(), static_cast<int>(req.prompt.size()), nullptr, &next);
    ASSERT_EQ(g.logprobs.size(), 1u);
    std::vector<int> order(n);
    for (int i = 0; i < n; ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(),
                     [&](int a, int b) { return logits[a] > logits[b]; });
    double z = 0;
    for (float v : logits) z += std::exp(static_cast<double>(v) - logits[order[0]]);
    const double log_z = logits[order[0]] + std::log(z);
    const TokenLogprob& t = g.logprobs[0];
    EXPECT_EQ(t.id, order[0]);  // greedy
    EXPECT_NEAR(t.logprob, logits[order[0]] - log_z, 1e-4);
    ASSERT_EQ(t.top.size(), static_cast<size_t>(k));
    for (int j = 0; j < k; ++j) {
      EXPECT_EQ(t.top[j].first, order[j]) << "k " << k << " rank " << j;
      EXPECT_NEAR(t.top[j].second, logits[order[j]] - log_z, 1e-4);
    }
  }
}

TEST_F(GenerationTest, StopStringCancelAndError) {
  GenerationRequest req = Prompt();
  req.n_predict = 12;
  const GenerationResult all = Run(req, 64);
  ASSERT_GE(all.text.size(), 4u);
  // Stop at the text of tokens 3..4: the result ends just before it.
  const std::string stop = all.text.substr(all.text.size() / 2, 2);
  req.stops = {"never-there", stop};
  std::string streamed;
  const GenerationResult cut = Run(req, 64, [&](int32_t, const std::string& t) {
    streamed += t;
    return true;
  });
  EXPECT_STREQ(cut.stop_reason, "stop");
  EXPECT_EQ(cut.text, all.text.substr(0, all.text.find(stop)));
  // The stream never shows the stop string: its pieces add up to the text
  // (as whole UTF-8, as the stream gives it).
  Utf8Stream whole;
  EXPECT_EQ(streamed, whole.Push(cut.text) + whole.Flush());

  req.stops.clear();
  int calls = 0;
  const GenerationResult c = Run(req, 64, [&](int32_t, const std::string&) { return ++calls < 3; });
  EXPECT_STREQ(c.stop_reason, "cancelled");
  EXPECT_EQ(c.ids.size(), 3u);

  GenerationRequest bad = Prompt();
  bad.prompt.push_back(100000);
  const GenerationResult e = Run(bad, 64);
  EXPECT_STREQ(e.stop_reason, "error");
  EXPECT_THAT(e.error, HasSubstr("token id 100000"));
  EXPECT_TRUE(e.ids.empty());
}

// A grammar held from its trigger (a lazy grammar: tool calls after free
// text): Next is fed logits by hand that favour, at each step, a token the
// grammar refuses over the one it takes; before the trigger the favourite
// wins, after it the best token the grammar takes, and at the end only the
// end of text.
TEST_F(GenerationTest, LazyGrammarHoldsTheTextFromItsTrigger) {
  std::vector<int32_t> id_of(256, -1);
  for (int32_t id = 0; id < tok_->n_vocab(); ++id) {
    const std::string p = tok_->TokenToPiece(id);
    if (p.size() == 1) id_of[static_cast<uint8_t>(p[0])] = id;
  }
  GenerationRequest req = Prompt();
  req.ignore_eos = false;
  ASSERT_TRUE(Grammar::Parse("root ::= \"<go>\" [0-9]{2} \".\"", &req.grammar).ok());
  req.grammar_trigger = "<go>";
  SamplerParams sp;
  sp.temp = 0;
  Sampler sampler(sp, tok_->n_vocab());
  GenerationResult g;
  Generation gen(*tok_, &sampler, req, 64, tok_->n_vocab(), &g);
  gen.PromptDone(0);
  // (favourite, runner-up) per step.
  const std::vector<std::pair<char, char>> steps = {{'a', 'z'}, {'<', 'z'}, {'g', 'z'},
                                                    {'o', 'z'}, {'>', 'z'}, {'z', '7'},
                                                    {'.', '3'}, {'.', 'x'}, {'9', 'x'}};
  std::vector<float> logits(tok_->n_vocab(), -10.0f);
  int32_t next = 0;
  size_t k = 0;
  for (; k < steps.size(); ++k) {
    std::fill(logits.begin(), logits.end(), -10.0f);
    ASSERT_GE(id_of[static_cast<uint8_t>(steps[k].first)], 0);
    logits[id_of[static_cast<uint8_t>(steps[k].first)]] = 5.0f;
    logits[id_of[static_cast<uint8_t>(steps[k].second)]] = 4.0f;
    if (!gen.Next(logits.data(), static_cast<int>(req.prompt.size() + k), nullptr, &next)) break;
  }
  gen.Finish(nullptr);
  EXPECT_EQ(g.text, "a<go>73.");
  EXPECT_STREQ(g.stop_reason, "eos");  // after the match only an end of text could come
  EXPECT_EQ(k, 8u);
}

TEST(StopPrefixAtEndTest, TheLongestEndThatCouldStartAStop) {
  EXPECT_EQ(StopPrefixAtEnd("and the LO", {"LORD"}), 2u);
  EXPECT_EQ(StopPrefixAtEnd("and the L", {"LORD", "the Lamb"}), 5u);
  EXPECT_EQ(StopPrefixAtEnd("and the", {"LORD"}), 0u);
  EXPECT_EQ(StopPrefixAtEnd("LORD", {"LORD"}), 0u);  // a whole stop is a match, not a prefix
  EXPECT_EQ(StopPrefixAtEnd("", {"a"}), 0u);
  EXPECT_EQ(StopPrefixAtEnd("xa", {"ab", "a"}), 1u);
}

TEST(FindStopStringTest, OnlyMatchesReachingTheFreshBytes) {
  EXPECT_EQ(FindStopString("abc def", 3, {"def"}), 4u);
  EXPECT_EQ(FindStopString("abc def", 1, {"c d"}),
            std::string::npos);  // ended before the fresh byte
  EXPECT_EQ(FindStopString("abc def", 2, {"c de"}), 2u);
  EXPECT_EQ(FindStopString("abc def", 7, {"zz", "b"}), 1u);
  EXPECT_EQ(FindStopString("", 0, {"a"}), std::string::npos);
}

}  // namespace
}  // namespace pi
