// A model split by llama.cpp's gguf-split (NAME-00001-of-00003.gguf, the
// first part holding the metadata, each part split.no / split.count and the
// first split.tensors.count): opened from its first part, mapped or read
// whole, it holds every tensor of the unsplit file byte for byte, and the
// engine's logits on it equal the unsplit model's bit for bit. A part opened
// alone, a missing or foreign part, a tensor in two parts and a wrong tensor
// count are errors naming the file.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "common/format/gguf.h"
#include "common/offline/synthetic_model.h"
#include "coordinator/engine/engine.h"
#include "tests/temp_path.h"

namespace pi {
namespace {

using ::testing::HasSubstr;

class GgufSplitTest : public ::testing::Test {
 protected:
  void SetUp() override {
    whole_ = TempPath("whole.gguf");
    SyntheticModelOptions o;
    o.activation = "relu";
    ASSERT_TRUE(WriteSyntheticModel(o, whole_).ok());
    ASSERT_TRUE(GgufFile::Open(whole_, &file_).ok());
    prefix_ = TempPath("split");
  }
  void TearDown() override {
    std::remove(whole_.c_str());
    for (int i = 1; i <= 3; ++i) std::remove(Part(i).c_str());
  }
  std::string Part(int i) const {
    char tail[32];
    snprintf(tail, sizeof tail, "-%05d-of-%05d.gguf", i, 3);
    return prefix_ + tail;
  }
  // The whole file's tensors dealt into 3 parts as gguf-split writes them;
  // `edit` changes a part's writer before it is written.
  void Split(void (*edit)(int part, GgufWriter* w) = nullptr) {
    const std::vector<TensorInfo>& tensors = file_->tensors();
    for (int p = 0; p < 3; ++p) {
      GgufWriter w;
      if (p == 0) {
        for (const auto& [key, value] : file_->metadata()) w.Set(key, value);
        w.Set("split.tensors.count", GgufValue::I32(static_cast<int32_t>(tensors.size())));
      }
      w.Set("split.no", GgufValue::U16(static_cast<uint16_t>(p)));
      w.Set("split.count", GgufValue::U16(3));
      for (size_t t = p; t < tensors.size(); t += 3) {
        const TensorInfo& info = tensors[t];
        std::vector<int64_t> ne(info.ne, info.ne + info.n_dims);
        ASSERT_TRUE(w.AddTensor(info.name, info.type, ne, info.data).ok());
      }
      if (edit) edit(p, &w);
      ASSERT_TRUE(w.Write(Part(p + 1)).ok());
    }
  }
  std::vector<float> Logits(std::unique_ptr<GgufFile> file) {
    LlamaModel m;
    EXPECT_TRUE(LoadLlamaModel(std::move(file), &m).ok());
    EngineOptions opt;
    opt.n_ctx = 16;
    std::unique_ptr<Engine> e;
    EXPECT_TRUE(Engine::Create(&m, opt, &e).ok());
    const int32_t tokens[4] = {1, 5, 9, 2};
    EXPECT_TRUE(e->Eval(tokens, 4).ok());
    return std::vector<float>(e->logits(), e->logits() + m.config.n_vocab);
  }
  std::string whole_, prefix_;
  std::unique_ptr<GgufFile> file_;
};

TEST_F(GgufSplitTest, OpenedFromItsFirstPartItIsTheWholeModel) {
  Split();
  for (const bool read : {false, true}) {
    std::unique_ptr<GgufFile> split;
    ASSERT_TRUE((read ? GgufFile::Read(Part(1), &split) : GgufFile::Open(Part(1), &split)).ok());
    EXPECT_EQ(split->n_parts(), 3);
    ASSERT_EQ(split->tensors().size(), file_->tensors().size());
    for (const TensorInfo& t : file_->tensors()) {
      const TensorInfo* s = split->FindTensor(t.name);
      ASSERT_NE(s, nullptr) << t.name;
      ASSERT_EQ(s->nbytes, t.nbytes);
      EXPECT_EQ(0, std::memcmp(s->data, t.data, t.nbytes)) << t.name;
    }
    std::string arch;
    EXPECT_TRUE(split->GetString("general.architecture", &arch).ok());
    std::unique_ptr<GgufFile> whole;
    ASSERT_TRUE(GgufFile::Open(whole_, &whole).ok());
    EXPECT_EQ(Logits(std::move(split)), Logits(std::move(whole)));  // bit for bit
  }
}

TEST_F(GgufSplitTest, BadSplitsAreErrorsNamingTheFile) {
  Split();
  std::unique_ptr<GgufFile> f;
  EXPECT_THAT(GgufFile::Open(Part(2), &f).message(), HasSubstr("open its first part"));
  std::remove(Part(3).c_str());
  EXPECT_THAT(GgufFile::Open(Part(1), &f).message(), HasSubstr(Part(3)));
  Split([](int part, GgufWriter* w) {
    if (part == 2) w->Set("split.no", GgufValue::U16(1));
  });
  EXPECT_THAT(GgufFile::Open(Part(1), &f).message(), HasSubstr("not part 3 of 3"));
  Split([](int part, GgufWriter* w) {
    if (part == 0) w->Set("split.tensors.count", GgufValue::I32(5));
  });
  EXPECT_THAT(GgufFile::Open(Part(1), &f).message(), HasSubstr("split.tensors.count says 5"));
  Split([](int part, GgufWriter* w) {
    const float one = 1.0f;
    if (part == 2) (void)w->AddTensor("token_embd.weight", DType::kF32, {1}, &one);
  });
  EXPECT_THAT(GgufFile::Open(Part(1), &f).message(), HasSubstr("in an earlier part too"));
  Split([](int part, GgufWriter* w) {
    if (part == 0) w->Set("split.count", GgufValue::U16(10000));
  });
  EXPECT_THAT(GgufFile::Open(Part(1), &f).message(), HasSubstr("over 9999 parts"));
}

}  // namespace
}  // namespace pi
