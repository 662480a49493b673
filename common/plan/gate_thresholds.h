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

 private:
  static constexpr int kPerOctave = 64, kMinExp = -40, kMaxExp = 24;
  static constexpr int kBins = 1 + (kMaxExp - kMinExp) * kPerOctave;  // bin 0: below 2^-40
  int n_layer_ = 0;
  std::vector<uint64_t> counts_;  // [n_layer][kBins]
};

// Each layer's threshold for a model-wide target share of skipped neurons
// (0 <= target < 1), from quantiles laid out [n_layer][kGateQuantilePoints]
// (interpolated between the points at the common level). Fails, naming the layer, on quantiles that are not
// finite, negative or decreasing.
Status GateThresholdsFor(const std::vector<float>& quantiles, int n_layer, double target,
                         std::vector<float>* thresholds);

// A layer's share of exact zeros, from its quantiles (to half a point).
double ZeroShare(const float* q);
// The common level for per-layer zero shares and a model-wide target: the
// s with mean(max(zero[l], s)) = target (0 when the zeros alone reach it).
double CommonLevel(const std::vector<double>& zero, double target);

// Whether a quantile table is valid (the checks above), for readers.
Status CheckGateQuantiles(const float* q, int layer);

}  // namespace pi
