// PromptStore (coordinator/engine/prompt_store.h) and Engine::SaveSeq /
// LoadSeq under it: a prompt saved from one engine and loaded, whole or a
// prefix of it, into another sequence goes on as a fresh evaluation of the
// whole prompt, bit for bit; the store keeps a prompt once (an entry that
// is its prefix goes), finds the longest reusable prefix or the prompt
// whole with its logits, evicts the least recently used past its byte cap
// (never the entry about to be loaded), and keeps nothing over the cap.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "common/offline/synthetic_model.h"
#include "coordinator/engine/engine.h"
#include "coordinator/engine/prompt_store.h"
#include "tests/temp_path.h"

namespace pi {
namespace {

using ::testing::HasSubstr;

class PromptStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    o_.activation = "relu";
    const std::string path = TempPath("store.gguf");
    ASSERT_TRUE(WriteSyntheticModel(o_, path).ok());
    ASSERT_TRUE(LoadLlamaModel(path, &m_).ok());
    std::remove(path.c_str());
  }
  std::unique_ptr<Engine> Make(int n_seq) {
    EngineOptions opt;
    opt.n_ctx = 64;
    opt.n_batch = 4;
    opt.n_seq = n_seq;
    std::unique_ptr<Engine> e;
    EXPECT_TRUE(Engine::Create(&m_, opt, &e).ok());
    return e;
  }
  std::vector<int32_t> Prompt(int n, int salt) const {
    std::vector<int32_t> p;
    for (int i = 0; i < n; ++i) p.push_back((i * 41 + salt) % o_.n_vocab);
    return p;
  }
  // Sequence 0 of e evaluates p; its KV bytes per position.
  void Evaluate(Engine* e, const std::vector<int32_t>& p) {
    e->Reset();
    ASSERT_TRUE(e->Eval(p.data(), static_cast<int>(p.size())).ok());
  }
  SyntheticModelOptions o_;
  LlamaModel m_;
};

TEST_F(PromptStoreTest, ALoadedPrefixGoesOnAsAFreshEvaluation) {
  const std::vector<int32_t> p = Prompt(16, 5);
  std::unique_ptr<Engine> fresh = Make(1), source = Make(1), target = Make(2);
  Evaluate(fresh.get(), p);
  Evaluate(source.get(), p);
  SavedSeq kv;
  ASSERT_TRUE(source->SaveSeq(0, 16, &kv).ok());
  EXPECT_EQ(kv.n(), 16);
  EXPECT_EQ(kv.device, nullptr);
  // The first 12 of the 16 positions into sequence 1; the last chunk evaluated.
  ASSERT_TRUE(target->LoadSeq(1, kv, 12).ok());
  EXPECT_EQ(target->seq_n_past(1), 12);
  std::vector<Engine::BatchRow> rows;
  for (int i = 12; i < 16; ++i) rows.push_back({1, p[i], i == 15});
  ASSERT_TRUE(target->EvalBatch(rows.data(), 4).ok());
  EXPECT_EQ(0, std::memcmp(target->batch_logits(0), fresh->logits(), sizeof(float) * o_.n_vocab));
  EXPECT_THAT(target->LoadSeq(1, kv, 17).message(), HasSubstr("loading 17 of 16"));
  SavedSeq cut;
  ASSERT_TRUE(source->SaveSeq(0, 16, &cut).ok());
  cut.host_kv.pop_back();
  EXPECT_THAT(target->LoadSeq(1, cut, 12).message(), HasSubstr("loading 12 of 16"));
  EXPECT_THAT(source->SaveSeq(0, 17, &kv).message(), HasSubstr("saving 17 positions"));
  SavedSeq none;  // no positions: no bytes, and loading it empties the sequence
  ASSERT_TRUE(source->SaveSeq(0, 0, &none).ok());
  EXPECT_TRUE(none.host_kv.empty());
  ASSERT_TRUE(target->LoadSeq(1, none, 0).ok());
  EXPECT_EQ(target->seq_n_past(1), 0);
}

TEST_F(PromptStoreTest, KeepsFindsAndEvictsByBytes) {
  std::unique_ptr<Engine> e = Make(1);
  const std::vector<int32_t> a = Prompt(16, 1), b = Prompt(16, 2), c = Prompt(16, 3);
  SavedSeq kv;
  Evaluate(e.get(), a);
  ASSERT_TRUE(e->SaveSeq(0, 16, &kv).ok());
  const int64_t entry =
      kv.bytes() + static_cast<int64_t>(16 * sizeof(int32_t) + o_.n_vocab * sizeof(float));
  PromptStore store(2 * entry);  // two prompts with their logits
  const std::vector<float> logits_a(e->logits(), e->logits() + o_.n_vocab);
  // A prefix of a first, then a whole: one entry.
  const std::vector<int32_t> a8(a.begin(), a.begin() + 8);
  ASSERT_TRUE(store.Save(e.get(), 0, a8, nullptr).ok());
  ASSERT_TRUE(store.Save(e.get(), 0, a, logits_a.data()).ok());
  EXPECT_EQ(store.size(), 1);
  EXPECT_EQ(store.bytes(), entry);
  ASSERT_TRUE(store.Save(e.get(), 0, a8, nullptr).ok());  // held already
  EXPECT_EQ(store.size(), 1);
  Evaluate(e.get(), b);
  ASSERT_TRUE(store.Save(e.get(), 0, b, e->logits()).ok());
  EXPECT_EQ(store.size(), 2);

  PromptStore::Hit hit;
  ASSERT_TRUE(store.Find(a, 4, 0, &hit));  // a whole, with its logits
  EXPECT_TRUE(hit.whole);
  EXPECT_EQ(hit.reuse, 16u);
  std::vector<int32_t> a_more = a;
  a_more.push_back(9);
  ASSERT_TRUE(store.Find(a_more, 4, 0, &hit));  // a prefix: whole chunks of it
  EXPECT_FALSE(hit.whole);
  EXPECT_EQ(hit.reuse, 16u);
  EXPECT_FALSE(store.Find(a_more, 4, 16, &hit));  // no more than 16 positions
  EXPECT_FALSE(store.Find(c, 4, 0, &hit));

  // Loading a makes it the most recently used: c's save evicts b.
  ASSERT_TRUE(store.Find(a, 4, 0, &hit));
  std::unique_ptr<Engine> other = Make(1);
  std::vector<float> logits;
  ASSERT_TRUE(store.Load(hit, other.get(), 0, &logits).ok());
  EXPECT_EQ(logits, logits_a);
  EXPECT_EQ(other->n_past(), 16);
  Evaluate(e.get(), c);
  ASSERT_TRUE(store.Save(e.get(), 0, c, e->logits()).ok());
  EXPECT_EQ(store.size(), 2);
  EXPECT_LE(store.bytes(), store.max_bytes());
  EXPECT_TRUE(store.Find(a, 4, 0, &hit));
  EXPECT_FALSE(store.Find(b, 4, 0, &hit));
  // An entry about to be loaded stays: a is the least recently used now
  // (c was saved after it), yet saving b with a kept evicts c.
  PromptStore::Hit a_hit;
  ASSERT_TRUE(store.Find(a, 4, 0, &a_hit));
  Evaluate(e.get(), b);
  ASSERT_TRUE(store.Save(e.get(), 0, b, e->logits(), &a_hit).ok());
  EXPECT_TRUE(store.Find(a, 4, 0, &hit));
  EXPECT_FALSE(store.Find(c, 4, 0, &hit));
  EXPECT_TRUE(store.Find(b, 4, 0, &hit));

  // Over the cap: not kept. A cap of 0: nothing kept.
  PromptStore small(entry - 1);
  ASSERT_TRUE(small.Save(e.get(), 0, b, e->logits()).ok());
  EXPECT_EQ(small.size(), 0);
  PromptStore off(0);
  ASSERT_TRUE(off.Save(e.get(), 0, b, e->logits()).ok());
  EXPECT_EQ(off.size(), 0);
}

}  // namespace
}  // namespace pi
