#include "cli/sparse_note.h"

#include <cstdio>

#include "common/compute/predictor.h"

namespace pi {

void ParseSparseModeValue(const std::string& value, ArgReader* args, SparseMode* mode,
                          bool* auto_mode) {
  if (args->failed()) return;
  if (auto_mode) {
    *auto_mode = value == "auto";
    if (*auto_mode) return;
  }
  if (!ParseSparseMode(value, mode)) {
    args->Fail(std::string("--sparse expects ") + (auto_mode ? "auto, " : "") +
               "off, oracle or predictor, got '" + value + "'");
  }
}

bool ParseSparseFlag(const std::string& flag, ArgReader* args, SparseMode* mode,
                     std::optional<float>* threshold, bool* auto_mode) {
  if (flag == "--sparse") {
    ParseSparseModeValue(args->String(flag), args, mode, auto_mode);
  } else if (flag == "--sparse-threshold") {
    *threshold = args->Float(flag);
  } else {
    return false;
  }
  return true;
}

SparseMode ChooseSparseMode(const LlamaModel& model, std::string* why) {
  std::string dense_why;
  if (!SupportsSparseFfn(model, &dense_why)) {
    *why = "off: the FFN runs dense (" + dense_why + ")";
    return SparseMode::kOff;
  }
  if (CheckPredictorPresent(model).ok()) {
    *why =
        "predictor: the file has trained predictors for every layer (--sparse oracle computes "
        "exactly the neurons that fire, --sparse off all of them)";
    return SparseMode::kPredictor;
  }
  *why =
      "oracle: a ReLU-family FFN with ffn_down_t but no predictors (pi-train-predictor adds "
      "them; --sparse off computes every neuron)";
  return SparseMode::kOracle;
}

void NoteSparseSupport(const char* tool, const LlamaModel& model, SparseMode mode) {
  if (mode == SparseMode::kOff) return;
  // Without predictor tensors Engine::Create fails and says why; a note
  // that the FFN "runs dense" would only confuse.
  if (mode == SparseMode::kPredictor && !CheckPredictorPresent(model).ok()) return;
  std::string why;
  if (!SupportsSparseFfn(model, &why)) {
    fprintf(stderr, "%s: --sparse %s: this model's FFN runs dense: %s\n", tool,
            SparseModeName(mode), why.c_str());
  }
}

}  // namespace pi
