// A worker step's round trip: coordinator -> pi-cpu-worker -> back, for one
// row of n_embd floats, with the worker owning no neuron in the layer (what
// remains is the transport: writing x, the wake-up or the network, the
// validation, writing y, the way back): a RemoteShard over the shared-memory
// link and, in gRPC builds, over the gRPC link on 127.0.0.1 (to a
// LoopbackWorker).
// Reported as p50 and p99 per round trip.
//
//   bench-worker-step [--benchmark_filter=...]   (run from the build directory)
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "common/base/executable_path.h"
#include "common/offline/synthetic_model.h"
#include "coordinator/workers/remote_shard.h"
#ifdef PI_HAVE_GRPC
#include "coordinator/workers/grpc_link.h"
#include "coordinator/workers/loopback_worker.h"
#endif

namespace {

// A one-layer model of this width, written to `path` and mapped.
pi::Status MakeModel(int n_embd, const std::string& path, pi::LlamaModel* model) {
  pi::SyntheticModelOptions o;
  o.n_vocab = 16;
  o.n_embd = n_embd;
  o.n_layer = 1;
  o.n_head = 32;
  o.n_ff = 64;
  o.type = pi::DType::kF16;
  o.activation = "relu";
  o.down_t = true;
  PI_RETURN_IF_ERROR(pi::WriteSyntheticModel(o, path));
  return pi::LoadLlamaModel(path, model);
}

// Times Start + Wait of `worker` per iteration; p50/p99 as counters.
void Measure(benchmark::State& state, pi::RemoteShard* worker, int n_embd) {
  std::vector<float> x(n_embd, 0.5f);
  std::vector<double> us;
  us.reserve(1 << 20);
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    worker->Start({0, 1, x.data(), nullptr, nullptr});
    const float* y = nullptr;
    int64_t fired = 0;
    const pi::Status s = worker->Wait(&y, &fired);
    us.push_back(
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
    if (!s.ok()) {
      state.SkipWithError(s.message().c_str());
      break;
    }
  }
  std::sort(us.begin(), us.end());
  if (!us.empty()) {
    state.counters["p50_us"] = us[us.size() / 2];
    state.counters["p99_us"] = us[us.size() * 99 / 100];
  }
  state.SetBytesProcessed(state.iterations() * 2 * n_embd * static_cast<int64_t>(sizeof(float)));
  (void)worker->Stop();
}

void BM_ShmStepRoundTrip(benchmark::State& state) {
  const int n_embd = static_cast<int>(state.range(0));
  const std::string path = "/tmp/bench-worker-step-" + std::to_string(getpid()) + ".gguf";
  pi::LlamaModel model;
  pi::WorkerProcessOptions opt;
  opt.binary = pi::PathNextToExecutable("pi-cpu-worker");
  opt.model_path = path;
  pi::RemoteShard worker(pi::NewShmLink(opt), pi::RemoteShardOptions{1, 5000});
  pi::Status s = MakeModel(n_embd, path, &model);
  if (s.ok()) s = worker.Open(model, std::vector<std::vector<int32_t>>(1));
  unlink(path.c_str());
  if (!s.ok()) {
    state.SkipWithError(s.message().c_str());
    return;
  }
  Measure(state, &worker, n_embd);
}
BENCHMARK(BM_ShmStepRoundTrip)->Arg(256)->Arg(4096)->Arg(8192)->UseRealTime();

#ifdef PI_HAVE_GRPC
void BM_GrpcStepRoundTrip(benchmark::State& state) {
  const int n_embd = static_cast<int>(state.range(0));
  const std::string path = "/tmp/bench-worker-step-" + std::to_string(getpid()) + ".gguf";
  pi::LlamaModel model;
  pi::LoopbackWorker process;
  std::unique_ptr<pi::RemoteShard> worker;
  pi::Status s = MakeModel(n_embd, path, &model);
  if (s.ok()) s = process.Start(pi::PathNextToExecutable("pi-cpu-worker"), path, 1);
  if (s.ok()) {
    pi::GrpcLinkOptions o;
    o.address = process.address();
    o.auth_token = process.token();
    worker = std::make_unique<pi::RemoteShard>(pi::NewGrpcLink(o), pi::RemoteShardOptions{1, 5000});
    s = worker->Open(model, std::vector<std::vector<int32_t>>(1));
  }
  unlink(path.c_str());
  if (!s.ok()) {
    state.SkipWithError(s.message().c_str());
    return;
  }
  Measure(state, worker.get(), n_embd);
}
BENCHMARK(BM_GrpcStepRoundTrip)->Arg(256)->Arg(4096)->Arg(8192)->UseRealTime();
#endif

}  // namespace

BENCHMARK_MAIN();
