// Placement: what goes in VRAM under a byte budget (pi-place), and the plan
// file that records it. PowerInfer solves this with an ILP over 256-neuron
// buckets and reads its statistics in file order; this greedy scheme places
// the same kind of prefix without either.
//
// Stage 1, dense blocks, in priority order (each block whole or not at all):
//   1. output + output_norm (the LM head runs every token; when the output is
//      tied to token_embd the embedding matrix is counted, since the head
//      needs a GPU copy of it);
//   2. per layer, in layer order: attention (attn_norm, q, k, v, o, ffn_norm;
//      falcon: attn_norm + bias, attn_qkv, o, attn_norm_2 + bias when present)
//      together with its KV cache for n_ctx positions in the engine's row
//      types (f16 by default: n_ctx * n_head_kv * (key row + value row
//      bytes)) — attention runs where its cache is — then the predictor
//      (fc1 + fc2) when the model has one. So the layers whose attention is
//      on the GPU are always a prefix [0, k).
//   token_embd stays in host RAM (a row lookup per token).
//   The blocks are placed as a prefix of this order. When they do not all fit,
//   Place fails naming the bytes needed, unless allow_partial_dense is set; a
//   partial stage 1 places no neurons (as the original does).
// Stage 2, hot FFN neurons, with what is left. A neuron costs its gate row
//   (none in an ungated FFN: falcon) + its up row + its down row, at the
//   tensors' actual types: the down row is ffn_down_t's row i when present;
//   otherwise column i of ffn_down, costed as n_embd elements of ffn_down's
//   type (the GPU keeps it as a row of a transposed copy in the same type).
//   Each layer's neurons are sorted by firing count (most first, ties by id)
//   and cut into groups of `group` neurons (the last group of a layer may be
//   smaller). Groups are ranked over all layers by firings per byte (sum of
//   counts / group bytes; ties by layer then group) and placed as a prefix of
//   that ranking, stopping at the first group that does not fit. Because both
//   stages place prefixes of orders that do not depend on the budget, a larger
//   budget's placement contains every smaller budget's.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/base/status.h"
#include "common/model/llama_model.h"
#include "common/plan/activation_stats.h"

namespace pi {

struct PlacementOptions {
  int64_t vram_budget = 0;  // bytes
  int n_ctx = 0;            // positions of KV cache to reserve (> 0)
  // Neurons per placement group. 32 = one warp: a GPU kernel can give each
  // group whole warps with no ragged tail, while the rounding loss stays at
  // most 31 neurons per layer (the original's 256 came from its ILP solver's
  // size, not from the kernels).
  int group = 32;
  bool allow_partial_dense = false;
  // The KV cache's row types (EngineOptions::cache_type_k / _v): what the
  // reserved cache will really take.
  DType cache_type_k = DType::kF16;
  DType cache_type_v = DType::kF16;
  // Several devices (PlaceOnDevices, --gpus): each one's budget; empty: one
  // device of vram_budget.
  std::vector<int64_t> device_budgets;
};

struct LayerPlacement {
  bool attn_on_gpu = false;       // attn_norm, q, k, v, o, ffn_norm
  bool predictor_on_gpu = false;  // fc1, fc2 (false when the model has none)
  bool kv_on_gpu = false;
  std::vector<int32_t> gpu_neurons;  // sorted neuron ids
  int64_t neuron_bytes = 0;          // bytes of one neuron ([gate +] up + down row)
  double firing_share = 0;           // share of this layer's firings on the GPU
};

struct Placement {
  int64_t vram_budget = 0;
  int n_ctx = 0;
  DType cache_type_k = DType::kF16, cache_type_v = DType::kF16;
  int group = 0;
  int n_ff = 0;
  uint64_t model_fingerprint = 0;
  uint64_t stats_fingerprint = 0;  // StatsFingerprint()
  uint64_t stats_n_tokens = 0;
  bool output_on_gpu = false;
  bool dense_complete = false;  // every stage-1 block is on the GPU
  int64_t dense_bytes = 0;      // stage 1 bytes placed
  int64_t neuron_bytes = 0;     // stage 2 bytes placed
  std::vector<LayerPlacement> layers;
  // The devices (one, or PlaceOnDevices'): each one's budget (vram_budget is
  // their sum), how many of the GPU's layers each holds — consecutive
  // ranges, device 0 from layer 0 — and which holds the head (-1: none).
  std::vector<int64_t> device_budgets;
  std::vector<int32_t> device_layers;
  int output_device = -1;

  int64_t used_bytes() const { return dense_bytes + neuron_bytes; }
};

// Bytes of a layer's attention as the GPU holds it (attn_norm [+ b], q, k,
// v — falcon: attn_qkv —, o, and ffn_norm [+ b] when it is not attn_norm
// itself), and of its predictor (fc1 + fc2; 0 without one).
int64_t AttentionBytes(const LlamaLayer& layer);
int64_t PredictorBytes(const LlamaLayer& layer);
// Bytes of one FFN neuron of `layer` (see the header comment).
int64_t NeuronBytes(const LlamaModel& model, int layer);
// Bytes of the KV cache of one layer for opt.n_ctx positions in opt's types.
int64_t KvCacheBytes(const LlamaConfig& config, const PlacementOptions& opt);
// The share of `layer`'s recorded firings that `neurons` account for (0 when
// the layer has none recorded).
double FiringShare(const ActivationStats& stats, int layer, const std::vector<int32_t>& neurons);
// Bytes of the whole stage 1 (every dense block and the KV cache).
int64_t DenseBytes(const LlamaModel& model, const PlacementOptions& opt);

// Budgets that mark a model's regimes at opt's context and cache types:
// every dense block and the KV cache (stage 1 complete, no neuron); those
// and a quarter of the FFN's bytes (PowerInfer's regime, where the hot
// quarter serves most firings); everything. What pi-place prints, and the
// note of a budget below the dense blocks, to help pick --vram-budget.
struct RegimeBudgets {
  int64_t dense = 0, dense_and_quarter_ffn = 0, everything = 0;
};
RegimeBudgets GetRegimeBudgets(const LlamaModel& model, const PlacementOptions& opt);
// "dense blocks 1.65 GiB, with a quarter of the FFN 2.22 GiB, everything 3.92 GiB".
std::string RegimeBudgetsString(const RegimeBudgets& b);

// For a plan whose budget did not hold every dense block (!dense_complete):
// what it holds, of what the dense blocks need, and what to do — "a VRAM
// budget of 16.00 MiB holds the dense blocks of 2 of 6 layers and the output
// head (15.20 MiB of the 29.64 MiB they need: 31078400 bytes ...), no FFN
// neuron; raise --vram-budget for hot neurons or lower -c (at this context:
// dense blocks ..., with a quarter of the FFN ..., everything ...)".
std::string PartialDenseNote(const Placement& plan, const LlamaModel& model);

// FNV-1a 64 over n_layer, n_ff, n_tokens and every count (all as
// little-endian i64): identifies the statistics a plan was made from.
uint64_t StatsFingerprint(const ActivationStats& stats);

// Computes the placement. `stats` must match `model` (CheckStatsMatchModel).
Status Place(const LlamaModel& model, const ActivationStats& stats, const PlacementOptions& opt,
             Placement* out);

// The placement over several devices (opt.device_budgets, two or more; one
// is Place). The devices run in a chain (coordinator/route/device_chain.h): device
// k holds a range of layers — their attention, KV cache, predictor and hot
// neurons — after device k - 1's, so a layer costs one hand-off as with one
// GPU, and the head goes on the last device that holds it. Stage 1 splits
// the layers so that each device's share of their dense bytes follows its
// share of the budgets (each keeps room for hot neurons in proportion), or,
// when that does not place them all, fills the devices in order; when not
// every layer fits, the layers that do are placed and no neuron (as Place).
// Stage 2 runs on each device over its own layers' groups (ranked as in
// Place) with what that device has left. No device's bytes exceed its budget.
Status PlaceOnDevices(const LlamaModel& model, const ActivationStats& stats,
                      const PlacementOptions& opt, Placement* out);

// The bytes device k of `plan` holds (dense blocks, KV cache, hot neurons).
int64_t DeviceUsedBytes(const Placement& plan, const LlamaModel& model, int k);

// The plan file: a small GGUF.
//   pi.plan.version            u32     4 (3, one device, is read too)
//   pi.plan.cache_type_k, pi.plan.cache_type_v   u32   ggml type ids of the KV rows
//   pi.plan.vram_budget        u64     bytes
//   pi.plan.n_ctx, pi.plan.group, pi.plan.n_layer, pi.plan.n_ff   u32
//   pi.plan.model_fingerprint  string  16 hex digits (ModelFingerprint)
//   pi.plan.stats_fingerprint  string  16 hex digits (StatsFingerprint)
//   pi.plan.stats_n_tokens     u64
//   pi.plan.output_on_gpu, pi.plan.dense_complete   bool
//   pi.plan.attn_on_gpu, pi.plan.predictor_on_gpu, pi.plan.kv_on_gpu
//                              array of u8 (0/1), one per layer
//   pi.plan.gpu_neuron_count   array of i32, one per layer
//   pi.plan.dense_bytes, pi.plan.neuron_bytes   u64
//   pi.plan.device_budgets     array of u64, one per device
//   pi.plan.device_layers      array of u32, one per device (their sum: the
//                              layers with attention on a GPU)
//   pi.plan.output_device      i32     the device holding the head, or -1
//   blk.N.gpu_neurons          I32 [count], sorted ids; only for count > 0
//                              (a GGUF tensor cannot be empty)
Status WritePlan(const Placement& plan, const std::string& path);
// Reads and validates a plan (ids sorted, unique, in range, counts match).
// Per-layer neuron_bytes and firing_share are not stored (left 0).
Status ReadPlan(const std::string& path, Placement* plan);
Status ReadPlan(const GgufFile& file, Placement* plan);

// Fails, naming what differs, when `plan` was not made for this model, these
// stats, this budget, context and group: a plan is never silently reused.
Status CheckPlanMatches(const Placement& plan, const LlamaModel& model,
                        const ActivationStats& stats, const PlacementOptions& opt);

// "11G", "512M", "64K" when exact, else the byte count: for file names.
std::string BudgetString(int64_t bytes);

// Where a plan for these keys is cached: the model's stem plus
// ".plan-<budget>-c<n_ctx>-<ctk>-<ctv>-g<gpus>.gguf" (every key a plan is
// made for, so tools planning for other contexts or cache types do not
// overwrite each other's), beside the model or, where its folder cannot be
// written, in the cache (common/format/side_files.h).
std::string DefaultPlanPath(const std::string& model_path, int64_t budget, int n_ctx,
                            DType cache_type_k, DType cache_type_v, int n_gpus = 1);

}  // namespace pi
