// The OpenAI-style API's bodies without a server: the replies built from a
// generation (CompletionReply) — a streamed reply's last chunk carries the
// same usage and finish_reason as the whole reply, for chat and
// completions, every stop reason; a failed generation is an error, never a
// normal end — and the requests' checks: integers never wrap, floats are
// finite and in range, stop strings are bounded, a prompt that cannot fit
// the context is refused before it is tokenized, the same for gRPC's
// GenerateRequest (one validation behind both).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/offline/synthetic_model.h"
#include "coordinator/serve/completion_reply.h"
#include "coordinator/serve/generate_request.h"
#include "coordinator/serve/openai_api.h"
#include "tests/in_memory_model.h"

namespace pi {
namespace {

using ::testing::HasSubstr;
using json = nlohmann::json;

// A finished generation of `n` tokens whose text is "t0t1...".
GenerationResult Finished(int n, const char* stop_reason) {
  GenerationResult g;
  for (int i = 0; i < n; ++i) {
    g.ids.push_back(100 + i);
    g.text += "t" + std::to_string(i);
  }
  g.n_eval = n > 0 ? n - 1 : 0;  // the last token is sampled, not evaluated
  g.stop_reason = stop_reason;
  g.eval_s = 0.5;
  return g;
}

std::vector<RequestStream::Token> TokensOf(const GenerationResult& g) {
  std::vector<RequestStream::Token> tokens;
  for (size_t i = 0; i < g.ids.size(); ++i) {
    RequestStream::Token t;
    t.id = g.ids[i];
    t.text = "t" + std::to_string(i);
    tokens.push_back(t);
  }
  return tokens;
}

// The data payloads of server-sent events.
std::vector<std::string> Events(const std::string& sse) {
  std::vector<std::string> out;
  size_t pos = 0;
  while ((pos = sse.find("data: ", pos)) != std::string::npos) {
    const size_t end = sse.find("\n\n", pos);
    out.push_back(sse.substr(pos + 6, end - pos - 6));
    pos = end;
  }
  return out;
}

CompletionInfo Info() {
  CompletionInfo info;
  info.id = "cmpl-1";
  info.created = 1700000000;
  info.model = "m";
  return info;
}

class ReplyTest : public ::testing::TestWithParam<bool> {};  // chat or completions

TEST_P(ReplyTest, StreamedUsageAndFinishEqualTheWholeReplys) {
  const bool chat = GetParam();
  for (const char* stop : {"length", "eos", "stop", "context"}) {
    for (int n : {0, 1, 7}) {
      const GenerationResult g = Finished(n, stop);
      CompletionReply whole(chat, Info(), nullptr, false);
      std::string body;
      ASSERT_EQ(whole.WholeResponse(g, 5, &body), 200);
      const json w = json::parse(body);
      CompletionReply streamed(chat, Info(), nullptr, false);
      std::string sse;
      streamed.AppendTokenEvents(TokensOf(g), g, &sse);
      streamed.AppendEndEvents(g, 5, &sse);
      const std::vector<std::string> events = Events(sse);
      ASSERT_GE(events.size(), 2u);
      EXPECT_EQ(events.back(), "[DONE]");
      const json last = json::parse(events[events.size() - 2]);
      SCOPED_TRACE(std::string(stop) + " " + std::to_string(n) + (chat ? " chat" : ""));
      EXPECT_EQ(last["usage"], w["usage"]);
      EXPECT_EQ(w["usage"]["completion_tokens"], n);
      EXPECT_EQ(w["usage"]["prompt_tokens"], 5);
      EXPECT_EQ(w["usage"]["total_tokens"], 5 + n);
      EXPECT_EQ(last["choices"][0]["finish_reason"], w["choices"][0]["finish_reason"]);
      EXPECT_EQ(
          w["choices"][0]["finish_reason"],
          std::string(stop) == "length" || std::string(stop) == "context" ? "length" : "stop");
      // llama-server's timings count the tokens sampled: usage's, and an end of
      // text that stopped the generation (which usage leaves out: it is not text).
      const int sampled = n + (std::string(stop) == "eos" ? 1 : 0);
      EXPECT_EQ(w["timings"]["predicted_n"], sampled);
      EXPECT_EQ(last["timings"]["predicted_n"], sampled);
      // The deltas add up to the whole text; the role comes first (chat).
      std::string text;
      for (size_t k = 0; k + 2 < events.size(); ++k) {
        const json c = json::parse(events[k]);
        EXPECT_TRUE(c["choices"][0]["finish_reason"].is_null());
        text += chat ? c["choices"][0]["delta"]["content"].get<std::string>()
                     : c["choices"][0]["text"].get<std::string>();
        if (chat && k == 0) {
          EXPECT_EQ(c["choices"][0]["delta"]["role"], "assistant");
        }
      }
      EXPECT_EQ(text, chat ? w["choices"][0]["message"]["content"].get<std::string>()
                           : w["choices"][0]["text"].get<std::string>());
      EXPECT_EQ(last["object"], chat ? "chat.completion.chunk" : "text_completion");
      EXPECT_EQ(w["object"], chat ? "chat.completion" : "text_completion");
    }
  }
}

TEST_P(ReplyTest, AFailedGenerationIsAnErrorNeverANormalEnd) {
  const bool chat = GetParam();
  GenerationResult g = Finished(3, "error");
  g.error = "gpu worker 1: bringing it back failed";
  CompletionReply whole(chat, Info(), nullptr, false);
  std::string body;
  EXPECT_EQ(whole.WholeResponse(g, 5, &body), 500);
  EXPECT_THAT(json::parse(body)["error"]["message"].get<std::string>(),
              HasSubstr("bringing it back failed"));
  CompletionReply streamed(chat, Info(), nullptr, false);
  std::string sse;
  streamed.AppendTokenEvents(TokensOf(g), g, &sse);
  streamed.AppendEndEvents(g, 5, &sse);
  const std::vector<std::string> events = Events(sse);
  ASSERT_EQ(events.size(), 4u);  // three deltas, then the error
  const json end = json::parse(events.back());
  EXPECT_EQ(end["error"]["code"], 500);
  EXPECT_THAT(end["error"]["message"].get<std::string>(), HasSubstr("bringing it back failed"));
  EXPECT_EQ(sse.find("[DONE]"), std::string::npos);
  EXPECT_EQ(sse.find("finish_reason\":\"stop"), std::string::npos);
}

INSTANTIATE_TEST_SUITE_P(Kinds, ReplyTest, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& i) {
                           return i.param ? "chat" : "completions";
                         });

Status Completion(const std::string& body, CompletionRequest* out = nullptr) {
  CompletionRequest r;
  int status = 0;
  return ParseCompletionRequest(body, "m", out ? out : &r, &status);
}

TEST(OpenAiRequestTest, IntegersNeverWrap) {
  // 2^64 - 1 and 2^63 are unsigned in JSON: out of range, not -1 or INT64_MIN.
  for (const char* field : {"max_tokens", "top_k", "n_predict", "repeat_last_n", "seed"}) {
    for (const char* v : {"18446744073709551615", "9223372036854775808"}) {
      const Status s = Completion(std::string("{\"prompt\": \"a\", \"") + field + "\": " + v + "}");
      EXPECT_FALSE(s.ok()) << field << " " << v;
      EXPECT_THAT(s.message(), HasSubstr(field));
      EXPECT_THAT(s.message(), HasSubstr("out of range"));
      EXPECT_THAT(s.message(), ::testing::Not(HasSubstr("got -1")));
    }
  }
  CompletionRequest r;
  ASSERT_TRUE(
      Completion("{\"prompt\": \"a\", \"seed\": 4294967295, \"max_tokens\": 2147483647}", &r).ok());
  EXPECT_EQ(r.request.sampling().seed(), 4294967295LL);
  EXPECT_EQ(r.request.n_predict(), 2147483647);
  EXPECT_FALSE(Completion("{\"prompt\": \"a\", \"seed\": 4294967296}").ok());
  EXPECT_FALSE(Completion("{\"prompt\": \"a\", \"max_tokens\": 2147483648}").ok());
  EXPECT_FALSE(Completion("{\"prompt\": \"a\", \"max_tokens\": 1.5}").ok());
  EXPECT_FALSE(Completion("{\"prompt\": [18446744073709551615]}").ok());
}

TEST(OpenAiRequestTest, StopStringsAreBounded) {
  json many = {{"prompt", "a"}, {"stop", json::array()}};
  for (size_t i = 0; i <= kMaxStopStrings; ++i) many["stop"].push_back("s" + std::to_string(i));
  const Status s = Completion(many.dump());
  EXPECT_THAT(s.message(), HasSubstr("stop: 17 strings, at most 16"));
}

Status Chat(const json& body, CompletionRequest* out) {
  int status = 0;
  const ChatTemplate chatml = ChatTemplate::kChatml;
  return ParseChatRequest(body.dump(), "m", &chatml, out, &status);
}

// No field is skipped: each is read, or the error names it.
TEST(OpenAiRequestTest, EveryFieldIsReadOrRefusedByName) {
  for (const char* field : {"tools", "tool_choice", "functions", "suffix", "grammar", "json_schema",
                            "store", "frobnicate"}) {
    CompletionRequest r;
    const Status s = Completion(json{{"prompt", "a"}, {field, 1}}.dump(), &r);
    EXPECT_THAT(s.message(), HasSubstr(field));
  }
  // Chat's own fields are not the completions' and the other way round.
  CompletionRequest r;
  EXPECT_THAT(Completion(json{{"prompt", "a"}, {"messages", json::array()}}.dump(), &r).message(),
              HasSubstr("messages"));
  const json user = {{"role", "user"}, {"content", "hi"}};
  EXPECT_THAT(Chat({{"messages", {user}}, {"echo", true}}, &r).message(), HasSubstr("echo"));
  EXPECT_THAT(Chat({{"messages", {user}}, {"prompt", "a"}}, &r).message(), HasSubstr("prompt"));
}

TEST(OpenAiRequestTest, LogitBiasInOpenAisAndLlamaServersShapes) {
  CompletionRequest a, b;
  ASSERT_TRUE(Completion(R"({"prompt": "a", "logit_bias": {"7": -2.5, "9": false}})", &a).ok());
  ASSERT_TRUE(Completion(R"({"prompt": "a", "logit_bias": [[7, -2.5], [9, false]]})", &b).ok());
  for (const CompletionRequest* r : {&a, &b}) {
    const auto& lb = r->request.sampling().logit_bias();
    ASSERT_EQ(lb.size(), 2);
    EXPECT_EQ(lb[0].token(), 7);
    EXPECT_EQ(lb[0].bias(), -2.5f);
    EXPECT_EQ(lb[1].token(), 9);
    EXPECT_EQ(lb[1].bias(), -INFINITY);
  }
  for (const char* bad : {R"({"7x": 1})", R"({"-1": 1})", R"({"7": "1"})", R"({"7": true})",
                          R"([[7]])", R"([["hello", 1]])", R"([[4294967296, 1]])", "3"}) {
    CompletionRequest r;
    const Status s = Completion(std::string(R"({"prompt": "a", "logit_bias": )") + bad + "}", &r);
    EXPECT_THAT(s.message(), HasSubstr("logit_bias")) << bad;
  }
}

TEST(OpenAiRequestTest, ContentPartsDeveloperAndNullAssistantContent) {
  CompletionRequest parts, joined;
  const json sys = {{"role", "developer"}, {"content", "Be brief."}};
  ASSERT_TRUE(
      Chat({{"messages",
             {sys,
              {{"role", "user"},
               {"content", {{{"type", "text"}, {"text", "a"}}, {{"type", "text"}, {"text", "b"}}}}},
              {{"role", "assistant"}, {"content", nullptr}}}}},
           &parts)
          .ok());
  EXPECT_EQ(parts.request.prompt(),
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\na\nb<|im_end|>\n"
            "<|im_start|>assistant\n<|im_end|>\n<|im_start|>assistant\n");
  CompletionRequest r;
  EXPECT_THAT(Chat({{"messages", {{{"role", "user"}, {"content", nullptr}}}}}, &r).message(),
              HasSubstr("null"));
  EXPECT_THAT(
      Chat({{"messages",
             {{{"role", "user"},
               {"content", {{{"type", "input_audio"}, {"input_audio", json::object()}}}}}}}},
           &r)
          .message(),
      HasSubstr("input_audio"));
}

TEST(OpenAiRequestTest, MaxCompletionTokensStreamOptionsAndEcho) {
  const json user = {{"role", "user"}, {"content", "hi"}};
  CompletionRequest r;
  ASSERT_TRUE(Chat({{"messages", {user}}, {"max_completion_tokens", 3}}, &r).ok());
  EXPECT_EQ(r.request.n_predict(), 3);
  CompletionRequest same;
  EXPECT_TRUE(
      Chat({{"messages", {user}}, {"max_completion_tokens", 3}, {"max_tokens", 3}}, &same).ok());
  CompletionRequest s;
  ASSERT_TRUE(Completion(R"({"prompt": "a", "stream": true, "echo": true,
                             "stream_options": {"include_usage": true}})",
                         &s)
                  .ok());
  EXPECT_TRUE(s.include_usage);
  EXPECT_TRUE(s.echo);
  EXPECT_THAT(
      Completion(R"({"prompt": "a", "stream": true, "stream_options": {"x": 1}})").message(),
      HasSubstr("stream_options"));
}

class GenerateRequestTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SyntheticModelOptions o;
    o.n_vocab = 300;
    o.n_embd = 64;
    o.n_layer = 1;
    o.n_head = 2;
    o.n_ff = 128;
    o.byte_tokenizer = true;
    ASSERT_TRUE(built_.Build(o).ok());
  }
  Status Parse(const v1::GenerateRequest& in, int n_ctx = 64) {
    GenerationRequest out;
    SamplerParams sampling;
    return ParseGenerateRequest(in, tok_->n_vocab(), n_ctx, *tok_, &out, &sampling);
  }
  InMemoryModel built_;
  std::unique_ptr<Tokenizer>& tok_ = built_.tok;
};

TEST_F(GenerateRequestTest, FloatsAreFiniteAndInRange) {
  v1::GenerateRequest in;
  in.set_prompt("In the");
  EXPECT_TRUE(Parse(in).ok());
  in.mutable_sampling()->set_temperature(std::numeric_limits<float>::infinity());
  EXPECT_THAT(Parse(in).message(), HasSubstr("temp"));
  in.mutable_sampling()->set_temperature(0.7f);
  // A penalty this small divides positive logits to infinity: NaN probabilities.
  in.mutable_sampling()->set_repeat_penalty(1e-45f);
  EXPECT_THAT(Parse(in).message(), HasSubstr("repeat-penalty"));
  in.mutable_sampling()->set_repeat_penalty(std::nanf(""));
  EXPECT_THAT(Parse(in).message(), HasSubstr("repeat-penalty"));
  in.mutable_sampling()->set_repeat_penalty(1.1f);
  in.mutable_sampling()->set_seed(int64_t{1} << 40);
  EXPECT_THAT(Parse(in).message(), HasSubstr("seed"));
  in.mutable_sampling()->set_seed(-1);
  EXPECT_TRUE(Parse(in).ok());
}

TEST_F(GenerateRequestTest, PostSamplingProbsGoWithLogprobs) {
  v1::GenerateRequest in;
  in.set_prompt("In the");
  in.set_post_sampling_probs(true);
  EXPECT_THAT(Parse(in).message(), HasSubstr("post_sampling_probs needs logprobs"));
  in.set_logprobs(true);
  in.set_top_logprobs(3);
  GenerationRequest out;
  SamplerParams sampling;
  ASSERT_TRUE(ParseGenerateRequest(in, tok_->n_vocab(), 64, *tok_, &out, &sampling).ok());
  EXPECT_TRUE(out.post_sampling);
  EXPECT_EQ(out.logprobs, 3);
}

TEST_F(GenerateRequestTest, StopStringsAreBoundedInNumberAndLength) {
  v1::GenerateRequest in;
  in.set_prompt("In the");
  for (size_t i = 0; i < kMaxStopStrings; ++i) in.add_stop("s");
  EXPECT_TRUE(Parse(in).ok());
  in.add_stop("s");
  EXPECT_THAT(Parse(in).message(), HasSubstr("at most 16"));
  in.clear_stop();
  in.add_stop(std::string(kMaxStopBytes + 1, 'x'));
  EXPECT_THAT(Parse(in).message(), HasSubstr("at most 1024"));
}

TEST_F(GenerateRequestTest, APromptThatCannotFitIsRefusedBeforeTokenizing) {
  // A byte vocabulary: no token stands for more than a few bytes.
  ASSERT_GT(tok_->max_token_bytes(), 0u);
  const size_t bound = MaxPromptBytes(*tok_, 64);
  EXPECT_EQ(bound, tok_->max_token_bytes() * 64);
  v1::GenerateRequest in;
  in.set_prompt(std::string(bound + 1, 'a'));
  const Status s = Parse(in);
  EXPECT_THAT(s.message(), HasSubstr("bytes: more than the context (64 tokens) can hold"));
  // Within the bound it is tokenized, and refused by its count of tokens.
  in.set_prompt(std::string(100, 'a'));
  EXPECT_THAT(Parse(in).message(), HasSubstr("exceeds the available context size"));
  in.set_prompt(std::string(50, 'a'));
  EXPECT_TRUE(Parse(in).ok());
}

}  // namespace
}  // namespace pi
