#include "common/compute/sparse_mode.h"

#include <cmath>

namespace pi {

const char* SparseModeName(SparseMode m) {
  switch (m) {
    case SparseMode::kOff:
      return "off";
    case SparseMode::kOracle:
      return "oracle";
    case SparseMode::kPredictor:
      return "predictor";
    case SparseMode::kCats:
      return "cats";
    case SparseMode::kTeal:
      return "teal";
  }
  return "?";
}

bool ParseSparseMode(const std::string& s, SparseMode* out) {
  if (s == "off") {
    *out = SparseMode::kOff;
  } else if (s == "oracle") {
    *out = SparseMode::kOracle;
  } else if (s == "predictor") {
    *out = SparseMode::kPredictor;
  } else if (s == "cats") {
    *out = SparseMode::kCats;
  } else if (s == "teal") {
    *out = SparseMode::kTeal;
  } else {
    return false;
  }
  return true;
}

Status CheckGateThresholds(const std::vector<float>& thresholds, int n_layer, bool may_be_empty,
                           const char* who) {
  if (thresholds.empty() && may_be_empty) return Status::Ok();
  if (thresholds.size() != static_cast<size_t>(n_layer)) {
    return Status::Invalid("%s: %zu gate thresholds for a model of %d layers", who,
                           thresholds.size(), n_layer);
  }
  for (int l = 0; l < n_layer; ++l) {
    const float t = thresholds[l];
    if (!std::isfinite(t) || t < 0) {
      return Status::Invalid("%s: layer %d's gate threshold %g is not a finite value >= 0", who, l,
                             t);
    }
  }
  return Status::Ok();
}

}  // namespace pi
