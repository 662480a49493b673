#include "cli/gpu_split.h"

#include <sys/stat.h>

#include <cstdio>

#include "common/activation_stats.h"
#include "common/gpu_index.h"
#include "common/memory_limits.h"
#include "common/placement.h"
#include "common/predictor.h"
#include "gpu_worker/ffn_backend_factory.h"
#include "gpu_worker/host_device_backend.h"
#include "gpu_worker/hot_rows.h"

namespace pi {

const char kGpuSplitUsage[] =
    "  --vram-budget SIZE      hot/cold FFN split for a VRAM budget: the plan's dense\n"
    "                          blocks and hot neurons on the GPU (--ffn-backend), the rest\n"
    "                          on the CPU; needs pi-profile stats. A bare number is GiB as\n"
    "                          in PowerInfer (8 = 8 GiB); 512M, 11G, 4096B; auto or -1:\n"
    "                          the GPU's free memory less a margin\n"
    "  --ffn-backend KIND      where the hot neurons run: auto (default: cuda when built\n"
    "                          with CUDA and a GPU is present, else host), cuda, host\n"
    "                          (host memory, on CPU threads)\n"
    "  --host-device           no GPU: run the GPU's share of the plan (whole layers with\n"
    "                          attention and KV cache, their hot neurons, the head) on\n"
    "                          CPU threads as the GPU would: the GPU path's reference\n"
    "  --stats FILE            activation statistics (default: MODEL.stats.gguf)\n"
    "  --plan FILE             the placement plan to reuse or write (default:\n"
    "                          MODEL.plan-<budget>-c<ctx>-<ctk>-<ctv>-g1.gguf, beside the\n"
    "                          model, or in ~/.cache/pi where its folder is read-only)\n"
    "  --reset-gpu-index       recompute the placement plan even if one is cached\n"
    "  --disable-gpu-index     no FFN split: every FFN neuron on the CPU\n";

bool ParseGpuSplitFlag(const std::string& flag, ArgReader* args, GpuSplitFlags* flags) {
  if (flag == "--vram-budget") {
    flags->vram_budget = args->VramBudget(flag);
  } else if (flag == "--stats") {
    flags->stats_path = args->String(flag);
  } else if (flag == "--plan") {
    flags->plan_path = args->String(flag);
  } else if (flag == "--reset-gpu-index") {
    flags->reset = true;
  } else if (flag == "--host-device") {
    flags->host_device = true;
  } else if (flag == "--disable-gpu-index") {
    flags->disable = true;
  } else if (flag == "--ffn-backend") {
    const std::string kind = args->String(flag);
    if (!args->failed() && kind != "auto" && kind != "cuda" && kind != "host") {
      args->Fail("--ffn-backend expects auto, cuda or host, got '" + kind + "'");
    }
    flags->ffn_backend = kind;
  } else {
    return false;
  }
  return true;
}

namespace {

// The original's placement cache, <model>.generated.gpuidx (pi-place --gpuidx
// writes one): its hot neurons replace the plan's when it was solved for this
// budget and model shape and fits (ApplyGpuIndex), unless --reset-gpu-index;
// said either way.
void UseGpuIndex(const char* tool, const std::string& model_path, const LlamaModel& model,
                 const ActivationStats& stats, const GpuSplitFlags& flags, Placement* plan) {
  const std::string path = model_path + ".generated.gpuidx";
  struct stat st;
  if (flags.reset || stat(path.c_str(), &st) != 0) return;
  GpuIndex index;
  Status s = ReadGpuIndex(path, &index);
  if (s.ok()) s = ApplyGpuIndex(index, model, stats, plan);
  if (s.ok()) {
    fprintf(stderr, "%s: hot neurons from %s (PowerInfer's index for this budget)\n", tool,
            path.c_str());
  } else {
    fprintf(stderr, "%s: not using %s: %s\n", tool, path.c_str(), s.message().c_str());
  }
}

// --vram-budget auto: the GPU's free memory less a margin (a tenth, at least
// 256 MiB: the CUDA context, cuBLAS, other programs' growth); without a GPU
// the host backend stands in for one and takes the available memory so.
Status ResolveAutoBudget(const char* tool, const GpuSplitFlags& flags, bool cuda, int64_t* out) {
  if (flags.remote_device) {
    return Status::Error(
        "--vram-budget auto with --remote-gpu-worker: this machine cannot see "
        "that GPU's free memory; give a size");
  }
  int64_t free_bytes = 0;
  std::string what;
  std::string why;
  if (cuda && CudaFreeMemory(&free_bytes, &why)) {
    what = "the GPU's free memory";
  } else {
    free_bytes = AvailableMemory().bytes;
    what = "no GPU (" + (why.empty() ? std::string("the host backend") : why) +
           "): the host backend assumed the available memory";
  }
  const int64_t margin = std::max<int64_t>(free_bytes / 10, int64_t{256} << 20);
  *out = std::max<int64_t>(0, free_bytes - margin);
  fprintf(stderr, "%s: --vram-budget auto: %s (%s, %s, less %s)\n", tool, HumanBytes(*out).c_str(),
          what.c_str(), HumanBytes(free_bytes).c_str(), HumanBytes(margin).c_str());
  return Status::Ok();
}

bool Exists(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0;
}

// The GPU side of a plan: its layers are the prefix whose attention and KV
// cache it holds (placement.h places them in layer order), with their hot
// neurons; loads the device and points options->device at it.
Status SetUpDevice(const char* tool, const LlamaModel& model, const Placement& plan, int n_ctx,
                   const GpuSplitFlags& flags, GpuSplit* split, EngineOptions* options) {
  const LlamaConfig& c = model.config;
  DevicePlan dp;
  while (dp.n_layers < c.n_layer && plan.layers[dp.n_layers].attn_on_gpu &&
         plan.layers[dp.n_layers].kv_on_gpu) {
    ++dp.n_layers;
  }
  dp.output = plan.output_on_gpu;
  dp.hot.assign(c.n_layer, {});
  int64_t n_hot = 0;
  for (int il = 0; il < dp.n_layers; ++il) {
    dp.hot[il] = plan.layers[il].gpu_neurons;
    n_hot += static_cast<int64_t>(dp.hot[il].size());
  }
  dp.n_ctx = n_ctx;
  dp.n_seq = options->n_seq;
  dp.cache_type_k = options->cache_type_k;
  dp.cache_type_v = options->cache_type_v;
  if (options->sparse == SparseMode::kPredictor) {
    dp.mode = SparseMode::kPredictor;
    PI_RETURN_IF_ERROR(ResolvePredictorThreshold(c, options->sparse_threshold, &dp.threshold));
  }
  if (dp.n_layers == 0 && !dp.output) {
    fprintf(stderr,
            "%s: the VRAM budget holds no layer and not the output head: everything "
            "runs on the CPU\n",
            tool);
    return Status::Ok();
  }
  const char* kind = flags.remote_device ? "auto" : flags.host_device ? "host" : "cuda";
  const std::string what =
      std::to_string(dp.n_layers) + " of " + std::to_string(c.n_layer) + " layers (attention, " +
      "KV cache" + (dp.mode == SparseMode::kPredictor ? ", predictor" : "") + ") with " +
      std::to_string(n_hot) + " of " + std::to_string(int64_t{dp.n_layers} * c.n_ff) +
      " FFN neurons, " + (dp.output ? "the output head" : "not the output head");
  if (flags.hot_in_worker || flags.remote_device) {
    if (flags.remote_device) {
      fprintf(stderr, "%s: GPU in the remote gpu worker: %s; the rest here\n", tool, what.c_str());
    } else {
      fprintf(stderr, "%s: GPU ('%s' backend) in the gpu worker process: %s; the rest here\n", tool,
              kind, what.c_str());
    }
    split->device_in_worker = true;
    split->device_plan = std::move(dp);
    split->device_kind = kind;
    return Status::Ok();
  }
  std::unique_ptr<DeviceBackend> device;
  if (flags.host_device) {
    device = std::make_unique<HostDeviceBackend>(options->n_threads);
  } else {
    PI_RETURN_IF_ERROR(CreateDeviceBackend(&device));
  }
  PI_RETURN_IF_ERROR(device->Load(model, dp));
  fprintf(stderr, "%s: GPU ('%s' backend): %s; %s in %s; the rest on the CPU\n", tool,
          device->name(), what.c_str(), HumanBytes(device->resident_bytes()).c_str(),
          flags.host_device ? "host memory" : "VRAM");
  split->device = std::move(device);
  options->device = split->device.get();
  return Status::Ok();
}

}  // namespace

namespace {

// Loads what `plan` gives the GPU — the device's layers, or the hot neurons
// on a backend or for a gpu worker — and points `options` at it; the plan
// moves into `split`. Says what it did ("plan P reused" or "written": the
// caller writes it once this succeeded).
Status UsePlan(const char* tool, const LlamaModel& model, const GpuSplitFlags& flags, int n_ctx,
               bool device_path, std::string why, Placement plan, const std::string& plan_path,
               bool reused, GpuSplit* split, EngineOptions* options) {
  if (device_path) {
    PI_RETURN_IF_ERROR(SetUpDevice(tool, model, plan, n_ctx, flags, split, options));
    fprintf(stderr, "%s: plan %s %s\n", tool, plan_path.c_str(), reused ? "reused" : "written");
    split->plan = std::move(plan);
    split->plan_path = plan_path;
    return Status::Ok();
  }
  split->hot.clear();
  int64_t n_hot = 0;
  for (const LayerPlacement& l : plan.layers) {
    split->hot.push_back(l.gpu_neurons);
    n_hot += static_cast<int64_t>(l.gpu_neurons.size());
  }
  if (flags.hot_in_worker) {
    fprintf(stderr,
            "%s: FFN split: %lld of %lld neurons hot (%s of rows) for the gpu worker process, "
            "the rest on the CPU; plan %s %s\n",
            tool, static_cast<long long>(n_hot),
            static_cast<long long>(model.config.n_layer) * model.config.n_ff,
            HumanBytes(HotRowBytes(model, split->hot)).c_str(), plan_path.c_str(),
            reused ? "reused" : "written");
    split->plan = std::move(plan);
    split->plan_path = plan_path;
    options->hot_neurons = &split->hot;
    return Status::Ok();
  }
  std::unique_ptr<FfnBackend> backend;
  PI_RETURN_IF_ERROR(CreateFfnBackend(flags.ffn_backend, 1, &backend));
  PI_RETURN_IF_ERROR(backend->Load(model, split->hot));
  // Say why "auto" did not pick the GPU: the backend is never swapped silently.
  if (flags.ffn_backend == "auto") why = " (auto: " + why + ")";
  fprintf(stderr,
          "%s: FFN split: %lld of %lld neurons hot (%s of rows) on the '%s' backend%s, the rest "
          "on the CPU; plan %s %s\n",
          tool, static_cast<long long>(n_hot),
          static_cast<long long>(model.config.n_layer) * model.config.n_ff,
          HumanBytes(HotRowBytes(model, split->hot)).c_str(), backend->name(), why.c_str(),
          plan_path.c_str(), reused ? "reused" : "written");
  split->backend = std::move(backend);
  split->plan = std::move(plan);
  split->plan_path = plan_path;
  options->hot_backend = split->backend.get();
  options->hot_neurons = &split->hot;
  return Status::Ok();
}

}  // namespace

Status SetUpGpuSplit(const char* tool, const std::string& model_path, const LlamaModel& model,
                     const GpuSplitFlags& flags, int n_ctx, GpuSplit* split,
                     EngineOptions* options) {
  if (flags.vram_budget == -1) {
    if (flags.ffn_backend != "auto") {
      fprintf(stderr, "%s: --ffn-backend %s has no effect without --vram-budget\n", tool,
              flags.ffn_backend.c_str());
    }
    return Status::Ok();
  }
  if (flags.disable) {
    fprintf(stderr, "%s: --disable-gpu-index: no FFN split, every neuron on the CPU\n", tool);
    return Status::Ok();
  }
  const std::string stats_path =
      flags.stats_path.empty() ? DefaultStatsPath(model_path) : flags.stats_path;
  if (!Exists(stats_path)) {
    return Status::Error(
        "--vram-budget needs activation statistics: no %s (run pi-profile -m %s "
        "-f CORPUS, or pass --stats)",
        stats_path.c_str(), model_path.c_str());
  }
  ActivationStats stats;
  PI_RETURN_IF_ERROR(ReadActivationStats(stats_path, &stats));
  std::string reuse_note;
  PI_RETURN_IF_ERROR(CheckStatsMatchModel(stats, model, &reuse_note).WithContext(stats_path));
  if (!reuse_note.empty())
    fprintf(stderr, "%s: %s: %s\n", tool, stats_path.c_str(), reuse_note.c_str());

  // A GPU takes a prefix of the layers when not all of them fit; the host
  // backend only hot neurons.
  std::string why;
  if (flags.host_device && flags.ffn_backend == "cuda") {
    return Status::Error(
        "--host-device runs the GPU's share on the CPU: not with --ffn-backend cuda");
  }
  const bool cuda = !flags.host_device && !flags.remote_device && flags.ffn_backend != "host" &&
                    CudaFfnBackendAvailable(&why);
  if (flags.ffn_backend == "cuda" && !cuda && !flags.remote_device) {
    return Status::Error("--ffn-backend cuda is not available: %s", why.c_str());
  }
  // The device path: a GPU (or the host standing in for one, or a remote
  // gpu worker) takes whole layers.
  const bool device_path = cuda || flags.host_device || flags.remote_device;
  int64_t budget = flags.vram_budget;
  if (budget == ArgReader::kVramBudgetAuto) {
    PI_RETURN_IF_ERROR(ResolveAutoBudget(tool, flags, cuda, &budget));
  }
  split->vram_budget = budget;
  PlacementOptions opt;
  opt.allow_partial_dense = true;  // what fits, said below
  opt.vram_budget = budget;
  // The device path keeps every sequence's KV cache (-np) on the GPU.
  opt.n_ctx = device_path ? n_ctx * options->n_seq : n_ctx;
  opt.cache_type_k = options->cache_type_k;
  opt.cache_type_v = options->cache_type_v;
  const std::string plan_path =
      flags.plan_path.empty()
          ? DefaultPlanPath(model_path, budget, opt.n_ctx, opt.cache_type_k, opt.cache_type_v)
          : flags.plan_path;
  Placement plan;
  bool reused = false;
  if (!flags.reset && Exists(plan_path)) {
    Status s = ReadPlan(plan_path, &plan);
    if (s.ok()) s = CheckPlanMatches(plan, model, stats, opt);
    if (s.ok()) {
      reused = true;
    } else {
      fprintf(stderr, "%s: not reusing %s: %s\n", tool, plan_path.c_str(), s.message().c_str());
    }
  }
  if (!reused) {
    PI_RETURN_IF_ERROR(Place(model, stats, opt, &plan));
    UseGpuIndex(tool, model_path, model, stats, flags, &plan);
  }
  if (!plan.dense_complete)
    fprintf(stderr, "%s: %s\n", tool, PartialDenseNote(plan, model).c_str());
  PI_RETURN_IF_ERROR(UsePlan(tool, model, flags, n_ctx, device_path, why, std::move(plan),
                             plan_path, reused, split, options));
  // Written only now: a run that fails (a backend that cannot load) leaves
  // no plan behind.
  if (!reused) PI_RETURN_IF_ERROR(WritePlan(split->plan, plan_path));
  return Status::Ok();
}

}  // namespace pi
