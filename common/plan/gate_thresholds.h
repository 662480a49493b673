// CATS' per-layer thresholds (SparseMode::kCats): how large |act(gate x)|
// must be for a neuron to be computed. Profiling records, per layer, the
// distribution of |act(gate x)| over every neuron and token of a corpus as
// its quantiles (0 %, 1 %, ..., 100 %); a model-wide target share s of
// skipped neurons then takes each layer's quantile at one common level. For
// a SiLU or GELU model (no exact zeros) that level is s itself: every layer
// skips s of its neurons. A ReLU model's layers skip their own zeros anyway
// (from 70 to 99 % in the demo), so the level is where the layers above it
// plus those already sparser by themselves average s (water-filling).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/base/status.h"

namespace pi {

// Quantile points per layer: 0 %, 1 %, ..., 100 % (point k is the value
// below which k % of the profiled magnitudes lie).
constexpr int kGateQuantilePoints = 101;

// Magnitudes counted per layer in log-spaced bins (64 per octave: a
// quantile is placed within 1.1 % of its value) from 2^-40 to 2^24, with
// zeros and smaller values in a bin of their own and larger ones clamped
// to the top. Add allocates nothing.
class GateHistogram {
 public:
  void Init(int n_layer);
  bool empty() const { return counts_.empty(); }
  // Counts |a[i]| for i < n into layer's bins (NaNs are not counted).
  void Add(int layer, const float* a, int64_t n);
  uint64_t total(int layer) const;
  // The layer's kGateQuantilePoints quantiles into out (all 0 when empty).
  void Quantiles(int layer, float* out) const;
  // The root mean square of the layer's counted magnitudes (0 when none).
  double Rms(int layer) const;

 private:
  static constexpr int kPerOctave = 64, kMinExp = -40, kMaxExp = 24;
  static constexpr int kBins = 1 + (kMaxExp - kMinExp) * kPerOctave;  // bin 0: below 2^-40
  int n_layer_ = 0;
  std::vector<uint64_t> counts_;  // [n_layer][kBins]
  std::vector<double> sum_sq_;    // [n_layer] the counted magnitudes' squares
};

// How a model-wide target share is spread over the layers.
enum class SparsityAllocation {
  // Every layer skips the target share (above its own zeros: CommonLevel).
  kUniform,
  // TEAL's greedy allocation, by the magnitudes the quantiles describe:
  // adding sparsity one step at a time to the layer whose share of its
  // squared magnitude (sum of a^2 over the entries skipped, over the
  // layer's whole) grows least ends where each layer's threshold is the same
  // multiple of its RMS — so layers with a heavy tail of large entries skip
  // more, those of even magnitudes less, the mean share the target.
  kGreedy,
};

// Each layer's threshold for a model-wide target share of skipped neurons
// (0 <= target < 1), from quantiles laid out [n_layer][kGateQuantilePoints]
// (interpolated between the points), allocated across layers as asked.
// Fails, naming the layer, on quantiles that are not finite, negative or
// decreasing.
// kGreedy weighs each layer by its RMS magnitude: `rms` [n_layer] as
// profiled (GateHistogram::Rms), or empty to estimate it from the
// quantiles (which cannot see the top 1 %'s spread: statistics from before
// pi-profile recorded it).
Status GateThresholdsFor(const std::vector<float>& quantiles, int n_layer, double target,
                         std::vector<float>* thresholds,
                         SparsityAllocation allocation = SparsityAllocation::kUniform,
                         const std::vector<float>& rms = {});
// "uniform" | "greedy".
const char* SparsityAllocationName(SparsityAllocation a);
bool ParseSparsityAllocation(const std::string& s, SparsityAllocation* out);
// The share of a layer's magnitudes at or below t, from its quantiles
// (interpolated; 1 at or above the largest).
double ShareBelow(const float* q, double t);

// A layer's share of exact zeros, from its quantiles (to half a point).
double ZeroShare(const float* q);
// The common level for per-layer zero shares and a model-wide target: the
// s with mean(max(zero[l], s)) = target (0 when the zeros alone reach it).
double CommonLevel(const std::vector<double>& zero, double target);

// Whether a quantile table is valid (the checks above), for readers.
Status CheckGateQuantiles(const float* q, int layer);

}  // namespace pi
