// pi-place: decides what goes in VRAM under --vram-budget (dense blocks
// first, then hot FFN neurons by expected firings per byte; see
// common/plan/placement.h), writes the plan next to the model and, with --gpuidx,
// PowerInfer's .generated.gpuidx. An existing plan or index made for another
// budget, context, model or statistics is never reused: it is replaced, and
// the reason is printed.
//
//   pi-place -m model.gguf --vram-budget 11G
//   pi-place -m model.gguf --stats m.stats.gguf --vram-budget 8G -c 2048 --gpuidx
#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "cli/args.h"
#include "cli/cache_type_flags.h"
#include "cli/tool_main.h"
#include "common/base/memory_limits.h"
#include "common/model/llama_model.h"
#include "common/plan/activation_stats.h"
#include "common/plan/gpu_index.h"
#include "common/plan/placement.h"

namespace {

void Usage() {
  fprintf(
      stderr,
      "usage: pi-place -m MODEL --vram-budget SIZE [options]\n"
      "  -m, --model FILE        GGUF model\n"
      "  --stats FILE            activation stats from pi-profile\n"
      "                          (default: MODEL without .gguf + .stats.gguf)\n"
      "  --vram-budget SIZE      VRAM to use: a bare number is GiB as in PowerInfer (8),\n"
      "                          or 512M, 11G, 4096B; a list (11G,11G) plans for several\n"
      "                          devices chained by layer, as --gpus runs them\n"
      "  -c, --ctx-size N        KV cache positions to reserve (default min(model ctx, 4096))\n"
      "  -ctk, -ctv TYPE         KV cache key / value rows the engine will use (default f16)\n"
      "  -o, --output FILE       plan (default: MODEL without .gguf + .plan-<budget>.gguf)\n"
      "  --gpuidx [FILE]         also write PowerInfer's index (default MODEL.generated.gpuidx)\n"
      "  --group N               neurons per placement group (default 32: one warp)\n"
      "  (a budget below the dense blocks places a prefix of them and no neuron, and says\n"
      "  so; --partial-dense, which asked for that, is accepted and does nothing)\n"
      "  --reset-gpu-index       rewrite the plan and index even when they are up to date\n");
}

bool Exists(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0;
}

// Why the plan at `path` cannot be reused ("" when it can).
std::string StalePlanReason(const std::string& path, const pi::Placement& want,
                            const pi::LlamaModel& model, const pi::ActivationStats& stats,
                            const pi::PlacementOptions& opt) {
  pi::Placement old;
  pi::Status s = pi::ReadPlan(path, &old);
  if (s.ok()) s = pi::CheckPlanMatches(old, model, stats, opt);
  if (!s.ok()) return s.message();
  for (size_t il = 0; il < want.layers.size(); ++il) {
    if (old.layers[il].gpu_neurons != want.layers[il].gpu_neurons) {
      return "layer " + std::to_string(il) + " differs (made by another version of pi-place)";
    }
  }
  return "";
}

std::string StaleIndexReason(const std::string& path, const pi::GpuIndex& want) {
  pi::GpuIndex old;
  pi::Status s = pi::ReadGpuIndex(path, &old);
  if (!s.ok()) return s.message();
  if (old.vram_capacity != want.vram_capacity) {
    return "it was solved for split.vram_capacity " + std::to_string(old.vram_capacity) +
           " bytes, not " + std::to_string(want.vram_capacity);
  }
  if (old.n_ff != want.n_ff || old.gpu_neurons != want.gpu_neurons) {
    return "its neurons differ (another model, statistics, context or group)";
  }
  return "";
}

// The plan as a table: per layer what is on the GPU, per device its layers,
// the bytes against the budget.
void PrintPlan(const pi::Placement& plan, const pi::LlamaModel& model,
               const pi::PlacementOptions& opt, const std::vector<int64_t>& budgets) {
  const pi::LlamaConfig& c = model.config;
  const int64_t budget = opt.vram_budget;
  printf("layer | dense on GPU        | hot neurons on GPU       | firings served by GPU\n");
  for (int il = 0; il < c.n_layer; ++il) {
    const pi::LayerPlacement& l = plan.layers[il];
    std::string dense;
    dense += l.attn_on_gpu ? "attn" : "-";
    dense += l.predictor_on_gpu ? " pred" : "";
    dense += l.kv_on_gpu ? " kv" : "";
    printf("%5d | %-19s | %7zu / %-7d %6.2f%% | %6.2f%%\n", il, dense.c_str(), l.gpu_neurons.size(),
           c.n_ff, 100.0 * l.gpu_neurons.size() / c.n_ff, 100.0 * l.firing_share);
  }
  printf("output + output_norm on GPU: %s; KV cache for %d positions; groups of %d neurons\n",
         plan.output_on_gpu ? "yes" : "no", opt.n_ctx, opt.group);
  for (size_t k = 0, first = 0; budgets.size() > 1 && k < budgets.size(); ++k) {
    const int n = plan.device_layers[k];
    const int64_t used = pi::DeviceUsedBytes(plan, model, static_cast<int>(k));
    printf("device %zu: layers %s%s, %lld B (%s) of %lld B (%s)\n", k,
           n == 0 ? "none" : (std::to_string(first) + ".." + std::to_string(first + n - 1)).c_str(),
           plan.output_device == static_cast<int>(k) ? " and the output head" : "",
           static_cast<long long>(used), pi::HumanBytes(used).c_str(),
           static_cast<long long>(budgets[k]), pi::HumanBytes(budgets[k]).c_str());
    first += n;
  }
  printf(
      "dense %lld B (%s) + neurons %lld B (%s) = %lld B (%s) of budget %lld B (%s); %lld B "
      "(%s) left\n",
      static_cast<long long>(plan.dense_bytes), pi::HumanBytes(plan.dense_bytes).c_str(),
      static_cast<long long>(plan.neuron_bytes), pi::HumanBytes(plan.neuron_bytes).c_str(),
      static_cast<long long>(plan.used_bytes()), pi::HumanBytes(plan.used_bytes()).c_str(),
      static_cast<long long>(budget), pi::HumanBytes(budget).c_str(),
      static_cast<long long>(budget - plan.used_bytes()),
      pi::HumanBytes(budget - plan.used_bytes()).c_str());
  printf("budgets at -c %d: %s\n", opt.n_ctx,
         pi::RegimeBudgetsString(pi::GetRegimeBudgets(model, opt)).c_str());
}

// The plan (and, when `gpuidx_path` is set, PowerInfer's index), each reused
// only when it says exactly this placement. The exit status.
int WriteFiles(const pi::Placement& plan, const pi::LlamaModel& model,
               const pi::ActivationStats& stats, const pi::PlacementOptions& opt, bool reset,
               const std::string& plan_path, const std::string& gpuidx_path) {
  pi::Status s;
  const std::string plan_stale =
      reset || !Exists(plan_path) ? "" : StalePlanReason(plan_path, plan, model, stats, opt);
  if (!reset && Exists(plan_path) && plan_stale.empty()) {
    printf("plan %s is up to date\n", plan_path.c_str());
  } else {
    if (!plan_stale.empty()) {
      printf("replacing %s: %s\n", plan_path.c_str(), plan_stale.c_str());
    }
    s = pi::WritePlan(plan, plan_path);
    if (!s.ok()) {
      fprintf(stderr, "pi-place: %s\n", s.message().c_str());
      return 1;
    }
    printf("wrote plan %s\n", plan_path.c_str());
  }
  if (!gpuidx_path.empty()) {
    const pi::GpuIndex index = pi::GpuIndexFromPlacement(plan);
    const std::string stale =
        reset || !Exists(gpuidx_path) ? "" : StaleIndexReason(gpuidx_path, index);
    if (!reset && Exists(gpuidx_path) && stale.empty()) {
      printf("gpu index %s is up to date\n", gpuidx_path.c_str());
    } else {
      if (!stale.empty()) {
        printf("replacing %s: %s\n", gpuidx_path.c_str(), stale.c_str());
      }
      s = pi::WriteGpuIndex(index, gpuidx_path);
      if (!s.ok()) {
        fprintf(stderr, "pi-place: %s\n", s.message().c_str());
        return 1;
      }
      printf("wrote gpu index %s\n", gpuidx_path.c_str());
    }
  }
  return 0;
}

}  // namespace

static int Run(int argc, char** argv) {
  // "--gpuidx" may stand without a value: give it an empty one (the default).
  std::vector<char*> av;
  static char kEmpty[] = "";
  for (int i = 0; i < argc; ++i) {
    av.push_back(argv[i]);
    if (std::string(argv[i]) == "--gpuidx" &&
        (i + 1 >= argc || (argv[i + 1][0] == '-' && argv[i + 1][1] != '\0'))) {
      av.push_back(kEmpty);
    }
  }
  pi::ArgReader args("pi-place", static_cast<int>(av.size()), av.data());
  std::string model_path, stats_path, plan_path, gpuidx_path;
  bool want_gpuidx = false, reset = false;
  int64_t budget = -1;
  std::vector<int64_t> budgets;
  pi::PlacementOptions opt;
  const int flags_rc = args.ReadFlags(
      [&](const std::string& f) {
        if (f == "-m" || f == "--model")
          model_path = args.String(f);
        else if (f == "--stats")
          stats_path = args.String(f);
        else if (f == "--vram-budget") {
          budgets = args.VramBudgets(f);
          // Their sum (each is below 4 EiB); auto anywhere is auto, refused below.
          budget = 0;
          for (int64_t b : budgets) budget = b < 0 || budget < 0 ? std::min(b, budget) : budget + b;
        } else if (f == "-c" || f == "--ctx-size")
          opt.n_ctx = args.Int(f);
        else if (pi::ParseCacheTypeFlag(f, &args, &opt.cache_type_k, &opt.cache_type_v)) {
        } else if (f == "-o" || f == "--output")
          plan_path = args.String(f);
        else if (f == "--gpuidx") {
          gpuidx_path = args.String(f);
          want_gpuidx = true;
        } else if (f == "--group")
          opt.group = args.Int(f);
        else if (f == "--partial-dense")
          opt.allow_partial_dense = true;
        else if (f == "--reset-gpu-index")
          reset = true;
        else {
          return false;
        }
        return true;
      },
      Usage);
  if (flags_rc >= 0) return flags_rc;
  if (budget == pi::ArgReader::kVramBudgetAuto) {
    fprintf(stderr,
            "pi-place: --vram-budget auto is resolved by the tools that load the model on the "
            "GPU (pi-run, pi-launch, pi-bench); pi-place plans for a size: give one\n");
    return 2;
  }
  opt.allow_partial_dense = true;
  if (model_path.empty() || budget < 0) {
    fprintf(stderr, "pi-place: -m MODEL and --vram-budget SIZE are required (see --help)\n");
    return 2;
  }
  if (opt.n_ctx < 0 || opt.group < 1) {
    fprintf(stderr, "pi-place: -c must be >= 0 and --group >= 1\n");
    return 2;
  }
  opt.vram_budget = budget;
  if (budgets.size() > 1) {
    if (want_gpuidx) {
      fprintf(stderr, "pi-place: --gpuidx is PowerInfer's index for one GPU, not for %zu\n",
              budgets.size());
      return 2;
    }
    opt.device_budgets = budgets;
  }
  if (stats_path.empty()) stats_path = pi::DefaultStatsPath(model_path);
  if (want_gpuidx && gpuidx_path.empty()) gpuidx_path = model_path + ".generated.gpuidx";
  if (!pi::CheckOutputs("pi-place", {plan_path, want_gpuidx ? gpuidx_path : ""})) return 1;

  pi::LlamaModel model;
  pi::ActivationStats stats;
  pi::Status s = pi::LoadLlamaModel(model_path, &model);
  if (s.ok() && !Exists(stats_path)) {
    s = pi::Status::Error("no activation stats at %s: run pi-profile -m %s -f CORPUS first",
                          stats_path.c_str(), model_path.c_str());
  }
  if (s.ok()) s = pi::ReadActivationStats(stats_path, &stats);
  std::string reuse_note;
  if (s.ok()) s = pi::CheckStatsMatchModel(stats, model, &reuse_note).WithContext(stats_path);
  if (s.ok() && !reuse_note.empty()) {
    fprintf(stderr, "pi-place: %s: %s\n", stats_path.c_str(), reuse_note.c_str());
  }
  const pi::LlamaConfig& c = model.config;
  if (s.ok() && opt.n_ctx == 0) {
    opt.n_ctx = c.n_ctx_train > 0 ? std::min(c.n_ctx_train, 4096) : 4096;
  }
  if (plan_path.empty()) {  // every key of the plan in its name (placement.h)
    plan_path = pi::DefaultPlanPath(model_path, budget, opt.n_ctx, opt.cache_type_k,
                                    opt.cache_type_v, static_cast<int>(budgets.size()));
  }
  pi::Placement plan;
  if (s.ok())
    s = budgets.size() > 1 ? pi::PlaceOnDevices(model, stats, opt, &plan)
                           : pi::Place(model, stats, opt, &plan);
  if (!s.ok()) {
    fprintf(stderr, "pi-place: %s\n", s.message().c_str());
    return 1;
  }
  if (!plan.dense_complete) {
    fprintf(stderr, "pi-place: %s\n", pi::PartialDenseNote(plan, model).c_str());
  }
  std::string why;
  if (stats.pass_target >= 0) {
    fprintf(stderr,
            "pi-place: note: the neurons are ranked by how often they pass --sparse cats' "
            "threshold at --target-sparsity %.2f (pi-profile's counts): run that target\n",
            stats.pass_target);
  } else if (!pi::SupportsSparseFfn(model, &why)) {
    fprintf(stderr, "pi-place: note: %s; hot neurons only pay off on a sparse model\n",
            why.c_str());
  }

  PrintPlan(plan, model, opt, budgets);
  return WriteFiles(plan, model, stats, opt, reset, plan_path, want_gpuidx ? gpuidx_path : "");
}

int main(int argc, char** argv) {
  return pi::RunTool("pi-place", Run, argc, argv);
}
