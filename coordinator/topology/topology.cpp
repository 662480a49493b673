#include "coordinator/topology/topology.h"

#include <algorithm>
#include <cstdio>

#include "common/base/executable_path.h"
#include "coordinator/workers/local_workers.h"
#ifdef PI_HAVE_GRPC
#include "coordinator/workers/grpc_link.h"
#endif

namespace pi {

namespace {

// A local worker runs the FFN as this process does.
void AddActivationArg(const Topology& t, std::vector<std::string>* args) {
  if (!t.ffn_activation.empty()) args->insert(args->end(), {"--ffn-activation", t.ffn_activation});
}

// A worker shard's steps: their rows and deadline.
RemoteShardOptions ShardOptions(const Topology& t) {
  RemoteShardOptions o;
  o.max_batch = t.max_batch;
  o.step_timeout_ms = t.worker_timeout_ms;
  return o;
}

WorkerProcessOptions GpuWorkerProcess(const Topology& t) {
  WorkerProcessOptions o;
  o.binary = PathNextToExecutable("pi-gpu-worker");
  o.role = "gpu worker";
  o.model_path = t.model_path;
  AddActivationArg(t, &o.extra_args);
  return o;
}

#ifdef PI_HAVE_GRPC
// A remote worker at `address` with the topology's token and TLS.
GrpcLinkOptions RemoteLink(const Topology& t, const std::string& address, const char* role) {
  GrpcLinkOptions o;
  o.address = address;
  o.role = role;
  o.auth_token = t.secrets.token;
  o.tls_ca = t.secrets.tls_ca;
  o.tls_cert = t.secrets.tls_cert;
  o.tls_key = t.secrets.tls_key;
  return o;
}
#endif

// The device workers' processes (or the remote one), loaded with their plans.
Status OpenDeviceWorkers(const Topology& t, const LlamaModel& model, const DevicePlans& plans,
                         Workers* out) {
  if (!t.remote_gpu_worker.empty()) {
#ifdef PI_HAVE_GRPC
    GrpcLinkOptions o = RemoteLink(t, t.remote_gpu_worker, "gpu worker");
    // Its hello once reached: it loads the plan onto the GPU first (a
    // restarted worker's weights may take a while; the request waits).
    o.hello_timeout_ms = 600000;
    auto w = std::make_unique<DeviceWorker>(NewGrpcLink(o), t.worker_timeout_ms);
    PI_RETURN_IF_ERROR(w->Load(model, plans.plans[0]));
    out->devices.push_back(std::move(w));
    return Status::Ok();
#else
    return Status::Unsupported("--remote-gpu-worker needs a build with gRPC (PI_GRPC)");
#endif
  }
  for (size_t k = 0; k < plans.plans.size(); ++k) {
    DeviceWorkerOptions o;
    o.process = GpuWorkerProcess(t);
    o.process.n_threads = t.n_threads;  // the host backend's; a GPU needs one
    o.process.extra_args.insert(o.process.extra_args.begin(), {"--ffn-backend", plans.kinds[k]});
    if (!plans.cuda_devices[k].empty()) {
      o.process.env.push_back("CUDA_VISIBLE_DEVICES=" + plans.cuda_devices[k]);
    }
    o.step_timeout_ms = t.worker_timeout_ms;
    auto w = std::make_unique<DeviceWorker>(o);
    PI_RETURN_IF_ERROR(w->Load(model, plans.plans[k]));
    out->devices.push_back(std::move(w));
  }
  return Status::Ok();
}

}  // namespace

Status StartDeviceWorkers(const char* tool, const Topology& t, const LlamaModel& model,
                          const DevicePlans& plans, Workers* out) {
  PI_RETURN_IF_ERROR(OpenDeviceWorkers(t, model, plans, out));
  if (out->devices.size() > 1) {
    std::vector<DeviceBackend*> members;
    for (const auto& w : out->devices) members.push_back(w.get());
    out->chain = std::make_unique<DeviceChain>();
    PI_RETURN_IF_ERROR(out->chain->Init(model, members));
  }
  if (!tool) return Status::Ok();
  for (const auto& w : out->devices) {
    const DevicePlan& p = w->plan();
    const std::string layers =
        p.n_layers > p.first_layer
            ? "layers " + std::to_string(p.first_layer) + ".." + std::to_string(p.n_layers - 1)
            : std::string("the head alone");
    fprintf(stderr, "%s: %s (%s): %s backend, %s: %.1f MiB of layers, KV cache and hot neurons\n",
            tool, w->name(), w->transport(), w->backend().c_str(), layers.c_str(),
            w->resident_bytes() / 1048576.0);
  }
  return Status::Ok();
}

Status StartGpuWorker(const char* tool, const Topology& t, const LlamaModel& model,
                      const std::vector<std::vector<int32_t>>& hot,
                      const std::vector<float>& gate_thresholds, bool gate_dots, Workers* out) {
  WorkerProcessOptions o = GpuWorkerProcess(t);
  o.extra_args.insert(o.extra_args.begin(), {"--ffn-backend", t.ffn_backend});
  auto w = std::make_unique<RemoteShard>(NewShmLink(o), ShardOptions(t));
  PI_RETURN_IF_ERROR(w->Open(model, hot, gate_thresholds, gate_dots));
  if (tool) {
    fprintf(stderr, "%s: %s (shm): %s backend, %.1f MiB of hot neurons, %lld neurons\n", tool,
            w->name(), w->backend(), w->resident_bytes() / 1048576.0,
            static_cast<long long>(w->neurons()));
  }
  out->gpu_worker = std::move(w);
  return Status::Ok();
}

Status StartColdWorkers(const char* tool, const Topology& t, const LlamaModel& model,
                        const EngineOptions& engine, Workers* out) {
  const int n_local = t.cpu_workers, n_remote = static_cast<int>(t.remote_workers.size());
  if (n_local + n_remote == 0) return Status::Ok();
  PI_RETURN_IF_ERROR(CheckCpuWorkersPossible(model, !engine.gate_thresholds.empty()));
#ifndef PI_HAVE_GRPC
  if (n_remote > 0) {
    return Status::Unsupported("--cpu-worker needs a build with gRPC (PI_GRPC)");
  }
#endif
  const auto slices = SplitColdNeurons(model, engine, n_local + n_remote, t.coordinator_share);
  WorkerProcessOptions local;
  local.binary = PathNextToExecutable("pi-cpu-worker");
  local.model_path = t.model_path;
  local.n_threads = std::max(1, t.n_threads / std::max(1, n_local));
  AddActivationArg(t, &local.extra_args);
  for (int k = 0; k < n_local + n_remote; ++k) {
    std::unique_ptr<WorkerLink> link;
    if (k < n_local) {
      link = NewShmLink(local);
    } else {
#ifdef PI_HAVE_GRPC
      link = NewGrpcLink(RemoteLink(t, t.remote_workers[k - n_local], "cpu worker"));
#endif
    }
    auto w = std::make_unique<RemoteShard>(std::move(link), ShardOptions(t));
    PI_RETURN_IF_ERROR(
        w->Open(model, slices[k], engine.gate_thresholds, engine.sparse == SparseMode::kTeal));
    if (tool) {
      fprintf(stderr, "%s: %s (%s): %s backend, %.1f MiB of cold neurons, %lld neurons\n", tool,
              w->name(), w->transport(), w->backend(), w->resident_bytes() / 1048576.0,
              static_cast<long long>(w->neurons()));
    }
    out->cold.push_back(std::move(w));
  }
  return Status::Ok();
}

void StopWorkers(const char* tool, const Engine* engine, Workers* workers) {
  const bool shard_failed = engine && engine->shard_failures() > 0;
  if (workers->gpu_worker) workers->cold.push_back(std::move(workers->gpu_worker));
  for (auto& w : workers->cold) {
    const Status stopped = w->Stop();
    if (!stopped.ok() && !shard_failed)
      fprintf(stderr, "%s: %s\n", tool, stopped.message().c_str());
  }
  for (auto& w : workers->devices) {
    const Status stopped = w->Stop();
    if (!stopped.ok() && engine && engine->device_failures() == 0) {
      fprintf(stderr, "%s: %s\n", tool, stopped.message().c_str());
    }
  }
}

}  // namespace pi
