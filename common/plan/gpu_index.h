// GpuIndex: PowerInfer's cached neuron placement, `<model>.generated.gpuidx`
// (PowerInfer's format), read and written so that a placement
// can be handed to the original engine and back.
//
// The file is GGUF v3 with the "PWRI" magic and exactly:
//   general.architecture             string  "generic.gpu_index"
//   generic.gpu_index.block_count    u32     n_layer
//   split.vram_capacity              u64     the budget it was solved for
//   tensors, in this order (the original's loader indexes 2i and 2i+1):
//     blk.i.gpu_idx     I32 [n_ff]  1 when neuron j is on the GPU, else 0
//     blk.i.gpu_bucket  I32 [k_i]   the sorted ids of the GPU neurons
//   (k_i may be 0: an empty tensor, ne = [0], with no data.)
// Read through GgufFile and written through GgufWriter.
// Unlike the original, whoever reads one must check split.vram_capacity
// against its own budget: an index for another budget is never reused.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/base/status.h"
#include "common/plan/placement.h"

namespace pi {

struct GpuIndex {
  uint64_t vram_capacity = 0;                     // bytes
  int n_ff = 0;                                   // neurons per layer
  std::vector<std::vector<int32_t>> gpu_neurons;  // per layer, sorted ids
};

// The hot neurons of `plan` (its budget as the capacity).
GpuIndex GpuIndexFromPlacement(const Placement& plan);

// Fails on ids out of range / unsorted / duplicated, or n_ff < 1.
Status WriteGpuIndex(const GpuIndex& index, const std::string& path);
// Reads and validates: architecture, keys, tensor count, names and order,
// shapes, gpu_idx values 0/1 and gpu_bucket equal to the ids where gpu_idx is
// 1. Errors name the file and the key or tensor.
Status ReadGpuIndex(const std::string& path, GpuIndex* index);
Status ReadGpuIndex(const GgufFile& file, GpuIndex* index);

// The original's use of a cached index: `plan` (made by Place for the same
// budget) takes the index's hot neurons instead of its own — when the index
// is for this budget and model shape, the plan holds every dense block, and
// the neurons fit what the dense blocks leave; otherwise an error saying
// which, and `plan` is unchanged.
Status ApplyGpuIndex(const GpuIndex& index, const LlamaModel& model, const ActivationStats& stats,
                     Placement* plan);

}  // namespace pi
