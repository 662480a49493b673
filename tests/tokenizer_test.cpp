// Tokenizer unit tests on small hand-built vocabularies. Every expected id list below was
// worked out by hand from the algorithm's definition (llama.cpp's SPM and BPE sessions,
// sentencepiece's rules, the GPT-2 / Llama 3 regexes), not produced by the code under test.
// The comparison against sentencepiece itself on a real model is
// tests/reference/check_tokenizer.py.
#include "common/text/tokenizer.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "common/format/gguf.h"
#include "common/text/tokenizer_bpe.h"
#include "common/text/tokenizer_spm.h"
#include "common/text/unicode.h"

namespace pi {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using Ids = std::vector<int32_t>;

const char kSp[] = "\xE2\x96\x81";  // "▁"

// ----------------------------------------------------------------------------- unicode

TEST(Unicode, DecodesAndRejects) {
  uint32_t cp;
  size_t len;
  const std::string euro = "\xE2\x82\xAC";
  EXPECT_EQ(DecodeUtf8(euro.data(), euro.size(), 0, &cp, &len), Utf8Status::kValid);
  EXPECT_EQ(cp, 0x20ACu);
  EXPECT_EQ(len, 3u);
  EXPECT_EQ(DecodeUtf8(euro.data(), 2, 0, &cp, &len), Utf8Status::kIncomplete);
  const std::string overlong = "\xC0\xAF", surrogate = "\xED\xA0\x80", big = "\xF4\x90\x80\x80";
  EXPECT_EQ(DecodeUtf8(overlong.data(), 2, 0, &cp, &len), Utf8Status::kInvalid);
  EXPECT_EQ(DecodeUtf8(surrogate.data(), 3, 0, &cp, &len), Utf8Status::kInvalid);
  EXPECT_EQ(DecodeUtf8(big.data(), 4, 0, &cp, &len), Utf8Status::kInvalid);
  EXPECT_EQ(cp, 0xFFFDu);
  EXPECT_EQ(len, 1u);
  std::string out;
  AppendUtf8(0x1F600, &out);
  EXPECT_EQ(out, "\xF0\x9F\x98\x80");
}

TEST(Unicode, Categories) {
  // Letters of several scripts; digits and other numbers; White_Space.
  for (uint32_t cp :
       {0x41u, 0x7Au, 0xE9u, 0x3B1u, 0x416u, 0x5D0u, 0x627u, 0x4E2Du, 0x3042u, 0xAC00u, 0x2CEA1u}) {
    EXPECT_TRUE(IsUnicodeLetter(cp)) << std::hex << cp;
  }
  for (uint32_t cp : {0x30u, 0x20u, 0x21u, 0x2Du, 0x1F600u, 0x300u, 0x110000u}) {
    EXPECT_FALSE(IsUnicodeLetter(cp)) << std::hex << cp;
  }
  for (uint32_t cp : {0x30u, 0x39u, 0xB2u, 0x661u, 0x2167u, 0xFF15u}) {
    EXPECT_TRUE(IsUnicodeNumber(cp)) << std::hex << cp;
  }
  EXPECT_FALSE(IsUnicodeNumber('a'));
  for (uint32_t cp : {0x9u, 0xAu, 0xDu, 0x20u, 0x85u, 0xA0u, 0x2003u, 0x3000u}) {
    EXPECT_TRUE(IsUnicodeWhitespace(cp)) << std::hex << cp;
  }
  for (uint32_t cp : {0x1Cu, 0x200Bu, 0x41u}) EXPECT_FALSE(IsUnicodeWhitespace(cp));
}

// ----------------------------------------------------------------------------- SPM

// A small SentencePiece vocabulary. Ids:
//   0 <unk>  1 <s>  2 </s>  3 ▁  4 a  5 b  6 c  7 ab  8 bc  9 ▁a  10 abc  11 aa  12 ▁b
//   13..15 <0xE2> <0x82> <0xAC> (the bytes of €)  16 <0x20>
struct SpmFixture {
  TokenizerVocab v;
  SpmFixture() {
    v.model = "llama";
    auto add = [&](const std::string& t, float score, TokenType type) {
      v.tokens.push_back(t);
      v.scores.push_back(score);
      v.types.push_back(type);
    };
    add("<unk>", 0, TokenType::kUnknown);
    add("<s>", 0, TokenType::kControl);
    add("</s>", 0, TokenType::kControl);
    add(kSp, -10, TokenType::kNormal);
    add("a", -11, TokenType::kNormal);
    add("b", -12, TokenType::kNormal);
    add("c", -13, TokenType::kNormal);
    add("ab", -1, TokenType::kNormal);
    add("bc", -2, TokenType::kNormal);
    add(std::string(kSp) + "a", -3, TokenType::kNormal);
    add("abc", -0.5f, TokenType::kNormal);
    add("aa", -1, TokenType::kNormal);
    add(std::string(kSp) + "b", -4, TokenType::kNormal);
    add("<0xE2>", 0, TokenType::kByte);
    add("<0x82>", 0, TokenType::kByte);
    add("<0xAC>", 0, TokenType::kByte);
    add("<0x20>", 0, TokenType::kByte);
    v.bos = 1;
    v.eos = 2;
    v.unk = 0;
    v.add_bos = true;
    v.add_space_prefix = true;
  }
  std::unique_ptr<Tokenizer> Make() const {
    std::unique_ptr<Tokenizer> t;
    const Status s = Tokenizer::FromVocab(v, &t);
    EXPECT_TRUE(s.ok()) << s.message();
    return t;
  }
};

Ids Enc(const Tokenizer& t, const std::string& text, bool bos = false, bool special = false) {
  Ids ids;
  const Status s = t.Encode(text, bos, &ids, special);
  EXPECT_TRUE(s.ok()) << s.message();
  return ids;
}

TEST(Spm, MergesByScore) {
  auto t = SpmFixture().Make();
  // "▁abc": pairs ▁a (-3), ab (-1), bc (-2). ab wins; then ab+c = abc (-0.5); ▁+abc is
  // not a piece. A tokenizer that merged bc first would end with ▁a, bc.
  EXPECT_THAT(Enc(*t, "abc"), ElementsAre(3, 10));
  // "▁bc": ▁b (-4) vs bc (-2): bc first, leaving ▁ alone.
  EXPECT_THAT(Enc(*t, "bc"), ElementsAre(3, 8));
  // "▁ba": ▁b (-4) is the only pair; then ▁b+a is not a piece.
  EXPECT_THAT(Enc(*t, "ba"), ElementsAre(12, 4));
}

TEST(Spm, TiesGoLeftmost) {
  SpmFixture f;
  f.v.add_space_prefix = false;
  auto t = f.Make();
  // aa (-1) at positions 0 and 1: the left pair merges, the right a stays.
  EXPECT_THAT(Enc(*t, "aaa"), ElementsAre(11, 4));
  // "aab": aa (-1) and ab (-1) tie: the leftmost (aa) wins, then a+... aa+b is no piece.
  EXPECT_THAT(Enc(*t, "aab"), ElementsAre(11, 5));
}

TEST(Spm, SpacePrefixAndSpaces) {
  auto t = SpmFixture().Make();
  // "a b" -> "▁a▁b": ▁a (-3) and ▁b (-4); a▁ is no piece.
  EXPECT_THAT(Enc(*t, "a b"), ElementsAre(9, 12));
  // A leading space becomes a second ▁: "▁▁a" -> ▁, ▁a.
  EXPECT_THAT(Enc(*t, " a"), ElementsAre(3, 9));
  EXPECT_THAT(Enc(*t, ""), ElementsAre());
  EXPECT_THAT(Enc(*t, "", /*bos=*/true), ElementsAre(1));
  EXPECT_THAT(Enc(*t, "a", /*bos=*/true), ElementsAre(1, 9));
  SpmFixture f;
  f.v.add_space_prefix = false;
  EXPECT_THAT(Enc(*f.Make(), "a b"), ElementsAre(4, 12));
}

TEST(Spm, ByteFallback) {
  auto t = SpmFixture().Make();
  // "▁a€": ▁a merges; € (E2 82 AC) is no piece -> its three byte tokens.
  EXPECT_THAT(Enc(*t, "a\xE2\x82\xAC"), ElementsAre(9, 13, 14, 15));
  // A byte without a byte token falls back to unk: "d" is 0x64.
  EXPECT_THAT(Enc(*t, "ad"), ElementsAre(9, 0));
}

TEST(Spm, UnknownWithoutByteTokens) {
  SpmFixture f;
  for (int k = 0; k < 4; ++k) {  // drop the byte tokens
    f.v.tokens.pop_back();
    f.v.scores.pop_back();
    f.v.types.pop_back();
  }
  auto t = f.Make();
  // "▁a€€b": ▁a, then € € unknown -> one unk (sentencepiece folds runs), then b.
  EXPECT_THAT(Enc(*t,
                  "a\xE2\x82\xAC\xE2\x82\xAC"
                  "b"),
              ElementsAre(9, 0, 5));
  // Separated unknowns stay separate: "▁a€▁€" -> ▁a, unk, ▁, unk.
  EXPECT_THAT(Enc(*t, "a\xE2\x82\xAC \xE2\x82\xAC"), ElementsAre(9, 0, 3, 0));
  f.v.unk = -1;
  auto no_unk = f.Make();
  Ids ids;
  EXPECT_FALSE(no_unk->Encode("\xE2\x82\xAC", false, &ids).ok());
}

TEST(Spm, UnusedPiecesAreResegmented) {
  SpmFixture f;
  f.v.add_space_prefix = false;
  f.v.types[7] = TokenType::kUnused;  // ab
  auto t = f.Make();
  // "ab": a+b merges into the unused ab, which sentencepiece splits back.
  EXPECT_THAT(Enc(*t, "ab"), ElementsAre(4, 5));
  // "abc": ab (unused) still merges on to abc, a normal piece.
  EXPECT_THAT(Enc(*t, "abc"), ElementsAre(10));
}

TEST(Spm, ControlPiecesAreNotMergeTargets) {
  SpmFixture f;
  f.v.add_space_prefix = false;
  f.v.types[8] = TokenType::kControl;  // bc
  auto t = f.Make();
  // "bc" cannot merge into a control piece; each character is its own token.
  EXPECT_THAT(Enc(*t, "bc"), ElementsAre(5, 6));
}

TEST(Spm, SpecialTokensOnlyWhenAsked) {
  SpmFixture f;
  // Byte tokens for "<", "/", "s", ">" do not exist: as plain text they become unk.
  auto t = f.Make();
  EXPECT_THAT(Enc(*t, "a</s>b", false, /*special=*/true), ElementsAre(9, 2, 12));
  // Without parse_special: ▁a, then "<", "/", "s", ">" -> unk each (byte fallback is on, so
  // no folding), then b.
  EXPECT_THAT(Enc(*t, "a</s>b"), ElementsAre(9, 0, 0, 0, 0, 5));
  // User-defined pieces are always split out; the text after them gets a space prefix.
  f.v.tokens.push_back("<x>");
  f.v.scores.push_back(0);
  f.v.types.push_back(TokenType::kUserDefined);
  auto u = f.Make();
  EXPECT_THAT(Enc(*u, "<x>b"), ElementsAre(17, 12));
  EXPECT_THAT(Enc(*u, "a<x>"), ElementsAre(9, 17));
}

TEST(Spm, RemoveExtraWhitespaces) {
  SpmFixture f;
  f.v.remove_extra_whitespaces = true;
  auto t = f.Make();
  // "  a   b  " -> "a b" -> "▁a▁b".
  EXPECT_THAT(Enc(*t, "  a   b  "), ElementsAre(9, 12));
  EXPECT_THAT(Enc(*t, "   "), ElementsAre());
  EXPECT_EQ(SpmRemoveExtraWhitespaces(" x  y "), "x y");
}

TEST(Spm, DecodeAndPieces) {
  auto t = SpmFixture().Make();
  EXPECT_EQ(t->Decode({1, 9, 13, 14, 15, 12, 2}), "a\xE2\x82\xAC b");
  // Only the first space is the prefix Encode added: "▁,▁a" is " a".
  EXPECT_EQ(t->Decode({3, 9}), " a");
  // A <0x20> byte token is the user's own space and stays.
  EXPECT_EQ(t->Decode({16, 4}), " a");
  EXPECT_EQ(t->Decode({0}), " \xE2\x81\x87 ");  // sentencepiece's unk surface " ⁇ "
  EXPECT_EQ(t->Decode({4, -1, 99}), "a");       // out of range ids are skipped
  EXPECT_EQ(t->TokenToPiece(9), " a");
  EXPECT_EQ(t->TokenToPiece(13), "\xE2");
  EXPECT_EQ(t->TokenToPiece(1), "");
  EXPECT_EQ(t->TokenToPiece(1000), "");
  EXPECT_EQ(t->TokenText(9), std::string(kSp) + "a");
  EXPECT_EQ(t->FindToken("abc"), 10);
  EXPECT_EQ(t->FindToken("zzz"), -1);
  EXPECT_EQ(t->n_vocab(), 17);
  EXPECT_TRUE(t->is_spm());
  EXPECT_TRUE(t->IsEog(2));
  EXPECT_FALSE(t->IsEog(1));
  // Streaming: the pieces concatenate to Decode plus the prefix space.
  const Ids ids = {9, 13, 14, 15, 12};
  std::string streamed;
  for (int32_t id : ids) streamed += t->TokenToPiece(id);
  EXPECT_EQ(streamed, " " + t->Decode(ids));
}

TEST(Utf8Stream, HoldsBackPartialCharacters) {
  Utf8Stream s;
  EXPECT_EQ(s.Push("a\xE2"), "a");
  EXPECT_EQ(s.Push("\x82"), "");
  EXPECT_EQ(s.Push("\xAC"
                   "b"),
            "\xE2\x82\xAC"
            "b");
  // An impossible byte comes out as U+FFFD at once; a cut-off character at Flush.
  EXPECT_EQ(s.Push("\xFF"
                   "c"),
            "\xEF\xBF\xBD"
            "c");
  EXPECT_EQ(s.Push("\xF0\x9F"), "");
  EXPECT_EQ(s.Flush(), "\xEF\xBF\xBD");
  EXPECT_EQ(s.Flush(), "");
  // A lead byte followed by a non-continuation byte is invalid, the next byte is kept.
  EXPECT_EQ(s.Push("\xE2"
                   "A"),
            "\xEF\xBF\xBD"
            "A");
}

// ----------------------------------------------------------------------------- BPE

TEST(Bpe, ByteAlphabet) {
  // GPT-2's bytes_to_unicode: printable bytes map to themselves; the others to 256 + n.
  EXPECT_EQ(BpeByteToChar('A'), "A");
  EXPECT_EQ(BpeByteToChar('!'), "!");
  EXPECT_EQ(BpeByteToChar(0xE9), "\xC3\xA9");  // é stays é
  EXPECT_EQ(BpeByteToChar(0), "\xC4\x80");     // U+0100 Ā
  EXPECT_EQ(BpeByteToChar(' '), "\xC4\xA0");   // U+0120 Ġ
  EXPECT_EQ(BpeByteToChar('\n'), "\xC4\x8A");  // U+010A Ċ
  EXPECT_EQ(BpeByteToChar(0x7F), "\xC4\xA1");  // U+0121 (the 34th unprintable byte)
  EXPECT_EQ(BpeByteToChar(0xAD), "\xC5\x83");  // U+0143, the last one
  for (int b = 0; b < 256; ++b) {
    uint32_t cp;
    size_t len;
    const std::string c = BpeByteToChar(static_cast<uint8_t>(b));
    ASSERT_EQ(DecodeUtf8(c.data(), c.size(), 0, &cp, &len), Utf8Status::kValid);
    EXPECT_EQ(BpeCharToByte(cp), b);
  }
  EXPECT_EQ(BpeCharToByte(0x4E2D), -1);
  EXPECT_EQ(BpeDecodeText("\xC4\xA0"
                          "a\xC4\x8A"),
            " a\n");
}

std::vector<std::string> Split(BpePreTokenizer pre, const std::string& text) {
  std::vector<std::pair<size_t, size_t>> words;
  BpePreTokenize(pre, text, &words);
  std::vector<std::string> out;
  for (const auto& w : words) out.push_back(text.substr(w.first, w.second - w.first));
  return out;
}

TEST(Bpe, Gpt2PreTokenizer) {
  const auto g = BpePreTokenizer::kGpt2;
  // Contractions, " ?letters", a two-space run (its last space goes to the next word),
  // newlines, " ?digits".
  EXPECT_THAT(Split(g, "Hello world's  end\n\n 123abc"),
              ElementsAre("Hello", " world", "'s", " ", " end", "\n\n", " 123", "abc"));
  // Case-sensitive contractions: "'T" is punctuation then a letter.
  EXPECT_THAT(Split(g, "DON'T don't we'll"),
              ElementsAre("DON", "'", "T", " don", "'t", " we", "'ll"));
  // Punctuation runs take an optional leading space; trailing whitespace is one word.
  EXPECT_THAT(Split(g, "a, (b)...  "), ElementsAre("a", ",", " (", "b", ")...", "  "));
  EXPECT_THAT(Split(g, "a\tb"), ElementsAre("a", "\t", "b"));
  EXPECT_THAT(Split(g, " \tfoo"), ElementsAre(" ", "\t", "foo"));
  // Unicode letters and numbers: é, Cyrillic, CJK; ² and Arabic-Indic digits are \p{N}.
  EXPECT_THAT(Split(g, "h\xC3\xA9llo \xD0\xBC\xD0\xB8\xD1\x80 \xE6\x97\xA5\xE6\x9C\xAC x\xC2\xB2"),
              ElementsAre("h\xC3\xA9llo", " \xD0\xBC\xD0\xB8\xD1\x80", " \xE6\x97\xA5\xE6\x9C\xAC",
                          " x", "\xC2\xB2"));
  EXPECT_THAT(Split(g, "12345"), ElementsAre("12345"));
  EXPECT_THAT(Split(g, ""), ElementsAre());
}

TEST(Bpe, Llama3PreTokenizer) {
  const auto l = BpePreTokenizer::kLlama3;
  EXPECT_THAT(Split(l, "Hello world's  end\n\n 123abc"),
              ElementsAre("Hello", " world", "'s", " ", " end", "\n\n", " ", "123", "abc"));
  // Case-insensitive contractions; digits in groups of at most three.
  EXPECT_THAT(Split(l, "DON'T 12345"), ElementsAre("DON", "'T", " ", "123", "45"));
  // One non-letter, non-digit, non-newline character may lead a letter run.
  EXPECT_THAT(Split(l, "(hello a\tb"), ElementsAre("(hello", " a", "\tb"));
  // Punctuation keeps following newlines; whitespace up to the last newline is one word.
  EXPECT_THAT(Split(l, "x.\n\ny  \n z"), ElementsAre("x", ".\n\n", "y", "  \n", " z"));
}

// Qwen2: Llama 3's pattern with one digit a piece.
TEST(Bpe, Qwen2PreTokenizer) {
  const auto q = BpePreTokenizer::kQwen2;
  EXPECT_THAT(Split(q, "DON'T 12345"), ElementsAre("DON", "'T", " ", "1", "2", "3", "4", "5"));
  EXPECT_THAT(Split(q, "Hello world's  end\n\n 12abc"),
              ElementsAre("Hello", " world", "'s", " ", " end", "\n\n", " ", "1", "2", "abc"));
  BpePreTokenizer parsed;
  ASSERT_TRUE(ParseBpePreTokenizer("qwen2", &parsed).ok());
  EXPECT_EQ(parsed, q);
}

// A byte-level vocabulary. Ids: 0 a  1 b  2 c  3 Ġ  4 bc  5 ab  6 aa  7 Ġa  8 Ċ
// 9 <|endoftext|> (control). Merges by rank: 0 "b c", 1 "a b", 2 "ab c", 3 "a a", 4 "Ġ a".
struct BpeFixture {
  TokenizerVocab v;
  BpeFixture() {
    v.model = "gpt2";
    v.pre = "gpt2";
    v.tokens = {"a",
                "b",
                "c",
                "\xC4\xA0",
                "bc",
                "ab",
                "aa",
                "\xC4\xA0"
                "a",
                "\xC4\x8A",
                "<|endoftext|>"};
    v.types.assign(v.tokens.size(), TokenType::kNormal);
    v.types[9] = TokenType::kControl;
    v.merges = {"b c", "a b", "ab c", "a a", "\xC4\xA0 a"};
    v.bos = 9;
    v.eos = 9;
  }
  std::unique_ptr<Tokenizer> Make() const {
    std::unique_ptr<Tokenizer> t;
    const Status s = Tokenizer::FromVocab(v, &t);
    EXPECT_TRUE(s.ok()) << s.message();
    return t;
  }
};

TEST(Bpe, MergesByRank) {
  auto t = BpeFixture().Make();
  EXPECT_FALSE(t->is_spm());
  // "abc": b c (rank 0) beats a b (rank 1); then "a bc" is no merge. Leftmost-first
  // merging would give ab, then "ab c" -> abc (not a token here).
  EXPECT_THAT(Enc(*t, "abc"), ElementsAre(0, 4));
  // "ab": a b (rank 1) -> ab.
  EXPECT_THAT(Enc(*t, "ab"), ElementsAre(5));
  // "aaa": the two "a a" pairs tie; the left one merges.
  EXPECT_THAT(Enc(*t, "aaa"), ElementsAre(6, 0));
  // " a" is one pre-token "Ġa": Ġ a (rank 4) -> Ġa.
  EXPECT_THAT(Enc(*t, "ab a", /*bos=*/true), ElementsAre(9, 5, 7));
  // "\n  a" splits into "\n " (a whitespace run leaves its last space) and " a".
  EXPECT_THAT(Enc(*t, "\n  a"), ElementsAre(8, 3, 7));
}

TEST(Bpe, MergedSymbolMissingFallsBackToBytes) {
  BpeFixture f;
  f.v.merges.push_back("c c");  // "cc" is not a token
  auto t = f.Make();
  EXPECT_THAT(Enc(*t, "cc"), ElementsAre(2, 2));
  // A byte with no token and no unk is an error; with an unk it is unk.
  Ids ids;
  const Status s = t->Encode("d", false, &ids);
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr("0x64"));
  f.v.tokens.push_back("<unk>");
  f.v.types.push_back(TokenType::kUnknown);
  f.v.unk = 10;
  EXPECT_THAT(Enc(*f.Make(), "dab"), ElementsAre(10, 5));
}

TEST(Bpe, SpecialTokensAndDecode) {
  auto t = BpeFixture().Make();
  EXPECT_THAT(Enc(*t, "a<|endoftext|>", false, /*special=*/true), ElementsAre(0, 9));
  EXPECT_EQ(t->Decode({9, 5, 7, 8, 3, 9}), "ab a\n ");
  EXPECT_EQ(t->TokenToPiece(7), " a");
  EXPECT_EQ(t->TokenToPiece(9), "");
  EXPECT_TRUE(t->IsEog(9));
}

TEST(Bpe, Llama3IgnoresMergesForWholeTokens) {
  BpeFixture f;
  f.v.pre = "llama-bpe";
  f.v.tokens.push_back("abc");
  f.v.types.push_back(TokenType::kNormal);
  auto t = f.Make();
  // "abc" is a token, so it is emitted as is although the merges would give a, bc.
  EXPECT_THAT(Enc(*t, "abc"), ElementsAre(10));
  f.v.pre = "gpt2";
  EXPECT_THAT(Enc(*f.Make(), "abc"), ElementsAre(0, 4));
}

// ----------------------------------------------------------------------------- bytes

// Random bytes (mostly invalid UTF-8) must come back unchanged through Encode and Decode
// when the vocabulary can spell every byte: SPM through byte fallback, BPE through the
// byte alphabet. The reference is the input itself.
TEST(RoundTrip, RandomBytes) {
  TokenizerVocab spm;
  spm.model = "llama";
  spm.tokens = {"<unk>", "<s>", "</s>", kSp, std::string(kSp) + "a", "ab"};
  spm.types = {TokenType::kUnknown, TokenType::kControl, TokenType::kControl,
               TokenType::kNormal,  TokenType::kNormal,  TokenType::kNormal};
  spm.scores = {0, 0, 0, -1, -2, -3};
  for (int b = 0; b < 256; ++b) {
    char name[8];
    snprintf(name, sizeof(name), "<0x%02X>", b);
    spm.tokens.push_back(name);
    spm.types.push_back(TokenType::kByte);
    spm.scores.push_back(0);
  }
  spm.unk = 0;
  spm.add_space_prefix = true;
  TokenizerVocab bpe;
  bpe.model = "gpt2";
  for (int b = 0; b < 256; ++b) bpe.tokens.push_back(BpeByteToChar(static_cast<uint8_t>(b)));
  bpe.tokens.push_back(BpeByteToChar('a') + BpeByteToChar('b'));
  bpe.merges = {BpeByteToChar('a') + " " + BpeByteToChar('b')};

  std::unique_ptr<Tokenizer> ts, tb;
  ASSERT_TRUE(Tokenizer::FromVocab(spm, &ts).ok());
  ASSERT_TRUE(Tokenizer::FromVocab(bpe, &tb).ok());
  uint32_t state = 12345;
  auto next = [&]() {  // a fixed LCG: the same strings on every platform
    state = state * 1664525u + 1013904223u;
    return state >> 24;
  };
  for (int iter = 0; iter < 300; ++iter) {
    std::string text;
    const int len = static_cast<int>(next() % 24);
    for (int k = 0; k < len; ++k) {
      // Bias towards a, b and spaces so that merges happen too.
      const uint32_t r = next();
      text.push_back(static_cast<char>(r < 64 ? 'a' : r < 96 ? 'b' : r < 128 ? ' ' : next()));
    }
    if (text.find(kSp) != std::string::npos) continue;  // a literal ▁ decodes as a space
    Ids ids;
    ASSERT_TRUE(ts->Encode(text, false, &ids).ok());
    EXPECT_EQ(ts->Decode(ids), text);
    ASSERT_TRUE(tb->Encode(text, false, &ids).ok());
    EXPECT_EQ(tb->Decode(ids), text);
    for (int32_t id : ids) EXPECT_GE(id, 0);
  }
}

// ----------------------------------------------------------------------------- errors

TEST(TokenizerErrors, FromVocab) {
  std::unique_ptr<Tokenizer> t;
  BpeFixture f;
  f.v.pre = "deepseek-llm";
  Status s = Tokenizer::FromVocab(f.v, &t);
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr("tokenizer.ggml.pre"));
  EXPECT_THAT(s.message(), HasSubstr("deepseek-llm"));

  f = BpeFixture();
  f.v.merges.push_back("nospace");
  s = Tokenizer::FromVocab(f.v, &t);
  EXPECT_THAT(s.message(), HasSubstr("tokenizer.ggml.merges[5]"));

  SpmFixture g;
  g.v.scores.pop_back();
  s = Tokenizer::FromVocab(g.v, &t);
  EXPECT_THAT(s.message(), HasSubstr("tokenizer.ggml.scores"));

  g = SpmFixture();
  g.v.bos = 17;
  s = Tokenizer::FromVocab(g.v, &t);
  EXPECT_THAT(s.message(), HasSubstr("tokenizer.ggml.bos_token_id"));

  g = SpmFixture();
  g.v.model = "bert";
  EXPECT_FALSE(Tokenizer::FromVocab(g.v, &t).ok());
  g.v.model = "llama";
  g.v.tokens.clear();
  EXPECT_FALSE(Tokenizer::FromVocab(g.v, &t).ok());
}

// ----------------------------------------------------------------------------- GGUF

Status Load(const GgufWriter& w, std::unique_ptr<Tokenizer>* t) {
  const std::vector<uint8_t> bytes = w.Serialize();
  std::unique_ptr<GgufFile> file;
  PI_RETURN_IF_ERROR(GgufFile::OpenBuffer(bytes.data(), bytes.size(), &file));
  return Tokenizer::FromGguf(*file, t);
}

GgufWriter SpmWriter() {
  GgufWriter w;
  w.Set("general.architecture", GgufValue::String("llama"));
  w.Set("tokenizer.ggml.model", GgufValue::String("llama"));
  w.Set("tokenizer.ggml.tokens",
        GgufValue::StringArray({"<unk>", "<s>", "</s>", kSp, "a", std::string(kSp) + "a"}));
  w.Set("tokenizer.ggml.scores", GgufValue::F32Array({0, 0, 0, -2, -3, -1}));
  w.Set("tokenizer.ggml.token_type", GgufValue::I32Array({2, 3, 3, 1, 1, 1}));
  return w;
}

TEST(TokenizerGguf, SpmDefaultsAndKeys) {
  std::unique_ptr<Tokenizer> t;
  GgufWriter w = SpmWriter();
  Status s = Load(w, &t);
  ASSERT_TRUE(s.ok()) << s.message();
  // llama.cpp's SPM defaults: bos 1, eos 2, unk 0, add_bos, space prefix.
  EXPECT_EQ(t->bos(), 1);
  EXPECT_EQ(t->eos(), 2);
  EXPECT_EQ(t->unk(), 0);
  EXPECT_TRUE(t->add_bos_token());
  EXPECT_THAT(Enc(*t, "a", true), ElementsAre(1, 5));

  w.Set("tokenizer.ggml.add_space_prefix", GgufValue::Bool(false));
  w.Set("tokenizer.ggml.add_bos_token", GgufValue::Bool(false));
  w.Set("tokenizer.ggml.eos_token_id", GgufValue::U32(1));
  w.Set("tokenizer.ggml.eot_token_id", GgufValue::U32(2));
  ASSERT_TRUE(Load(w, &t).ok());
  EXPECT_FALSE(t->add_bos_token());
  EXPECT_EQ(t->eos(), 1);
  EXPECT_TRUE(t->IsEog(1));
  EXPECT_TRUE(t->IsEog(2));
  EXPECT_THAT(Enc(*t, "a"), ElementsAre(4));
}

TEST(TokenizerGguf, Errors) {
  std::unique_ptr<Tokenizer> t;
  GgufWriter w = SpmWriter();
  w.Set("tokenizer.ggml.model", GgufValue::String("none"));
  Status s = Load(w, &t);
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr("no vocabulary"));

  w.Set("tokenizer.ggml.model", GgufValue::String("bert"));
  EXPECT_THAT(Load(w, &t).message(), HasSubstr("bert"));

  GgufWriter no_model;
  no_model.Set("general.architecture", GgufValue::String("llama"));
  EXPECT_THAT(Load(no_model, &t).message(), HasSubstr("tokenizer.ggml.model"));

  GgufWriter no_tokens;
  no_tokens.Set("general.architecture", GgufValue::String("llama"));
  no_tokens.Set("tokenizer.ggml.model", GgufValue::String("llama"));
  EXPECT_THAT(Load(no_tokens, &t).message(), HasSubstr("tokenizer.ggml.tokens"));

  w = SpmWriter();
  w.Set("tokenizer.ggml.scores", GgufValue::StringArray({"x"}));
  EXPECT_THAT(Load(w, &t).message(), HasSubstr("tokenizer.ggml.scores"));
  w = SpmWriter();
  w.Set("tokenizer.ggml.token_type", GgufValue::I32Array({2, 3, 3, 1, 1, 9}));
  EXPECT_THAT(Load(w, &t).message(), HasSubstr("tokenizer.ggml.token_type[5]"));
  w = SpmWriter();
  w.Set("tokenizer.ggml.unknown_token_id", GgufValue::U32(6));
  EXPECT_THAT(Load(w, &t).message(), HasSubstr("tokenizer.ggml.unknown_token_id"));

  GgufWriter bpe;
  bpe.Set("general.architecture", GgufValue::String("gpt2"));
  bpe.Set("tokenizer.ggml.model", GgufValue::String("gpt2"));
  bpe.Set("tokenizer.ggml.tokens", GgufValue::StringArray({"a", "b", "ab"}));
  EXPECT_THAT(Load(bpe, &t).message(), HasSubstr("tokenizer.ggml.merges"));
  bpe.Set("tokenizer.ggml.merges", GgufValue::StringArray({"a b"}));
  s = Load(bpe, &t);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(t->bos(), -1);
  EXPECT_THAT(Enc(*t, "ab", /*bos=*/true), ElementsAre(2));
  bpe.Set("tokenizer.ggml.pre", GgufValue::String("deepseek-llm"));
  EXPECT_THAT(Load(bpe, &t).message(), HasSubstr("deepseek-llm"));
}

}  // namespace
}  // namespace pi
