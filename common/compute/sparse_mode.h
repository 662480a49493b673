// SparseMode: which FFN neurons a decode step computes.
//   off:       all of them (dense);
//   oracle:    exactly the ones that fire — the gate is computed densely, then
//              up and down only for neurons with relu(gate) > 0 (no predictor,
//              so the output equals dense up to float rounding);
//   predictor: the ones PowerInfer's per-layer predictor (fc1, fc2; see
//              predictor.h) expects to fire — gate, up and down are computed
//              for those rows only, so a missed neuron is an error in the
//              output (pi-train-predictor makes the predictor).
//   cats:      CATS (training-free, any activation): the gate is computed
//              densely, then up and down only for neurons whose activated
//              gate passes the layer's calibrated threshold, |act(gate x)| >
//              t_l (gate_thresholds.h: t_l is the quantile of those values
//              for a target share of skipped neurons). For SiLU and GELU
//              models, whose activations are never exactly zero: an
//              approximation whose loss grows with the target.
//   teal:      cats, and the inputs of the other projections thresholded
//              too (TEAL: q, k, v read only the attention input's entries
//              with |x| above the layer's threshold, o the attention
//              output's, the gate the FFN input's), each product reading
//              only the weight columns of the kept entries (transposed
//              copies made at load, weight_transpose.h). Decode steps in
//              one process; prompt batches run dense.
// Oracle and predictor need a ReLU-family activation; every sparse mode
// needs PowerInfer's ffn_down_t (rows per neuron). Elsewhere, and for prompt
// batches, the FFN runs dense.
#pragma once

#include <string>
#include <vector>

#include "common/base/status.h"
#include "common/compute/ffn_observer.h"

namespace pi {

enum class SparseMode { kOff, kOracle, kPredictor, kCats, kTeal };

const char* SparseModeName(SparseMode m);
// Whether the mode decides the FFN's neurons by CATS' gate thresholds.
inline bool UsesGateThresholds(SparseMode m) {
  return m == SparseMode::kCats || m == SparseMode::kTeal;
}
bool ParseSparseMode(const std::string& s, SparseMode* out);
// Gate thresholds as every taker checks them: one per layer of n_layer (or
// none, when `may_be_empty`), each finite and >= 0. Errors start with `who`.
Status CheckGateThresholds(const std::vector<float>& thresholds, int n_layer, bool may_be_empty,
                           const char* who);
// --sparse teal's input thresholds (one list per ProjectionInput) as every
// taker checks them: one per layer of n_layer in each, finite and >= 0.
Status CheckInputThresholds(const std::vector<float> (&thresholds)[kProjectionInputs], int n_layer,
                            const char* who);

}  // namespace pi
