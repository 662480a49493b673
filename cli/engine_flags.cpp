#include "cli/engine_flags.h"

#include <algorithm>
#include <cstdio>
#include <thread>

#include "cli/cache_type_flags.h"
#include "cli/context_note.h"
#include "cli/default_model.h"
#include "cli/sparse_note.h"
#include "common/executable_path.h"
#include "common/tensor_check.h"
#include "coordinator/local_workers.h"

namespace pi {

EngineFlags::EngineFlags() {
  opt.n_threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

const char kEngineUsage[] =
    "  -m, --model FILE        GGUF model (default: the bundled demo model)\n"
    "  -t, --threads N         threads (default: the cores)\n"
    "  -c, --ctx-size N        context size (0 = the model's, capped at 4096; default 0)\n"
    "  -b, --batch-size N      prompt batch size (default 64)\n"
    "  --sparse MODE           FFN neurons computed per decoded token: off = all\n"
    "                          (default), oracle = exactly those that fire, predictor =\n"
    "                          those the model's predictor picks (ReLU models with\n"
    "                          ffn_down_t; predictor: fc1/fc2, see pi-train-predictor)\n"
    "  --sparse-threshold X    predictor score threshold (default: env\n"
    "                          LLAMA_SPARSE_PRED_THRESHOLD, else the file's)\n"
    "  --check-tensors         check every weight is finite when loading\n"
    "  --cpu-workers N         the cold FFN neurons in N local pi-cpu-worker processes\n"
    "                          over shared memory (a sparse-capable model; a worker that\n"
    "                          dies is replaced by this process, same tokens)\n";

bool ParseEngineFlag(const std::string& f, ArgReader* args, EngineFlags* e) {
  if (f == "-m" || f == "--model")
    e->model_path = args->String(f);
  else if (f == "-t" || f == "--threads")
    e->opt.n_threads = args->Int(f);
  else if (f == "-c" || f == "--ctx-size")
    e->opt.n_ctx = args->Int(f);
  else if (f == "-b" || f == "--batch-size")
    e->opt.n_batch = args->Int(f);
  else if (f == "--cpu-workers")
    e->cpu_workers = args->Int(f);
  else if (f == "--check-tensors")
    e->check_tensors = true;
  else if (ParseCacheTypeFlag(f, args, &e->opt.cache_type_k, &e->opt.cache_type_v) ||
           ParseSparseFlag(f, args, &e->opt.sparse, &e->opt.sparse_threshold) ||
           ParseGpuSplitFlag(f, args, &e->split)) {
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
  return Status::Ok();
}

Status LoadEngine(const char* tool, EngineFlags* e, LoadedEngine* out) {
  if (e->model_path.empty()) e->model_path = DefaultModelPath();
  PI_RETURN_IF_ERROR(LoadLlamaModel(e->model_path, &out->model));
  const LlamaModel& model = out->model;
  if (e->check_tensors) {
    PI_RETURN_IF_ERROR(CheckTensorValues(*model.file, true).WithContext(e->model_path));
  }
  PI_RETURN_IF_ERROR(Tokenizer::FromGguf(*model.file, &out->tok).WithContext(e->model_path));
  NoteSparseSupport(tool, model, e->opt.sparse);
  const int n_ctx = Engine::ContextSize(model.config, e->opt.n_ctx);
  NoteContextSize(tool, model, n_ctx);
  PI_RETURN_IF_ERROR(
      SetUpGpuSplit(tool, e->model_path, model, e->split, n_ctx, &out->split, &e->opt));
  if (e->cpu_workers_auto) {
    std::string why;
    e->cpu_workers = SupportsSparseFfn(model, &why) ? 1 : 0;
    if (e->cpu_workers == 0) {
      fprintf(stderr, "%s: no cpu worker: the FFN runs in this process (%s)\n", tool, why.c_str());
    }
  }
  if (e->cpu_workers > 0) {
    PI_RETURN_IF_ERROR(StartLocalCpuWorkers(
        PathNextToExecutable("pi-cpu-worker"), e->model_path, model, e->cpu_workers,
        std::max(1, e->opt.n_threads / e->cpu_workers), &e->opt, &out->workers));
    for (const auto& w : out->workers) {
      fprintf(stderr, "%s: %s: %s backend, %.1f MiB of cold neurons\n", tool, w->name(),
              w->backend().c_str(), w->resident_bytes() / 1048576.0);
    }
  }
  return Engine::Create(&out->model, e->opt, &out->engine);
}

void StopWorkers(const char* tool, LoadedEngine* loaded) {
  const bool failed_before = loaded->engine && loaded->engine->shard_failures() > 0;
  for (auto& w : loaded->workers) {
    const Status stopped = w->Stop();
    if (!stopped.ok() && !failed_before)
      fprintf(stderr, "%s: %s\n", tool, stopped.message().c_str());
  }
}

}  // namespace pi
