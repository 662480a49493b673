// Synthetic llama files (pi-synth): metadata and shapes as the llama loader and
// llama.cpp expect them, weight statistics, determinism, and the structural
// properties the engine tests rely on (ffn_down_t is ffn_down transposed;
// a quantized file is the f32 file run through ggml's reference quantizers).
#include "common/offline/synthetic_model.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "common/format/gguf.h"
#include "common/model/llama_model.h"
#include "common/text/tokenizer.h"
#include "kernels/cpu/quant.h"
#include "tests/temp_path.h"

namespace pi {
namespace {

using ::testing::HasSubstr;

SyntheticModelOptions Small() {
  SyntheticModelOptions o;
  o.n_vocab = 300;
  o.n_embd = 64;
  o.n_layer = 2;
  o.n_head = 4;
  o.n_head_kv = 2;
  o.n_ff = 96;
  o.n_ctx = 128;
  o.seed = 7;
  return o;
}

// Writes `o` and opens it; the file is removed when the test ends.
class SynthFile {
 public:
  SynthFile(const SyntheticModelOptions& o, const std::string& name) : path_(TempPath(name)) {
    Status s = WriteSyntheticModel(o, path_);
    EXPECT_TRUE(s.ok()) << s.message();
    s = GgufFile::Open(path_, &file_);
    EXPECT_TRUE(s.ok()) << s.message();
  }
  ~SynthFile() { remove(path_.c_str()); }
  const GgufFile& operator*() const { return *file_; }
  const GgufFile* operator->() const { return file_.get(); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::unique_ptr<GgufFile> file_;
};

std::vector<float> Row(const TensorInfo& t, int64_t r) {
  std::vector<float> out(static_cast<size_t>(t.ne[0]));
  DequantizeRow(t.type, t.data + r * t.row_bytes(), out.data(), t.ne[0]);
  return out;
}

uint32_t U32(const GgufFile& f, const std::string& key) {
  uint32_t v = 0;
  Status s = f.GetU32(key, &v);
  EXPECT_TRUE(s.ok()) << s.message();
  return v;
}

TEST(SyntheticModelTest, MetadataAndShapes) {
  SyntheticModelOptions o = Small();
  o.byte_tokenizer = true;
  o.activation = "relu";
  o.rope_theta = 500000.0f;
  SynthFile f(o, "meta.gguf");
  ASSERT_NE(f.operator->(), nullptr);
  EXPECT_FALSE(f->is_sparse_magic());
  std::string s;
  ASSERT_TRUE(f->GetString("general.architecture", &s).ok());
  EXPECT_EQ(s, "llama");
  ASSERT_TRUE(f->GetString("pi.ffn_activation", &s).ok());
  EXPECT_EQ(s, "relu");
  EXPECT_EQ(U32(*f, "llama.context_length"), 128u);
  EXPECT_EQ(U32(*f, "llama.embedding_length"), 64u);
  EXPECT_EQ(U32(*f, "llama.block_count"), 2u);
  EXPECT_EQ(U32(*f, "llama.feed_forward_length"), 96u);
  EXPECT_EQ(U32(*f, "llama.attention.head_count"), 4u);
  EXPECT_EQ(U32(*f, "llama.attention.head_count_kv"), 2u);
  EXPECT_EQ(U32(*f, "llama.rope.dimension_count"), 16u);
  EXPECT_EQ(U32(*f, "general.file_type"), 0u);
  EXPECT_EQ(f->Find("general.quantization_version"), nullptr);
  float x = 0;
  ASSERT_TRUE(f->GetF32("llama.rope.freq_base", &x).ok());
  EXPECT_EQ(x, 500000.0f);
  ASSERT_TRUE(f->GetF32("llama.attention.layer_norm_rms_epsilon", &x).ok());
  EXPECT_EQ(x, 1e-5f);

  struct Shape {
    std::string name;
    std::vector<int64_t> ne;
  };
  std::vector<Shape> expect = {{"token_embd.weight", {64, 300}}};
  for (int l = 0; l < 2; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    expect.push_back({p + "attn_norm.weight", {64}});
    expect.push_back({p + "attn_q.weight", {64, 64}});
    expect.push_back({p + "attn_k.weight", {64, 32}});
    expect.push_back({p + "attn_v.weight", {64, 32}});
    expect.push_back({p + "attn_output.weight", {64, 64}});
    expect.push_back({p + "ffn_norm.weight", {64}});
    expect.push_back({p + "ffn_gate.weight", {64, 96}});
    expect.push_back({p + "ffn_up.weight", {64, 96}});
    expect.push_back({p + "ffn_down.weight", {96, 64}});
  }
  expect.push_back({"output_norm.weight", {64}});
  expect.push_back({"output.weight", {64, 300}});
  ASSERT_EQ(f->tensors().size(), expect.size());
  for (const Shape& e : expect) {
    SCOPED_TRACE(e.name);
    const TensorInfo* t = f->FindTensor(e.name);
    ASSERT_NE(t, nullptr);
    EXPECT_EQ(t->type, DType::kF32);
    ASSERT_EQ(t->n_dims, static_cast<int>(e.ne.size()));
    for (size_t d = 0; d < e.ne.size(); ++d) EXPECT_EQ(t->ne[d], e.ne[d]);
  }

  // The llama loader and the tokenizer accept it.
  LlamaModel model;
  Status ls = LoadLlamaModel(f.path(), &model);
  ASSERT_TRUE(ls.ok()) << ls.message();
  EXPECT_EQ(model.config.n_vocab, 300);
  EXPECT_EQ(model.config.activation, FfnActivation::kRelu);
  EXPECT_FALSE(model.tied_output);
  std::unique_ptr<Tokenizer> tok;
  Status ts = Tokenizer::FromGguf(*f, &tok);
  ASSERT_TRUE(ts.ok()) << ts.message();
  std::vector<int32_t> ids;
  ASSERT_TRUE(tok->Encode("Hi y\xc3\xa9", true, &ids).ok());
  // bos, then "▁" (259) for each space (the first one is SPM's prefix), and
  // byte fallback for everything else: byte b is token 3 + b.
  EXPECT_EQ(ids,
            (std::vector<int32_t>{1, 259, 3 + 'H', 3 + 'i', 259, 3 + 'y', 3 + 0xc3, 3 + 0xa9}));
  EXPECT_EQ(tok->Decode(ids), "Hi y\xc3\xa9");
}

TEST(SyntheticModelTest, WeightStatistics) {
  SynthFile f(Small(), "stats.gguf");
  for (const TensorInfo& t : f->tensors()) {
    SCOPED_TRACE(t.name);
    const bool is_norm = t.n_dims == 1;
    double sum = 0, sum2 = 0, lo = 1e9, hi = -1e9;
    const int64_t rows = t.n_elements() / t.ne[0];
    for (int64_t r = 0; r < rows; ++r) {
      for (float v : Row(t, r)) {
        sum += v;
        sum2 += static_cast<double>(v) * v;
        lo = std::min<double>(lo, v);
        hi = std::max<double>(hi, v);
      }
    }
    const double n = static_cast<double>(t.n_elements());
    const double mean = sum / n;
    const double sd = std::sqrt(sum2 / n - mean * mean);
    // Tolerances are 5 standard errors of the estimates for a uniform sample.
    if (is_norm) {
      EXPECT_GE(lo, 0.8);
      EXPECT_LT(hi, 1.2);
      EXPECT_NEAR(mean, 1.0, 5 * 0.4 / std::sqrt(12 * n));
    } else {
      // Uniform with sd 1/sqrt(fan_in); fan_in is ne0 (the reduction axis).
      const double want = 1.0 / std::sqrt(static_cast<double>(t.ne[0]));
      EXPECT_NEAR(sd, want, 5 * want * std::sqrt(0.2 / n));
      EXPECT_NEAR(mean, 0.0, 5 * want / std::sqrt(n));
      EXPECT_LE(hi, std::sqrt(3.0) * want);
      EXPECT_GE(lo, -std::sqrt(3.0) * want);
    }
  }
  // Different tensors hold different values.
  EXPECT_NE(Row(*f->FindTensor("blk.0.ffn_gate.weight"), 0),
            Row(*f->FindTensor("blk.0.ffn_up.weight"), 0));
  EXPECT_NE(Row(*f->FindTensor("blk.0.ffn_gate.weight"), 0),
            Row(*f->FindTensor("blk.1.ffn_gate.weight"), 0));
}

std::vector<uint8_t> ReadAll(const std::string& path) {
  std::vector<uint8_t> out;
  FILE* fp = fopen(path.c_str(), "rb");
  if (fp == nullptr) return out;
  uint8_t buf[65536];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), fp)) > 0) out.insert(out.end(), buf, buf + n);
  fclose(fp);
  return out;
}

TEST(SyntheticModelTest, DeterministicForASeed) {
  SyntheticModelOptions o = Small();
  o.type = DType::kQ4_0;
  SynthFile a(o, "det_a.gguf");
  SynthFile b(o, "det_b.gguf");
  o.seed = 8;
  SynthFile c(o, "det_c.gguf");
  const std::vector<uint8_t> ba = ReadAll(a.path());
  ASSERT_FALSE(ba.empty());
  EXPECT_EQ(ba, ReadAll(b.path()));
  const std::vector<uint8_t> bc = ReadAll(c.path());
  EXPECT_EQ(ba.size(), bc.size());
  EXPECT_NE(ba, bc);
}

// The generator as documented in synthetic_model.h, written out again from
// the published splitmix64 and FNV-1a definitions.
float ReferenceWeight(uint64_t seed, const std::string& name, int64_t ne0, double lo, double hi,
                      int64_t row, int64_t col) {
  auto mix = [](uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  };
  uint64_t h = 14695981039346656037ull;  // FNV-1a 64 offset basis
  for (unsigned char c : name) h = (h ^ c) * 1099511628211ull;
  const uint64_t key = mix(seed ^ h);
  const uint64_t i = static_cast<uint64_t>(row * ne0 + col);
  const double u =
      std::ldexp(static_cast<double>(mix(key + (i + 1) * 0x9e3779b97f4a7c15ull) >> 40), -24);
  return static_cast<float>(lo + (hi - lo) * u);
}

TEST(SyntheticModelTest, ValuesFollowTheDocumentedGenerator) {
  // Small tensors are generated on one thread, tensors of >= 2^20 elements
  // on several; both must give the documented values.
  SyntheticModelOptions o = Small();
  o.n_embd = 1024;
  o.n_head = 8;
  o.n_head_kv = 8;
  o.n_ff = 1536;
  o.n_layer = 1;
  o.n_vocab = 16;
  SynthFile f(o, "threads.gguf");
  const TensorInfo& t = *f->FindTensor("blk.0.ffn_gate.weight");
  ASSERT_GE(t.n_elements(), 1 << 20);
  const double a = std::sqrt(3.0 / 1024);
  for (int64_t r : {int64_t{0}, int64_t{767}, int64_t{1535}}) {
    const std::vector<float> row = Row(t, r);
    for (int64_t c = 0; c < 1024; c += 97) {
      EXPECT_EQ(row[c], ReferenceWeight(o.seed, t.name, 1024, -a, a, r, c)) << r << "," << c;
      EXPECT_EQ(row[c], SyntheticWeight(o.seed, t.name, 1024, 1024, r, c));
    }
  }
  const TensorInfo& n = *f->FindTensor("blk.0.ffn_norm.weight");
  const std::vector<float> norm = Row(n, 0);
  for (int64_t c = 0; c < 1024; c += 31) {
    EXPECT_EQ(norm[c], ReferenceWeight(o.seed, n.name, 1024, 0.8, 1.2, 0, c));
  }
  const TensorInfo& small = *f->FindTensor("token_embd.weight");  // 16 rows: one thread
  ASSERT_LT(small.n_elements(), 1 << 20);
  for (int64_t c = 0; c < 1024; c += 101) {
    EXPECT_EQ(Row(small, 15)[c], ReferenceWeight(o.seed, small.name, 1024, -a, a, 15, c));
  }
}

TEST(SyntheticModelTest, DownTIsTheTransposeOfDown) {
  SyntheticModelOptions o = Small();
  SynthFile plain(o, "plain.gguf");
  o.down_t = true;
  SynthFile dt(o, "down_t.gguf");
  EXPECT_TRUE(dt->is_sparse_magic());
  EXPECT_EQ(dt->FindTensor("blk.0.ffn_down.weight"), nullptr);
  const TensorInfo* down = plain->FindTensor("blk.1.ffn_down.weight");   // [n_ff, n_embd]
  const TensorInfo* down_t = dt->FindTensor("blk.1.ffn_down_t.weight");  // [n_embd, n_ff]
  ASSERT_NE(down, nullptr);
  ASSERT_NE(down_t, nullptr);
  ASSERT_EQ(down_t->ne[0], 64);
  ASSERT_EQ(down_t->ne[1], 96);
  const float* a = reinterpret_cast<const float*>(down->data);
  const float* b = reinterpret_cast<const float*>(down_t->data);
  for (int64_t j = 0; j < 64; ++j) {    // output feature
    for (int64_t i = 0; i < 96; ++i) {  // neuron
      ASSERT_EQ(a[j * 96 + i], b[i * 64 + j]) << j << "," << i;
    }
  }
  // Everything else is identical.
  const TensorInfo* q0 = plain->FindTensor("blk.0.attn_q.weight");
  const TensorInfo* q1 = dt->FindTensor("blk.0.attn_q.weight");
  EXPECT_EQ(memcmp(q0->data, q1->data, q0->nbytes), 0);
  LlamaModel model;
  Status s = LoadLlamaModel(dt.path(), &model);
  EXPECT_TRUE(s.ok()) << s.message();
}

TEST(SyntheticModelTest, QuantizedFileIsTheF32FileQuantized) {
  SyntheticModelOptions o = Small();
  o.n_embd = 256;  // whole K-quant super-blocks
  o.down_t = true;
  o.tied = true;
  SynthFile ref(o, "f32.gguf");
  for (DType type : {DType::kF16, DType::kBF16, DType::kQ8_0, DType::kQ4_0, DType::kQ4_K,
                     DType::kQ5_K, DType::kQ6_K}) {
    SCOPED_TRACE(DTypeName(type));
    o.type = type;
    SynthFile q(o, std::string("q_") + DTypeName(type) + ".gguf");
    const bool quantized = type != DType::kF16 && type != DType::kBF16;
    EXPECT_EQ(q->Find("general.quantization_version") != nullptr, quantized);
    EXPECT_EQ(q->FindTensor("output.weight"), nullptr);  // tied
    EXPECT_EQ(U32(*q, "general.file_type"), GgufFileTypeOf(type));
    ASSERT_EQ(q->tensors().size(), ref->tensors().size());
    for (const TensorInfo& t : q->tensors()) {
      SCOPED_TRACE(t.name);
      const TensorInfo& r = *ref->FindTensor(t.name);
      EXPECT_EQ(t.type, t.n_dims == 1 ? DType::kF32 : type);
      const int64_t rows = t.n_elements() / t.ne[0];
      std::vector<uint8_t> expect(static_cast<size_t>(t.row_bytes()));
      for (int64_t row = 0; row < rows; ++row) {
        QuantizeRow(t.type, reinterpret_cast<const float*>(r.data) + row * r.ne[0], expect.data(),
                    t.ne[0]);
        ASSERT_EQ(memcmp(expect.data(), t.data + row * t.row_bytes(), expect.size()), 0) << row;
      }
    }
  }
  EXPECT_EQ(U32(*ref, "general.file_type"), 0u);
  EXPECT_EQ(GgufFileTypeOf(DType::kQ8_0), 7u);
  EXPECT_EQ(GgufFileTypeOf(DType::kQ4_0), 2u);
  EXPECT_EQ(GgufFileTypeOf(DType::kF16), 1u);
  EXPECT_EQ(GgufFileTypeOf(DType::kBF16), 32u);
}

TEST(SyntheticModelTest, RejectsBadShapes) {
  SyntheticModelOptions o = Small();
  o.n_head = 5;
  EXPECT_THAT(ValidateSyntheticModel(o).message(), HasSubstr("head"));
  o = Small();
  o.n_head_kv = 3;
  EXPECT_THAT(ValidateSyntheticModel(o).message(), HasSubstr("n_head_kv 3"));
  o = Small();
  o.n_embd = 48;
  o.n_head = 2;
  o.type = DType::kQ4_0;
  EXPECT_THAT(ValidateSyntheticModel(o).message(), HasSubstr("multiples of 32"));
  o = Small();
  o.n_ff = 100;
  o.type = DType::kQ8_0;
  EXPECT_THAT(ValidateSyntheticModel(o).message(), HasSubstr("n_ff"));
  o.down_t = true;  // ffn_down_t rows run along n_embd: n_ff need not be a block multiple
  EXPECT_TRUE(ValidateSyntheticModel(o).ok());
  o = Small();
  o.byte_tokenizer = true;
  o.n_vocab = 100;
  EXPECT_THAT(ValidateSyntheticModel(o).message(), HasSubstr("n_vocab >= 260"));
  o = Small();
  o.activation = "tanh";
  EXPECT_THAT(ValidateSyntheticModel(o).message(), HasSubstr("tanh"));
  o = Small();
  o.type = DType::kQ4_1;
  EXPECT_THAT(ValidateSyntheticModel(o).message(), HasSubstr("not supported"));
  o = Small();
  o.type = DType::kQ4_K;
  o.down_t = true;
  EXPECT_THAT(ValidateSyntheticModel(o).message(), HasSubstr("multiples of 256"));
  o = Small();
  o.n_layer = 0;
  EXPECT_THAT(ValidateSyntheticModel(o).message(), HasSubstr("positive"));
  EXPECT_FALSE(WriteSyntheticModel(o, TempPath("never.gguf")).ok());
  EXPECT_NE(access(TempPath("never.gguf").c_str(), F_OK), 0);
}

}  // namespace
}  // namespace pi
