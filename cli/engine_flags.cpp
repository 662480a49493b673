#include "cli/engine_flags.h"

#include <algorithm>
#include <cstdio>
#include <thread>

#include "cli/activation_flag.h"
#include "cli/cache_type_flags.h"
#include "cli/context_note.h"
#include "cli/default_model.h"
#include "cli/sparse_note.h"
#include "common/base/executable_path.h"
#include "common/base/thread_pool.h"
#include "common/compute/neuron_ffn.h"
#include "common/format/tensor_check.h"
#include "common/model/weight_repack.h"
#include "coordinator/topology/topology.h"
#ifdef PI_HAVE_GRPC
#include "common/transport/listen_address.h"
#endif

namespace pi {

EngineFlags::EngineFlags() {
  opt.n_threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

const char kEngineUsage[] =
    "  -m, --model FILE        GGUF model (default: the bundled demo model)\n"
    "  -t, --threads N         threads (default: the cores)\n"
    "  -c, --ctx-size N        context size (0 = the model's, capped at 4096; default 0)\n"
    "  -b, --batch-size N      prompt batch size (default 64)\n" PI_FFN_ACTIVATION_USAGE
    "  --no-mmap               read the model into memory instead of mapping it\n"
    "  --mlock                 keep the model's bytes in RAM (never paged out)\n"
    "  -nr, --no-repack        keep Q4_0, Q4_K, Q5_K and float matrices in the file's layout\n"
    "                          (default: repacked at load for the CPU's matrix kernels,\n"
    "                          where they have them)\n"
    "  -ngl N                  accepted for llama.cpp's scripts, ignored: --vram-budget places\n"
    "  --sparse MODE           FFN neurons computed per decoded token: off = all,\n"
    "                          oracle = exactly those that fire, predictor = those the\n"
    "                          model's predictor picks (ReLU models with ffn_down_t;\n"
    "                          predictor: fc1/fc2, see pi-train-predictor); cats = those\n"
    "                          whose |act(gate)| passes a calibrated threshold (any model\n"
    "                          with ffn_down_t; approximate; thresholds from pi-profile's\n"
    "                          stats); teal = cats, and the inputs of q, k, v, o and the\n"
    "                          gate thresholded too, each product reading only the columns\n"
    "                          of the entries kept (one process; transposed copies made at\n"
    "                          load); auto (default) = predictor where the file has them,\n"
    "                          else oracle where the model can run sparse, else off\n"
    "  --target-sparsity F     --sparse cats/teal: the share of FFN neurons (teal: and of\n"
    "                          each thresholded input's entries) skipped (0 to 0.99,\n"
    "                          default 0.5)\n"
    "  --sparse-allocation A   how that share spreads over the layers: uniform (each\n"
    "                          layer the same share, default) or greedy (thresholds the\n"
    "                          same multiple of each layer's RMS magnitude, TEAL's\n"
    "                          greedy allocation)\n"
    "  --sparse-threshold X    predictor score threshold (default: env\n"
    "                          LLAMA_SPARSE_PRED_THRESHOLD, else the file's)\n"
    "  --check-tensors         check every weight is finite when loading\n"
    "  --cpu-workers N         the cold FFN neurons in N local pi-cpu-worker processes\n"
    "                          over shared memory (a sparse-capable model; a worker that\n"
    "                          dies is replaced by this process, same tokens)\n"
    "  --cpu-worker HOST:PORT  also a remote pi-cpu-worker --listen, over gRPC (repeatable;\n"
    "                          the cold neurons are split across all workers)\n"
    "  --remote-gpu-worker HOST:PORT  the GPU's share of a --vram-budget plan (whole layers\n"
    "                          with their KV cache) on a pi-gpu-worker --listen there, over\n"
    "                          gRPC (restarted there, it is reconnected and its KV cache\n"
    "                          rebuilt from the tokens)\n"
    "  --auth-token-file F     the token the remote workers share (required with them)\n"
    "  --tls-ca F              reach remote workers over TLS, checking their certificate\n"
    "  --tls-cert F --tls-key F  the client certificate, for workers that require one\n"
    "  --coordinator-share F   with cpu workers, compute this fraction (0 to 0.9) of the\n"
    "                          cold neurons here, at the same time as the workers theirs\n"
    "                          (default 0: the workers take them all)\n"
    "  --worker-timeout MS     a worker that has not answered a step by then is lost: its\n"
    "                          neurons run here until it is back (default 1000)\n"
    "  --gpu-worker, --no-gpu-worker  what a --vram-budget plan gives the GPU (whole\n"
    "                          layers with their KV cache, or the hot neurons alone) in a\n"
    "                          pi-gpu-worker process, or in this one (pi-run: in this one;\n"
    "                          pi-launch: in the worker; a worker lost mid-generation is\n"
    "                          restarted, its KV cache refilled from the tokens)\n";

bool ParseEngineFlag(const std::string& f, ArgReader* args, EngineFlags* e) {
  if (f == "-m" || f == "--model")
    e->model_path = args->String(f);
  else if (ParseFfnActivationFlag(f, args, &e->ffn_activation)) {
  } else if (f == "--no-mmap") {
    e->no_mmap = true;
  } else if (f == "--mlock") {
    e->mlock = true;
  } else if (f == "-nr" || f == "--no-repack") {
    e->no_repack = true;
  } else if (f == "-ngl" || f == "--n-gpu-layers" || f == "--gpu-layers") {
    // llama.cpp's layer count: pi places by bytes, not layers.
    const int n = args->Int(f);
    if (!args->failed()) {
      fprintf(stderr,
              "pi: note: %s %d is llama.cpp's way; pi places work by --vram-budget SIZE (a GPU "
              "takes the dense blocks of as many layers as the budget holds, then hot "
              "neurons): %s is ignored\n",
              f.c_str(), n, f.c_str());
    }
  } else if (f == "-t" || f == "--threads")
    e->opt.n_threads = args->Int(f);
  else if (f == "-c" || f == "--ctx-size")
    e->opt.n_ctx = args->Int(f);
  else if (f == "-b" || f == "--batch-size")
    e->opt.n_batch = args->Int(f);
  else if (f == "--cpu-workers")
    e->cpu_workers = args->Int(f);
  else if (f == "--check-tensors")
    e->check_tensors = true;
  else if (f == "--cpu-worker")
    e->remote_workers.push_back(args->String(f));
  else if (f == "--remote-gpu-worker")
    e->remote_gpu_worker = args->String(f);
  else if (f == "--auth-token-file")
    e->secrets.token = args->String(f);
  else if (f == "--tls-ca")
    e->secrets.tls_ca = args->String(f);
  else if (f == "--tls-cert")
    e->secrets.tls_cert = args->String(f);
  else if (f == "--tls-key")
    e->secrets.tls_key = args->String(f);
  else if (f == "--worker-timeout")
    e->worker_timeout_ms = args->Int(f);
  else if (f == "--coordinator-share")
    e->coordinator_share = args->Float(f);
  else if (f == "--gpu-worker")
    e->gpu_worker = true;
  else if (f == "--no-gpu-worker")
    e->gpu_worker = false;
  else if (ParseCacheTypeFlag(f, args, &e->opt.cache_type_k, &e->opt.cache_type_v) ||
           ParseSparseFlag(f, args, &e->opt.sparse, &e->opt.sparse_threshold, &e->target_sparsity,
                           &e->sparse_auto, &e->allocation) ||
           ParseGpuSplitFlag(f, args, &e->split) || ParseDraftFlag(f, args, &e->draft)) {
  } else
    return false;
  return true;
}

Status CheckEngineFlags(const EngineFlags& e) {
  if (e.opt.n_threads < 1) return Status::Error("-t must be >= 1");
  if (e.cpu_workers < 0 || e.cpu_workers > 64) {
    return Status::Error("--cpu-workers must be 0 to 64, got %d", e.cpu_workers);
  }
  if (e.opt.n_ctx < 0) {
    return Status::Error("-c must be 0 (the model's) or positive, got %d", e.opt.n_ctx);
  }
  if (e.opt.n_batch < 1) return Status::Error("-b must be at least 1, got %d", e.opt.n_batch);
  PI_RETURN_IF_ERROR(CheckDraftFlags(e.draft));
  if (!(e.coordinator_share >= 0.0 && e.coordinator_share <= 0.9)) {
    return Status::Error("--coordinator-share must be 0 to 0.9, got %g", e.coordinator_share);
  }
  if (e.coordinator_share > 0 && e.cpu_workers == 0 && e.remote_workers.empty() &&
      !e.cpu_workers_auto) {
    return Status::Error(
        "--coordinator-share splits the cold neurons with cpu workers: give "
        "--cpu-workers N or --cpu-worker HOST:PORT");
  }
  if (e.worker_timeout_ms < 10 || e.worker_timeout_ms > 600000) {
    return Status::Error("--worker-timeout must be 10 to 600000 ms, got %d", e.worker_timeout_ms);
  }
  const WorkerSecretFiles& f = e.secrets;
  if (!e.ffn_activation.empty() && (!e.remote_workers.empty() || !e.remote_gpu_worker.empty())) {
    return Status::Error(
        "--ffn-activation with remote workers: they read the file as it is (start them with "
        "--ffn-activation too, or fix the file once: pi-quantize --set-activation)");
  }
  if (!e.remote_gpu_worker.empty() && e.split.vram_budget == -1) {
    return Status::Error("--remote-gpu-worker runs the GPU's share of a plan: give --vram-budget");
  }
  if (e.remote_workers.empty() && e.remote_gpu_worker.empty()) {
    if (!f.token.empty() || !f.tls_ca.empty() || !f.tls_cert.empty() || !f.tls_key.empty()) {
      return Status::Error(
          "--auth-token-file and --tls-* secure remote workers: give them with --cpu-worker or "
          "--remote-gpu-worker");
    }
    return Status::Ok();
  }
#ifdef PI_HAVE_GRPC
  if (e.cpu_workers + e.remote_workers.size() > 64) {
    return Status::Error("at most 64 cpu workers in all (--cpu-workers and --cpu-worker)");
  }
  std::vector<std::pair<std::string, const char*>> addresses;
  for (const std::string& a : e.remote_workers) addresses.emplace_back(a, "--cpu-worker");
  if (!e.remote_gpu_worker.empty())
    addresses.emplace_back(e.remote_gpu_worker, "--remote-gpu-worker");
  for (const auto& [address, flag] : addresses) {
    std::string host;
    int port = 0;
    PI_RETURN_IF_ERROR(SplitHostPort(address, flag, &host, &port));
    if (port == 0) return Status::Error("%s %s: port 0 names no worker", flag, address.c_str());
  }
  return CheckWorkerSecretFiles(e.secrets, true);
#else
  return Status::Error("--cpu-worker and --remote-gpu-worker need a build with gRPC (PI_GRPC)");
#endif
}

namespace {

// Rows a worker step may carry: a decode token of each sequence (-np), up to
// what one sparse step takes (common/compute/neuron_ffn.h).
int WorkerMaxBatch(const EngineFlags& e) {
  return std::min(e.opt.n_seq, NeuronFfn::kMaxRows);
}

// The worker processes the flags ask for (the remote workers' secrets read
// from their files).
Status TopologyOf(const EngineFlags& e, Topology* t) {
  t->model_path = e.model_path;
  t->ffn_activation = e.ffn_activation;
  t->n_threads = e.opt.n_threads;
  t->max_batch = WorkerMaxBatch(e);
  t->worker_timeout_ms = e.worker_timeout_ms;
  t->coordinator_share = e.coordinator_share;
  t->cpu_workers = e.cpu_workers;
  t->remote_workers = e.remote_workers;
  t->ffn_backend = e.split.ffn_backend;
  t->remote_gpu_worker = e.remote_gpu_worker;
  if (e.remote_workers.empty() && e.remote_gpu_worker.empty()) return Status::Ok();
#ifdef PI_HAVE_GRPC
  WorkerSecrets secrets;
  PI_RETURN_IF_ERROR(ReadWorkerSecrets(e.secrets, &secrets));
  t->secrets = {secrets.token, secrets.tls_ca, secrets.tls_cert, secrets.tls_key};
  return Status::Ok();
#else
  return Status::Unsupported(
      "--cpu-worker and --remote-gpu-worker need a build with gRPC (PI_GRPC)");
#endif
}

// The dense matrices this process multiplies, repacked (common/model/weight_repack.h).
Status RepackWeights(const char* tool, const EngineFlags& e, LlamaModel* model) {
  if (e.no_repack) return Status::Ok();
  ThreadPool pool(e.opt.n_threads);
  RepackStats stats;
  PI_RETURN_IF_ERROR(RepackModelWeights(model, HostRepackScope(e.opt), &pool, &stats));
  if (!stats.skipped.empty()) fprintf(stderr, "%s: note: %s\n", tool, stats.skipped.c_str());
  if (stats.matrices > 0) {
    fprintf(stderr, "%s: %lld matrices (%.1f MiB) repacked for the CPU kernels (-nr: keep them)\n",
            tool, static_cast<long long>(stats.matrices), stats.bytes / 1048576.0);
  }
  return Status::Ok();
}

}  // namespace

Status LoadEngine(const char* tool, EngineFlags* e, LoadedEngine* out) {
  if (e->model_path.empty()) e->model_path = DefaultModelPath();
  if (e->no_mmap) {
    std::unique_ptr<GgufFile> file;
    PI_RETURN_IF_ERROR(GgufFile::Read(e->model_path, &file));
    PI_RETURN_IF_ERROR(LoadLlamaModel(std::move(file), &out->model));
  } else {
    PI_RETURN_IF_ERROR(LoadLlamaModel(e->model_path, &out->model));
  }
  if (e->mlock) {
    const Status locked = out->model.file->LockInMemory();
    if (!locked.ok()) fprintf(stderr, "%s: warning: %s\n", tool, locked.message().c_str());
  }
  PI_RETURN_IF_ERROR(ApplyFfnActivationFlag(tool, e->ffn_activation, &out->model));
  const LlamaModel& model = out->model;
  if (e->check_tensors) {
    PI_RETURN_IF_ERROR(CheckTensorValues(*model.file, true).WithContext(e->model_path));
  }
  PI_RETURN_IF_ERROR(Tokenizer::FromGguf(*model.file, &out->tok).WithContext(e->model_path));
  if (e->sparse_auto) {
    std::string why;
    e->opt.sparse = ChooseSparseMode(model, &why);
    fprintf(stderr, "%s: --sparse auto: %s\n", tool, why.c_str());
  } else {
    NoteSparseSupport(tool, model, e->opt.sparse);
  }
  PI_RETURN_IF_ERROR(PrepareSparseMode(tool, e->model_path, e->split.stats_path, e->target_sparsity,
                                       &out->model, &e->opt, e->allocation));
  const bool teal = e->opt.sparse == SparseMode::kTeal;
  const int n_ctx = Engine::ContextSize(model.config, e->opt.n_ctx);
  NoteContextSize(tool, model, n_ctx);
  e->split.hot_in_worker = e->gpu_worker;
  e->split.remote_device = !e->remote_gpu_worker.empty();
  PI_RETURN_IF_ERROR(
      SetUpGpuSplit(tool, e->model_path, model, e->split, n_ctx, &out->split, &e->opt));
  if (e->cpu_workers_auto) {
    // Remote workers given: the cold neurons go there; else one local worker.
    std::string why;
    const bool cats = UsesGateThresholds(e->opt.sparse);
    e->cpu_workers = e->remote_workers.empty() && SupportsNeuronSplit(model, cats, &why) ? 1 : 0;
    if (e->cpu_workers == 0 && e->remote_workers.empty()) {
      fprintf(stderr, "%s: no cpu worker: the FFN runs in this process (%s)\n", tool, why.c_str());
    }
  }
  Topology topology;
  PI_RETURN_IF_ERROR(TopologyOf(*e, &topology));
  Workers& w = out->workers;
  if (out->split.device_in_worker) {
    PI_RETURN_IF_ERROR(StartDeviceWorkers(tool, topology, model, out->split.devices, &w));
    e->opt.device = w.device();
  }
  if (e->gpu_worker && !out->split.hot.empty()) {
    PI_RETURN_IF_ERROR(
        StartGpuWorker(tool, topology, model, out->split.hot, e->opt.gate_thresholds, teal, &w));
    e->opt.hot_shard = w.gpu_worker.get();
  }
  PI_RETURN_IF_ERROR(StartColdWorkers(tool, topology, model, e->opt, &w));
  for (const auto& c : w.cold) e->opt.cold_shards.push_back(c.get());
  PI_RETURN_IF_ERROR(RepackWeights(tool, *e, &out->model));
  PI_RETURN_IF_ERROR(Engine::Create(&out->model, e->opt, &out->engine));
  if (e->draft.model_path.empty()) return Status::Ok();
  return LoadDraft(tool, e->draft, out->engine.get(), *out->tok, &out->draft);
}

std::string HotBackendName(const LoadedEngine& loaded) {
  const Workers& w = loaded.workers;
  return loaded.split.device      ? loaded.split.device->name()
         : loaded.split.hot_shard ? loaded.split.hot_shard->backend()
         : loaded.split.chain     ? loaded.split.devices.kinds[0]
         : w.gpu_worker           ? w.gpu_worker->backend()
         : !w.devices.empty()     ? w.devices[0]->backend()
                                  : "none";
}

void StopWorkers(const char* tool, LoadedEngine* loaded) {
  pi::StopWorkers(tool, loaded->engine.get(), &loaded->workers);
}

}  // namespace pi
