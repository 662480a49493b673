// Slot files (coordinator/engine/slot_file.h): a sequence's prompt saved to
// disk and restored into another engine's sequence goes on as a fresh
// evaluation of the prompt, bit for bit, with the logits after its last
// token kept; a file is refused, naming what differs, when it was saved
// from another model, with other KV cache types or prompt chunking, or when
// any tensor's type, shape or values are off; a failed restore leaves the
// sequence as it was.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/offline/synthetic_model.h"
#include "coordinator/engine/engine.h"
#include "coordinator/engine/slot_file.h"
#include "tests/temp_path.h"

namespace pi {
namespace {

using ::testing::HasSubstr;

class SlotFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    o_.activation = "relu";
    const std::string path = TempPath("slot-model.gguf");
    ASSERT_TRUE(WriteSyntheticModel(o_, path).ok());
    ASSERT_TRUE(LoadLlamaModel(path, &m_).ok());
    std::remove(path.c_str());
    file_ = TempPath("slot.bin");
  }
  void TearDown() override { std::remove(file_.c_str()); }
  std::unique_ptr<Engine> Make(int n_seq, int n_batch = 4, DType k = DType::kF16) {
    EngineOptions opt;
    opt.n_ctx = 64;
    opt.n_batch = n_batch;
    opt.n_seq = n_seq;
    opt.cache_type_k = k;
    std::unique_ptr<Engine> e;
    EXPECT_TRUE(Engine::Create(&m_, opt, &e).ok());
    return e;
  }
  std::vector<int32_t> Prompt(int n) const {
    std::vector<int32_t> p;
    for (int i = 0; i < n; ++i) p.push_back((i * 37 + 3) % o_.n_vocab);
    return p;
  }
  // A valid file's contents, changed by `edit`, read against `layout`.
  Status ReadEdited(const SlotLayout& layout, const std::function<void(SlotState*)>& edit,
                    const std::function<void(GgufWriter*)>& rewrite = nullptr) {
    std::unique_ptr<Engine> e = Make(1);
    const std::vector<int32_t> p = Prompt(8);
    EXPECT_TRUE(e->Eval(p.data(), 8).ok());
    SlotState state;
    EXPECT_TRUE(e->SaveSeq(0, 8, &state.seq).ok());
    state.logits.assign(e->logits(), e->logits() + o_.n_vocab);
    if (edit) edit(&state);
    GgufWriter w;
    const Status s = SerializeSlotFile(EngineSlotLayout(*e), state, &w);
    if (!s.ok()) return s;
    if (rewrite) rewrite(&w);
    bytes_ = w.Serialize();
    std::unique_ptr<GgufFile> f;
    EXPECT_TRUE(GgufFile::OpenBuffer(bytes_.data(), bytes_.size(), &f).ok());
    SlotState back;
    return ReadSlotFile(*f, layout, &back);
  }
  SyntheticModelOptions o_;
  LlamaModel m_;
  std::string file_;
  std::vector<uint8_t> bytes_;
};

TEST_F(SlotFileTest, ARestoredPromptGoesOnAsAFreshEvaluation) {
  const std::vector<int32_t> p = Prompt(14);
  std::unique_ptr<Engine> fresh = Make(1), source = Make(2), target = Make(2);
  ASSERT_TRUE(fresh->Eval(p.data(), 14).ok());
  const std::vector<float> after(fresh->logits(), fresh->logits() + o_.n_vocab);
  const int32_t next = 7;
  ASSERT_TRUE(fresh->Eval(&next, 1).ok());
  // The prompt on source's sequence 1, saved with its logits.
  std::vector<Engine::BatchRow> rows;
  for (int i = 0; i < 14; ++i) rows.push_back({1, p[i], i == 13});
  for (int at = 0; at < 14; at += 4) {
    const int n = std::min(4, 14 - at);
    ASSERT_TRUE(source->EvalBatch(rows.data() + at, n).ok());
  }
  int64_t written = 0;
  ASSERT_TRUE(SaveSlot(source.get(), 1, p, source->batch_logits(0), file_, &written).ok());
  EXPECT_EQ(written, static_cast<int64_t>(std::filesystem::file_size(file_)));
  // Into target's sequence 0: the same prompt, logits and next step, bit for bit.
  std::vector<int32_t> prompt;
  std::vector<float> logits;
  int64_t read = 0;
  ASSERT_TRUE(RestoreSlot(target.get(), 0, file_, &prompt, &logits, &read).ok());
  EXPECT_EQ(prompt, p);
  EXPECT_EQ(read, written);
  ASSERT_EQ(logits.size(), after.size());
  EXPECT_EQ(0, std::memcmp(logits.data(), after.data(), sizeof(float) * after.size()));
  EXPECT_EQ(target->seq_n_past(0), 14);
  const Engine::BatchRow step{0, next, true};
  ASSERT_TRUE(target->EvalBatch(&step, 1).ok());
  EXPECT_EQ(0, std::memcmp(target->batch_logits(0), fresh->logits(), sizeof(float) * o_.n_vocab));
  // Without logits: none come back.
  ASSERT_TRUE(SaveSlot(source.get(), 1, p, nullptr, file_, &written).ok());
  ASSERT_TRUE(RestoreSlot(target.get(), 1, file_, &prompt, &logits, &read).ok());
  EXPECT_TRUE(logits.empty());
}

TEST_F(SlotFileTest, AFileFromAnotherSetupIsRefusedAndTheSequenceKept) {
  const std::vector<int32_t> p = Prompt(8), q = {1, 2, 3, 4, 5};
  std::unique_ptr<Engine> source = Make(1);
  ASSERT_TRUE(source->Eval(p.data(), 8).ok());
  int64_t bytes = 0;
  ASSERT_TRUE(SaveSlot(source.get(), 0, p, nullptr, file_, &bytes).ok());
  std::vector<int32_t> prompt;
  std::vector<float> logits;
  // Other chunking or cache types: refused, the target's sequence as it was.
  std::unique_ptr<Engine> other_b = Make(1, 8), other_k = Make(1, 4, DType::kF32);
  ASSERT_TRUE(other_b->Eval(q.data(), 5).ok());
  EXPECT_THAT(RestoreSlot(other_b.get(), 0, file_, &prompt, &logits, &bytes).message(),
              HasSubstr("runs of 4 tokens; this server's are 8 (-b)"));
  EXPECT_EQ(other_b->seq_n_past(0), 5);
  EXPECT_THAT(RestoreSlot(other_k.get(), 0, file_, &prompt, &logits, &bytes).message(),
              HasSubstr("KV cache is f16/f16; this server's is f32/f16"));
  // Another model (another seed: the same shapes).
  SyntheticModelOptions o2 = o_;
  o2.seed += 1;
  const std::string path2 = TempPath("slot-model2.gguf");
  ASSERT_TRUE(WriteSyntheticModel(o2, path2).ok());
  LlamaModel m2;
  ASSERT_TRUE(LoadLlamaModel(path2, &m2).ok());
  std::remove(path2.c_str());
  EngineOptions opt;
  opt.n_ctx = 64;
  opt.n_batch = 4;
  std::unique_ptr<Engine> e2;
  ASSERT_TRUE(Engine::Create(&m2, opt, &e2).ok());
  EXPECT_THAT(RestoreSlot(e2.get(), 0, file_, &prompt, &logits, &bytes).message(),
              HasSubstr("saved from another model"));
  // Missing, or not a slot file (the model itself).
  EXPECT_FALSE(RestoreSlot(source.get(), 0, file_ + ".none", &prompt, &logits, &bytes).ok());
  // Nothing to save, and a prompt the sequence does not hold.
  EXPECT_THAT(SaveSlot(source.get(), 0, {}, nullptr, file_, &bytes).message(),
              HasSubstr("holds no prompt"));
  EXPECT_FALSE(SaveSlot(source.get(), 0, q, nullptr, file_, &bytes).ok());
}

TEST_F(SlotFileTest, EveryTensorIsChecked) {
  std::unique_ptr<Engine> e = Make(1);
  const SlotLayout layout = EngineSlotLayout(*e);
  EXPECT_TRUE(ReadEdited(layout, nullptr).ok());
  EXPECT_THAT(ReadEdited(layout, [](SlotState* s) { s->seq.tokens[3] = 1 << 20; }).message(),
              HasSubstr("token id 1048576"));
  EXPECT_THAT(ReadEdited(layout, [](SlotState* s) { s->seq.dense[2] = 7; }).message(),
              HasSubstr("dense flag of 7"));
  EXPECT_THAT(ReadEdited(layout, [](SlotState* s) { s->logits[0] = NAN; }).message(),
              HasSubstr("not a number"));
  EXPECT_THAT(ReadEdited(layout, [](SlotState* s) { s->seq.host_kv.pop_back(); }).message(),
              HasSubstr("does not fit its layout"));
  EXPECT_THAT(ReadEdited(layout, nullptr,
                         [](GgufWriter* w) { w->Set("general.type", GgufValue::String("x")); })
                  .message(),
              HasSubstr("not a slot file"));
  EXPECT_THAT(ReadEdited(layout, nullptr,
                         [](GgufWriter* w) {
                           const int32_t one = 1;
                           (void)w->AddTensor("extra", DType::kI32, {1}, &one);
                         })
                  .message(),
              HasSubstr("unexpected tensor extra"));
  EXPECT_THAT(ReadEdited(layout, nullptr,
                         [](GgufWriter* w) { w->Set("pi.slot.kv_row_bytes", GgufValue::U64(3)); })
                  .message(),
              HasSubstr("3 KV bytes per position"));
  SlotLayout small = layout;
  small.n_ctx = 7;
  EXPECT_THAT(ReadEdited(small, nullptr).message(), HasSubstr("context holds 1 to 7"));
  SlotLayout vocab = layout;
  vocab.n_vocab += 1;
  EXPECT_THAT(ReadEdited(vocab, nullptr).message(), HasSubstr("logits is f32"));
}

}  // namespace
}  // namespace pi
