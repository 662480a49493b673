// Predictor training: what pi-train-predictor does per layer, on the samples
// PredictorSamples collected. PowerInfer's predictor form fc2 · relu(fc1 · h)
// (no biases) is trained with Adam on a binary cross-entropy whose firing
// term is weighted (a miss corrupts the output, a false alarm only costs
// time), on the first n_train tokens; the rest, a contiguous tail, is held
// out for early stopping and then for calibrating the threshold. All f32 on
// one thread per layer (GemmRows of kernels/cpu/matmul.h does the products),
// so results do not depend on how many layers train at once.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "common/offline/predictor_samples.h"
#include "kernels/dtype.h"

namespace pi {

struct PredictorTrainParams {
  int epochs = 30;
  int patience = 3;
  float lr = 0.002f;
  int batch = 128;
  float pos_weight = 4.0f;
  uint64_t seed = 1;
};

// One layer's predictor and its training state. Weights are f32, row-major
// in the file's layout: w1 [rank][d], w2 [ff][rank].
struct LayerPredictor {
  int rank = 0;
  float in_scale = 1.0f;  // h is divided by this (folded into w1 when written)
  std::vector<float> w1, w2;
  double best_loss = 0;
  int epochs_run = 0;
};

// One batch's loss and gradient, the products of a training step. Forward:
// z = W1 x, r = relu(z), s = W2 r; the weighted cross-entropy of s against
// what fired; backward: dL/dW2 = g r^T and dL/dW1 = (W2^T g * [z > 0]) x^T,
// g = dL/ds. The five products are matrix-matrix products (GemmRows), which
// need each one's reduction dimension contiguous, so the batch transposes
// what it must (r, x, g and W2): far fewer bytes than the products move.
// Buffers are sized once, for batches of up to max_batch tokens.
class PredictorBatch {
 public:
  PredictorBatch(int d, int ff, int rank, int max_batch);

  // Tokens idx[0, nb) of `layer` (nb <= max_batch), inputs times in_mul.
  void Load(const PredictorSamples& data, int layer, const int64_t* idx, int nb, float in_mul);

  // The loss summed over the batch's (token, neuron) pairs, each firing
  // term weighted by pos_weight. With g1 and g2 non-null, also its gradient
  // divided by the batch size: g1 [rank][d], g2 [ff][rank] (overwritten).
  double Run(const float* w1, const float* w2, float pos_weight, float* g1, float* g2);

 private:
  void Gradients(const float* w2, float* g1, float* g2);

  int d_, ff_, rank_, nb_ = 0;
  std::vector<const uint64_t*> masks_;  // [max_batch] firing bits per token
  std::vector<float> x_, xt_;           // [nb][d] inputs, [d][nb]
  std::vector<float> z_, r_, rt_;       // [nb][rank] pre-activation, relu; [rank][nb]
  std::vector<float> s_, gt_;           // [nb][ff] scores, then dL/ds; [ff][nb] dL/ds
  std::vector<float> w2t_;              // [rank][ff]
  std::vector<float> dr_, dzt_;         // [nb][rank] dL/dr; [rank][nb] dL/dz
};

// Called after every epoch: (epoch, train loss, held-out loss, whether the
// held-out loss is the best so far).
using EpochReport = std::function<void(int, double, double, bool)>;

// Trains layer `layer`'s predictor (out->rank set by the caller) on tokens
// [0, n_train) of `data`, early-stopping on [n_train, n_total); keeps the
// best weights in *out.
void TrainLayerPredictor(const PredictorSamples& data, int layer, int64_t n_train, int64_t n_total,
                         const PredictorTrainParams& p, LayerPredictor* out,
                         const EpochReport& report);

// The weights as the file will hold them: 1/in_scale folded into w1, fc2
// scaled by `fc2_scale`, rounded through `type`. w1 [rank][d], w2 [ff][rank].
void FinalPredictorWeights(const LayerPredictor& p, int d, int ff, DType type, float fc2_scale,
                           std::vector<float>* w1, std::vector<float>* w2);

// scores [n][ff] of tokens [t0, t0 + n) from final weights, in f32 (GemmRows)
// as the engine scores them, if not bit for bit.
void PredictorScores(const PredictorSamples& data, int layer, int64_t t0, int64_t n, int d, int ff,
                     const std::vector<float>& w1, const std::vector<float>& w2, int rank,
                     std::vector<float>* scores);

struct PredictorQuality {
  double recall = 0, precision = 0, predicted_sparsity = 0, true_sparsity = 0;
  int64_t firing = 0;  // (token, neuron) firings the recall is measured over
  // Half-width of recall's 95 % interval (normal approximation; the firings
  // of one token are not independent, so read it as a lower bound).
  double RecallMargin() const;
};

// Recall, precision and sparsities of `scores` >= threshold against what
// fired in tokens [t0, t0 + n).
PredictorQuality MeasurePredictor(const PredictorSamples& data, int layer, int64_t t0, int64_t n,
                                  int ff, const std::vector<float>& scores, float threshold);

// The largest threshold at which at least `target` of the firing neurons of
// tokens [t0, t0 + n) score >= threshold.
float ThresholdForRecall(const PredictorSamples& data, int layer, int64_t t0, int64_t n, int ff,
                         const std::vector<float>& scores, double target);

}  // namespace pi
