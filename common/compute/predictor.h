// Predictor: PowerInfer's per-layer activation predictor at inference time.
// A small two-layer MLP without biases, fc2 · relu(fc1 · h), reads h, the
// residual stream after attention and *before* the FFN norm (PowerInfer's
// convention), and gives one raw score per FFN neuron; neuron i is predicted
// to fire iff score_i >= threshold (powerinfer.sparse_threshold; 0 by
// default, i.e. a sigmoid probability of 0.5). Tensors per layer:
//   blk.N.fc1.weight [n_embd, rank]   rank rows of n_embd
//   blk.N.fc2.weight [rank, n_ff]     n_ff rows of rank (row i = neuron i)
// in F32, F16, BF16, Q8_0 or Q4_0 (quantized ones need whole blocks per row).
// pi-train-predictor trains them (cli/pi_train_predictor.cpp).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/base/status.h"
#include "common/base/thread_pool.h"
#include "common/compute/parallel_matmul.h"
#include "common/model/llama_model.h"

namespace pi {

// The environment variable PowerInfer reads to override the file's threshold.
inline constexpr const char* kPredictorThresholdEnv = "LLAMA_SPARSE_PRED_THRESHOLD";

// The threshold a run uses: `flag` (--sparse-threshold) if set, else the
// environment variable if set, else the file's powerinfer.sparse_threshold
// (0 when absent). Fails when the environment variable is not a number.
// *source, if given, says which of the three it came from.
Status ResolvePredictorThreshold(const LlamaConfig& config, const std::optional<float>& flag,
                                 float* threshold, std::string* source = nullptr);

// OK when every layer has fc1 and fc2; otherwise says which layer lacks them
// and how to get a predictor.
Status CheckPredictorPresent(const LlamaModel& model);

// The largest fc1 row count (rank) over the layers; 0 without predictors.
int64_t MaxPredictorRank(const LlamaModel& model);

class Predictor {
 public:
  // Sizes the scratch buffers; after this, Scores and Predict allocate nothing.
  void Init(int64_t n_embd, int64_t n_ff, int64_t max_rank);

  // Optional, after Init: for each layer of `model` whose fc2 is float
  // (F32, F16, BF16) with rank < kTransposeMaxRank, keeps a transposed copy
  // of fc2 ([n_ff] wide rows, one per hidden unit), and Scores then adds
  // hidden_j * row j (skipping hidden units relu zeroed) instead of taking
  // n_ff dot products of length rank: with rank 32-128, a dot kernel's
  // per-row overhead dominates. Exact (a byte shuffle); costs the memory of
  // those fc2s once more, which is small by construction.
  void PrepareLayers(const LlamaModel& model);
  static constexpr int64_t kTransposeMaxRank = 256;

  // scores[n_ff] = fc2 · relu(fc1 · h) for one token; h is [n_embd].
  void Scores(const LlamaLayer& layer, const float* h, float* scores, ThreadPool* pool);

  // The neurons with score >= threshold, ascending, into ids[n_ff]; returns
  // how many.
  int64_t Predict(const LlamaLayer& layer, const float* h, float threshold, int32_t* ids,
                  ThreadPool* pool);

 private:
  struct TransposedFc2 {
    const uint8_t* source = nullptr;  // the fc2 data it was made from
    std::vector<uint8_t> rows;        // [rank][n_ff] in fc2's type
  };
  const TransposedFc2* FindTransposed(const Tensor& fc2) const;

  int64_t n_ff_ = 0;
  std::vector<TransposedFc2> transposed_;
  std::vector<float> hidden_;  // [max_rank]
  std::vector<float> scores_;  // [n_ff]
  std::vector<uint8_t> q8_;    // prepared Q8_0 input, max(n_embd, max_rank) wide
};

}  // namespace pi
