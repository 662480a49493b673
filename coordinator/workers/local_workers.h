// How cold neurons are shared among cpu_workers: the neurons that are not
// hot (on the GPU, or the host backend standing in for it) split across N
// workers, interleaved by neuron index so each gets a like share of the
// firing (pi-run, pi-launch and pi-bench start the workers with these
// shards; they become the engine's EngineOptions::cold_shards).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common/base/status.h"
#include "common/model/llama_model.h"
#include "coordinator/engine/engine.h"

namespace pi {

// The hot neurons of each layer as `options` places them: the split's hot
// sets, the device plan's, or none.
std::vector<std::vector<int32_t>> HotNeuronSets(const LlamaModel& model,
                                                const EngineOptions& options);

// An error saying why, unless the model's FFN can be split off to cpu
// workers (SupportsNeuronSplit; gate_thresholds: under --sparse cats).
Status CheckCpuWorkersPossible(const LlamaModel& model, bool gate_thresholds = false);

// The neurons that are not hot, in each layer, split across n workers by
// index (neuron i of the non-hot ones to worker i mod n): [n][n_layer] ids.
// With coordinator_share F in [0, 1), an evenly spread fraction F of them
// is left to no worker: the coordinator computes those itself, while the
// workers compute theirs (FfnBlock's neurons no shard owns), so its threads
// work instead of waiting.
std::vector<std::vector<std::vector<int32_t>>> SplitColdNeurons(const LlamaModel& model,
                                                                const EngineOptions& options, int n,
                                                                double coordinator_share = 0.0);

}  // namespace pi
