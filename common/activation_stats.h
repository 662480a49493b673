// ActivationStats: per layer, per FFN neuron, how many profiled tokens it
// fired on (activation != 0), plus the number of tokens seen — what
// PowerInfer's offline profiler produces (activation/activation_{i}.pt) and
// what neuron placement ranks by.
//
// Stored as a small GGUF container (see WriteActivationStats):
//   pi.stats.version            u32     1
//   pi.stats.model_name         string  general.name of the model (may be "")
//   pi.stats.model_fingerprint  string  16 hex digits, ModelFingerprint()
//   pi.stats.shape_fingerprint  string  16 hex digits, ShapeFingerprint() (optional)
//   pi.stats.weight_signs       string  64 hex digits, WeightSigns() (with it)
//   pi.stats.n_layer            u32
//   pi.stats.n_ff               u32
//   pi.stats.n_tokens           u64     tokens profiled (every layer sees each)
//   pi.stats.activation         string  silu | relu | drelu
//   pi.stats.corpus             string  what was profiled (a path, or a folder)
//   pi.stats.n_ctx              u32     chunk context used
//   blk.N.ffn_fire_count        I32 [n_ff], one per layer, in layer order
// Readers match tensors to layers by the number in the name, never by sorting
// names (PowerInfer bug #247 sorted "blk.10" before "blk.2").
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/ffn_observer.h"
#include "common/gguf.h"
#include "common/llama_model.h"
#include "common/side_files.h"
#include "common/status.h"

namespace pi {

// Identifies a model file so that stats are never applied to another model:
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

// The fraction of neurons (most frequent first) that account for `share`
// (in (0, 1]) of all firings: the smallest k with sum of the k largest counts
// >= share * total, divided by n. 0 when nothing fired (or n == 0).
double FiringConcentration(const int64_t* counts, int n, double share);

class ActivationStats : public FfnObserver {
 public:
  // Zeroed counts for a model of n_layer x n_ff.
  void Init(int n_layer, int n_ff);

  // Counts, per neuron, the rows of `act` ([batch, n_ff]) where it is
  // non-zero. Layer 0's calls also count tokens seen. Allocates nothing.
  void OnFfn(int layer, int batch, const float* act) override;

  int n_layer() const { return n_layer_; }
  int n_ff() const { return n_ff_; }
  uint64_t n_tokens() const { return n_tokens_; }
  void set_n_tokens(uint64_t n) { n_tokens_ = n; }
  // [n_ff] counts of one layer.
  const int64_t* counts(int layer) const { return counts_.data() + int64_t{layer} * n_ff_; }
  int64_t* mutable_counts(int layer) { return counts_.data() + int64_t{layer} * n_ff_; }

  // Mean share of zero activations in `layer` over all tokens: 1 - firings /
  // (n_tokens * n_ff); 0 when no tokens were seen.
  double Sparsity(int layer) const;

  // Provenance, written to and read from the file's metadata.
  std::string model_name;
  uint64_t model_fingerprint = 0;
  uint64_t shape_fingerprint = 0;  // 0: not recorded (files before it was)
  std::string weight_signs;        // WeightSigns(); "" with shape_fingerprint 0
  std::string activation;          // FfnActivationName of the model
  std::string corpus;
  int n_ctx = 0;

 private:
  int n_layer_ = 0;
  int n_ff_ = 0;
  uint64_t n_tokens_ = 0;
  std::vector<int64_t> counts_;  // [n_layer, n_ff]
};

// Fills name, fingerprint, activation and the sizes from `model`, zeroing the
// counts.
void InitActivationStatsFor(const LlamaModel& model, ActivationStats* stats);

// Writes `stats` as a GGUF file (see the header comment). Fails when a count
// does not fit the file's I32.
// Where pi-place and --vram-budget look for a model's statistics by
// default, and where pi-profile writes them: the model's path without
// ".gguf", plus ".stats.gguf" — or, for a model in a folder this process
// cannot write, the cache (common/side_files.h).
std::string DefaultStatsPath(const std::string& model_path);
std::string DefaultStatsWritePath(const std::string& model_path);

Status WriteActivationStats(const ActivationStats& stats, const std::string& path);

// Reads and validates a stats file: every key present with its type, n_layer
// and n_ff in range, exactly one blk.N.ffn_fire_count (I32 [n_ff]) per layer,
// each count in [0, n_tokens]. Errors name the file and the key or tensor.
Status ReadActivationStats(const std::string& path, ActivationStats* stats);
Status ReadActivationStats(const GgufFile& file, ActivationStats* stats);

// Fails with a message naming both sides when `stats` was not made from
// `model` (layer count, n_ff or fingerprint differ).
// Statistics profiled on another copy of the same shapes (ShapeFingerprint)
// are accepted, with *note (when given) saying so.
Status CheckStatsMatchModel(const ActivationStats& stats, const LlamaModel& model,
                            std::string* note = nullptr);

}  // namespace pi
