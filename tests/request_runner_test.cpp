// The engine never waits on a client: RequestStream (bounded, never
// blocking, notifying), Admission, and RequestRunner over both schedulers
// (-np 1: SerialScheduler; -np 2: BatchScheduler) on a small synthetic
// model — a client that never takes its tokens is cancelled when its stream
// fills and the next request runs, with exactly the tokens it gets alone
// (Generate on a fresh engine: the reference); a client that leaves while
// waiting frees its place at once.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/base/progress.h"
#include "common/offline/synthetic_model.h"
#include "coordinator/serve/admission.h"
#include "coordinator/serve/request_runner.h"
#include "coordinator/serve/request_stream.h"
#include "tests/in_memory_model.h"

namespace pi {
namespace {

using ::testing::HasSubstr;

TEST(RequestStreamTest, TokensInOrderThenTheEnd) {
  RequestStream s(8, 1 << 10);
  EXPECT_TRUE(s.Push(5, "a", -1));
  EXPECT_TRUE(s.Push(6, "bc", 0));
  std::vector<RequestStream::Token> got;
  EXPECT_FALSE(s.Take(&got));
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].id, 5);
  EXPECT_EQ(got[0].text, "a");
  EXPECT_EQ(got[1].text, "bc");
  EXPECT_EQ(got[1].logprob, 0);
  EXPECT_TRUE(s.Push(-1, "d", -1));
  s.End();
  EXPECT_FALSE(s.Push(7, "late", -1));  // nothing after the end
  EXPECT_TRUE(s.Take(&got));
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].text, "d");
  EXPECT_TRUE(s.Take(&got));
  EXPECT_TRUE(got.empty());
}

TEST(RequestStreamTest, AFullStreamCancelsTheRequest) {
  RequestStream by_count(3, 1 << 10);
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(by_count.Push(i, "x", -1));
  EXPECT_FALSE(by_count.cancelled());
  EXPECT_FALSE(by_count.Push(3, "x", -1));
  EXPECT_TRUE(by_count.cancelled());
  EXPECT_THAT(by_count.cancel_reason(), HasSubstr("did not read"));
  RequestStream by_bytes(100, 10);
  EXPECT_TRUE(by_bytes.Push(0, "12345", -1));
  EXPECT_TRUE(by_bytes.Push(1, "12345", -1));
  EXPECT_FALSE(by_bytes.Push(2, "1", -1));
  // Taking makes room again only before the limit was hit: a cancel stays.
  std::vector<RequestStream::Token> got;
  by_bytes.Take(&got);
  EXPECT_FALSE(by_bytes.Push(3, "1", -1));
  // The client's own cancel keeps its reason.
  RequestStream mine(4, 100);
  mine.Cancel("gone");
  mine.Cancel("again");
  EXPECT_FALSE(mine.Push(0, "x", -1));
  EXPECT_EQ(mine.cancel_reason(), "gone");
}

TEST(RequestStreamTest, NotifiesWhenTokensArriveInAnEmptyStreamAndAtTheEnd) {
  RequestStream s(8, 1 << 10);
  std::atomic<int> calls{0};
  s.SetNotify([&] { ++calls; });
  s.Push(0, "a", -1);
  s.Push(1, "b", -1);  // not empty: the connection drains both at once
  EXPECT_EQ(calls, 1);
  std::vector<RequestStream::Token> got;
  s.Take(&got);
  s.Push(2, "c", -1);
  EXPECT_EQ(calls, 2);
  s.End();
  EXPECT_EQ(calls, 3);
  s.SetNotify(nullptr);
  s.End();
  EXPECT_EQ(calls, 3);
}

TEST(RequestStreamTest, WaitReturnsOnATokenOrTheEnd) {
  RequestStream s(8, 1 << 10);
  const double t0 = NowSeconds();
  s.Wait(0.05);  // nothing: the full wait
  EXPECT_GE(NowSeconds() - t0, 0.04);
  std::thread producer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    s.Push(0, "a", -1);
  });
  const double t1 = NowSeconds();
  s.Wait(10);
  EXPECT_LT(NowSeconds() - t1, 5);
  producer.join();
}

TEST(AdmissionTest, RunningAndWaitingWithinTheCaps) {
  Admission a(/*max_queue=*/1, /*max_running=*/2);
  EXPECT_TRUE(a.Enter());
  EXPECT_TRUE(a.Enter());
  EXPECT_TRUE(a.Enter());
  EXPECT_FALSE(a.Enter());  // 2 running + 1 waiting
  a.Started();
  a.Started();
  EXPECT_EQ(a.running(), 2);
  EXPECT_EQ(a.queued(), 1);
  a.Leave(false);  // the waiting one left
  EXPECT_EQ(a.queued(), 0);
  EXPECT_TRUE(a.Enter());
  a.Leave(true);
  EXPECT_EQ(a.running(), 1);
}

class RequestRunnerTest : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override {
    SyntheticModelOptions o;
    o.n_vocab = 300;
    o.n_embd = 128;
    o.n_layer = 2;
    o.n_head = 2;
    o.n_ff = 256;
    o.n_ctx = 4096;
    o.byte_tokenizer = true;
    ASSERT_TRUE(built_.Build(o).ok());
  }
  std::unique_ptr<Engine> MakeEngine(int n_seq) {
    EngineOptions opt;
    opt.n_threads = 1;
    opt.n_ctx = 1024;
    opt.n_seq = n_seq;
    std::unique_ptr<Engine> e;
    EXPECT_TRUE(Engine::Create(&model_, opt, &e).ok());
    return e;
  }
  GenerationRequest Request(const std::string& text, int n_predict) {
    GenerationRequest r;
    EXPECT_TRUE(tok_->Encode(text, true, &r.prompt).ok());
    r.n_predict = n_predict;
    r.ignore_eos = true;
    return r;
  }
  static SamplerParams Greedy() {
    SamplerParams p;
    p.temp = 0;
    return p;
  }
  // The reference: the request alone on a fresh engine.
  std::vector<int32_t> Solo(const GenerationRequest& r) {
    std::unique_ptr<Engine> e = MakeEngine(1);
    Sampler sampler(Greedy(), e->n_vocab());
    GenerationResult g;
    Generate(e.get(), *tok_, &sampler, r, nullptr, &g);
    return g.ids;
  }
  // Takes a job's tokens until its end; their ids.
  static std::vector<int32_t> Drain(RequestJob* job) {
    std::vector<int32_t> ids;
    std::vector<RequestStream::Token> got;
    for (int i = 0; i < 100000; ++i) {
      job->stream.Wait(0.05);
      const bool ended = job->stream.Take(&got);
      for (const auto& t : got) {
        if (t.id >= 0) ids.push_back(t.id);
      }
      if (ended) break;
    }
    return ids;
  }
  InMemoryModel built_;
  LlamaModel& model_ = built_.model;
  std::unique_ptr<Tokenizer>& tok_ = built_.tok;
};

TEST_P(RequestRunnerTest, RunGivesTheTokensOfTheRequestAlone) {
  std::unique_ptr<Engine> e = MakeEngine(GetParam());
  RequestRunner runner(e.get(), tok_.get(), 4, "test");
  const GenerationRequest r = Request("In the beginning", 12);
  std::vector<int32_t> told;
  RunOutcome out;
  runner.Run(
      r, Greedy(), nullptr,
      [&](int32_t id, const std::string&) {
        if (id >= 0) told.push_back(id);
        return true;
      },
      &out);
  EXPECT_EQ(out.kind, RunOutcome::kDone);
  EXPECT_EQ(out.result.ids, Solo(r));
  EXPECT_EQ(told, out.result.ids);
  EXPECT_EQ(runner.running(), 0);
}

TEST_P(RequestRunnerTest, AClientThatNeverReadsIsCancelledAndTheNextRuns) {
  std::unique_ptr<Engine> e = MakeEngine(GetParam());
  // Room for the normal request's 20 tokens whatever its reader's pace;
  // the stuck ones' 500 overflow it.
  StreamLimits limits;
  limits.max_tokens = 32;
  RequestRunner runner(e.get(), tok_.get(), 4, "test", limits);
  // As many never-reading clients as the engine runs at once, then one that reads.
  std::vector<std::shared_ptr<RequestJob>> stuck;
  for (int i = 0; i < GetParam(); ++i) {
    stuck.push_back(runner.Submit(Request("And God said", 500), Greedy(), true, nullptr));
    ASSERT_NE(stuck.back(), nullptr);
  }
  const GenerationRequest r = Request("In the beginning", 20);
  std::shared_ptr<RequestJob> normal = runner.Submit(r, Greedy(), true, nullptr);
  ASSERT_NE(normal, nullptr);
  const std::vector<int32_t> ids = Drain(normal.get());
  EXPECT_EQ(ids, Solo(r));
  EXPECT_EQ(normal->result.ids, ids);
  for (auto& job : stuck) {
    // It ends by itself, cancelled when its stream fills, never read: with -np 2 the normal
    // request may run beside it and finish first, so wait for that end (bounded, reading
    // nothing) before taking what it left.
    for (int i = 0; i < 6000 && !job->stream.ended(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    ASSERT_TRUE(job->stream.ended());
    Drain(job.get());
    EXPECT_STREQ(job->result.stop_reason, "cancelled");
    EXPECT_THAT(job->stream.cancel_reason(), HasSubstr("did not read"));
    EXPECT_LE(job->result.ids.size(), 34u);
  }
  EXPECT_EQ(runner.running(), 0);
  EXPECT_EQ(runner.queued(), 0);
}

TEST_P(RequestRunnerTest, AClientThatLeavesWhileWaitingFreesItsPlaceAtOnce) {
  std::unique_ptr<Engine> e = MakeEngine(GetParam());
  RequestRunner runner(e.get(), tok_.get(), /*max_queue=*/1, "test");
  // Long prefills keep the engine busy while the line is tested.
  std::string long_text;
  for (int i = 0; i < 30; ++i) long_text += "In the beginning God created ";  // 870 tokens
  std::vector<std::shared_ptr<RequestJob>> running;
  for (int i = 0; i < GetParam(); ++i) {
    running.push_back(runner.Submit(Request(long_text, 4), Greedy(), false, nullptr));
  }
  std::shared_ptr<RequestJob> waiting = runner.Submit(Request("a", 4), Greedy(), false, nullptr);
  ASSERT_NE(waiting, nullptr);
  EXPECT_EQ(runner.Submit(Request("b", 4), Greedy(), false, nullptr), nullptr);  // the line is full
  runner.Cancel(waiting, "the client left");
  EXPECT_TRUE(waiting->stream.ended());
  EXPECT_EQ(RequestRunner::Outcome(*waiting).kind, RunOutcome::kCancelledWaiting);
  const GenerationRequest r = Request("In the", 6);
  std::shared_ptr<RequestJob> next = runner.Submit(r, Greedy(), true, nullptr);
  ASSERT_NE(next, nullptr) << "the place was not freed";
  EXPECT_EQ(Drain(next.get()), Solo(r));
  for (auto& job : running) {
    Drain(job.get());
    EXPECT_STREQ(job->result.stop_reason, "length");
  }
}

INSTANTIATE_TEST_SUITE_P(Sequences, RequestRunnerTest, ::testing::Values(1, 2),
                         [](const ::testing::TestParamInfo<int>& i) {
                           return "np" + std::to_string(i.param);
                         });

}  // namespace
}  // namespace pi
