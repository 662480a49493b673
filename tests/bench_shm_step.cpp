// The shared-memory step round trip: ShmWorker -> pi-cpu-worker -> back, for
// one row of n_embd floats, with the worker owning no neuron in the layer
// (what remains is the transport: writing x, the wake-up, the validation,
// writing y, the wake-up back). Reported as p50 and p99 per round trip.
//
//   bench-shm-step [--benchmark_filter=...]   (run from the build directory)
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

#include "common/executable_path.h"
#include "common/synthetic_model.h"
#include "coordinator/shm_worker.h"

namespace {

void BM_ShmStepRoundTrip(benchmark::State& state) {
  const int n_embd = static_cast<int>(state.range(0));
  pi::SyntheticModelOptions o;
  o.n_vocab = 16;
  o.n_embd = n_embd;
  o.n_layer = 1;
  o.n_head = 32;
  o.n_ff = 64;
  o.type = pi::DType::kF16;
  o.activation = "relu";
  o.down_t = true;
  const std::string path = "/tmp/bench-shm-step-" + std::to_string(getpid()) + ".gguf";
  pi::LlamaModel model;
  pi::ShmWorker worker;
  pi::ShmWorkerOptions opt;
  opt.binary = pi::PathNextToExecutable("pi-cpu-worker");
  opt.model_path = path;
  pi::Status s = pi::WriteSyntheticModel(o, path);
  if (s.ok()) s = pi::LoadLlamaModel(path, &model);
  if (s.ok()) s = worker.Start(opt, model, std::vector<std::vector<int32_t>>(1));
  unlink(path.c_str());
  if (!s.ok()) {
    state.SkipWithError(s.message().c_str());
    return;
  }
  std::vector<float> x(n_embd, 0.5f);
  std::vector<double> us;
  us.reserve(1 << 20);
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    worker.StartStep(0, 1, x.data(), nullptr, -1);
    const float* y = nullptr;
    int64_t fired = 0;
    s = worker.WaitStep(5000, &y, &fired);
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
  (void)worker.Stop();
}
BENCHMARK(BM_ShmStepRoundTrip)->Arg(256)->Arg(4096)->Arg(8192)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
