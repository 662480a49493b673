#include "common/compute/sparse_mode.h"

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

}  // namespace pi
