// Topology: which worker processes a system runs, where and over what — the
// flag-free description pi-run, pi-launch and pi-bench fill from their flags
// (cli/engine_flags.h) — and the workers it starts: a pi-gpu-worker for the
// GPU's share of a plan (its hot neurons, or whole layers: one per device,
// chained), local pi-cpu-workers over shared memory and remote ones over
// gRPC for the cold neurons, split across all of them. Each worker is a
// handle of coordinator/workers/ (RemoteShard, DeviceWorker) over a
// WorkerLink; the engine takes them through its EngineOptions.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common/base/status.h"
#include "common/model/llama_model.h"
#include "common/shard/device_backend.h"
#include "coordinator/engine/engine.h"
#include "coordinator/route/device_chain.h"
#include "coordinator/workers/device_worker.h"
#include "coordinator/workers/remote_shard.h"

namespace pi {

// What the plan gives a GPU on the device path (the placement's, cli/gpu_split.h):
// a device per entry, the plan each holds, its backend (cuda | host; auto for
// a remote worker) and the GPU its worker process sees (CUDA_VISIBLE_DEVICES;
// empty: inherited).
struct DevicePlans {
  std::vector<DevicePlan> plans;
  std::vector<std::string> kinds, cuda_devices;
};

// The remote workers' shared token and TLS files' contents.
struct RemoteSecrets {
  std::string token, tls_ca, tls_cert, tls_key;
};

struct Topology {
  std::string model_path;        // the file every worker maps
  std::string ffn_activation;    // --ffn-activation: local workers run the FFN as this process does
  int n_threads = 1;             // this process's (local cpu workers share them)
  int max_batch = 1;             // rows a worker step carries
  int worker_timeout_ms = 1000;  // a step not answered by then: the worker is lost
  // The fraction of the cold neurons this process computes itself while the
  // cpu workers compute theirs (local_workers.h's SplitColdNeurons).
  double coordinator_share = 0.0;
  int cpu_workers = 0;                      // local pi-cpu-worker processes
  std::vector<std::string> remote_workers;  // pi-cpu-worker --listen addresses (gRPC builds)
  std::string ffn_backend = "auto";         // the local gpu worker's --ffn-backend (hot neurons)
  std::string remote_gpu_worker;            // a pi-gpu-worker --listen for the devices' layers
  RemoteSecrets secrets;
};

struct Workers {
  std::unique_ptr<RemoteShard> gpu_worker;  // the hot neurons' process, if any
  // Or the devices' processes (whole layers), chained when several.
  std::vector<std::unique_ptr<DeviceWorker>> devices;
  std::unique_ptr<DeviceChain> chain;
  std::vector<std::unique_ptr<RemoteShard>> cold;  // local ones first, then remote

  // What the engine drives: the chain, the one device worker, or null.
  DeviceBackend* device() const {
    return chain             ? static_cast<DeviceBackend*>(chain.get())
           : devices.empty() ? nullptr
                             : devices[0].get();
  }
};

// A pi-gpu-worker per device of `plans` (one remote one with
// t.remote_gpu_worker), chained when several; says what each holds on
// stderr, prefixed with `tool`.
Status StartDeviceWorkers(const char* tool, const Topology& t, const LlamaModel& model,
                          const DevicePlans& plans, Workers* out);

// A pi-gpu-worker holding the hot neurons `hot` (its --ffn-backend: t.ffn_backend),
// with --sparse cats' gate thresholds (one per layer, or none), taking the
// host's gate dots (gate_dots: --sparse teal).
Status StartGpuWorker(const char* tool, const Topology& t, const LlamaModel& model,
                      const std::vector<std::vector<int32_t>>& hot,
                      const std::vector<float>& gate_thresholds, bool gate_dots, Workers* out);

// The local cpu workers and the remote ones, the neurons `engine` leaves
// cold split across all of them (and this process, t.coordinator_share),
// with its gate thresholds (--sparse cats) and, under --sparse teal, taking
// its gate dots.

Status StartColdWorkers(const char* tool, const Topology& t, const LlamaModel& model,
                        const EngineOptions& engine, Workers* out);

// Stops every worker (after the engine is done with them); reports one that
// did not stop cleanly unless `engine` already reported failures.
void StopWorkers(const char* tool, const Engine* engine, Workers* workers);

}  // namespace pi
