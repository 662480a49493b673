// Fill-in-the-middle prompts (common/text/infill.h) over a vocabulary of byte
// tokens and the FIM markers, against token sequences written out here:
// the prefix-suffix-middle and suffix-prefix-middle orders, the repository
// format and the snippet lines for other files, what a tight budget keeps,
// and the markers found by their text in a vocabulary without the keys.
#include "common/text/infill.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

namespace pi {
namespace {

constexpr int32_t kBos = 1, kPre = 3, kSuf = 4, kMid = 5, kRep = 6, kSep = 7, kPad = 8;
constexpr int32_t kFirstByte = 9;

// <unk> <s> </s>, the FIM markers (control tokens; the repository's two
// only when `repo`), then the 256 byte tokens: text is one token per byte.
std::unique_ptr<Tokenizer> FimTokenizer(bool repo) {
  TokenizerVocab v;
  v.model = "llama";
  v.tokens = {"<unk>",          "<s>",           "</s>",         "<|fim_prefix|>", "<|fim_suffix|>",
              "<|fim_middle|>", "<|repo_name|>", "<|file_sep|>", "<|fim_pad|>"};
  if (!repo) {
    v.tokens[kRep] = "<unused0>";
    v.tokens[kSep] = "<unused1>";
  }
  v.types.assign(v.tokens.size(), TokenType::kControl);
  v.types[0] = TokenType::kUnknown;
  for (int b = 0; b < 256; ++b) {
    char name[8];
    snprintf(name, sizeof name, "<0x%02X>", b);
    v.tokens.push_back(name);
    v.types.push_back(TokenType::kByte);
  }
  v.bos = kBos;
  v.eos = 2;
  v.unk = 0;
  v.add_bos = true;
  std::unique_ptr<Tokenizer> t;
  const Status st = Tokenizer::FromVocab(v, &t);
  EXPECT_TRUE(st.ok()) << st.message();
  return t;
}

// One token per byte; a space is sentencepiece's U+2581 (the vocabulary has
// no piece for it: its three bytes).
std::vector<int32_t> Bytes(const std::string& s) {
  std::vector<int32_t> ids;
  for (unsigned char c : s) {
    if (c == ' ') {
      for (int b : {0xe2, 0x96, 0x81}) ids.push_back(kFirstByte + b);
    } else {
      ids.push_back(kFirstByte + c);
    }
  }
  return ids;
}

std::vector<int32_t> Join(std::initializer_list<std::vector<int32_t>> parts) {
  std::vector<int32_t> out;
  for (const auto& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

TEST(Infill, MarkersFoundByTheirTextAndEndingGeneration) {
  const auto tok = FimTokenizer(true);
  EXPECT_TRUE(tok->has_fim());
  EXPECT_EQ(tok->vocab().fim_pre, kPre);
  EXPECT_EQ(tok->vocab().fim_mid, kMid);
  EXPECT_EQ(tok->vocab().fim_sep, kSep);
  for (int32_t id : {kPad, kRep, kSep}) EXPECT_TRUE(tok->IsEog(id)) << id;
  EXPECT_FALSE(tok->IsEog(kPre));
  EXPECT_EQ(FimTokenizer(false)->vocab().fim_rep, -1);
}

TEST(Infill, PrefixSuffixMiddleAndSuffixFirst) {
  const auto tok = FimTokenizer(false);
  InfillInput in;
  in.prefix = "def_f(";
  in.suffix = "):\n";
  in.prompt = "x";
  std::vector<int32_t> ids;
  bool truncated = true;
  ASSERT_TRUE(InfillPrompt(*tok, in, false, 100, &ids, &truncated).ok());
  EXPECT_EQ(ids, Join({{kBos, kPre}, Bytes("def_f(x"), {kSuf}, Bytes("):\n"), {kMid}}));
  EXPECT_FALSE(truncated);
  ASSERT_TRUE(InfillPrompt(*tok, in, true, 100, &ids, &truncated).ok());
  EXPECT_EQ(ids, Join({{kBos, kSuf}, Bytes("):\n"), {kPre}, Bytes("def_f(x"), {kMid}}));
  // A marker written in the text is text.
  in.prefix = "<|fim_middle|>";
  ASSERT_TRUE(InfillPrompt(*tok, in, false, 100, &ids, &truncated).ok());
  EXPECT_EQ(ids, Join({{kBos, kPre}, Bytes("<|fim_middle|>x"), {kSuf}, Bytes("):\n"), {kMid}}));
}

TEST(Infill, OtherFilesInTheRepositoryFormatOrAfterSnippetLines) {
  InfillInput in;
  in.prefix = "a";
  in.suffix = "b";
  in.extra = {{"u.py", "U"}, {"tmp", "V"}};
  std::vector<int32_t> ids;
  bool truncated = false;
  ASSERT_TRUE(InfillPrompt(*FimTokenizer(true), in, false, 100, &ids, &truncated).ok());
  EXPECT_EQ(ids, Join({{kBos, kRep},
                       Bytes("myproject\n"),
                       {kSep},
                       Bytes("u.py\nU"),
                       {kSep},
                       Bytes("tmp\nV"),
                       {kSep},
                       Bytes("filename\n"),
                       {kPre},
                       Bytes("a"),
                       {kSuf},
                       Bytes("b"),
                       {kMid}}));
  ASSERT_TRUE(InfillPrompt(*FimTokenizer(false), in, false, 100, &ids, &truncated).ok());
  EXPECT_EQ(ids, Join({{kBos},
                       Bytes("\n\n--- snippet ---\n\nU\n\n--- snippet ---\n\nV"),
                       {kPre},
                       Bytes("a"),
                       {kSuf},
                       Bytes("b"),
                       {kMid}}));
}

TEST(Infill, ATightBudgetKeepsTheTextNearestTheCursor) {
  const auto tok = FimTokenizer(false);
  InfillInput in;
  in.prefix = "0123456789";
  in.suffix = "abcdefghij";
  in.extra = {{"f", "EXTRA"}};
  std::vector<int32_t> ids;
  bool truncated = false;
  // 4 markers (BOS included) and 12 tokens of room: the suffix a quarter (3),
  // the prefix the rest (9), nothing for the other file.
  ASSERT_TRUE(InfillPrompt(*tok, in, false, 16, &ids, &truncated).ok());
  EXPECT_TRUE(truncated);
  EXPECT_EQ(ids, Join({{kBos, kPre}, Bytes("123456789"), {kSuf}, Bytes("abc"), {kMid}}));
  // A short prefix leaves its room to the suffix, then to the other file's end.
  in.prefix = "0";
  ASSERT_TRUE(InfillPrompt(*tok, in, false, 16, &ids, &truncated).ok());
  EXPECT_EQ(ids,
            Join({{kBos}, Bytes("A"), {kPre}, Bytes("0"), {kSuf}, Bytes("abcdefghij"), {kMid}}));
  EXPECT_TRUE(truncated);
  // The markers and the prompt must fit.
  in.prompt = "xx";
  const Status st = InfillPrompt(*tok, in, false, 5, &ids, &truncated);
  EXPECT_NE(st.message().find("6 tokens, more than the 5"), std::string::npos) << st.message();
}

TEST(Infill, AModelWithoutMarkersIsRefused) {
  TokenizerVocab v;
  v.model = "llama";
  v.tokens = {"<unk>", "<s>", "</s>", "a"};
  std::unique_ptr<Tokenizer> tok;
  ASSERT_TRUE(Tokenizer::FromVocab(v, &tok).ok());
  std::vector<int32_t> ids;
  bool truncated = false;
  const Status st = InfillPrompt(*tok, InfillInput{}, false, 100, &ids, &truncated);
  EXPECT_NE(st.message().find("no fill-in-the-middle tokens"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace pi
