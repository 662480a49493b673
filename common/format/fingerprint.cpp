#include "common/format/fingerprint.h"

#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <vector>

#include "kernels/cpu/quant.h"

namespace pi {

namespace {

constexpr size_t kFingerprintDataBytes = 256;

}  // namespace

uint64_t ModelFingerprint(const GgufFile& file) {
  Fnv1a64 h;
  for (const TensorInfo& t : file.tensors()) {
    h.Add(t.name.data(), t.name.size());
    h.Add("", 1);
    h.AddU32(static_cast<uint32_t>(t.type));
    h.AddU32(static_cast<uint32_t>(t.n_dims));
    for (int i = 0; i < t.n_dims; ++i) h.AddU64(static_cast<uint64_t>(t.ne[i]));
    if (t.data != nullptr) h.Add(t.data, std::min<uint64_t>(t.nbytes, kFingerprintDataBytes));
  }
  h.AddU64(file.file_size());
  return h.value();
}

uint64_t ShapeFingerprint(const GgufFile& file) {
  Fnv1a64 h;
  std::string arch;
  if (const GgufValue* a = file.Find("general.architecture")) arch = a->str;
  h.Add(arch.data(), arch.size());
  // By name: another tool may write the tensors in another order.
  std::vector<const TensorInfo*> tensors;
  for (const TensorInfo& t : file.tensors()) tensors.push_back(&t);
  std::sort(tensors.begin(), tensors.end(),
            [](const TensorInfo* a, const TensorInfo* b) { return a->name < b->name; });
  for (const TensorInfo* t : tensors) {
    h.Add(t->name.data(), t->name.size());
    h.Add("", 1);
    h.AddU32(static_cast<uint32_t>(t->n_dims));
    for (int i = 0; i < t->n_dims; ++i) h.AddU64(static_cast<uint64_t>(t->ne[i]));
  }
  if (const GgufValue* tokens = file.Find("tokenizer.ggml.tokens")) {
    for (const GgufValue& v : tokens->array) {
      h.Add(v.str.data(), v.str.size());
      h.Add("", 1);
    }
  }
  return h.value();
}

std::string WeightSigns(const GgufFile& file) {
  const TensorInfo* t = file.FindTensor("token_embd.weight");
  if (!t || t->n_dims != 2 || !IsComputeDType(t->type) || t->ne[0] % 32 != 0) return "";
  constexpr int kBlocks = 256;
  std::vector<float> row(static_cast<size_t>(t->ne[0]));
  uint8_t bits[kBlocks / 8] = {};
  int block = 0;
  for (int64_t r = 0; r < t->n_rows() && block < kBlocks; ++r) {
    DequantizeRow(t->type, t->data + r * t->row_bytes(), row.data(), t->ne[0]);
    for (int64_t b0 = 0; b0 + 32 <= t->ne[0] && block < kBlocks; b0 += 32, ++block) {
      int64_t best = b0;
      for (int64_t i = b0; i < b0 + 32; ++i) {
        if (std::fabs(row[i]) > std::fabs(row[best])) best = i;
      }
      if (row[best] < 0) bits[block / 8] |= static_cast<uint8_t>(1u << (block % 8));
    }
  }
  if (block < kBlocks) return "";
  std::string hex;
  for (uint8_t b : bits) {
    char buf[3];
    snprintf(buf, sizeof buf, "%02x", b);
    hex += buf;
  }
  return hex;
}

int SignsDiffer(const std::string& a, const std::string& b) {
  if (a.size() != 64 || b.size() != 64) return -1;
  int n = 0;
  for (size_t i = 0; i < 64; ++i) {
    const int x = std::stoi(a.substr(i, 1), nullptr, 16) ^ std::stoi(b.substr(i, 1), nullptr, 16);
    n += __builtin_popcount(static_cast<unsigned>(x));
  }
  return n;
}

std::string FingerprintHex(uint64_t fingerprint) {
  char buf[17];
  snprintf(buf, sizeof(buf), "%016" PRIx64, fingerprint);
  return buf;
}

}  // namespace pi
