// Fingerprints of a model file: what ties a side file (statistics, a plan, a
// worker's shard) to the model it was made from, so that none is ever applied
// to another model.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "common/format/gguf.h"

namespace pi {

// FNV-1a 64 over bytes; integers added as their little-endian bytes. What
// every fingerprint here and beside them (statistics, placements) hashes with.
class Fnv1a64 {
 public:
  void Add(const void* data, size_t n) {
    const uint8_t* p = static_cast<const uint8_t*>(data);
    for (size_t i = 0; i < n; ++i) {
      h_ ^= p[i];
      h_ *= 0x100000001b3ull;
    }
  }
  void AddU32(uint32_t v) {
    uint8_t b[4];
    for (int i = 0; i < 4; ++i) b[i] = static_cast<uint8_t>(v >> (8 * i));
    Add(b, 4);
  }
  void AddU64(uint64_t v) {
    uint8_t b[8];
    for (int i = 0; i < 8; ++i) b[i] = static_cast<uint8_t>(v >> (8 * i));
    Add(b, 8);
  }
  uint64_t value() const { return h_; }

 private:
  uint64_t h_ = 0xcbf29ce484222325ull;
};

// Identifies a model file so that nothing made from one model is applied to another:
// FNV-1a 64 over, for every tensor in file order, its name, a 0 byte, its
// type id (u32), n_dims (u32) and ne[0..n_dims) (i64), plus up to its first
// 256 data bytes (so two fine-tunes of one shape differ); then the file size
// (u64). All integers little-endian. Reads ~256 bytes per tensor, not the
// weights. A requantized or re-exported file gets a new fingerprint.
uint64_t ModelFingerprint(const GgufFile& file);
// The same without types or data: the architecture, every tensor's name and
// shape (in name order) and the vocabulary's tokens. Copies of one model in
// other types (an F16 and its Q4_0) share it, so their statistics carry over.
uint64_t ShapeFingerprint(const GgufFile& file);
// And a sketch of the weights that survives requantization: for the first
// 256 blocks of 32 values of token_embd.weight, the sign of each block's
// largest-magnitude value (a block's maximum is what Q8_0 and Q4_0 keep
// exactly), as 64 hex digits; "" without that tensor. Other weights of the
// same shapes (a fine-tune, another seed) differ in about half the bits.
std::string WeightSigns(const GgufFile& file);
std::string FingerprintHex(uint64_t fingerprint);  // 16 lower-case hex digits

// Bits that differ between two WeightSigns() strings; -1 when they cannot be
// compared.
int SignsDiffer(const std::string& a, const std::string& b);

}  // namespace pi
