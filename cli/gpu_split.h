// The placement flags shared by pi-run, pi-bench and pi-perplexity:
//   --vram-budget SIZE   split every FFN: the plan's hot neurons on the
//                        gpu_worker backend, the cold rest on the CPU
//   --stats FILE         activation statistics (default <model>.stats.gguf)
//   --reset-gpu-index    recompute the plan even if a matching one is cached
//   --disable-gpu-index  no FFN split: every neuron on the CPU
//   --ffn-backend KIND   where the hot neurons run: auto (CUDA when built
//                        with it and a GPU is present, else host), cuda, host
//   --host-device        no GPU: the GPU's share (whole layers) on the host
//                        device backend, as a GPU would run it
//   --gpus LIST          several devices chained by layer range, each with
//                        its layers' hot neurons (PlaceOnDevices)
// As in PowerInfer, the plan is cached next to the model
// (<model>.plan-<budget>.gguf) and reused only when it matches the model,
// the statistics, the budget and the context (pi-place writes the same file).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "cli/args.h"
#include "common/model/llama_model.h"
#include "common/plan/placement.h"
#include "common/shard/device_backend.h"
#include "common/shard/shard.h"
#include "coordinator/engine/engine.h"
#include "coordinator/route/device_chain.h"
#include "coordinator/topology/topology.h"

namespace pi {

struct GpuSplitFlags {
  // Bytes; -1: no split; ArgReader::kVramBudgetAuto: the device's free
  // memory less a margin (SetUpGpuSplit resolves it and says what it took).
  int64_t vram_budget = -1;
  // --vram-budget's list (vram_budget is its first): with --gpus, one per
  // device, or one for each.
  std::vector<int64_t> vram_budgets;
  // --gpus: the devices of a chain (coordinator/route/device_chain.h), in layer
  // order — CUDA device numbers (each gpu_worker process sees only its own:
  // CUDA_VISIBLE_DEVICES) or "host" (a host-backend worker standing in for
  // a GPU). Empty: one device, as without the flag.
  std::vector<std::string> gpus;
  std::string stats_path;
  std::string plan_path;  // --plan FILE; empty: DefaultPlanPath (placement.h)
  bool reset = false;
  bool disable = false;
  std::string ffn_backend = "auto";  // auto | cuda | host
  // The device path without a GPU: whole layers (attention, KV cache,
  // predictor, hot neurons, head) on HostDeviceBackend, the CPU standing in
  // for the GPU — the reference for the GPU path and its test here.
  bool host_device = false;
  // What the plan gives the GPU goes to a gpu_worker process (pi-launch;
  // pi-run --gpu-worker): nothing is loaded here, only the plan — the hot
  // sets (GpuSplit::hot), or on the device path the DevicePlans
  // (GpuSplit::devices); the caller starts the worker.
  bool hot_in_worker = false;
  // The gpu_worker is remote (--remote-gpu-worker): the device path whatever
  // this machine has (the worker reports its backend); implies hot_in_worker.
  bool remote_device = false;
};

// Consumes `flag` (already read by args.Next()) when it is one of the above.
bool ParseGpuSplitFlag(const std::string& flag, ArgReader* args, GpuSplitFlags* flags);
extern const char kGpuSplitUsage[];

// The split, when asked for: owns the backend and the hot sets the engine
// options point to.
struct GpuSplit {
  std::unique_ptr<Shard> hot_shard;       // the host's hot neurons (HostHotShard)
  std::unique_ptr<DeviceBackend> device;  // a GPU: a prefix of the layers and the head
  std::vector<std::vector<int32_t>> hot;
  // The device path, a device per entry (one without --gpus).
  DevicePlans devices;
  // The devices are for gpu_worker processes (hot_in_worker): nothing loaded
  // here; the caller starts a worker per plan (and chains several).
  bool device_in_worker = false;
  // --gpus in this process: the devices and their chain (options->device).
  std::vector<std::unique_ptr<DeviceBackend>> members;
  std::unique_ptr<DeviceChain> chain;
  Placement plan;            // the plan in use (read or made)
  std::string plan_path;     // where it is cached
  int64_t vram_budget = -1;  // the budget in bytes (auto resolved); -1: no split
};

// Loads or makes the plan, loads the backend and points `options` at it;
// prints what it did (which backend, what went where, plan reused or
// written) to stderr. Does nothing without --vram-budget or with
// --disable-gpu-index.
//
// A budget below the dense blocks holds what fits — the dense blocks of a
// prefix of the layers (on a GPU those layers run on the device, the rest on
// the CPU: options->device), no FFN neuron — and says so, as the original
// offloads what fits instead of failing.
// With options->sparse == kPredictor the device evaluates the predictors of
// its layers (at options->sparse_threshold, resolved as the engine does).
Status SetUpGpuSplit(const char* tool, const std::string& model_path, const LlamaModel& model,
                     const GpuSplitFlags& flags, int n_ctx, GpuSplit* split,
                     EngineOptions* options);

}  // namespace pi
