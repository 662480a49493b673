// The time model of a hybrid decode step: the
// bytes one decoded token makes each device read, and the time those bytes
// take at each device's measured bandwidth. pi-bench prints both beside the
// measured speed, so a report says how far a run is from what its placement
// allows.
//
// Who reads what, per decoded token, under a placement plan (the GPU
// execution path's semantics; without a plan everything is the CPU's):
//   - A layer with attn_on_gpu keeps its KV cache in VRAM too. Its attention
//     weights (attn_norm [+ b], wq, wk, wv — falcon: attn_qkv —, wo, and
//     ffn_norm [+ b] when it is not attn_norm itself) and its KV cache, read
//     up to the current depth, are GPU bytes; so is its predictor (fc1 + fc2)
//     when predictor_on_gpu and the mode is kPredictor. Every other layer's
//     attention, KV cache and predictor are CPU bytes.
//   - Hot neurons are the plan's gpu_neurons of the layers whose attention is
//     on the GPU (elsewhere a layer's FFN is all the CPU's). The GPU reads the
//     deciding row (gate; up in an ungated FFN such as falcon's) of every hot
//     neuron and the remaining rows (up when gated, down_t) of the hot
//     neurons that fired. The CPU reads the deciding rows of its candidates
//     and the remaining rows of those that fired. The engine's counters give
//     the totals: Engine::last_ffn_gate_rows() (hot rows included),
//     last_ffn_neurons() (fired, or all when dense) and last_ffn_hot_fired().
//   - output_norm [+ b] and output: the GPU's when output_on_gpu. The token
//     embedding row: the CPU's.
//   - Transfers: per layer with attn_on_gpu and a cold part (fewer than n_ff
//     hot neurons), the normed x down and the cold partial y up (4 n_embd
//     bytes each, f32), plus in kPredictor mode the predicted set down as a
//     bitmask of n_ff bits. Along the token's path — embedding row (CPU),
//     layers 0 .. n_layer-1 (each on its attention's device), head, sampling
//     (CPU) — every change of device moves one vector: the embedding row or
//     the residual h (4 n_embd bytes), and after a head on the GPU the logits
//     (4 n_vocab). For Place's plans (output first, then a prefix of the
//     layers) that is: the embedding up and the logits down once some layer
//     is on the GPU, and h down then up again when CPU layers follow GPU ones.
//
// Several devices chained by layer (--gpus) count as one GPU: their layers
// run one after the other, each at one device's bandwidth, and the residual
// row handed from one to the next (4 n_embd bytes each way) is left out.
//
// FFN rows are costed at layer 0's row sizes: the counters are sums over the
// layers, and every tool here writes one type for all FFN matrices.
#pragma once

#include <cstdint>
#include <string>

#include "common/compute/sparse_mode.h"
#include "common/model/llama_model.h"
#include "common/plan/placement.h"

namespace pi {

// What a tg measurement ran and counted: `reps` runs of `n_gen` single-token
// steps, each from an empty context, with the engine's FFN counters summed
// over all reps * n_gen steps.
struct DecodeCounters {
  SparseMode mode = SparseMode::kOff;
  int n_gen = 0;
  int reps = 0;
  int64_t kv_cache_bytes = 0;  // Engine::kv_cache_bytes(): all layers, n_ctx positions
  int n_ctx = 0;               // Engine::n_ctx()
  double ffn_neurons = 0;      // sum of Engine::last_ffn_neurons()
  double gate_rows = 0;        // sum of Engine::last_ffn_gate_rows()
  double hot_fired = 0;        // sum of Engine::last_ffn_hot_fired()
  // --sparse teal: the share of the thresholded inputs' entries read
  // (Engine::input_kept_share()); the attention matrices and the gate read
  // that share of their rows (of their transposed copies).
  double input_kept_share = 1;
};

// Weight and KV cache bytes one decode step reads, whatever device reads
// them: every matrix once, less the FFN rows sparse steps skip (the up and
// down rows of silent neurons, the gate rows of neurons no one asked for),
// plus the predictor in predictor mode, plus the KV cache read at the run's
// average depth, (n_gen + 1) / 2 positions.
double DecodeBytesPerToken(const LlamaModel& model, const DecodeCounters& counters);

// Bytes per decoded token by device (see the header comment). gpu + cpu is
// always DecodeBytesPerToken; xfer is extra: what crosses the CPU-GPU link.
struct DeviceBytes {
  double gpu = 0;
  double cpu = 0;
  double xfer = 0;
};

// `plan` may be null: no split, every byte is the CPU's and nothing moves.
// Layers the plan does not list run on the CPU.
DeviceBytes DecodeDeviceBytes(const LlamaModel& model, const Placement* plan,
                              const DecodeCounters& counters);

// The lower bound on a token's time: the GPU and the CPU read their bytes at
// the same time, and the transfers add to that (they sit on the dependency
// chain between the two), so
//   seconds = max(gpu / gpu_bw, cpu / cpu_bw) + xfer / link.
// Bandwidths in GB/s (1e9 bytes/s). A device with bytes but no bandwidth
// (0: not measured, or no GPU) makes the bound not computable; a link of 0
// means unknown: the transfer time is left out and `note` says so.
struct TimeBound {
  bool computable = false;
  double seconds = 0;
  bool includes_transfers = false;
  std::string note;  // why not computable, or what was left out; "" otherwise
};
TimeBound ComputeTimeBound(const DeviceBytes& bytes, double gpu_bw_gbs, double cpu_bw_gbs,
                           double link_gbs);

// FNV-1a 64 of `bytes` as 16 lowercase hex digits: names the exact plan file
// a report's per-device bytes were computed from.
std::string Fnv1a64Hex(const std::string& bytes);

}  // namespace pi
