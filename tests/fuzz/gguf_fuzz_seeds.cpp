// Writes a few small, valid GGUF files into a directory as the fuzzer's seed
// corpus: every value type, nested arrays, several tensor types, both magics,
// a non-default alignment and a v2 header.
#include <cstdio>
#include <string>
#include <vector>

#include "common/format/gguf.h"
#include "tests/fuzz/seed_file.h"

namespace {

bool Save(const std::string& dir, const std::string& name, std::vector<uint8_t> bytes,
          int version = 3) {
  if (bytes.empty()) {
    fprintf(stderr, "gguf_fuzz_seeds: %s: writer failed\n", name.c_str());
    return false;
  }
  bytes[4] = static_cast<uint8_t>(version);  // the version's low byte
  return pi::WriteSeedFile(dir + "/" + name, bytes);
}

}  // namespace

int main(int argc, char** argv) {
  std::string dir;
  if (!pi::SeedDirFromArgs(argc, argv, &dir)) return 2;
  bool ok = true;

  ok &= Save(dir, "empty.gguf", pi::GgufWriter().Serialize());

  {
    pi::GgufWriter w;
    w.Set("u8", pi::GgufValue::U8(1));
    w.Set("i8", pi::GgufValue::I8(-1));
    w.Set("u16", pi::GgufValue::U16(2));
    w.Set("i16", pi::GgufValue::I16(-2));
    w.Set("u32", pi::GgufValue::U32(3));
    w.Set("i32", pi::GgufValue::I32(-3));
    w.Set("f32", pi::GgufValue::F32(0.5f));
    w.Set("bool", pi::GgufValue::Bool(true));
    w.Set("str", pi::GgufValue::String("h\xc3\xa9llo"));
    w.Set("u64", pi::GgufValue::U64(4));
    w.Set("i64", pi::GgufValue::I64(-4));
    w.Set("f64", pi::GgufValue::F64(0.25));
    w.Set("nested",
          pi::GgufValue::Array(pi::GgufType::kArray, {pi::GgufValue::I32Array({1, 2}),
                                                      pi::GgufValue::StringArray({"a", "b"})}));
    ok &= Save(dir, "values.gguf", w.Serialize());
  }

  {
    pi::GgufWriter w;
    w.Set("general.architecture", pi::GgufValue::String("llama"));
    w.Set("llama.block_count", pi::GgufValue::U32(1));
    w.Set("tokenizer.ggml.tokens", pi::GgufValue::StringArray({"<unk>", "<s>", "</s>", "<0x0A>"}));
    w.Set("tokenizer.ggml.scores", pi::GgufValue::F32Array({0, 0, 0, -1}));
    w.Set("tokenizer.ggml.token_type", pi::GgufValue::I32Array({2, 3, 3, 6}));
    std::vector<uint8_t> buf(4096);
    for (size_t k = 0; k < buf.size(); ++k) buf[k] = static_cast<uint8_t>(k * 31);
    ok &= w.AddTensor("token_embd.weight", pi::DType::kF16, {8, 4}, buf.data()).ok();
    ok &= w.AddTensor("blk.0.attn_q.weight", pi::DType::kQ8_0, {32, 2}, buf.data()).ok();
    ok &= w.AddTensor("blk.0.ffn_up.weight", pi::DType::kQ4_0, {64, 1}, buf.data()).ok();
    ok &= w.AddTensor("output_norm.weight", pi::DType::kF32, {8}, buf.data()).ok();
    ok &= w.AddTensor("k", pi::DType::kQ4_K, {256}, buf.data()).ok();
    ok &= w.AddTensor("b", pi::DType::kBF16, {3, 1, 1, 2}, buf.data()).ok();
    ok &= Save(dir, "llama.gguf", w.Serialize());
    ok &= Save(dir, "llama_v2.gguf", w.Serialize(), 2);
  }

  {
    pi::GgufWriter w;
    w.SetSparseMagic(true);
    ok &= w.SetAlignment(64).ok();
    const float x[16] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
    ok &= w.AddTensor("blk.0.ffn_down_t.weight", pi::DType::kF32, {4, 2}, x).ok();
    ok &= w.AddTensor("blk.0.fc1.weight", pi::DType::kF32, {2}, x).ok();
    ok &= w.AddTensor("scalar", pi::DType::kF32, {}, x).ok();
    ok &= Save(dir, "pwri_align64.gguf", w.Serialize());
  }
  return ok ? 0 : 1;
}
