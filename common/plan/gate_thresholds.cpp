#include "common/plan/gate_thresholds.h"

#include <algorithm>
#include <cmath>

namespace pi {

void GateHistogram::Init(int n_layer) {
  n_layer_ = n_layer;
  counts_.assign(static_cast<size_t>(n_layer) * kBins, 0);
  sum_sq_.assign(n_layer, 0.0);
}

void GateHistogram::Add(int layer, const float* a, int64_t n) {
  uint64_t* c = counts_.data() + static_cast<int64_t>(layer) * kBins;
  double sq = 0;
  for (int64_t i = 0; i < n; ++i) {
    const float m = std::fabs(a[i]);
    if (m == m) sq += double{m} * m;
    if (!(m >= 0x1p-40f)) {  // zero, tiny or NaN
      if (m == m) ++c[0];
      continue;
    }
    const int bin = 1 + static_cast<int>((std::log2(m) - kMinExp) * kPerOctave);
    ++c[std::min(bin, kBins - 1)];
  }
  sum_sq_[layer] += sq;
}

double GateHistogram::Rms(int layer) const {
  const uint64_t n = total(layer);
  return n == 0 ? 0.0 : std::sqrt(sum_sq_[layer] / static_cast<double>(n));
}

const char* SparsityAllocationName(SparsityAllocation a) {
  return a == SparsityAllocation::kGreedy ? "greedy" : "uniform";
}

bool ParseSparsityAllocation(const std::string& s, SparsityAllocation* out) {
  if (s == "uniform") {
    *out = SparsityAllocation::kUniform;
  } else if (s == "greedy") {
    *out = SparsityAllocation::kGreedy;
  } else {
    return false;
  }
  return true;
}

uint64_t GateHistogram::total(int layer) const {
  const uint64_t* c = counts_.data() + static_cast<int64_t>(layer) * kBins;
  uint64_t t = 0;
  for (int b = 0; b < kBins; ++b) t += c[b];
  return t;
}

void GateHistogram::Quantiles(int layer, float* out) const {
  const uint64_t* c = counts_.data() + static_cast<int64_t>(layer) * kBins;
  const uint64_t total_count = total(layer);
  // Bin b >= 1 covers [2^(kMinExp + (b-1)/kPerOctave), 2^(kMinExp + b/kPerOctave)); a
  // quantile inside it is placed geometrically by its rank among the bin's counts.
  uint64_t below = 0;
  int b = 0;
  for (int k = 0; k < kGateQuantilePoints; ++k) {
    if (total_count == 0) {
      out[k] = 0.0f;
      continue;
    }
    const double rank = static_cast<double>(total_count) * k / (kGateQuantilePoints - 1);
    while (b < kBins - 1 && static_cast<double>(below + c[b]) < rank) below += c[b++];
    if (b == 0) {
      out[k] = 0.0f;
      continue;
    }
    const double within = c[b] == 0 ? 1.0 : std::clamp((rank - below) / c[b], 0.0, 1.0);
    out[k] = static_cast<float>(std::exp2(kMinExp + (b - 1 + within) / kPerOctave));
  }
}

double ZeroShare(const float* q) {
  int k = 0;  // the last point still 0
  while (k + 1 < kGateQuantilePoints && q[k + 1] == 0.0f) ++k;
  // Point 0 is 0 for any layer; a zero share from k / 100 to (k + 1) / 100
  // is taken at its middle.
  return k == 0 ? 0.0 : std::min(1.0, (k + 0.5) / (kGateQuantilePoints - 1));
}

double CommonLevel(const std::vector<double>& zero, double target) {
  const int n = static_cast<int>(zero.size());
  bool any_above = false;
  for (double z : zero) any_above = any_above || z > target;
  if (!any_above) return target;  // no layer is sparser than the target by itself
  std::vector<double> z = zero;
  std::sort(z.begin(), z.end());
  // With the j least sparse layers at level s and the rest at their own
  // zero shares: j s + sum(z[j..n)) = n target, for the j where z[j-1] <= s <= z[j].
  double rest = 0;
  for (double v : z) rest += v;
  for (int j = 1; j <= n; ++j) {
    rest -= z[j - 1];
    const double s = (n * target - rest) / j;
    if (s >= z[j - 1] && (j == n || s <= z[j])) return std::max(0.0, s);
  }
  return 0.0;  // the zeros alone pass the target: every threshold 0
}

Status CheckGateQuantiles(const float* q, int layer) {
  for (int k = 0; k < kGateQuantilePoints; ++k) {
    if (!std::isfinite(q[k]) || q[k] < 0 || (k > 0 && q[k] < q[k - 1])) {
      return Status::Invalid(
          "layer %d's gate quantile %d (%g) is not finite, is negative or is below the one "
          "before it",
          layer, k, q[k]);
    }
  }
  return Status::Ok();
}

double ShareBelow(const float* q, double t) {
  const int last = kGateQuantilePoints - 1;
  if (t >= q[last]) return 1.0;
  if (t < q[0]) return 0.0;
  int k = 0;  // the last point <= t
  while (k + 1 < last && q[k + 1] <= t) ++k;
  const double span = q[k + 1] - q[k];
  const double f = span > 0 ? (t - q[k]) / span : 1.0;
  return (k + f) / last;
}

namespace {

// A layer's RMS magnitude from its quantiles: the trapezoid rule over the
// quantile function (each 1 % of the entries at its end points' mean a^2).
double QuantileRms(const float* q) {
  double e = 0;
  for (int k = 0; k + 1 < kGateQuantilePoints; ++k) {
    e += 0.5 * (double{q[k]} * q[k] + double{q[k + 1]} * q[k + 1]);
  }
  return std::sqrt(e / (kGateQuantilePoints - 1));
}

// kGreedy: thresholds c * rms[l], the c whose mean share below is target
// (bisection: the mean share grows with c).
void GreedyThresholds(const std::vector<float>& quantiles, int n_layer, double target,
                      const std::vector<float>& profiled_rms, std::vector<float>* thresholds) {
  std::vector<double> rms(n_layer);
  for (int l = 0; l < n_layer; ++l) {
    rms[l] = profiled_rms.empty()
                 ? QuantileRms(quantiles.data() + static_cast<int64_t>(l) * kGateQuantilePoints)
                 : profiled_rms[l];
  }
  auto mean_share = [&](double c) {
    double s = 0;
    for (int l = 0; l < n_layer; ++l) {
      s += ShareBelow(quantiles.data() + static_cast<int64_t>(l) * kGateQuantilePoints, c * rms[l]);
    }
    return s / n_layer;
  };
  double lo = 0, hi = 1;
  while (mean_share(hi) < target && hi < 1e6) hi *= 2;
  for (int i = 0; i < 60; ++i) {
    const double mid = 0.5 * (lo + hi);
    (mean_share(mid) < target ? lo : hi) = mid;
  }
  thresholds->assign(n_layer, 0.0f);
  for (int l = 0; l < n_layer; ++l) (*thresholds)[l] = static_cast<float>(lo * rms[l]);
}

}  // namespace

Status GateThresholdsFor(const std::vector<float>& quantiles, int n_layer, double target,
                         std::vector<float>* thresholds, SparsityAllocation allocation,
                         const std::vector<float>& rms) {
  if (!(target >= 0 && target < 1)) {
    return Status::Invalid("the target sparsity %g is not in [0, 1)", target);
  }
  if (quantiles.size() != static_cast<size_t>(n_layer) * kGateQuantilePoints) {
    return Status::Invalid("%zu gate quantiles for %d layers of %d", quantiles.size(), n_layer,
                           kGateQuantilePoints);
  }
  std::vector<double> zero(n_layer);
  for (int l = 0; l < n_layer; ++l) {
    const float* q = quantiles.data() + static_cast<int64_t>(l) * kGateQuantilePoints;
    PI_RETURN_IF_ERROR(CheckGateQuantiles(q, l));
    zero[l] = ZeroShare(q);
  }
  if (allocation == SparsityAllocation::kGreedy) {
    if (!rms.empty() && rms.size() != static_cast<size_t>(n_layer)) {
      return Status::Invalid("%zu RMS values for %d layers", rms.size(), n_layer);
    }
    for (size_t l = 0; l < rms.size(); ++l) {
      if (!std::isfinite(rms[l]) || rms[l] < 0) {
        return Status::Invalid("layer %zu's RMS magnitude %g is not finite and >= 0", l, rms[l]);
      }
    }
    GreedyThresholds(quantiles, n_layer, target, rms, thresholds);
    return Status::Ok();
  }
  const double level = CommonLevel(zero, target);
  thresholds->assign(n_layer, 0.0f);
  const double pos = level * (kGateQuantilePoints - 1);
  const int k = std::min(static_cast<int>(pos), kGateQuantilePoints - 2);
  const double f = pos - k;
  for (int l = 0; l < n_layer; ++l) {
    const float* q = quantiles.data() + static_cast<int64_t>(l) * kGateQuantilePoints;
    (*thresholds)[l] = static_cast<float>(q[k] + f * (q[k + 1] - q[k]));
  }
  return Status::Ok();
}

}  // namespace pi
