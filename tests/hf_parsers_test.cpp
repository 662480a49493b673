// What pi-convert reads from a Hugging Face folder, file by file: a
// safetensors file's header (every field checked before its bytes are
// trusted), config.json, a sentencepiece model (the demo's, against what
// its GGUF holds), a BPE tokenizer.json. Each malformed input names its
// problem. (tests/convert_test.py converts whole folders.)
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "common/format/gguf.h"
#include "common/offline/hf_config.h"
#include "common/offline/hf_tokenizer.h"
#include "common/offline/safetensors.h"

namespace pi {
namespace {

using ::testing::HasSubstr;

std::vector<uint8_t> File(const std::string& header, size_t data_bytes) {
  std::vector<uint8_t> f(8 + header.size() + data_bytes);
  for (int i = 0; i < 8; ++i) f[i] = static_cast<uint8_t>(header.size() >> (8 * i));
  std::copy(header.begin(), header.end(), f.begin() + 8);
  for (size_t i = 0; i < data_bytes; ++i) f[8 + header.size() + i] = static_cast<uint8_t>(i);
  return f;
}

std::string ParseError(const std::string& header, size_t data_bytes) {
  const std::vector<uint8_t> f = File(header, data_bytes);
  std::vector<SafeTensor> t;
  return ParseSafetensors(f.data(), f.size(), &t).message();
}

TEST(SafetensorsTest, ValidFileParsesInPlace) {
  const std::vector<uint8_t> f =
      File(R"({"w":{"dtype":"F16","shape":[2,3],"data_offsets":[0,12]},)"
           R"("b":{"dtype":"BF16","shape":[2],"data_offsets":[12,16]},"__metadata__":{"x":"y"}})",
           16);
  std::vector<SafeTensor> t;
  ASSERT_TRUE(ParseSafetensors(f.data(), f.size(), &t).ok());
  ASSERT_EQ(t.size(), 2u);
  const SafeTensor& w = t[0].name == "w" ? t[0] : t[1];
  EXPECT_EQ(w.type, DType::kF16);
  EXPECT_EQ(w.shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(w.nbytes, 12u);
  EXPECT_EQ(w.data, f.data() + f.size() - 16);
}

TEST(SafetensorsTest, MalformedHeadersNameTheProblem) {
  std::vector<SafeTensor> t;
  const uint8_t tiny[4] = {1, 2, 3, 4};
  EXPECT_THAT(ParseSafetensors(tiny, 4, &t).message(), HasSubstr("shorter than the 8-byte"));
  std::vector<uint8_t> cut = File(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", 4);
  cut.resize(20);
  EXPECT_THAT(ParseSafetensors(cut.data(), cut.size(), &t).message(), HasSubstr("truncated"));
  EXPECT_THAT(ParseError("[1, 2]", 0), HasSubstr("not a JSON object"));
  EXPECT_THAT(ParseError(R"({"w":{"dtype":"Q4","shape":[1],"data_offsets":[0,4]}})", 4),
              HasSubstr("unknown dtype 'Q4'"));
  EXPECT_THAT(ParseError(R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,4]}})", 4),
              HasSubstr("4 bytes for 3 F32 elements"));
  EXPECT_THAT(ParseError(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 4),
              HasSubstr("outside the 4 bytes of data"));
  EXPECT_THAT(ParseError(R"({"w":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", 4),
              HasSubstr("not a non-negative integer"));
  EXPECT_THAT(ParseError(R"({"w":{"dtype":"F32","shape":[1099511627776,1099511627776],)"
                         R"("data_offsets":[0,4]}})",
                         4),
              HasSubstr("overflows"));
  EXPECT_THAT(ParseError(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                         R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                         12),
              HasSubstr("share bytes"));
  EXPECT_THAT(ParseError(R"({"w":{"dtype":"F32","shape":[1]}})", 4), HasSubstr("data_offsets"));
}

TEST(HfConfigTest, FieldsAndDefaults) {
  HfConfig c;
  ASSERT_TRUE(ParseHfConfig(R"({"architectures":["LlamaForCausalLM"],"hidden_size":64,)"
                            R"("intermediate_size":192,"num_hidden_layers":2,)"
                            R"("num_attention_heads":4,"vocab_size":100,"eos_token_id":[2,7]})",
                            &c)
                  .ok());
  EXPECT_EQ(c.num_key_value_heads, 4);
  EXPECT_EQ(c.head_dim, 16);
  EXPECT_EQ(c.hidden_act, "silu");
  EXPECT_EQ(c.eos_token_id, 2);
  EXPECT_EQ(c.bos_token_id, -1);
  auto error = [](const std::string& text) {
    HfConfig x;
    return ParseHfConfig(text, &x).message();
  };
  EXPECT_THAT(error("{"), HasSubstr("not a JSON object"));
  EXPECT_THAT(error(R"({"hidden_size":64})"), HasSubstr("architectures"));
  const std::string base = R"({"architectures":["X"],"hidden_size":64,"intermediate_size":192,)"
                           R"("num_hidden_layers":2,"num_attention_heads":4,"vocab_size":100)";
  EXPECT_THAT(error(base + R"(,"num_key_value_heads":3})"), HasSubstr("not a multiple of 3 KV"));
  EXPECT_THAT(error(base + R"(,"hidden_size":"64"})"), HasSubstr("\"hidden_size\" must be"));
  EXPECT_THAT(error(base + R"(,"rope_scaling":{"type":"linear"}})"),
              HasSubstr("rope_scaling.factor"));
  EXPECT_THAT(error(base + R"(,"rope_scaling":{"rope_type":"yarn","factor":4}})"),
              HasSubstr("rope_scaling type 'yarn' is not supported"));
  EXPECT_THAT(error(base + R"(,"rope_scaling":4})"), HasSubstr("not an object"));
  EXPECT_THAT(error(base + R"(,"rope_scaling":{"rope_type":"llama3","factor":8,)"
                           R"("low_freq_factor":4,"high_freq_factor":1}})"),
              HasSubstr("high_freq_factor"));
  EXPECT_THAT(error(R"({"architectures":["X"],"hidden_size":64})"),
              HasSubstr("no \"intermediate_size\""));
}

// rope_scaling: linear, Llama 3.1's llama3 (defaults for what it leaves out),
// and "default" (none).
TEST(HfConfigTest, RopeScaling) {
  const std::string base = R"({"architectures":["LlamaForCausalLM"],"hidden_size":64,)"
                           R"("intermediate_size":192,"num_hidden_layers":2,)"
                           R"("num_attention_heads":4,"vocab_size":100,"rope_scaling":)";
  HfConfig c;
  ASSERT_TRUE(ParseHfConfig(base + R"({"type":"linear","factor":4}})", &c).ok());
  EXPECT_EQ(c.rope_scaling, "linear");
  EXPECT_EQ(c.rope.factor, 4.0);
  HfConfig l3;
  ASSERT_TRUE(ParseHfConfig(base + R"({"rope_type":"llama3","factor":32,"high_freq_factor":)"
                                   R"(8,"original_max_position_embeddings":4096}})",
                            &l3)
                  .ok());
  EXPECT_EQ(l3.rope_scaling, "llama3");
  EXPECT_EQ(l3.rope.factor, 32.0);
  EXPECT_EQ(l3.rope.low_freq_factor, 1.0);
  EXPECT_EQ(l3.rope.high_freq_factor, 8.0);
  EXPECT_EQ(l3.rope.original_context, 4096.0);
  HfConfig none;
  ASSERT_TRUE(ParseHfConfig(base + R"({"rope_type":"default"}})", &none).ok());
  EXPECT_EQ(none.rope_scaling, "");
}

// FalconConfig's defaults and older key names; the fused QKV's KV groups as
// FalconAttention splits it; the variants pi's falcon cannot run, by key.
TEST(HfConfigTest, Falcon) {
  const std::string base = R"({"architectures":["FalconForCausalLM"],"n_embed":64,"n_layer":2,)"
                           R"("n_head":4,"vocab_size":100)";
  HfConfig c;
  ASSERT_TRUE(ParseHfConfig(base + "}", &c).ok());
  EXPECT_TRUE(c.falcon);
  EXPECT_EQ(c.hidden_size, 64);
  EXPECT_EQ(c.intermediate_size, 256);  // 4 x hidden_size
  EXPECT_EQ(c.num_key_value_heads, 1);  // multi_query by default
  EXPECT_EQ(c.falcon_norms, 1);
  EXPECT_EQ(c.hidden_act, "gelu");
  EXPECT_TRUE(c.tie_word_embeddings);
  ASSERT_TRUE(ParseHfConfig(base + R"(,"multi_query":false,"num_kv_heads":2})", &c).ok());
  EXPECT_EQ(c.num_key_value_heads, 4);  // num_kv_heads counts only in the new architecture
  ASSERT_TRUE(ParseHfConfig(base + R"(,"new_decoder_architecture":true,"num_kv_heads":2,)"
                                   R"("ffn_hidden_size":96,"activation":"relu"})",
                            &c)
                  .ok());
  EXPECT_EQ(c.num_key_value_heads, 2);
  EXPECT_EQ(c.falcon_norms, 2);
  EXPECT_EQ(c.intermediate_size, 96);
  EXPECT_EQ(c.hidden_act, "relu");
  ASSERT_TRUE(
      ParseHfConfig(base + R"(,"new_decoder_architecture":true,"num_ln_in_parallel_attn":1})", &c)
          .ok());
  EXPECT_EQ(c.falcon_norms, 1);
  auto error = [&](const std::string& extra) {
    HfConfig x;
    return ParseHfConfig(base + extra + "}", &x).message();
  };
  EXPECT_THAT(error(R"(,"alibi":true)"), HasSubstr("\"alibi\": true is not supported"));
  EXPECT_THAT(error(R"(,"bias":true)"), HasSubstr("\"bias\": true is not supported"));
  EXPECT_THAT(error(R"(,"parallel_attn":false)"),
              HasSubstr("\"parallel_attn\": false is not supported"));
  EXPECT_THAT(error(R"(,"multi_query":1)"), HasSubstr("\"multi_query\" is not true or false"));
  EXPECT_THAT(error(R"(,"new_decoder_architecture":true,"num_kv_heads":3)"),
              HasSubstr("not a multiple of 3 KV"));
}

// configuration_RW.py's defaults: one KV head per query head unless
// multi_query, sequential unless parallel_attn, RefinedWeb = the new layout.
TEST(HfConfigTest, RwDialect) {
  const std::string rw = R"({"architectures":["RWForCausalLM"],"n_embed":64,"n_layer":2,)"
                         R"("n_head":4,"vocab_size":100)";
  HfConfig c;
  ASSERT_TRUE(ParseHfConfig(rw + R"(,"model_type":"RefinedWeb","n_head_kv":2})", &c).ok());
  EXPECT_TRUE(c.falcon);
  EXPECT_EQ(c.num_key_value_heads, 2);
  EXPECT_EQ(c.falcon_norms, 2);
  ASSERT_TRUE(ParseHfConfig(rw + R"(,"model_type":"RefinedWebModel","parallel_attn":true,)"
                                 R"("multi_query":true})",
                            &c)
                  .ok());
  EXPECT_EQ(c.num_key_value_heads, 1);
  EXPECT_EQ(c.falcon_norms, 1);
  ASSERT_TRUE(
      ParseHfConfig(rw + R"(,"model_type":"RefinedWebModel","parallel_attn":true})", &c).ok());
  EXPECT_EQ(c.num_key_value_heads, 4);  // RWConfig's multi_query defaults to false
  EXPECT_THAT(ParseHfConfig(rw + R"(,"model_type":"RefinedWebModel"})", &c).message(),
              HasSubstr("\"parallel_attn\": false is not supported"));
}

// generation_config.json's ids win over config.json's; a list's second id is
// the end of turn.
TEST(HfConfigTest, GenerationConfig) {
  HfConfig c;
  c.bos_token_id = 1;
  c.eos_token_id = 2;
  ASSERT_TRUE(ApplyGenerationConfig(R"({"temperature":0.6,"top_p":0.9})", &c).ok());
  EXPECT_EQ(c.bos_token_id, 1);
  EXPECT_EQ(c.eos_token_id, 2);
  EXPECT_EQ(c.eot_token_id, -1);
  ASSERT_TRUE(ApplyGenerationConfig(R"({"bos_token_id":5,"eos_token_id":[7,9,11]})", &c).ok());
  EXPECT_EQ(c.bos_token_id, 5);
  EXPECT_EQ(c.eos_token_id, 7);
  EXPECT_EQ(c.eot_token_id, 9);
  EXPECT_EQ(c.n_eos_dropped, 1);
  EXPECT_THAT(ApplyGenerationConfig("[1]", &c).message(),
              HasSubstr("generation_config.json is not a JSON object"));
  EXPECT_THAT(ApplyGenerationConfig(R"({"eos_token_id":"x"})", &c).message(),
              HasSubstr("generation_config.json: \"eos_token_id\" must be a token id"));
  EXPECT_THAT(ApplyGenerationConfig(R"({"eos_token_id":[1,-4]})", &c).message(),
              HasSubstr("\"eos_token_id\"[1] must be a token id"));
}

TEST(HfTokenizerTest, SentencepieceModelAsItsGguf) {
  std::ifstream f(std::string(PI_SOURCE_DIR) + "/models/demo-tokenizer.model", std::ios::binary);
  const std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(f)),
                                   std::istreambuf_iterator<char>());
  SpmModel m;
  ASSERT_TRUE(ParseSpmModel(bytes.data(), bytes.size(), &m).ok());
  std::unique_ptr<GgufFile> demo;
  ASSERT_TRUE(GgufFile::Open(std::string(PI_SOURCE_DIR) + "/models/demo-kjv-f16.gguf", &demo).ok());
  const GgufValue* tokens = demo->Find("tokenizer.ggml.tokens");
  const GgufValue* types = demo->Find("tokenizer.ggml.token_type");
  ASSERT_TRUE(tokens && types);
  ASSERT_EQ(m.pieces.size(), tokens->array.size());
  for (size_t i = 0; i < m.pieces.size(); ++i) {
    ASSERT_EQ(m.pieces[i].piece, tokens->array[i].str) << i;
    ASSERT_EQ(m.pieces[i].type, types->array[i].i) << i;
  }
  EXPECT_EQ(m.normalizer, "identity");
  std::vector<uint8_t> cut(bytes.begin(), bytes.begin() + 1001);
  EXPECT_THAT(ParseSpmModel(cut.data(), cut.size(), &m).message(), HasSubstr("past the end"));
  const uint8_t none[2] = {0x18, 0x01};  // field 3 varint: no pieces
  EXPECT_THAT(ParseSpmModel(none, 2, &m).message(), HasSubstr("no pieces"));
}

TEST(HfTokenizerTest, BpeJsonAndItsErrors) {
  HfConfig c;
  c.vocab_size = 8;
  c.bos_token_id = 3;
  const std::string good =
      R"({"model":{"type":"BPE","vocab":{"a":0,"b":1,"ab":2},"merges":[["a","b"]]},)"
      R"("added_tokens":[{"id":3,"content":"<s>","special":true}],)"
      R"("pre_tokenizer":{"type":"Sequence","pretokenizers":[{"type":"Split","pattern":)"
      R"({"Regex":"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?x"}},)"
      R"({"type":"ByteLevel"}]},)"
      R"("post_processor":{"single":[{"SpecialToken":{"id":"<s>"}}]}})";
  GgufWriter w;
  ASSERT_TRUE(AddBpeTokenizer(good, "", c, &w).ok());
  std::unique_ptr<GgufFile> g;
  const std::vector<uint8_t> bytes = w.Serialize();
  ASSERT_TRUE(GgufFile::OpenBuffer(bytes.data(), bytes.size(), &g).ok());
  EXPECT_EQ(g->Find("tokenizer.ggml.pre")->str, "llama-bpe");
  EXPECT_EQ(g->Find("tokenizer.ggml.tokens")->array.size(), 8u);  // padded to vocab_size
  EXPECT_EQ(g->Find("tokenizer.ggml.tokens")->array[7].str, "[PAD7]");
  EXPECT_EQ(g->Find("tokenizer.ggml.merges")->array[0].str, "a b");
  EXPECT_EQ(g->Find("tokenizer.ggml.token_type")->array[3].i, 3);  // special: control
  EXPECT_TRUE(g->Find("tokenizer.ggml.add_bos_token")->u != 0);
  auto error = [&](const std::string& text) {
    GgufWriter x;
    return AddBpeTokenizer(text, "", c, &x).message();
  };
  EXPECT_THAT(error("{}"), HasSubstr("no \"model\""));
  EXPECT_THAT(error(R"({"model":{"type":"Unigram"}})"), HasSubstr("only BPE"));
  EXPECT_THAT(error(R"({"model":{"type":"BPE","vocab":{"a":9},"merges":[]},)"
                    R"("pre_tokenizer":{"type":"ByteLevel"}})"),
              HasSubstr("outside the model's vocab_size 8"));
  EXPECT_THAT(error(R"({"model":{"type":"BPE","vocab":{"a":0},"merges":[7]},)"
                    R"("pre_tokenizer":{"type":"ByteLevel"}})"),
              HasSubstr("a merge is neither"));
  EXPECT_THAT(error(R"({"model":{"type":"BPE","vocab":{"a":0},"merges":[]},)"
                    R"("pre_tokenizer":{"type":"Whitespace"}})"),
              HasSubstr("pre-tokenizer this tool does not know"));
  // Qwen2's split: Llama 3's with single digits. Another digit rule is refused.
  auto pre_of = [&](const std::string& regex) {
    const std::string text = R"({"model":{"type":"BPE","vocab":{"a":0},"merges":[]},)"
                             R"("pre_tokenizer":{"type":"Sequence","pretokenizers":[{"type":)"
                             R"("Split","pattern":{"Regex":")" +
                             regex + R"("}},{"type":"ByteLevel"}]}})";
    GgufWriter x;
    const Status s = AddBpeTokenizer(text, "", c, &x);
    if (!s.ok()) return s.message();
    std::unique_ptr<GgufFile> f;
    const std::vector<uint8_t> b = x.Serialize();
    return GgufFile::OpenBuffer(b.data(), b.size(), &f).ok() ? f->Find("tokenizer.ggml.pre")->str
                                                             : std::string("unreadable");
  };
  EXPECT_EQ(pre_of(R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?x)"),
            "qwen2");
  EXPECT_THAT(pre_of(R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|\\p{N}{1,5})"),
              HasSubstr("split pre-tokenizer this tool does not know"));
}

}  // namespace
}  // namespace pi
