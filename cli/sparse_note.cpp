#include "cli/sparse_note.h"

#include <algorithm>
#include <cstdio>

#include "cli/model_stats.h"
#include "common/compute/predictor.h"
#include "common/model/weight_transpose.h"
#include "common/plan/gate_thresholds.h"
#include "coordinator/engine/engine.h"
#include "kernels/cpu/isa.h"

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
               "off, oracle, predictor, cats or teal, got '" + value + "'");
  }
}

bool ParseSparseFlag(const std::string& flag, ArgReader* args, SparseMode* mode,
                     std::optional<float>* threshold, double* target, bool* auto_mode,
                     SparsityAllocation* allocation) {
  if (flag == "--sparse") {
    ParseSparseModeValue(args->String(flag), args, mode, auto_mode);
  } else if (flag == "--sparse-threshold") {
    *threshold = args->Float(flag);
  } else if (flag == "--target-sparsity") {
    *target = args->Float(flag);
    if (!args->failed() && !(*target >= 0 && *target < 1)) {
      args->Fail("--target-sparsity expects a share in [0, 1), got " + std::to_string(*target));
    }
  } else if (flag == "--sparse-allocation" && allocation) {
    const std::string v = args->String(flag);
    if (!args->failed() && !ParseSparsityAllocation(v, allocation)) {
      args->Fail("--sparse-allocation expects uniform or greedy, got '" + v + "'");
    }
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
  // cats and teal run any activation; without ffn_down_t Engine::Create says so.
  if (mode == SparseMode::kOff || UsesGateThresholds(mode)) return;
  // Without predictor tensors Engine::Create fails and says why; a note
  // that the FFN "runs dense" would only confuse.
  if (mode == SparseMode::kPredictor && !CheckPredictorPresent(model).ok()) return;
  std::string why;
  if (!SupportsSparseFfn(model, &why)) {
    fprintf(stderr, "%s: --sparse %s: this model's FFN runs dense: %s\n", tool,
            SparseModeName(mode), why.c_str());
  }
}

namespace {

// Greedy allocation weighs layers by RMS magnitudes; statistics from before
// pi-profile recorded them leave it to estimate them from the quantiles.
void NoteEstimatedRms(const char* tool, SparsityAllocation allocation,
                      const std::vector<float>& rms, const std::string& path) {
  if (allocation != SparsityAllocation::kGreedy || !rms.empty()) return;
  fprintf(stderr,
          "%s: note: %s has no RMS magnitudes (an older pi-profile): --sparse-allocation greedy "
          "estimates them from the quantiles\n",
          tool, path.c_str());
}

}  // namespace

Status LoadGateThresholds(const char* tool, const std::string& model_path,
                          const std::string& stats_path, const LlamaModel& model, double target,
                          std::vector<float>* thresholds, SparsityAllocation allocation) {
  PI_RETURN_IF_ERROR(CheckCatsSupport(model));
  ActivationStats stats;
  std::string path;
  PI_RETURN_IF_ERROR(ReadModelStats(tool, "--sparse cats needs the model's gate statistics",
                                    model_path, stats_path, model, &stats, &path));
  if (stats.gate_quantiles.empty()) {
    return Status::NotFound(
        "--sparse cats: %s has no gate quantiles (made by an older pi-profile): run pi-profile "
        "-m %s -f CORPUS again",
        path.c_str(), model_path.c_str());
  }
  PI_RETURN_IF_ERROR(GateThresholdsFor(stats.gate_quantiles, model.config.n_layer, target,
                                       thresholds, allocation, stats.gate_rms)
                         .WithContext(path));
  NoteEstimatedRms(tool, allocation, stats.gate_rms, path);
  const auto [lo, hi] = std::minmax_element(thresholds->begin(), thresholds->end());
  fprintf(stderr,
          "%s: --sparse cats: target sparsity %.0f%% (%s), gate thresholds %.3g to %.3g from %s "
          "(%llu profiled tokens)\n",
          tool, 100 * target, SparsityAllocationName(allocation), *lo, *hi, path.c_str(),
          static_cast<unsigned long long>(stats.n_tokens()));
  return Status::Ok();
}

Status LoadInputThresholds(const char* tool, const std::string& model_path,
                           const std::string& stats_path, const LlamaModel& model, double target,
                           std::vector<float>* inputs, SparsityAllocation allocation) {
  ActivationStats stats;
  std::string path;
  PI_RETURN_IF_ERROR(ReadModelStats(tool, "--sparse teal needs the model's input statistics",
                                    model_path, stats_path, model, &stats, &path));
  static const char* const kNames[kProjectionInputs] = {"attention input", "attention output",
                                                        "FFN input"};
  for (int k = 0; k < kProjectionInputs; ++k) {
    if (stats.input_quantiles[k].empty()) {
      return Status::NotFound(
          "--sparse teal: %s has no %s quantiles (made by an older pi-profile): run pi-profile "
          "-m %s -f CORPUS again",
          path.c_str(), kNames[k], model_path.c_str());
    }
    PI_RETURN_IF_ERROR(GateThresholdsFor(stats.input_quantiles[k], model.config.n_layer, target,
                                         &inputs[k], allocation, stats.input_rms[k])
                           .WithContext(path));
    NoteEstimatedRms(tool, allocation, stats.input_rms[k], path);
  }
  fprintf(stderr,
          "%s: --sparse teal: the inputs of q, k, v, o and the gate drop %.0f%% of their entries "
          "(%s; thresholds from %s)\n",
          tool, 100 * target, SparsityAllocationName(allocation), path.c_str());
  return Status::Ok();
}

Status PrepareSparseMode(const char* tool, const std::string& model_path,
                         const std::string& stats_path, double target, LlamaModel* model,
                         EngineOptions* opt, SparsityAllocation allocation) {
  if (!UsesGateThresholds(opt->sparse)) return Status::Ok();
  PI_RETURN_IF_ERROR(LoadGateThresholds(tool, model_path, stats_path, *model, target,
                                        &opt->gate_thresholds, allocation));
  if (opt->sparse != SparseMode::kTeal) return Status::Ok();
  PI_RETURN_IF_ERROR(LoadInputThresholds(tool, model_path, stats_path, *model, target,
                                         opt->input_thresholds, allocation));
  return AddTealCopies(tool, opt->n_threads, model);
}

Status AddTealCopies(const char* tool, int n_threads, LlamaModel* model) {
  ThreadPool pool(n_threads);
  int64_t bytes = 0;
  PI_RETURN_IF_ERROR(AddTransposedCopies(model, &pool, &bytes));
  fprintf(stderr,
          "%s: --sparse teal: transposed copies of q, k, v, o and the gate (%.1f MiB) for the "
          "column-sparse products\n",
          tool, bytes / 1048576.0);
  // Below AVX-512 the Q4_0 column-sparse product runs at half its AVX-512
  // speed, too slow for the bytes it saves: on a 7B-shaped Q4_0 file teal
  // decoded at 0.81-0.88x cats there (docs/sparse-execution.md).
  const Tensor* copy = model->layers.empty() ? nullptr : &model->layers[0].wq_t;
  if (copy && copy->present() && copy->type == DType::kQ4_0 && ActiveCpuIsa() < CpuIsa::kAvx512) {
    fprintf(stderr,
            "%s: note: the copies are Q4_0, whose column-sparse products run at half speed "
            "without AVX-512 (kernels here: %s); --sparse cats may decode this file faster: "
            "compare them with pi-bench --sparse cats,teal\n",
            tool, CpuIsaName(ActiveCpuIsa()));
  }
  return Status::Ok();
}

}  // namespace pi
