// pi-quantize end to end: runs the binary on a small synthetic PowerInfer-style
// file (PWRI magic, ffn_down_t, predictor fc1/fc2, odd-shaped and non-weight
// tensors) and checks every output tensor against ggml's reference quantizer
// applied to the dequantized source, plus the metadata rules.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "common/format/gguf.h"
#include "common/offline/synthetic_model.h"
#include "kernels/cpu/quant.h"
#include "tests/temp_path.h"

namespace pi {
namespace {

// Runs pi-quantize; returns its exit status (stderr goes to `log`).
int RunQuantize(const std::string& args, const std::string& log) {
  const std::string cmd = std::string(PI_BINARY_DIR) + "/bin/pi-quantize " + args + " 2>" + log;
  const int rc = std::system(cmd.c_str());
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

std::string ReadText(const std::string& path) {
  std::string out;
  FILE* f = fopen(path.c_str(), "rb");
  if (f == nullptr) return out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), f)) > 0) out.append(buf, n);
  fclose(f);
  return out;
}

bool SameValue(const GgufValue& a, const GgufValue& b) {
  if (a.type != b.type || a.u != b.u || a.i != b.i || a.str != b.str ||
      memcmp(&a.f, &b.f, sizeof(double)) != 0) {
    return false;
  }
  if (a.type != GgufType::kArray) return true;
  if (a.array_type != b.array_type || a.array.size() != b.array.size()) return false;
  for (size_t k = 0; k < a.array.size(); ++k) {
    if (!SameValue(a.array[k], b.array[k])) return false;
  }
  return true;
}

class QuantizeTest : public ::testing::Test {
 protected:
  // Source: a synthetic model in `source_type` with ffn_down_t (PWRI), plus
  // predictor tensors, a 2-D weight whose ne0 is no block multiple, and a
  // 2-D tensor whose name does not end in ".weight".
  void MakeSource(DType source_type) {
    SyntheticModelOptions o;
    o.n_vocab = 272;
    o.n_embd = 64;
    o.n_layer = 2;
    o.n_head = 4;
    o.n_ff = 96;
    o.down_t = true;
    o.byte_tokenizer = true;
    o.type = source_type;
    o.seed = 3;
    GgufWriter w;
    ASSERT_TRUE(AddSyntheticModel(o, &w).ok());
    ASSERT_TRUE(w.SetAlignment(64).ok());
    w.Set("powerinfer.sparse_threshold", GgufValue::F32(0.5f));
    std::vector<float> fc1(64 * 16), fc2(16 * 96), odd(48 * 4), table(64 * 2);
    for (size_t k = 0; k < fc1.size(); ++k) fc1[k] = std::sin(0.1f * k);
    for (size_t k = 0; k < fc2.size(); ++k) fc2[k] = std::cos(0.3f * k);
    for (size_t k = 0; k < odd.size(); ++k) odd[k] = 0.01f * k;
    for (size_t k = 0; k < table.size(); ++k) table[k] = -0.5f * k;
    ASSERT_TRUE(w.AddTensor("blk.0.fc1.weight", DType::kF32, {64, 16}, fc1.data()).ok());
    ASSERT_TRUE(w.AddTensor("blk.0.fc2.weight", DType::kF32, {16, 96}, fc2.data()).ok());
    ASSERT_TRUE(w.AddTensor("odd.weight", DType::kF32, {48, 4}, odd.data()).ok());
    ASSERT_TRUE(w.AddTensor("rope_table", DType::kF32, {64, 2}, table.data()).ok());
    src_path_ = TempPath("src.gguf");
    Status s = w.Write(src_path_);
    ASSERT_TRUE(s.ok()) << s.message();
    ASSERT_TRUE(GgufFile::Open(src_path_, &src_).ok());
  }

  void TearDown() override {
    remove(src_path_.c_str());
    for (const std::string& p : cleanup_) remove(p.c_str());
  }

  // Quantizes the source to `type` and checks the result.
  void CheckQuantize(DType type, const char* type_name) {
    const std::string out = TempPath(std::string("out_") + type_name + ".gguf");
    const std::string log = out + ".log";
    cleanup_.push_back(out);
    cleanup_.push_back(log);
    ASSERT_EQ(RunQuantize(src_path_ + " " + out + " " + type_name, log), 0) << ReadText(log);
    const std::string progress = ReadText(log);
    const int n = static_cast<int>(src_->tensors().size());
    EXPECT_THAT(progress, ::testing::HasSubstr("[ 1/" + std::to_string(n) + "]"));
    EXPECT_THAT(progress,
                ::testing::HasSubstr("[" + std::to_string(n) + "/" + std::to_string(n) + "]"));

    std::unique_ptr<GgufFile> q;
    Status s = GgufFile::Open(out, &q);
    ASSERT_TRUE(s.ok()) << s.message();
    EXPECT_TRUE(q->is_sparse_magic());
    EXPECT_EQ(q->alignment(), 64u);

    // Metadata: everything kept, in order, except the two keys the tool owns.
    const bool quantized = type != DType::kF16;
    for (const auto& kv : src_->metadata()) {
      if (kv.first == "general.file_type" || kv.first == "general.quantization_version") continue;
      const GgufValue* v = q->Find(kv.first);
      ASSERT_NE(v, nullptr) << kv.first;
      EXPECT_TRUE(SameValue(*v, kv.second)) << kv.first;
    }
    uint32_t ftype = 99;
    ASSERT_TRUE(q->GetU32("general.file_type", &ftype).ok());
    EXPECT_EQ(ftype, type == DType::kQ8_0 ? 7u : type == DType::kQ4_0 ? 2u : 1u);
    uint32_t qv = 0;
    if (quantized) {
      ASSERT_TRUE(q->GetU32("general.quantization_version", &qv).ok());
      EXPECT_EQ(qv, 2u);
    }
    const bool had_qv = src_->Find("general.quantization_version") != nullptr;
    EXPECT_EQ(q->metadata().size(), src_->metadata().size() - had_qv + quantized);
    EXPECT_EQ(q->Find("general.quantization_version") != nullptr, quantized);

    // Tensors: same names, order and shapes.
    ASSERT_EQ(q->tensors().size(), src_->tensors().size());
    for (size_t k = 0; k < q->tensors().size(); ++k) {
      const TensorInfo& t = q->tensors()[k];
      const TensorInfo& r = src_->tensors()[k];
      SCOPED_TRACE(t.name);
      ASSERT_EQ(t.name, r.name);
      ASSERT_EQ(t.n_dims, r.n_dims);
      for (int d = 0; d < 4; ++d) EXPECT_EQ(t.ne[d], r.ne[d]);
      const bool weight = t.name.size() > 7 && t.name.substr(t.name.size() - 7) == ".weight";
      const int block = GetDTypeInfo(static_cast<uint32_t>(type)).block_elems;
      const bool convert = t.n_dims == 2 && weight && r.ne[0] % block == 0;
      if (t.n_dims == 1) {
        EXPECT_EQ(t.type, DType::kF32);
      }
      if (!convert) {
        EXPECT_EQ(t.type, r.type);
        ASSERT_EQ(t.nbytes, r.nbytes);
        EXPECT_EQ(memcmp(t.data, r.data, r.nbytes), 0);
        continue;
      }
      EXPECT_EQ(t.type, type);
      std::vector<float> row(static_cast<size_t>(r.ne[0]));
      std::vector<uint8_t> expect(static_cast<size_t>(t.row_bytes()));
      for (int64_t i = 0; i < r.ne[1]; ++i) {
        DequantizeRow(r.type, r.data + i * r.row_bytes(), row.data(), r.ne[0]);
        QuantizeRow(type, row.data(), expect.data(), r.ne[0]);
        ASSERT_EQ(memcmp(expect.data(), t.data + i * t.row_bytes(), expect.size()), 0) << i;
      }
    }
    // The cases the source was built to cover.
    EXPECT_EQ(q->FindTensor("odd.weight")->type, quantized ? DType::kF32 : DType::kF16);
    EXPECT_EQ(q->FindTensor("rope_table")->type, DType::kF32);
    EXPECT_EQ(q->FindTensor("blk.0.fc1.weight")->type, type);
    EXPECT_EQ(q->FindTensor("blk.0.fc2.weight")->type, quantized ? DType::kF32 : DType::kF16);
    EXPECT_EQ(q->FindTensor("blk.1.ffn_down_t.weight")->type, type);
    EXPECT_EQ(q->FindTensor("token_embd.weight")->type, type);
    EXPECT_EQ(q->FindTensor("blk.1.ffn_norm.weight")->type, DType::kF32);
  }

  std::string src_path_;
  std::unique_ptr<GgufFile> src_;
  std::vector<std::string> cleanup_;
};

TEST_F(QuantizeTest, F32ToQ8_0) {
  MakeSource(DType::kF32);
  CheckQuantize(DType::kQ8_0, "q8_0");
}

TEST_F(QuantizeTest, F32ToQ4_0) {
  MakeSource(DType::kF32);
  CheckQuantize(DType::kQ4_0, "q4_0");
}

TEST_F(QuantizeTest, F32ToF16) {
  MakeSource(DType::kF32);
  CheckQuantize(DType::kF16, "f16");
}

TEST_F(QuantizeTest, F16ToQ4_0) {
  MakeSource(DType::kF16);
  CheckQuantize(DType::kQ4_0, "q4_0");
}

TEST_F(QuantizeTest, Q8_0ToF16DropsQuantizationVersion) {
  MakeSource(DType::kQ8_0);
  ASSERT_NE(src_->Find("general.quantization_version"), nullptr);
  CheckQuantize(DType::kF16, "f16");
  std::unique_ptr<GgufFile> q;
  ASSERT_TRUE(GgufFile::Open(TempPath("out_f16.gguf"), &q).ok());
  EXPECT_EQ(q->Find("general.quantization_version"), nullptr);
}

TEST(QuantizeCliTest, BadArguments) {
  const std::string log = TempPath("bad.log");
  EXPECT_EQ(RunQuantize("", log), 2);
  EXPECT_THAT(ReadText(log), ::testing::HasSubstr("usage"));
  EXPECT_EQ(RunQuantize("a.gguf b.gguf q3_k", log), 2);
  EXPECT_THAT(ReadText(log), ::testing::HasSubstr("unknown type 'q3_k'"));
  EXPECT_EQ(RunQuantize("/nonexistent.gguf " + TempPath("x.gguf") + " q8_0", log), 1);
  EXPECT_THAT(ReadText(log), ::testing::HasSubstr("cannot open"));
  EXPECT_NE(access(TempPath("x.gguf").c_str(), F_OK), 0);
  remove(log.c_str());
}

// llama.cpp's Q4_K_M recipe on an 8-layer model: attn_v and ffn_down of layers
// 0, 3, 6 and 7 (first and last eighth, every third between) and output.weight
// in `high`, every other matrix in `base`, each bit for bit the reference
// quantizer of its type; general.file_type is LLAMA_FTYPE_MOSTLY_Q4_K_M (15).
void CheckQ4_K_M(int64_t n_embd, int64_t n_ff, DType base, DType high) {
  SyntheticModelOptions o;
  o.n_vocab = 272;
  o.n_embd = n_embd;
  o.n_layer = 8;
  o.n_head = 4;
  o.n_ff = n_ff;
  o.byte_tokenizer = true;
  o.seed = 5;
  GgufWriter w;
  ASSERT_TRUE(AddSyntheticModel(o, &w).ok());
  const std::string src_path = TempPath("mix_src.gguf");
  const std::string out = TempPath("mix_q4_k_m.gguf");
  const std::string log = out + ".log";
  ASSERT_TRUE(w.Write(src_path).ok());
  ASSERT_EQ(RunQuantize(src_path + " " + out + " q4_k_m", log), 0) << ReadText(log);
  if (base != DType::kQ4_K) {
    EXPECT_THAT(ReadText(log), ::testing::HasSubstr("not whole 256s"));
  }
  std::unique_ptr<GgufFile> src, q;
  ASSERT_TRUE(GgufFile::Open(src_path, &src).ok());
  ASSERT_TRUE(GgufFile::Open(out, &q).ok());
  uint32_t ftype = 0;
  ASSERT_TRUE(q->GetU32("general.file_type", &ftype).ok());
  EXPECT_EQ(ftype, 15u);
  int n_high = 0;
  for (const TensorInfo& t : q->tensors()) {
    SCOPED_TRACE(t.name);
    const TensorInfo* r = src->FindTensor(t.name);
    ASSERT_NE(r, nullptr);
    if (t.n_dims != 2) {
      EXPECT_EQ(t.type, r->type);
      continue;
    }
    DType want = base;
    for (int layer : {0, 3, 6, 7}) {
      const std::string p = "blk." + std::to_string(layer) + ".";
      if (t.name == p + "attn_v.weight" || t.name == p + "ffn_down.weight") want = high;
    }
    if (t.name == "output.weight") want = high;
    ASSERT_EQ(t.type, want);
    n_high += want == high;
    std::vector<float> row(static_cast<size_t>(r->ne[0]));
    std::vector<uint8_t> expect(static_cast<size_t>(t.row_bytes()));
    for (int64_t i = 0; i < r->ne[1]; ++i) {
      DequantizeRow(r->type, r->data + i * r->row_bytes(), row.data(), r->ne[0]);
      QuantizeRow(want, row.data(), expect.data(), r->ne[0]);
      ASSERT_EQ(memcmp(expect.data(), t.data + i * t.row_bytes(), expect.size()), 0) << i;
    }
  }
  EXPECT_EQ(n_high, 9);
  remove(src_path.c_str());
  remove(out.c_str());
  remove(log.c_str());
}

TEST(QuantizeMixTest, Q4_K_M) {
  CheckQ4_K_M(256, 512, DType::kQ4_K, DType::kQ6_K);
}

// Rows of 64 and 96: llama-quantize's fallbacks, Q5_0 for Q4_K, Q8_0 for Q6_K.
TEST(QuantizeMixTest, Q4_K_MFallsBackForRowsNotWhole256s) {
  CheckQ4_K_M(64, 96, DType::kQ5_0, DType::kQ8_0);
}

}  // namespace
}  // namespace pi
