// The --sparse flags shared by pi-run, pi-bench and pi-perplexity.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "cli/args.h"
#include "common/base/status.h"
#include "common/compute/sparse_mode.h"
#include "common/model/llama_model.h"
#include "common/plan/gate_thresholds.h"

namespace pi {

// Parses one mode name ("off", "oracle", "predictor", "cats", "teal") into *mode; otherwise
// fails `args` with a message naming the bad value. With `auto_mode` (the
// tools that choose at load: pi-run, pi-launch) "auto" is a mode too, and
// *auto_mode says whether it was given.
void ParseSparseModeValue(const std::string& value, ArgReader* args, SparseMode* mode,
                          bool* auto_mode = nullptr);

// Consumes `flag` (already read by args->Next()) when it is --sparse MODE,
// --sparse-threshold X, --target-sparsity F (into *target, in [0, 1)) or,
// where `allocation` is given, --sparse-allocation uniform|greedy; returns
// false for any other flag.
bool ParseSparseFlag(const std::string& flag, ArgReader* args, SparseMode* mode,
                     std::optional<float>* threshold, double* target, bool* auto_mode = nullptr,
                     SparsityAllocation* allocation = nullptr);

// --sparse cats' default --target-sparsity: half the neurons skipped.
constexpr double kDefaultTargetSparsity = 0.5;

// --sparse cats: each layer's gate threshold for `target` from the model's
// statistics (`stats_path`, or beside the model: DefaultStatsPath), into
// *thresholds; says on stderr which file and target they came from. Fails
// with the command that makes them when there are none.
// `allocation`: how the target spreads over the layers (gate_thresholds.h).
Status LoadGateThresholds(const char* tool, const std::string& model_path,
                          const std::string& stats_path, const LlamaModel& model, double target,
                          std::vector<float>* thresholds,
                          SparsityAllocation allocation = SparsityAllocation::kUniform);

// --sparse teal: each layer's input thresholds for `target` (every
// thresholded input drops that share of its entries) into
// inputs[ProjectionInput], from the same statistics. Fails, naming
// pi-profile, when they have no input quantiles.
Status LoadInputThresholds(const char* tool, const std::string& model_path,
                           const std::string& stats_path, const LlamaModel& model, double target,
                           std::vector<float>* inputs,
                           SparsityAllocation allocation = SparsityAllocation::kUniform);

// What opt->sparse needs beyond the model: cats and teal their gate
// thresholds (opt->gate_thresholds), teal its input thresholds
// (opt->input_thresholds) and the transposed copies (AddTealCopies, with
// opt->n_threads); nothing for the other modes.
struct EngineOptions;
Status PrepareSparseMode(const char* tool, const std::string& model_path,
                         const std::string& stats_path, double target, LlamaModel* model,
                         EngineOptions* opt,
                         SparsityAllocation allocation = SparsityAllocation::kUniform);

// --sparse teal's transposed copies (weight_transpose.h), made with
// `n_threads`; says on stderr how large they are, and, when they are Q4_0
// and the kernels lack AVX-512, that cats may be faster.
Status AddTealCopies(const char* tool, int n_threads, LlamaModel* model);

// --sparse auto (pi-run's and pi-launch's default): predictor when the model's
// FFN can run sparse and the file has a predictor for every layer (as
// PowerInfer runs such a file), oracle when it can run sparse without one
// (exact: only the neurons that fire), off otherwise. *why says which was
// chosen and why, for the tool's header.
SparseMode ChooseSparseMode(const LlamaModel& model, std::string* why);

// Prints "tool: --sparse oracle: this model's FFN runs dense: <why>" when a
// sparse mode cannot skip neurons in `model`, so a user never mistakes a
// dense run for a sparse one.
void NoteSparseSupport(const char* tool, const LlamaModel& model, SparseMode mode);

}  // namespace pi
