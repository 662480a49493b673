// FfnBlock: the FFN half of a llama layer for a batch of B tokens,
// h[b] += down(act(gate x_b, up x_b)) with x_b = rmsnorm(h[b]) and act one of
// the gated forms of FfnActivation, or for falcon h[b] += down(act(up x_b))
// with x_b = layernorm(in[b]), in the layer input: the coordinator's one
// place where a layer's FFN work is decided and split among its owners.
// Batches run dense (common/compute/dense_ffn.h). Forward allocates nothing.
//
// Single-token steps of a layer with ffn_down_t can be sparse: the neurons
// to compute come from the mode (all of them for kOracle, ReLU forms, and
// for kCats, any activation, with the layer's gate threshold; the
// predictor's ids for kPredictor; sparse_mode.h) and, with a hot/cold split
// (InitHotShard), the hot ones go to a Shard (common/shard/shard.h: the GPU's
// share, in this process or a gpu_worker's) that runs at the same time while
// the CPU takes the rest, itself or — cold neurons in worker processes —
// through the ShardRouter (shard_router.h):
//
//   x = rmsnorm(h); [hot.Start(l, x)]
//   ids = all | predictor(h); [ids -= hot]          cold or all candidates
//   [ids -> shards' shares]                         router.Start
//   h += NeuronFfn(ids, x);  [h += shards' sums] [h += hot.Wait()]
//
// The hot shard computes every hot neuron that fires (exact); only the CPU's
// candidates come from the predictor. Prompt batches run dense: a batch reads
// each weight row once for all its tokens, which beats per-token sparsity
// (demo: pp64 ~8500 t/s against ~7300 t/s for sparse decode).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/base/status.h"
#include "common/base/thread_pool.h"
#include "common/compute/column_sparse.h"
#include "common/compute/dense_ffn.h"
#include "common/compute/neuron_ffn.h"
#include "common/compute/predictor.h"
#include "common/compute/sparse_mode.h"
#include "common/model/llama_model.h"
#include "common/shard/shard.h"
#include "coordinator/route/shard_health.h"
#include "coordinator/route/shard_router.h"

namespace pi {

class FfnBlock {
 public:
  // `model` must outlive the block.
  void Init(const LlamaModel& model, int max_batch, SparseMode mode = SparseMode::kOff);
  // For SparseMode::kPredictor: readies the predictor for the model's layers
  // (scratch, transposed small fc2s; see predictor.h) and sets the score
  // threshold (ResolvePredictorThreshold).
  void InitPredictor(float threshold);
  // For SparseMode::kCats: layer l's neurons are computed when
  // |act(gate x)| > thresholds[l] (one per layer, checked by the engine).
  void InitGateThresholds(const std::vector<float>& thresholds) { gate_thresholds_ = thresholds; }
  // For SparseMode::kTeal: also, per layer, the |x| an entry of the normed
  // FFN input must exceed for the gate to read its column (the layer's
  // ffn_gate_t, weight_transpose.h), in the sparse steps; every neuron's
  // dot is computed here and the shards read theirs (ShardStep::gate_dots).
  void InitInputThresholds(std::vector<float> thresholds);
  // Until called again with false, every step runs as a prompt batch does:
  // dense, or with a split (ForwardCold) over all its cold neurons, here,
  // with no thresholds — a prompt's tokens, which the device path runs one
  // at a time.
  void SetDense(bool dense) { dense_steps_ = dense; }
  // Entries of the thresholded FFN inputs kept and seen since the last reset.
  int64_t inputs_kept() const { return columns_.entries_kept(); }
  int64_t inputs_seen() const { return columns_.entries_seen(); }
  void ResetInputCounts() { columns_.ResetCounts(); }
  // The normed input rows of the last Forward / ForwardSparseRows (in the
  // order computed), for an observer.
  const float* normed_input() const { return x_.data(); }
  // The split with the hot neurons on a DeviceBackend (common/shard/device_backend.h),
  // which runs the whole layer there: only the cold neuron lists are kept,
  // for ForwardCold.
  Status InitColdPart(const std::vector<std::vector<int32_t>>& hot_ids);

  // Cold neurons on shards (worker processes): each sparse step's candidates
  // are split by owner, every shard's share starts at once, the neurons no
  // live shard owns run here meanwhile, and the shards' sums are added in
  // shard order. The shards must own disjoint neuron sets, none of them hot
  // (call after InitHotShard / InitColdPart), and outlive the block; the model
  // must support sparse FFNs. Single-token steps then always run sparse.
  // A shard whose Wait fails is dropped: its neurons run here until its
  // Recover() succeeds (shard_health.h: when it is tried; shard_failures(),
  // shard_recoveries(), shard_error()).
  Status InitColdShards(const std::vector<Shard*>& shards);
  // The hot/cold split: hot_ids[l] (sorted, unique) are layer l's neurons on
  // `shard` (in this process, or a gpu_worker's), which must own exactly
  // them and outlive the block. Every single-token step sends it the whole
  // layer (ids null: the gate decides) while the CPU computes the cold part
  // (all of it, or the predicted part); if the shard fails, the hot neurons
  // run here until it recovers, as a cold shard's do. Single-token steps
  // then always run sparse (kOff behaves as kOracle: the split is exact).
  Status InitHotShard(const std::vector<std::vector<int32_t>>& hot_ids, Shard* shard);
  int64_t shard_failures() const { return events_.failures; }
  int64_t shard_recoveries() const { return events_.recoveries; }
  const std::string& shard_error() const { return events_.last_error; }

  // The host's part of a layer whose attention and hot neurons run on a
  // device: y[n_embd] += the FFN over the layer's cold neurons for the
  // already normed input x — those the device's predictor picked (`mask`,
  // bit i = neuron i; device_backend.h) or, without a mask, all of them,
  // passing kCats' gate threshold unless SetDense — or over every neuron,
  // dense, when the model cannot skip neurons.
  void ForwardCold(int il, const float* x, const uint32_t* mask, float* y, ThreadPool* pool);

  // h: [batch, n_embd] for layer `il`, updated in place.
  void Forward(int il, int batch, float* h, ThreadPool* pool) { Forward(il, batch, h, h, pool); }
  // The same with the FFN's input apart from the vector it adds into: `in`
  // ([batch, n_embd]; normed here, and what the predictor reads) may be h
  // itself, or for a parallel-residual model (falcon) the layer input while h
  // already holds the attention's sum. in is read before h changes.
  // `run_length`: ParallelMatMul's (parallel_matmul.h) for the rows, or null.
  void Forward(int il, int batch, const float* in, float* h, ThreadPool* pool,
               const int32_t* run_length = nullptr);
  // Whether a single row of layer il takes the sparse step (else the dense
  // one, whose rows do not depend on how many are computed together).
  bool SparseStep(int il) const { return SparseStepApplies(model_->layers[il], 1); }
  // Single-token steps of several sequences at once (continuous batching):
  // rows idx[0..n) of in and h (stride n_embd), each computed exactly as
  // Forward(il, 1, ...) computes it alone — bit for bit — but with the
  // neurons they share read once for all of them, and one message per shard
  // for all the rows. Only where SparseStep(il).
  void ForwardSparseRows(int il, int n, const int* idx, const float* in, float* h,
                         ThreadPool* pool);

  // The activations of the last Forward: [batch, n_ff] (zero where a ReLU
  // form did not fire or a neuron was not computed). With a split, a sparse
  // step records the CPU's neurons only. Profiling reads these.
  const float* activations() const { return activations_; }
  // act(gate x) alone of the last Forward when it was dense and they are
  // kept (KeepGateActivations: profiling's OnGate), else null.
  void KeepGateActivations(bool on) { dense_.KeepGateActivations(on); }
  const float* gate_activations() const {
    return activations_ == dense_.activations() ? dense_.gate_activations() : nullptr;
  }

  // Neurons whose up and down rows the last Forward computed: all of them in
  // a dense step, the ones that fired in a sparse step.
  int64_t last_computed_neurons() const { return last_hot_ + last_cold_; }
  // Of those, on the hot shard and on the CPU (sparse split steps).
  int64_t last_hot_fired() const { return last_hot_; }
  int64_t last_cold_fired() const { return last_cold_; }
  // The phases of the CPU's sparse steps (all neurons, or the cold part of a
  // split), summed since Init.
  const NeuronFfnTimes& neuron_times() const { return neurons_.times(); }
  // Gate rows the last Forward read (a sparse step reads its candidates'
  // gate rows, fired or not, and the hot shard all of its hot ones).
  int64_t last_gate_rows() const { return last_gate_rows_; }
  SparseMode mode() const { return mode_; }

 private:
  bool SparseStepApplies(const LlamaLayer& layer, int batch) const;
  // --sparse teal: each of the n rows of x's gate dots, for every neuron,
  // from the columns of its kept entries (into given_gate_); null when the
  // step is not teal's (another mode, a dense step).
  const float* TealGateDots(const LlamaLayer& layer, int il, int n, const float* x,
                            ThreadPool* pool);
  // The dense FFN of `batch` rows already normed into x, added into h.
  void DenseNormed(const LlamaLayer& layer, int batch, const float* x, float* h, ThreadPool* pool,
                   const int32_t* run_length = nullptr);
  // Row b's candidates into cand_[b], cand_n_[b]: the predictor's (read
  // from row idx[b] of in) or all neurons, less the hot ones of a split.
  void SelectCandidates(int il, int n, const int* idx, const float* in, ThreadPool* pool);
  // The CPU's part of a sparse step for n rows: NeuronFfn over row b's
  // candidates ids[b][0..n_ids[b]) for its normed x (rows of x), added into
  // y's row b; sets the step's counters (and, one row, the observer's
  // activations).
  void LocalRows(int il, int n, const int32_t* const* ids, const int64_t* n_ids, const float* x,
                 float* y, ThreadPool* pool);
  // LocalRows, or with shards: the router's shares started, the rest
  // computed here, the shards' sums added.
  void ComputeRows(int il, int n, const int32_t* const* ids, const int64_t* n_ids, const float* x,
                   float* y, ThreadPool* pool);
  // The hot part of a split step of n rows on the hot shard, started
  // (`started`) or, with the shard lost, here; added into y's rows.
  void FinishHotShard(int il, int n, bool started, float* y, ThreadPool* pool);

  const LlamaModel* model_ = nullptr;
  LlamaConfig c_;
  SparseMode mode_ = SparseMode::kOff;
  bool dense_steps_ = false;  // SetDense
  int64_t last_hot_ = 0, last_cold_ = 0, last_gate_rows_ = 0;
  Predictor predictor_;
  float threshold_ = 0.0f;
  std::vector<float> gate_thresholds_;     // [n_layer] kCats' levels (empty: 0, every ReLU firing)
  std::vector<float> input_thresholds_;    // [n_layer] kTeal's FFN input levels (else empty)
  ColumnSparseProduct columns_;            // kTeal's gate products
  std::vector<float> given_gate_;          // [sparse rows, n_ff] their dots
  const float* step_gate_dots_ = nullptr;  // this step's given_gate_, or null
  DenseFfn dense_;
  NeuronFfn neurons_;
  int sparse_rows_ = 1;               // rows one sparse step takes (scratch, shards' messages)
  std::vector<int32_t> row_ids_;      // [sparse_rows, n_ff] rows' predicted candidates
  std::vector<const int32_t*> cand_;  // [sparse_rows] a step's rows' candidates
  std::vector<int64_t> cand_n_;
  std::vector<const int32_t*> fallback_ids_;  // [sparse_rows] the lost hot shard's rows, run here
  std::vector<int64_t> fallback_n_, fired_rows_;
  std::vector<int32_t> all_ids_;  // 0 .. n_ff - 1
  // The split (InitHotShard, InitColdPart): per layer the cold ids and a hot mask.
  std::vector<std::vector<int32_t>> cold_ids_;
  std::vector<std::vector<uint8_t>> is_hot_;
  std::vector<float> y_;      // [max_batch, n_embd] sparse rows' sums (copies of h rows)
  std::vector<float> y_hot_;  // [max_batch, n_embd] the hot part
  ShardRouter router_;        // the cold shards (InitColdShards)
  // The hot shard (InitHotShard): its owned() are the hot ids, computed here
  // while it is lost.
  Shard* hot_shard_ = nullptr;
  ShardHealth hot_health_;
  ShardEvents events_;  // over the hot and the cold shards

  std::vector<float> x_;    // [max_batch, n_embd]
  std::vector<float> act_;  // [n_ff] a single sparse row's activations, for the observer
  const float* activations_ = nullptr;
};

}  // namespace pi
