// NeuronFfn: the FFN restricted to a set of neurons, computed neuron by
// neuron — the unit the hot/cold split works in. For neurons `ids` of a
// layer whose rows are gate [n, n_embd], up [n, n_embd] and down_t
// [n, n_embd] (PowerInfer's transposed down: row i = neuron i's outputs):
//
//   y += sum_{i in ids, |a_i| > t} a_i * up_i·x * down_t[i],   a_i = act(gate_i·x)
//                                            (drelu: times relu(up_i·x) instead;
//                                            ungated: a_i = act(up_i·x) alone,
//                                            and `gate` is not read)
//
// A neuron whose activated gate does not pass costs one gate row and nothing
// else. With t = 0 and a ReLU form (silent: relu(gate) = 0) over all neurons
// this is the oracle form of sparsity (exact); over a predictor's ids, the
// predicted neurons that really fire; with CATS' calibrated t over all the
// neurons of a SiLU or GELU model, the ones whose gate is far enough from
// zero (NeuronRows::threshold). Every sparse FFN step runs
// through here: FfnBlock's oracle and predictor steps, the cold part of the
// hot/cold split, and HostHotShard's hot part. The gate products are cut
// as finely as the pool is wide (each lands in its own slot); the neurons
// that passed are cut into a fixed number of chunks, each summed into its
// own partial vector and reduced in order, so the result does not depend on
// the thread count. Allocation-free once Init has sized the scratch.
//
// Several rows (continuous batching: one decode token of each of several
// sequences) each have their own candidates and their own fired neurons;
// AccumulateRows walks the union of their neurons in id order, so a neuron
// that several rows need has its rows read from memory once for all of them,
// while each row's sum is formed exactly as Accumulate forms it alone (the
// same dots, the same chunks, each summed in the same order): bit-identical.
#pragma once

#include <cstdint>
#include <vector>

#include "common/base/thread_pool.h"
#include "common/model/llama_model.h"

namespace pi {

// The three row sets of a neuron subset, possibly gathered into compact
// matrices (then ids index the compact rows). Ids must be unique and below
// n_ff (the scratch is indexed by id).
struct NeuronRows {
  const Tensor* gate;    // rows = neurons, cols = n_embd (ungated: an absent tensor)
  const Tensor* up;      // rows = neurons, cols = n_embd
  const Tensor* down_t;  // rows = neurons, cols = n_embd
  // A candidate passes when |act(its deciding dot)| > threshold (>= 0). 0
  // keeps every neuron a ReLU form fires — exact — and every SiLU or GELU
  // neuron; CATS' per-layer level (gate_thresholds.h) skips the neurons whose
  // activated gate is near zero, and their up and down rows with them.
  float threshold = 0.0f;
  // Given: the deciding dots of every neuron, [batch][n_ff] (--sparse teal
  // computes the gate column-sparsely), read instead of the gate rows.
  const float* gate_dots = nullptr;
};

// Wall time of NeuronFfn's phases, summed over its calls (as the calling
// thread sees them: a parallel phase ends when its last chunk does). Where a
// sparse step's CPU time goes — on a many-core host, how much of it is the
// fixed cost of a phase rather than its bytes.
struct NeuronFfnTimes {
  double prepare = 0;  // the input quantized for the dots
  double gate = 0;     // every candidate's deciding dot
  double select = 0;   // the neurons that passed listed
  double up_down = 0;  // their up dots and down_t rows
  double sum = 0;      // the partial vectors added into y
  int64_t calls = 0;
};

struct PreparedInput;  // common/compute/parallel_matmul.h

class NeuronFfn {
 public:
  // The most rows one AccumulateRows call takes (its scratch grows with it).
  static constexpr int kMaxRows = 16;

  // Sizes the scratch for calls of up to max_rows rows (1 .. kMaxRows).
  void Init(const LlamaConfig& config, int max_rows = 1);

  // y[0..n_embd) += the FFN partial of neurons ids[0..n) for the normed input
  // x (f32, n_embd), using `pool`. Returns the number of neurons that fired.
  // If `act` is given ([n_ff], by id), act[i] is set for every computed
  // neuron i that passed the gate (the caller zeroes the rest).
  int64_t Accumulate(const NeuronRows& rows, const int32_t* ids, int64_t n, const float* x,
                     float* y, ThreadPool* pool, float* act = nullptr) {
    int64_t fired = 0;
    AccumulateRows(rows, 1, &ids, &n, x, y, pool, &fired, act);
    return fired;
  }

  // The same for `batch` rows (in groups of Init's max_rows): row b adds the
  // partial of its candidates ids[b][0..n[b]) — sorted ascending — for input
  // x[b * n_embd ..] into y[b * n_embd ..]; fired[b] = its neurons that
  // fired; act (optional, [batch, n_ff]) as above per row. Each row's result
  // equals Accumulate's for that row alone, bit for bit.
  void AccumulateRows(const NeuronRows& rows, int batch, const int32_t* const* ids,
                      const int64_t* n, const float* x, float* y, ThreadPool* pool, int64_t* fired,
                      float* act = nullptr);

  // The phases' times since Init.
  const NeuronFfnTimes& times() const { return times_; }

 private:
  // Chunks of the up/down phase: enough for a 16-core host's threads; their
  // partial vectors are added at the end in chunk order (kChunks x n_embd
  // adds, the columns split among the threads: on many cores one thread
  // doing them all would be the step's serial tail).
  static constexpr int kChunks = 16;
  // The sorted union of `batch` sorted id lists into `out`; returns its size.
  int64_t Union(int batch, const int32_t* const* lists, const int64_t* n, int32_t* out);
  // AccumulateRows' phases. 1: the deciding dot (gate, or up when ungated)
  // of every row's candidates, into gate_dots_ (batch 1: also each chunk's
  // passing candidates into active_).
  struct GateCut {
    int64_t n_all = 0;   // candidates over all rows (their union)
    int64_t chunks = 0;  // the tasks they were cut into
  };
  // `given`: gate_dots_ already holds the dots (NeuronRows::gate_dots); only
  // the passing is done.
  GateCut GateDots(const Tensor* first, float threshold, bool given, int batch,
                   const int32_t* const* ids, const int64_t* n, const PreparedInput& in,
                   ThreadPool* pool);
  // 2a: each row's passing neurons into active_ / n_active_; returns the bytes
  // of up and down_t rows they read.
  int64_t SelectActive(const NeuronRows& rows, int batch, const int32_t* const* ids,
                       const int64_t* n, GateCut cut);
  // 2b: up and down for the active neurons, kChunks partial sums per row.
  void UpDownChunks(const NeuronRows& rows, int batch, const PreparedInput& in, bool small,
                    ThreadPool* pool, float* act_out);
  // 3: the partial sums added into y in chunk order.
  void SumPartials(int batch, float* y, bool small, ThreadPool* pool);
  // act() of the deciding dots of candidates ids[0..n) in place
  // (ActivatedGate), and those that pass `t` into out, in order; returns how
  // many.
  int64_t PassGate(float* dots, const int32_t* ids, int64_t n, float t, int32_t* out) const;
  // Row b's up dots, activations and down_t axpy for its active neurons at
  // positions [p0, p1), into its chunk k's partial sum.
  void UpDown(const NeuronRows& rows, int b, int k, int64_t p0, int64_t p1, const void* x_up,
              float* act_out);

  LlamaConfig c_;
  int max_rows_ = 0;
  bool gated_ = true, drelu_ = false;
  std::vector<uint8_t> q8_;            // [max_rows] x prepared as Q8_0
  std::vector<float> gate_dots_;       // [max_rows][n_ff] by row id: the dots, then act() of them
  std::vector<float> up_dots_;         // [max_rows][n_ff] by row id
  std::vector<int32_t> active_;        // [max_rows][n_ff] ids whose gate fired, in candidate order
  std::vector<int64_t> n_active_;      // [max_rows]
  std::vector<float> act_;             // [max_rows][n_ff] their activations
  std::vector<float> partial_;         // [max_rows][kChunks][n_embd]
  std::vector<int64_t> fired_;         // [max_rows][kChunks]
  std::vector<int32_t> union_;         // [n_ff] the rows' candidates or active neurons, merged
  std::vector<uint8_t> marks_;         // [n_ff] zero between calls (Union)
  std::vector<int64_t> chunk_active_;  // [gate chunks] one row's gate-passing count per chunk
  NeuronFfnTimes times_;
};

}  // namespace pi
