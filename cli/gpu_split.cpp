#include "cli/gpu_split.h"

#include <sys/stat.h>

#include <cstdio>

#include "cli/model_stats.h"
#include "common/base/memory_limits.h"
#include "common/compute/predictor.h"
#include "common/plan/activation_stats.h"
#include "common/plan/gpu_index.h"
#include "common/plan/placement.h"
#include "gpu_worker/backend_factory.h"
#include "gpu_worker/host_device_backend.h"
#include "gpu_worker/hot_rows.h"
#include "gpu_worker/layer_range_device.h"

namespace pi {

const char kGpuSplitUsage[] =
    "  --vram-budget SIZE      hot/cold FFN split for a VRAM budget: the plan's dense\n"
    "                          blocks and hot neurons on the GPU (--ffn-backend), the rest\n"
    "                          on the CPU; needs pi-profile stats. A bare number is GiB as\n"
    "                          in PowerInfer (8 = 8 GiB); 512M, 11G, 4096B; auto or -1:\n"
    "                          the GPU's free memory less a margin; with --gpus, one for\n"
    "                          each device or a list, one per device (11G,7G)\n"
    "  --gpus LIST             several devices chained by layer range, each holding its\n"
    "                          layers (attention, KV cache, predictor, hot neurons), one\n"
    "                          gpu worker process each: CUDA device numbers (0,1; 0,0\n"
    "                          shares one GPU: a test of the path) or host (a host-backend\n"
    "                          worker standing in for a GPU: host,host)\n"
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
    flags->vram_budgets = args->VramBudgets(flag);
    flags->vram_budget = flags->vram_budgets.empty() ? -1 : flags->vram_budgets[0];
  } else if (flag == "--gpus") {
    const std::string list = args->String(flag);
    flags->gpus = args->failed() ? std::vector<std::string>() : SplitCommaList(list);
    for (const std::string& item : flags->gpus) {
      const bool number = !item.empty() && item.size() < 4 &&
                          item.find_first_not_of("0123456789") == std::string::npos;
      if (item != "host" && !number) {
        args->Fail(
            "--gpus expects CUDA device numbers or host, comma-separated (0,1; host,host), "
            "got '" +
            item + "'");
        break;
      }
    }
    if (flags->gpus.size() > 16) args->Fail("--gpus names more than 16 devices");
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

std::string JoinList(const std::vector<std::string>& items) {
  std::string s;
  for (const std::string& i : items) s += (s.empty() ? "" : ",") + i;
  return s;
}

// --gpus: a budget per device (one given: the same for each), checked.
Status DeviceBudgets(const GpuSplitFlags& flags, std::vector<int64_t>* budgets) {
  const size_t n = flags.gpus.size();
  if (flags.remote_device) {
    return Status::Error("--gpus with --remote-gpu-worker: one remote gpu worker at a time");
  }
  if (flags.host_device) {
    return Status::Error("--gpus names each device's backend: host entries, not --host-device");
  }
  *budgets = flags.vram_budgets;
  if (budgets->size() == 1) budgets->assign(n, flags.vram_budgets[0]);
  if (budgets->size() != n) {
    return Status::Error("--vram-budget gives %zu budgets for the %zu devices of --gpus %s",
                         flags.vram_budgets.size(), n, JoinList(flags.gpus).c_str());
  }
  for (int64_t b : *budgets) {
    if (b == ArgReader::kVramBudgetAuto) {
      return Status::Error("--vram-budget auto with --gpus: give each device's size (11G,11G)");
    }
  }
  return Status::Ok();
}

bool Exists(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0;
}

// The settings every device of the plan shares: context, sequences, cache
// types, predictor, or --sparse cats' and teal's thresholds.
Status BaseDevicePlan(const LlamaModel& model, int n_ctx, const EngineOptions& options,
                      DevicePlan* dp) {
  dp->hot.assign(model.config.n_layer, {});
  dp->n_ctx = n_ctx;
  dp->n_seq = options.n_seq;
  dp->cache_type_k = options.cache_type_k;
  dp->cache_type_v = options.cache_type_v;
  if (options.sparse == SparseMode::kPredictor) {
    dp->mode = SparseMode::kPredictor;
    PI_RETURN_IF_ERROR(
        ResolvePredictorThreshold(model.config, options.sparse_threshold, &dp->threshold));
  }
  if (UsesGateThresholds(options.sparse)) {
    dp->mode = options.sparse;
    dp->gate_thresholds = options.gate_thresholds;
  }
  if (options.sparse == SparseMode::kTeal) {
    for (int k = 0; k < kProjectionInputs; ++k) {
      dp->input_thresholds[k] = options.input_thresholds[k];
    }
  }
  return Status::Ok();
}

// The GPU side of a plan: its layers are the prefix whose attention and KV
// cache it holds (placement.h places them in layer order), with their hot
// neurons; loads the device and points options->device at it.
Status SetUpDevice(const char* tool, const LlamaModel& model, const Placement& plan, int n_ctx,
                   const GpuSplitFlags& flags, GpuSplit* split, EngineOptions* options) {
  const LlamaConfig& c = model.config;
  DevicePlan dp;
  PI_RETURN_IF_ERROR(BaseDevicePlan(model, n_ctx, *options, &dp));
  while (dp.n_layers < c.n_layer && plan.layers[dp.n_layers].attn_on_gpu &&
         plan.layers[dp.n_layers].kv_on_gpu) {
    ++dp.n_layers;
  }
  dp.output = plan.output_on_gpu;
  int64_t n_hot = 0;
  for (int il = 0; il < dp.n_layers; ++il) {
    dp.hot[il] = plan.layers[il].gpu_neurons;
    n_hot += static_cast<int64_t>(dp.hot[il].size());
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
  split->devices.plans = {dp};
  split->devices.kinds = {kind};
  split->devices.cuda_devices = {""};
  if (flags.hot_in_worker || flags.remote_device) {
    if (flags.remote_device) {
      fprintf(stderr, "%s: GPU in the remote gpu worker: %s; the rest here\n", tool, what.c_str());
    } else {
      fprintf(stderr, "%s: GPU ('%s' backend) in the gpu worker process: %s; the rest here\n", tool,
              kind, what.c_str());
    }
    split->device_in_worker = true;
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

// --gpus: device k of the plan (PlaceOnDevices) holds its range of layers on
// flags.gpus[k]; the devices go to gpu worker processes (hot_in_worker) or
// run here chained (host ones, or several on this process's GPU).
Status SetUpDeviceChain(const char* tool, const LlamaModel& model, const Placement& plan, int n_ctx,
                        const GpuSplitFlags& flags, GpuSplit* split, EngineOptions* options) {
  const LlamaConfig& c = model.config;
  DevicePlan base;
  PI_RETURN_IF_ERROR(BaseDevicePlan(model, n_ctx, *options, &base));
  std::string gpu_seen;
  for (int k = 0, first = 0; k < static_cast<int>(flags.gpus.size()); ++k) {
    const bool host = flags.gpus[k] == "host";
    DevicePlan dp = base;
    dp.first_layer = first;
    dp.n_layers = first = first + plan.device_layers[k];
    dp.output = plan.output_device == k;
    int64_t n_hot = 0;
    for (int il = dp.first_layer; il < dp.n_layers; ++il) {
      dp.hot[il] = plan.layers[il].gpu_neurons;
      n_hot += static_cast<int64_t>(dp.hot[il].size());
    }
    const std::string who = "device " + std::to_string(k) + " (" +
                            (host ? std::string("host") : "GPU " + flags.gpus[k]) + ")";
    if (dp.n_layers == dp.first_layer && !dp.output) {
      fprintf(stderr, "%s: %s: its budget of %s holds no layer: left out\n", tool, who.c_str(),
              HumanBytes(plan.device_budgets[k]).c_str());
      continue;
    }
    fprintf(stderr, "%s: %s: layers %d..%d with %lld of %lld FFN neurons%s: %s of %s\n", tool,
            who.c_str(), dp.first_layer, dp.n_layers - 1, static_cast<long long>(n_hot),
            static_cast<long long>(dp.n_layers - dp.first_layer) * c.n_ff,
            dp.output ? ", the output head" : "",
            HumanBytes(DeviceUsedBytes(plan, model, k)).c_str(),
            HumanBytes(plan.device_budgets[k]).c_str());
    if (!host && gpu_seen.empty()) gpu_seen = flags.gpus[k];
    if (!host && !flags.hot_in_worker && flags.gpus[k] != gpu_seen) {
      return Status::Error(
          "--gpus %s: several GPUs run in gpu worker processes, one each (pi-launch, pi-run "
          "--gpu-worker, pi-bench --transport gpu-shm); this process runs on one",
          JoinList(flags.gpus).c_str());
    }
    split->devices.plans.push_back(std::move(dp));
    split->devices.kinds.push_back(host ? "host" : "cuda");
    split->devices.cuda_devices.push_back(host ? "" : flags.gpus[k]);
  }
  if (split->devices.plans.empty()) {
    fprintf(stderr,
            "%s: the VRAM budgets hold no layer and not the output head: everything "
            "runs on the CPU\n",
            tool);
    return Status::Ok();
  }
  if (flags.hot_in_worker) {
    fprintf(stderr, "%s: %zu gpu worker processes, chained by layer; the rest here\n", tool,
            split->devices.plans.size());
    split->device_in_worker = true;
    return Status::Ok();
  }
  std::vector<DeviceBackend*> members;
  for (size_t k = 0; k < split->devices.plans.size(); ++k) {
    std::unique_ptr<DeviceBackend> device;
    if (split->devices.kinds[k] == "host") {
      device = std::make_unique<HostDeviceBackend>(options->n_threads);
    } else {
      PI_RETURN_IF_ERROR(CreateDeviceBackend(&device));
    }
    device = std::make_unique<LayerRangeDevice>(std::move(device));
    PI_RETURN_IF_ERROR(device->Load(model, split->devices.plans[k]));
    members.push_back(device.get());
    split->members.push_back(std::move(device));
  }
  split->chain = std::make_unique<DeviceChain>();
  PI_RETURN_IF_ERROR(split->chain->Init(model, members));
  fprintf(stderr, "%s: devices chained in this process: %s; %s in all; the rest on the CPU\n", tool,
          split->chain->name(), HumanBytes(split->chain->resident_bytes()).c_str());
  options->device = split->chain.get();
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
    PI_RETURN_IF_ERROR(flags.gpus.empty()
                           ? SetUpDevice(tool, model, plan, n_ctx, flags, split, options)
                           : SetUpDeviceChain(tool, model, plan, n_ctx, flags, split, options));
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
    return Status::Ok();
  }
  std::unique_ptr<Shard> hot_shard;
  PI_RETURN_IF_ERROR(
      LoadHotShard(flags.ffn_backend, 1, model, split->hot, options->gate_thresholds, &hot_shard));
  // Say why "auto" did not pick the GPU: the backend is never swapped silently.
  if (flags.ffn_backend == "auto") why = " (auto: " + why + ")";
  fprintf(stderr,
          "%s: FFN split: %lld of %lld neurons hot (%s of rows) on the '%s' backend%s, the rest "
          "on the CPU; plan %s %s\n",
          tool, static_cast<long long>(n_hot),
          static_cast<long long>(model.config.n_layer) * model.config.n_ff,
          HumanBytes(HotRowBytes(model, split->hot)).c_str(), hot_shard->backend(), why.c_str(),
          plan_path.c_str(), reused ? "reused" : "written");
  split->hot_shard = std::move(hot_shard);
  split->plan = std::move(plan);
  split->plan_path = plan_path;
  options->hot_shard = split->hot_shard.get();
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
    if (!flags.gpus.empty()) {
      fprintf(stderr, "%s: --gpus has no effect without --vram-budget\n", tool);
    }
    return Status::Ok();
  }
  if (flags.disable) {
    fprintf(stderr, "%s: --disable-gpu-index: no FFN split, every neuron on the CPU\n", tool);
    return Status::Ok();
  }
  const int n_gpus = static_cast<int>(flags.gpus.size());
  PlacementOptions opt;
  if (n_gpus > 0) {
    PI_RETURN_IF_ERROR(DeviceBudgets(flags, &opt.device_budgets));
  } else if (flags.vram_budgets.size() > 1) {
    return Status::Error("--vram-budget lists %zu budgets: one per device of --gpus",
                         flags.vram_budgets.size());
  }
  ActivationStats stats;
  std::string stats_path;
  PI_RETURN_IF_ERROR(ReadModelStats(tool, "--vram-budget needs activation statistics", model_path,
                                    flags.stats_path, model, &stats, &stats_path));

  // A GPU takes a prefix of the layers when not all of them fit; the host
  // backend only hot neurons.
  std::string why;
  if (flags.host_device && flags.ffn_backend == "cuda") {
    return Status::Error(
        "--host-device runs the GPU's share on the CPU: not with --ffn-backend cuda");
  }
  const bool cuda = !flags.host_device && !flags.remote_device && flags.ffn_backend != "host" &&
                    CudaAvailable(&why);
  // --gpus names each device's backend; its workers (or CreateDeviceBackend) check.
  if (flags.ffn_backend == "cuda" && !cuda && !flags.remote_device && n_gpus == 0) {
    return Status::Error("--ffn-backend cuda is not available: %s", why.c_str());
  }
  // The device path: a GPU (or the host standing in for one, or a remote
  // gpu worker) takes whole layers.
  const bool device_path = cuda || flags.host_device || flags.remote_device || n_gpus > 0;
  int64_t budget = flags.vram_budget;
  if (n_gpus > 0) {
    budget = 0;
    for (int64_t b : opt.device_budgets) budget += b;  // each below 4 EiB (ArgReader)
  }
  if (budget == ArgReader::kVramBudgetAuto) {
    PI_RETURN_IF_ERROR(ResolveAutoBudget(tool, flags, cuda, &budget));
  }
  split->vram_budget = budget;
  opt.allow_partial_dense = true;  // what fits, said below
  opt.vram_budget = budget;
  // The device path keeps every sequence's KV cache (-np) on the GPU.
  opt.n_ctx = device_path ? n_ctx * options->n_seq : n_ctx;
  opt.cache_type_k = options->cache_type_k;
  opt.cache_type_v = options->cache_type_v;
  const std::string plan_path =
      flags.plan_path.empty() ? DefaultPlanPath(model_path, budget, opt.n_ctx, opt.cache_type_k,
                                                opt.cache_type_v, std::max(1, n_gpus))
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
  if (!reused && n_gpus > 0) {
    PI_RETURN_IF_ERROR(PlaceOnDevices(model, stats, opt, &plan));
  } else if (!reused) {
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
