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
//   blk.N.ffn_gate_quantiles    F32 [101], one per layer or none: the
//                               quantiles of |act(gate x)| over the profiled
//                               neurons and tokens (gate_thresholds.h)
//   blk.N.attn_in_quantiles     F32 [101] each, one per layer or none: the
//   blk.N.attn_out_quantiles    quantiles of |x| over the entries of the
//   blk.N.ffn_in_quantiles      attention's normed input, its heads' output
//                               and the FFN's normed input (--sparse teal)
//   blk.N.ffn_gate_rms, ...     F32 [1] each, beside each quantile table
//   blk.N.*_in_rms, attn_out_rms  (optional): the RMS of those magnitudes
//                               (--sparse-allocation greedy's weights)
//   pi.stats.pass_target        f32 (optional): the counts are of neurons
//                               whose |act(gate x)| passed --sparse cats'
//                               thresholds for this target (SiLU models)
// Readers match tensors to layers by the number in the name, never by sorting
// names (PowerInfer bug #247 sorted "blk.10" before "blk.2").
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/base/status.h"
#include "common/compute/ffn_observer.h"
#include "common/format/fingerprint.h"
#include "common/format/gguf.h"
#include "common/format/side_files.h"
#include "common/model/llama_model.h"
#include "common/plan/gate_thresholds.h"

namespace pi {

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
  // Counts the activated gates' magnitudes (for gate_quantiles), or in
  // CountGatePasses' mode the neurons whose |act(gate)| passes.
  void OnGate(int layer, int batch, const float* a) override;
  // Counts the magnitudes of the thresholded inputs' entries (for
  // input_quantiles).
  void OnProjectionInput(int layer, ProjectionInput which, int batch, const float* x,
                         int width) override;
  // gate_quantiles and input_quantiles from the magnitudes OnGate and
  // OnProjectionInput counted (none counted: left).
  void FinishGateQuantiles();
  // For a model whose neurons never fall silent (SiLU, GELU): from now on a
  // neuron's count is how often |act(gate x)| passes its layer's threshold
  // (--sparse cats at `target`, GateThresholdsFor), what placement then
  // ranks by; counts and tokens start again from zero.
  void CountGatePasses(const std::vector<float>& thresholds, double target);

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
  // [n_layer][kGateQuantilePoints] or empty: |act(gate x)|'s quantiles per
  // layer, what --sparse cats' thresholds are read from.
  std::vector<float> gate_quantiles;
  // The same for |x| of each input --sparse teal thresholds, by
  // ProjectionInput.
  std::vector<float> input_quantiles[kProjectionInputs];
  // [n_layer] or empty: the RMS of each table's magnitudes per layer.
  std::vector<float> gate_rms;
  std::vector<float> input_rms[kProjectionInputs];
  // >= 0: the counts are of gate passes at this --sparse cats target
  // (CountGatePasses), not of exact firings.
  double pass_target = -1;

 private:
  GateHistogram gates_;                      // while profiling (OnGate)
  GateHistogram inputs_[kProjectionInputs];  // and OnProjectionInput
  std::vector<float> pass_thresholds_;       // [n_layer] in CountGatePasses' mode
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
// cannot write, the cache (common/format/side_files.h).
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
