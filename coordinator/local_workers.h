// Local cpu_workers for an engine: the neurons that are not hot (on the GPU,
// or the host backend standing in for it) split across N pi-cpu-worker
// processes over shared memory, interleaved by neuron index so each gets a
// like share of the firing. The workers become the engine's cold shards
// (EngineOptions::cold_shards). pi-run's --cpu-workers uses it; pi-launch
// will too.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common/llama_model.h"
#include "common/status.h"
#include "coordinator/engine.h"
#include "coordinator/shm_worker.h"

namespace pi {

// The hot neurons of each layer as `options` places them: the split's hot
// sets, the device plan's, or none.
std::vector<std::vector<int32_t>> HotNeuronSets(const LlamaModel& model,
                                                const EngineOptions& options);

// An error saying why, unless the model's FFN can be split off to cpu
// workers (SupportsSparseFfn).
Status CheckCpuWorkersPossible(const LlamaModel& model);

// The neurons that are not hot, in each layer, split across n workers by
// index (neuron i of the non-hot ones to worker i mod n): [n][n_layer] ids.
std::vector<std::vector<std::vector<int32_t>>> SplitColdNeurons(const LlamaModel& model,
                                                                const EngineOptions& options,
                                                                int n);

// Starts `n` workers (binary: pi-cpu-worker) for the model at model_path,
// each with `threads` threads, owning every n-th non-hot neuron; adds them
// to options->cold_shards. The model must support sparse FFNs.
Status StartLocalCpuWorkers(const std::string& binary, const std::string& model_path,
                            const LlamaModel& model, int n, int threads, EngineOptions* options,
                            std::vector<std::unique_ptr<ShmWorker>>* workers);

}  // namespace pi
