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

namespace {

Status CheckLevels(const std::vector<float>& thresholds, int n_layer, const char* who,
                   const char* what, const char* which) {
  if (thresholds.size() != static_cast<size_t>(n_layer)) {
    return Status::Invalid("%s: %zu %s thresholds%s for a model of %d layers", who,
                           thresholds.size(), what, which, n_layer);
  }
  for (int l = 0; l < n_layer; ++l) {
    const float t = thresholds[l];
    if (!std::isfinite(t) || t < 0) {
      return Status::Invalid("%s: layer %d's %s threshold%s %g is not a finite value >= 0", who, l,
                             what, which, t);
    }
  }
  return Status::Ok();
}

}  // namespace

Status CheckGateThresholds(const std::vector<float>& thresholds, int n_layer, bool may_be_empty,
                           const char* who) {
  if (thresholds.empty() && may_be_empty) return Status::Ok();
  return CheckLevels(thresholds, n_layer, who, "gate", "");
}

Status CheckInputThresholds(const std::vector<float> (&thresholds)[kProjectionInputs], int n_layer,
                            const char* who) {
  static const char* const kWhich[kProjectionInputs] = {" (attention input)", " (attention output)",
                                                        " (FFN input)"};
  for (int k = 0; k < kProjectionInputs; ++k) {
    PI_RETURN_IF_ERROR(CheckLevels(thresholds[k], n_layer, who, "input", kWhich[k]));
  }
  return Status::Ok();
}

}  // namespace pi
