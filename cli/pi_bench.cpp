// pi-bench: llama-bench's measurements for this engine.
//
//   pp N: a batch of N random tokens from an empty context; t/s = N / time.
//   tg N: N single-token decodes from an empty context;     t/s = N / time.
// One untimed warmup, then -r repetitions; mean ± sample stddev of per-run
// t/s. Tokenization and sampling are excluded.
//
// Beyond llama-bench: the weight bytes each generated token reads, the GB/s
// that implies, and a read-bandwidth probe of this machine with the same
// threads, so a tg row shows how close decode runs to the memory limit. With
// a hot/cold split (--vram-budget) a tg row also splits those bytes by device
// under the plan, with the GPU's share of the fired neurons, and compares the
// measured time with the time model's bound (common/offline/time_model.h).
#include <algorithm>
#include <array>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "cli/activation_flag.h"
#include "cli/args.h"
#include "cli/cache_type_flags.h"
#include "cli/default_model.h"
#include "cli/gpu_split.h"
#include "cli/read_file.h"
#include "cli/server_bench.h"
#include "cli/sparse_note.h"
#include "cli/tool_main.h"
#include "common/base/executable_path.h"
#include "common/base/memory_bandwidth.h"
#include "common/base/progress.h"
#include "common/compute/neuron_ffn.h"
#include "common/model/weight_repack.h"
#include "common/offline/time_model.h"
#include "common/plan/placement.h"
#include "common/text/json.h"
#include "common/text/tokenizer.h"
#include "coordinator/engine/engine.h"
#include "coordinator/topology/topology.h"
#include "coordinator/workers/device_worker.h"
#include "coordinator/workers/local_workers.h"
#include "coordinator/workers/remote_shard.h"
#ifdef PI_HAVE_GRPC
#include "coordinator/workers/grpc_link.h"
#include "coordinator/workers/loopback_worker.h"
#endif
#include "gpu_worker/gpu_bandwidth.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/weight_panels.h"

namespace {

void Usage() {
  fprintf(stderr,
          "usage: pi-bench [options]   (list flags take comma lists: -t 1,2)\n"
          "  -m, --model FILE[,FILE]  GGUF models (default: the bundled demo model)\n"
          "  -p, --n-prompt N[,N]     prompt lengths (default 512; 0 = skip)\n"
          "  -n, --n-gen N[,N]        generated lengths (default 128; 0 = skip)\n"
          "  -t, --threads N[,N]      threads (default: all cores)\n"
          "  -np, --parallel N[,N]    tg tests with N sequences decoding together, each\n"
          "                           step one token of each (continuous batching; test\n"
          "                           tgNxP, t/s over all of them; default 1)\n"
          "  -b, --batch-size N       prompt tokens per forward batch (default 512, as\n"
          "                           llama-bench's micro-batch; pi-run's default is 64)\n"
          "  -r, --repetitions N      (default 5)\n"
          "  -o, --output md|csv|json|jsonl   (default md)\n"
          "  --isa scalar|avx2|avx2-novnni|avx512   force a kernel level (default: best\n"
          "                           available; avx2-novnni: AVX2 without AVX-VNNI)\n"
          "  -nr, --no-repack 0|1[,..] 1: keep Q4_0, Q4_K, Q5_K and float matrices in the file\n"
          "                           layout; 0,1 runs both, interleaved (default 0:\n"
          "                           repacked at load for the CPU kernels; isa column +rp\n"
          "                           when used)\n"
          "  --no-bw                  skip the memory-bandwidth probes (CPU and GPU)\n"
          "  --link-gbs X             CPU-GPU link bandwidth in GB/s for the time bound\n"
          "                           (default unknown: transfers left out of the bound)\n"
          "  --sparse off[,oracle][,predictor][,cats][,teal]  FFN sparsity modes to compare\n"
          "                           (default off)\n"
          "  --target-sparsity F[,F]  cats and teal runs: the shares skipped (default 0.5;\n"
          "                           thresholds from --stats, default MODEL.stats.gguf)\n"
          "  --transport inproc[,shm][,grpc]  where the cold neurons run in tg tests: this\n"
          "                          process, or a pi-cpu-worker process with -t threads over\n"
          "                          shared memory or over gRPC on 127.0.0.1 (needs ffn_down_t);\n"
          "                          repetitions interleaved (default inproc); gpu-shm: on\n"
          "                          the device path (a GPU, --host-device), the device's\n"
          "                          layers in a pi-gpu-worker process over shared memory\n"
          "  --worker-threads N       the worker process's threads (default: the run's -t)\n"
          "  --coordinator-share F    shm/grpc runs: this process computes this fraction of\n"
          "                           the cold neurons while the worker computes the rest\n"
          "                           (default 0)\n"
          "  --sparse-threshold X     predictor score threshold (default: env\n"
          "                           LLAMA_SPARSE_PRED_THRESHOLD, else the file's)\n"
          "  --server HOST:PORT       drive a running server's HTTP API instead (pi-bench\n"
          "                           --server --help)\n"
          "  --text FILE              take the tokens from this text (repeated as needed)\n"
          "                           instead of random ids: a sparse model's activations\n"
          "                           on real text, not on noise (tg then decodes the text)\n");
  fputs(pi::kCacheTypeUsage, stderr);
  fputs(pi::kGpuSplitUsage, stderr);
  fputs(pi::kFfnActivationUsage, stderr);
}

std::vector<std::string> SplitList(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

// The cap on -p/-n keeps the token buffers small before the engine checks the
// KV cache against the memory available; it is beyond any model's context.
constexpr int64_t kMaxTokens = 1 << 24;

// Whether the model has a repacked matrix the active level reads.
bool UsesPanels(const pi::LlamaModel& model) {
  const pi::Tensor& w = model.layers.empty() ? model.output : model.layers[0].wq;
  return (w.panels && pi::WeightPanelsFast(w.type)) ||
         (model.output.panels && pi::WeightPanelsFast(model.output.type));
}

std::vector<int> ToInts(const std::vector<int64_t>& v) {
  return std::vector<int>(v.begin(), v.end());
}

struct Result {
  std::string model_filename, model_type, test, isa;
  int64_t model_size = 0, model_n_params = 0;
  int n_threads = 0, n_batch = 0, n_prompt = 0, n_gen = 0;
  int n_parallel = 1;  // tg: sequences decoding together (-np), each n_gen tokens
  std::string test_time;
  std::vector<double> samples_ns;
  double weight_bytes_per_token = 0;  // tg only
  double mem_bw_gbs = 0;
  std::string sparse = "off";
  double ffn_active = 1.0;  // tg: share of FFN neurons computed per token
  // The split (--vram-budget) and the time model (tg rows; see time_model.h).
  std::string backend = "none";         // the hot neurons' backend
  int64_t vram_budget = -1;             // the plan's budget; -1 without a split
  std::vector<int64_t> device_budgets;  // each device's share of it (--gpus: several)
  std::string plan_fingerprint;         // FNV-1a 64 of the plan file; "" without
  double gpu_fired_share = 0;           // of the fired FFN neurons, those on the hot side
  pi::DeviceBytes device_bytes;         // per token
  double gpu_bw_gbs = 0, link_gbs = 0;
  // The worker step round trip of a shm run (p50, p99 over its timed steps),
  // and the p50 of its transport part (the round trip less the worker's
  // compute), µs.
  double step_p50_us = 0, step_p99_us = 0, step_overhead_p50_us = 0;
  double bound_ms_per_token = 0;  // 0: not computable
  // The device path's tg rows, per token (Engine::last_device_wait_seconds and
  // friends): µs waiting on the device, µs computing cold parts here, how
  // many cold parts (hand-offs), and the CPU's bytes over the cold time (its
  // rate while in them, when the host has no layers of its own).
  double device_wait_us = 0, cold_us = 0, cold_parts = 0, cold_gbs = 0;
  // Sparse tg rows: per token, µs the CPU's sparse FFN spent in each phase
  // (common/compute/neuron_ffn.h: quantizing the input, the deciding gate dots,
  // listing the neurons that passed, their up/down rows, adding the partial
  // sums) — on a many-core host, whether fixed costs or bytes dominate.
  pi::NeuronFfnTimes ffn_phase_us;

  double avg(const std::vector<double>& v) const {
    double s = 0;
    for (double x : v) s += x;
    return v.empty() ? 0 : s / v.size();
  }
  double stddev(const std::vector<double>& v) const {
    if (v.size() < 2) return 0;
    const double m = avg(v);
    double s = 0;
    for (double x : v) s += (x - m) * (x - m);
    return std::sqrt(s / (v.size() - 1));
  }
  std::vector<double> samples_ts() const {
    std::vector<double> ts;
    const int n = (n_prompt + n_gen) * n_parallel;
    for (double ns : samples_ns) ts.push_back(1e9 * n / ns);
    return ts;
  }
  double avg_gbs() const {
    return n_gen > 0 ? weight_bytes_per_token * avg(samples_ts()) / 1e9 : 0.0;
  }
  // The bound's share of the measured time per token (1: at the bound).
  double bound_fraction() const {
    const double ms_per_token = avg(samples_ns) / 1e6 / std::max(1, n_gen);
    return n_gen > 0 && ms_per_token > 0 ? bound_ms_per_token / ms_per_token : 0.0;
  }
};

// The file's name without its folder: what tells two rows' models apart.
std::string Basename(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

std::string IsoNow() {
  char buf[32];
  const time_t t = time(nullptr);
  strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", gmtime(&t));
  return buf;
}

std::string Fmt(const char* fmt, double v) {
  char buf[64];
  snprintf(buf, sizeof(buf), fmt, v);
  return buf;
}

// Each device's budget, as integers joined by `sep` ("+" in csv, "," in json).
std::string DeviceBudgets(const Result& r, const char* sep) {
  std::string s;
  for (size_t i = 0; i < r.device_budgets.size(); ++i) {
    s += (i ? sep : "") + std::to_string(r.device_budgets[i]);
  }
  return s;
}

std::string JsonArray(const std::vector<double>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + pi::JsonNumber(v[i]);
  return s + "]";
}

// *acc += now - before, phase by phase.
void AddTimesSince(const pi::NeuronFfnTimes& now, const pi::NeuronFfnTimes& before,
                   pi::NeuronFfnTimes* acc) {
  acc->prepare += now.prepare - before.prepare;
  acc->gate += now.gate - before.gate;
  acc->select += now.select - before.select;
  acc->up_down += now.up_down - before.up_down;
  acc->sum += now.sum - before.sum;
  acc->calls += now.calls - before.calls;
}

std::string ToJson(const Result& r) {
  const std::vector<double> ts = r.samples_ts();
  std::string s = "{";
  s += "\"model_filename\":" + pi::JsonEscape(r.model_filename);
  s += ",\"model_type\":" + pi::JsonEscape(r.model_type);
  s += ",\"model_size\":" + std::to_string(r.model_size);
  s += ",\"model_n_params\":" + std::to_string(r.model_n_params);
  s += ",\"cpu_isa\":" + pi::JsonEscape(r.isa);
  s += ",\"n_batch\":" + std::to_string(r.n_batch);
  s += ",\"n_threads\":" + std::to_string(r.n_threads);
  s += ",\"n_prompt\":" + std::to_string(r.n_prompt);
  s += ",\"n_gen\":" + std::to_string(r.n_gen);
  s += ",\"n_parallel\":" + std::to_string(r.n_parallel);
  s += ",\"test_time\":" + pi::JsonEscape(r.test_time);
  s += ",\"avg_ns\":" + pi::JsonNumber(r.avg(r.samples_ns));
  s += ",\"stddev_ns\":" + pi::JsonNumber(r.stddev(r.samples_ns));
  s += ",\"avg_ts\":" + pi::JsonNumber(r.avg(ts));
  s += ",\"stddev_ts\":" + pi::JsonNumber(r.stddev(ts));
  s += ",\"samples_ns\":" + JsonArray(r.samples_ns);
  s += ",\"samples_ts\":" + JsonArray(ts);
  s += ",\"weight_bytes_per_token\":" + pi::JsonNumber(r.weight_bytes_per_token);
  s += ",\"avg_gbs\":" + pi::JsonNumber(r.avg_gbs());
  s += ",\"mem_bw_gbs\":" + pi::JsonNumber(r.mem_bw_gbs);
  s += ",\"sparse\":" + pi::JsonEscape(r.sparse);
  s += ",\"ffn_active\":" + pi::JsonNumber(r.ffn_active);
  s += ",\"bw_fraction\":" + pi::JsonNumber(r.mem_bw_gbs > 0 ? r.avg_gbs() / r.mem_bw_gbs : 0);
  s += ",\"backend\":" + pi::JsonEscape(r.backend);
  s += ",\"vram_budget\":" + std::to_string(r.vram_budget);
  s += ",\"device_budgets\":[" + DeviceBudgets(r, ",") + "]";
  s += ",\"plan_fingerprint\":" + pi::JsonEscape(r.plan_fingerprint);
  s += ",\"gpu_fired_share\":" + pi::JsonNumber(r.gpu_fired_share);
  s += ",\"gpu_bytes_per_token\":" + pi::JsonNumber(r.device_bytes.gpu);
  s += ",\"cpu_bytes_per_token\":" + pi::JsonNumber(r.device_bytes.cpu);
  s += ",\"xfer_bytes_per_token\":" + pi::JsonNumber(r.device_bytes.xfer);
  s += ",\"gpu_bw_gbs\":" + pi::JsonNumber(r.gpu_bw_gbs);
  s += ",\"link_gbs\":" + pi::JsonNumber(r.link_gbs);
  s += ",\"bound_ms_per_token\":" + pi::JsonNumber(r.bound_ms_per_token);
  s += ",\"bound_fraction\":" + pi::JsonNumber(r.bound_fraction());
  s += ",\"step_p50_us\":" + pi::JsonNumber(r.step_p50_us);
  s += ",\"step_p99_us\":" + pi::JsonNumber(r.step_p99_us);
  s += ",\"step_overhead_p50_us\":" + pi::JsonNumber(r.step_overhead_p50_us);
  s += ",\"device_wait_us_per_token\":" + pi::JsonNumber(r.device_wait_us);
  s += ",\"cold_us_per_token\":" + pi::JsonNumber(r.cold_us);
  s += ",\"cold_parts_per_token\":" + pi::JsonNumber(r.cold_parts);
  s += ",\"cold_gbs\":" + pi::JsonNumber(r.cold_gbs);
  const pi::NeuronFfnTimes& f = r.ffn_phase_us;
  s += ",\"ffn_prepare_us_per_token\":" + pi::JsonNumber(f.prepare);
  s += ",\"ffn_gate_us_per_token\":" + pi::JsonNumber(f.gate);
  s += ",\"ffn_select_us_per_token\":" + pi::JsonNumber(f.select);
  s += ",\"ffn_up_down_us_per_token\":" + pi::JsonNumber(f.up_down);
  s += ",\"ffn_sum_us_per_token\":" + pi::JsonNumber(f.sum);
  return s + "}";
}

// The md table's split columns: backend and budget, then for tg rows the
// GPU's share of the fired neurons, MB per token by device, the bound's share.
std::string SplitColumns(const Result& r) {
  const bool split = r.vram_budget >= 0;
  const bool tg = r.n_gen > 0 && r.n_parallel == 1;
  const pi::DeviceBytes& b = r.device_bytes;
  std::string s = split ? r.backend + " " : "none";
  if (split && r.device_budgets.size() > 1) {  // a chain: each device's budget
    for (size_t i = 0; i < r.device_budgets.size(); ++i) {
      s += (i ? "+" : "") + pi::BudgetString(r.device_budgets[i]);
    }
  } else if (split) {
    s += pi::BudgetString(r.vram_budget);
  }
  s += " | ";
  if (tg && split) s += Fmt("%.1f", 100 * r.gpu_fired_share) + "%";
  s += " | ";
  if (tg) {
    s += Fmt("%.2f", b.gpu / 1e6) + "/" + Fmt("%.2f", b.cpu / 1e6) + "/";
    s += Fmt("%.3f", b.xfer / 1e6);
  }
  s += " | ";
  if (tg && r.bound_ms_per_token > 0) s += Fmt("%.0f", 100 * r.bound_fraction()) + "%";
  return s;
}

void PrintResults(const std::vector<Result>& rs, const std::string& fmt) {
  if (fmt == "json") {
    printf("[\n");
    for (size_t i = 0; i < rs.size(); ++i)
      printf("  %s%s\n", ToJson(rs[i]).c_str(), i + 1 < rs.size() ? "," : "");
    printf("]\n");
  } else if (fmt == "jsonl") {
    for (const Result& r : rs) printf("%s\n", ToJson(r).c_str());
  } else if (fmt == "csv") {
    printf(
        "model_filename,model_type,model_size,model_n_params,cpu_isa,n_batch,n_threads,"
        "n_prompt,n_gen,test_time,avg_ns,stddev_ns,avg_ts,stddev_ts,weight_bytes_per_token,"
        "avg_gbs,mem_bw_gbs,bw_fraction,sparse,ffn_active,backend,vram_budget,device_budgets,"
        "plan_fingerprint,gpu_fired_share,gpu_bytes_per_token,cpu_bytes_per_token,xfer_bytes_per_"
        "token,gpu_bw_gbs,"
        "link_gbs,bound_ms_per_token,bound_fraction,step_p50_us,step_p99_us,step_overhead_p50_"
        "us,device_wait_us_per_token,cold_us_per_token,cold_parts_per_token,cold_gbs,"
        "ffn_prepare_us_per_token,ffn_gate_us_per_token,ffn_select_us_per_token,"
        "ffn_up_down_us_per_token,ffn_sum_us_per_token\n");
    for (const Result& r : rs) {
      const std::vector<double> ts = r.samples_ts();
      printf(
          "\"%s\",\"%s\",%lld,%lld,%s,%d,%d,%d,%d,%s,%.0f,%.0f,%.6f,%.6f,%.0f,%.3f,%.3f,%.4f,%s,"
          "%.4f,%s,%lld,%s,%s,%.4f,%.0f,%.0f,%.0f,%.3f,%.3f,%.6f,%.4f,%.2f,%.2f,%.2f,%.1f,%.1f,%."
          "2f,"
          "%.3f,%.1f,%.1f,%.1f,%.1f,%.1f\n",
          r.model_filename.c_str(), r.model_type.c_str(), static_cast<long long>(r.model_size),
          static_cast<long long>(r.model_n_params), r.isa.c_str(), r.n_batch, r.n_threads,
          r.n_prompt, r.n_gen, r.test_time.c_str(), r.avg(r.samples_ns), r.stddev(r.samples_ns),
          r.avg(ts), r.stddev(ts), r.weight_bytes_per_token, r.avg_gbs(), r.mem_bw_gbs,
          r.mem_bw_gbs > 0 ? r.avg_gbs() / r.mem_bw_gbs : 0.0, r.sparse.c_str(), r.ffn_active,
          r.backend.c_str(), static_cast<long long>(r.vram_budget), DeviceBudgets(r, "+").c_str(),
          r.plan_fingerprint.c_str(), r.gpu_fired_share, r.device_bytes.gpu, r.device_bytes.cpu,
          r.device_bytes.xfer, r.gpu_bw_gbs, r.link_gbs, r.bound_ms_per_token, r.bound_fraction(),
          r.step_p50_us, r.step_p99_us, r.step_overhead_p50_us, r.device_wait_us, r.cold_us,
          r.cold_parts, r.cold_gbs, r.ffn_phase_us.prepare, r.ffn_phase_us.gate,
          r.ffn_phase_us.select, r.ffn_phase_us.up_down, r.ffn_phase_us.sum);
    }
  } else {
    printf(
        "| model | size | params | isa | threads | sparse | FFN active | test | t/s | GB/s | "
        "mem BW GB/s | of BW | split | GPU fired | MB/tok GPU/CPU/xfer | of bound | step µs "
        "p50/p99 (transport) |\n");
    printf(
        "| --- | ---: | ---: | --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- | "
        "---: | ---: | ---: | ---: |\n");
    for (const Result& r : rs) {
      const std::vector<double> ts = r.samples_ts();
      const bool tg = r.n_gen > 0;
      const bool bytes =
          tg && r.n_parallel == 1;  // -np steps share their reads: no per-token figure
      printf("| %s | %s | %s | %s | %d | %s | %s | %s | %s ± %s | %s | %s | %s | %s | %s |\n",
             (Basename(r.model_filename) + ": " + r.model_type).c_str(),
             (Fmt("%.2f", r.model_size / 1048576.0) + " MiB").c_str(),
             (Fmt("%.2f", r.model_n_params / 1e6) + " M").c_str(), r.isa.c_str(), r.n_threads,
             r.sparse.c_str(), tg ? (Fmt("%.1f", 100 * r.ffn_active) + "%").c_str() : "",
             r.test.c_str(), Fmt("%.2f", r.avg(ts)).c_str(), Fmt("%.2f", r.stddev(ts)).c_str(),
             bytes ? Fmt("%.2f", r.avg_gbs()).c_str() : "",
             r.mem_bw_gbs > 0 ? Fmt("%.2f", r.mem_bw_gbs).c_str() : "",
             bytes && r.mem_bw_gbs > 0
                 ? (Fmt("%.0f", 100 * r.avg_gbs() / r.mem_bw_gbs) + "%").c_str()
                 : "",
             SplitColumns(r).c_str(),
             r.step_p50_us > 0 ? (Fmt("%.1f", r.step_p50_us) + "/" + Fmt("%.1f", r.step_p99_us) +
                                  " (" + Fmt("%.1f", r.step_overhead_p50_us) + ")")
                                     .c_str()
                               : "");
    }
  }
}

// What every row of a model says about its split: the backend, the plan's
// budget and the plan file's fingerprint; `plan` is null without a plan.
struct SplitInfo {
  std::string backend = "none";
  int64_t vram_budget = -1;
  std::vector<int64_t> device_budgets;  // one per device; empty without a split
  std::string plan_fingerprint;
  const pi::Placement* plan = nullptr;
};

SplitInfo DescribeSplit(const pi::GpuSplit& split) {
  SplitInfo info;
  if (split.plan_path.empty()) return info;  // no --vram-budget, or --disable-gpu-index
  // A GPU holds layers (device); the host's hot shard only hot neurons. A plan
  // that gives the GPU nothing loads neither, and everything runs here.
  if (split.device) {
    info.backend = split.device->name();
  } else if (!split.devices.kinds.empty()) {  // --gpus: "cuda" when every device is one
    info.backend = split.devices.kinds[0];
    for (const std::string& k : split.devices.kinds) {
      if (k != info.backend) info.backend = "mixed";
    }
  } else if (split.hot_shard) {
    info.backend = split.hot_shard->backend();
  }
  info.vram_budget = split.plan.vram_budget;
  info.device_budgets = split.plan.device_budgets;
  if (info.device_budgets.empty()) info.device_budgets.push_back(info.vram_budget);
  info.plan = &split.plan;
  // The file's bytes, as written or reused: the same fingerprint means the
  // same placement, whichever run or machine made it.
  std::string bytes;
  if (pi::ReadWholeFile(split.plan_path, &bytes).ok()) {
    info.plan_fingerprint = pi::Fnv1a64Hex(bytes);
  } else {
    fprintf(stderr, "pi-bench: cannot read the plan %s to fingerprint it\n",
            split.plan_path.c_str());
  }
  return info;
}

// The GPU's read bandwidth for the time bound: measured once per process, and
// only for a split on the cuda backend (the host backend's hot rows are in
// host memory); 0, with the reason on stderr, when there is none.
double GpuBandwidth(const SplitInfo& info, bool probe, std::optional<double>* measured) {
  if (!probe || info.backend != "cuda") return 0;
  if (!measured->has_value()) {
    std::string why;
    *measured = pi::MeasureGpuReadBandwidthGBs(&why);
    if (**measured <= 0) fprintf(stderr, "pi-bench: no GPU bandwidth: %s\n", why.c_str());
  }
  return **measured;
}

// Prints each distinct note once.
void NoteOnce(const std::string& note, std::set<std::string>* printed) {
  if (printed->insert(note).second) fprintf(stderr, "pi-bench: %s\n", note.c_str());
}

}  // namespace

namespace {

// The worker processes of --transport shm and grpc (one each), the
// loopback gRPC worker's process, and gpu-shm's gpu workers (the devices).
struct BenchWorkers {
  std::unique_ptr<pi::RemoteShard> shm, grpc;
  pi::Workers devices;  // gpu-shm's
#ifdef PI_HAVE_GRPC
  std::unique_ptr<pi::LoopbackWorker> grpc_process;
#endif
  pi::RemoteShard* Get(const std::string& transport) {
    return transport == "shm" ? shm.get() : transport == "grpc" ? grpc.get() : nullptr;
  }
};

pi::Status StartBenchWorkers(const std::vector<std::string>& transports, const std::string& path,
                             const pi::LlamaModel& model, int n_threads, double coordinator_share,
                             int max_batch, const pi::EngineOptions& split_opt,
                             const pi::GpuSplit& split, BenchWorkers* w) {
  auto wanted = [&](const char* t) {
    return std::find(transports.begin(), transports.end(), t) != transports.end();
  };
  if (wanted("gpu-shm")) {
    // The split's devices (the same plans as in this process, when loaded
    // here too), each on its backend in a process of its own.
    int n_layers = 0;
    for (const pi::DevicePlan& p : split.devices.plans) n_layers += p.n_layers - p.first_layer;
    if (n_layers == 0) {
      return pi::Status::Error(
          "gpu-shm needs the device path with layers on the device (--vram-budget with a GPU, "
          "--host-device or --gpus)");
    }
    pi::Topology t;
    t.model_path = path;
    t.n_threads = split_opt.n_threads;  // as the host device in this process
    t.worker_timeout_ms = 60000;
    PI_RETURN_IF_ERROR(pi::StartDeviceWorkers(nullptr, t, model, split.devices, &w->devices));
  }
  if (!wanted("shm") && !wanted("grpc")) return pi::Status::Ok();
  PI_RETURN_IF_ERROR(pi::CheckCpuWorkersPossible(model));
  const auto slice = pi::SplitColdNeurons(model, split_opt, 1, coordinator_share)[0];
  const std::string binary = pi::PathNextToExecutable("pi-cpu-worker");
  pi::RemoteShardOptions shard;
  shard.max_batch = max_batch;
  if (wanted("shm")) {
    pi::WorkerProcessOptions o;
    o.binary = binary;
    o.model_path = path;
    o.n_threads = n_threads;
    auto shm = std::make_unique<pi::RemoteShard>(pi::NewShmLink(o), shard);
    PI_RETURN_IF_ERROR(shm->Open(model, slice));
    w->shm = std::move(shm);
  }
  if (wanted("grpc")) {
#ifdef PI_HAVE_GRPC
    w->grpc_process = std::make_unique<pi::LoopbackWorker>();
    PI_RETURN_IF_ERROR(w->grpc_process->Start(binary, path, n_threads));
    pi::GrpcLinkOptions o;
    o.address = w->grpc_process->address();
    o.auth_token = w->grpc_process->token();
    auto grpc = std::make_unique<pi::RemoteShard>(pi::NewGrpcLink(o), shard);
    PI_RETURN_IF_ERROR(grpc->Open(model, slice));
    w->grpc = std::move(grpc);
#else
    return pi::Status::Error("grpc needs a build with gRPC (PI_GRPC)");
#endif
  }
  return pi::Status::Ok();
}

// Decode step i of a tg test: token i of the test's tokens alone, or with
// `par` sequences one token of each (sequence q's token i is toks[(i + 7 q)
// mod size]: each its own text), logits for all, as a server's step.
pi::Status DecodeStep(pi::Engine* engine, const std::vector<int32_t>& toks, int i, int par,
                      std::vector<pi::Engine::BatchRow>* rows) {
  if (par == 1) return engine->Eval(&toks[i], 1);
  for (int q = 0; q < par; ++q) {
    (*rows)[q] = {q, toks[(i + 7 * static_cast<size_t>(q)) % toks.size()], true};
  }
  return engine->EvalBatch(rows->data(), par);
}

// What the flags ask for.
struct BenchFlags {
  std::string ffn_activation;  // --ffn-activation
  pi::GpuSplitFlags split_flags;
  std::vector<std::string> models;
  std::vector<int> n_prompt = {512}, n_gen = {128}, n_parallel = {1};
  std::vector<int> threads = {static_cast<int>(std::max(1u, std::thread::hardware_concurrency()))};
  // A prompt in batches of 512, as llama-bench evaluates it, so pp figures
  // compare like for like.
  int reps = 5, n_batch = 512;
  std::string out_fmt = "md", isa_name;
  bool bw_probe = true;
  double link_gbs = 0;
  std::vector<pi::SparseMode> sparse_modes = {pi::SparseMode::kOff};
  std::vector<std::string> transports = {"inproc"};
  std::vector<int64_t> no_repack = {0};
  int worker_threads = 0;          // 0: each run's -t
  double coordinator_share = 0.0;  // of the cold neurons, in shm/grpc runs
  std::optional<float> sparse_threshold;
  std::vector<double> targets = {pi::kDefaultTargetSparsity};  // --target-sparsity (cats runs)
  std::string text_path, text;
  pi::DType cache_type_k = pi::DType::kF16, cache_type_v = pi::DType::kF16;

  int max_parallel() const { return *std::max_element(n_parallel.begin(), n_parallel.end()); }
  int max_threads() const { return *std::max_element(threads.begin(), threads.end()); }
};

bool ParseBenchFlag(const std::string& f, pi::ArgReader* args, BenchFlags* b) {
  if (f == "-m" || f == "--model") {
    for (const std::string& m : SplitList(args->String(f))) b->models.push_back(m);
  } else if (f == "-p" || f == "--n-prompt") {
    b->n_prompt = ToInts(args->IntList(f, 0, kMaxTokens));
  } else if (f == "-n" || f == "--n-gen") {
    b->n_gen = ToInts(args->IntList(f, 0, kMaxTokens));
  } else if (f == "-np" || f == "--parallel") {
    b->n_parallel = ToInts(args->IntList(f, 1, 256));
  } else if (f == "-t" || f == "--threads") {
    b->threads = ToInts(args->IntList(f, 1, 512));
  } else if (f == "-r" || f == "--repetitions")
    b->reps = args->Int(f);
  else if (f == "-b" || f == "--batch-size")
    b->n_batch = args->Int(f);
  else if (f == "-o" || f == "--output")
    b->out_fmt = args->String(f);
  else if (f == "--isa")
    b->isa_name = args->String(f);
  else if (f == "-nr" || f == "--no-repack")
    b->no_repack = args->IntList(f, 0, 1);
  else if (f == "--no-bw")
    b->bw_probe = false;
  else if (f == "--link-gbs")
    b->link_gbs = args->Float(f);
  else if (f == "--worker-threads")
    b->worker_threads = args->Int(f);
  else if (f == "--coordinator-share")
    b->coordinator_share = args->Float(f);
  else if (f == "--transport") {
    b->transports = SplitList(args->String(f));
    for (const std::string& t : b->transports) {
      if (t != "inproc" && t != "shm" && t != "grpc" && t != "gpu-shm")
        args->Fail("--transport expects inproc, shm, grpc or gpu-shm, got '" + t + "'");
    }
    if (b->transports.empty()) args->Fail("--transport expects inproc[,shm][,grpc][,gpu-shm]");
  } else if (f == "--sparse") {
    b->sparse_modes.clear();
    for (const std::string& m : SplitList(args->String(f))) {
      pi::SparseMode mode = pi::SparseMode::kOff;
      pi::ParseSparseModeValue(m, args, &mode);
      b->sparse_modes.push_back(mode);
    }
  } else if (f == "--sparse-threshold") {
    b->sparse_threshold = args->Float(f);
  } else if (f == "--target-sparsity") {
    b->targets.clear();
    for (const std::string& v : SplitList(args->String(f))) {
      char* end = nullptr;
      const double x = std::strtod(v.c_str(), &end);
      if (end == v.c_str() || *end != '\0' || !(x >= 0 && x < 1)) {
        args->Fail("--target-sparsity expects shares in [0, 1), got '" + v + "'");
      }
      b->targets.push_back(x);
    }
    if (b->targets.empty()) args->Fail("--target-sparsity expects F[,F]");
  } else if (f == "--text") {
    b->text_path = args->String(f);
  } else if (pi::ParseCacheTypeFlag(f, args, &b->cache_type_k, &b->cache_type_v)) {
  } else if (pi::ParseGpuSplitFlag(f, args, &b->split_flags)) {
  } else {
    return pi::ParseFfnActivationFlag(f, args, &b->ffn_activation);
  }
  return true;
}

// --isa: the kernels' instruction set for the whole run. The exit status
// when it cannot be had, else -1.
int SetIsa(const std::string& isa_name) {
  pi::CpuIsa isa;
  if (isa_name == "scalar")
    isa = pi::CpuIsa::kScalar;
  else if (isa_name == "avx2" || isa_name == "avx2-novnni")
    isa = pi::CpuIsa::kAvx2;
  else if (isa_name == "avx512")
    isa = pi::CpuIsa::kAvx512;
  else {
    fprintf(stderr, "pi-bench: unknown --isa '%s'\n", isa_name.c_str());
    return 2;
  }
  pi::SetCpuIsa(isa);
  pi::SetAvxVnni(isa_name != "avx2-novnni");
  if (pi::ActiveCpuIsa() != isa) {
    fprintf(stderr, "pi-bench: --isa %s is not available on this CPU/build\n", isa_name.c_str());
    return 2;
  }
  return -1;
}

// Reads and checks the flags (and --text's file): -1 to go on, else the exit status.
int ParseBenchFlags(int argc, char** argv, BenchFlags* b) {
  pi::ArgReader args("pi-bench", argc, argv);
  const int flags_rc =
      args.ReadFlags([&](const std::string& f) { return ParseBenchFlag(f, &args, b); }, Usage);
  if (flags_rc >= 0) return flags_rc;
  const char* bad =
      b->reps < 1                                        ? "-r must be at least 1"
      : b->n_batch < 1                                   ? "-b must be at least 1"
      : b->link_gbs < 0                                  ? "--link-gbs must not be negative"
      : b->worker_threads < 0 || b->worker_threads > 512 ? "--worker-threads must be 0 to 512"
      : !(b->coordinator_share >= 0 && b->coordinator_share <= 0.9)
          ? "--coordinator-share must be 0 to 0.9"
      : (b->out_fmt != "md" && b->out_fmt != "csv" && b->out_fmt != "json" && b->out_fmt != "jsonl")
          ? "-o expects md, csv, json or jsonl"
          : nullptr;
  if (bad) {
    fprintf(stderr, "pi-bench: %s\n", bad);
    return 2;
  }
  for (int t : b->threads) {
    if (t < 1) {
      fprintf(stderr, "pi-bench: threads must be >= 1\n");
      return 2;
    }
  }
  if (!b->isa_name.empty()) {
    const int rc = SetIsa(b->isa_name);
    if (rc >= 0) return rc;
  }
  if (b->models.empty()) b->models.push_back(pi::DefaultModelPath());
  if (!b->text_path.empty()) {
    const pi::Status rs = pi::ReadWholeFile(b->text_path, &b->text);
    if (!rs.ok()) {
      fprintf(stderr, "pi-bench: --text: %s\n", rs.message().c_str());
      return 1;
    }
    if (b->text.empty()) {
      fprintf(stderr, "pi-bench: --text: '%s' is empty\n", b->text_path.c_str());
      return 1;
    }
  }
  return -1;
}

// What a whole benchmark shares across its models: the stream of random
// tokens, the GPU bandwidth once measured, the notes printed, the results.
struct BenchState {
  std::mt19937 rng{1234};
  std::optional<double> gpu_bw_measured;
  std::set<std::string> notes;
  std::vector<Result> results;
};

// One model as its tests run it: loaded, split, repacked.
struct BenchModel {
  std::string path;
  pi::LlamaModel model;
  std::vector<int32_t> text_tokens;  // --text's, or none
  std::string model_type;            // "llama 7M F16"
  pi::GpuSplit split;
  pi::EngineOptions split_opt;  // what the split gives each engine
  // cats and teal runs: one set per --target-sparsity
  std::vector<std::vector<float>> gate_thresholds;
  // teal runs: the input thresholds too, one set per --target-sparsity
  std::vector<std::array<std::vector<float>, pi::kProjectionInputs>> input_thresholds;
  SplitInfo split_info;
  double gpu_bw = 0;
};

// Loads the model, tokenizes --text with it and makes its placement (one per
// model, its KV cache sized for the longest test), then repacks what this
// process computes.
pi::Status LoadBenchModel(const BenchFlags& b, BenchState* st, BenchModel* m) {
  PI_RETURN_IF_ERROR(pi::LoadLlamaModel(m->path, &m->model));
  PI_RETURN_IF_ERROR(pi::ApplyFfnActivationFlag("pi-bench", b.ffn_activation, &m->model));
  pi::LlamaModel& model = m->model;
  if (!b.text.empty()) {
    std::unique_ptr<pi::Tokenizer> tok;
    PI_RETURN_IF_ERROR(pi::Tokenizer::FromGguf(*model.file, &tok).WithContext(m->path));
    PI_RETURN_IF_ERROR(
        tok->Encode(b.text, /*add_bos=*/false, &m->text_tokens).WithContext(b.text_path));
    if (m->text_tokens.empty()) return pi::Status::Error("%s: no tokens", b.text_path.c_str());
  }
  std::string ftype = DTypeName(model.layers[0].ffn_up.type);
  for (char& ch : ftype) ch = static_cast<char>(toupper(ch));
  m->model_type =
      model.config.arch + " " + Fmt("%.0f", model.ParameterCount() / 1e6) + "M " + ftype;

  int max_ctx = 16;
  for (int pp : b.n_prompt) max_ctx = std::max(max_ctx, pp);
  for (int tg : b.n_gen) max_ctx = std::max(max_ctx, tg);
  pi::EngineOptions& split_opt = m->split_opt;
  split_opt.cache_type_k = b.cache_type_k;
  split_opt.cache_type_v = b.cache_type_v;
  // A GPU evaluates its layers' predictors when a predictor run is asked for.
  for (pi::SparseMode mode : b.sparse_modes) {
    if (mode == pi::SparseMode::kPredictor) split_opt.sparse = mode;
  }
  split_opt.sparse_threshold = b.sparse_threshold;
  const bool teal =
      std::count(b.sparse_modes.begin(), b.sparse_modes.end(), pi::SparseMode::kTeal) > 0;
  if (teal || std::count(b.sparse_modes.begin(), b.sparse_modes.end(), pi::SparseMode::kCats)) {
    for (double target : b.targets) {
      PI_RETURN_IF_ERROR(pi::LoadGateThresholds("pi-bench", m->path, b.split_flags.stats_path,
                                                model, target, &m->gate_thresholds.emplace_back()));
      if (!teal) continue;
      PI_RETURN_IF_ERROR(pi::LoadInputThresholds("pi-bench", m->path, b.split_flags.stats_path,
                                                 model, target,
                                                 m->input_thresholds.emplace_back().data()));
    }
  }
  if (teal) PI_RETURN_IF_ERROR(pi::AddTealCopies("pi-bench", b.max_threads(), &model));
  // A split's hot neurons (a hot shard, a device) hold one set of
  // thresholds: cats or teal (not both) with one target measures with them.
  const bool cats =
      std::count(b.sparse_modes.begin(), b.sparse_modes.end(), pi::SparseMode::kCats) > 0;
  const bool split_gated = b.split_flags.vram_budget != -1 && !b.split_flags.disable &&
                           b.targets.size() == 1 && cats != teal;
  if (split_gated) {
    if (split_opt.sparse == pi::SparseMode::kPredictor) {
      return pi::Status::Unsupported(
          "pi-bench --vram-budget: a device holds the predictor or --sparse cats' (teal's) "
          "thresholds, not both: measure them in separate runs");
    }
    split_opt.sparse = teal ? pi::SparseMode::kTeal : pi::SparseMode::kCats;
    split_opt.gate_thresholds = m->gate_thresholds[0];
    if (teal) {
      for (int k = 0; k < pi::kProjectionInputs; ++k) {
        split_opt.input_thresholds[k] = m->input_thresholds[0][k];
      }
    }
  }
  // --host-device's threads (in this process and in gpu-shm's worker alike).
  // The device holds a KV cache for every sequence of the -np tests.
  split_opt.n_seq = b.max_parallel();
  split_opt.n_threads = b.worker_threads > 0 ? b.worker_threads : b.max_threads();
  // Several devices measured only in gpu worker processes (distinct GPUs
  // cannot share this process): load nothing here.
  pi::GpuSplitFlags split_flags = b.split_flags;
  split_flags.hot_in_worker =
      !split_flags.gpus.empty() &&
      std::find(b.transports.begin(), b.transports.end(), "inproc") == b.transports.end();
  PI_RETURN_IF_ERROR(
      pi::SetUpGpuSplit("pi-bench", m->path, model, split_flags, max_ctx, &m->split, &split_opt));
  if (std::count(b.no_repack.begin(), b.no_repack.end(), 0) > 0) {
    // What the split leaves this process; the FFN only when every run
    // computes it densely here.
    pi::RepackScope scope = pi::HostRepackScope(split_opt);
    scope.ffn = scope.ffn && b.transports.size() == 1 && b.transports[0] == "inproc" &&
                std::count(b.sparse_modes.begin(), b.sparse_modes.end(), pi::SparseMode::kOff) ==
                    static_cast<int64_t>(b.sparse_modes.size());
    pi::ThreadPool pool(b.max_threads());
    pi::RepackStats stats;
    PI_RETURN_IF_ERROR(pi::RepackModelWeights(&model, scope, &pool, &stats));
    if (!stats.skipped.empty()) fprintf(stderr, "pi-bench: note: %s\n", stats.skipped.c_str());
  }
  m->split_info = DescribeSplit(m->split);
  m->gpu_bw = GpuBandwidth(m->split_info, b.bw_probe, &st->gpu_bw_measured);
  return pi::Status::Ok();
}

// One test: a prompt of n_prompt tokens (pp), or n_gen decode steps of
// n_parallel sequences (tg), at n_threads.
struct BenchTest {
  int n_prompt = 0, n_gen = 0, n_parallel = 1, n_threads = 1;
  double mem_bw_gbs = 0;  // this thread count's probe
};

// A test's run: one sparsity mode on one transport, with or without repacking.
struct BenchRun {
  pi::SparseMode mode;
  double target = 0;  // cats runs: the target sparsity
  bool repacked = false;
  std::unique_ptr<pi::Engine> engine;
  Result r;
  double ffn_neurons = 0, gate_rows = 0, hot_fired = 0;         // over the timed tg runs
  double device_seconds = 0, cold_seconds = 0, cold_parts = 0;  // the same
  pi::NeuronFfnTimes ffn_times;       // the CPU's sparse FFN phases, the same
  pi::RemoteShard* worker = nullptr;  // the process its cold neurons run in, if any
  std::vector<float> step_us;         // its step round trips over the timed runs
  std::vector<float> overhead_us;     // and their transport parts
};

// The result row a run starts with: what was measured, on what.
Result DescribeRun(const BenchFlags& b, const BenchModel& m, const BenchTest& t,
                   const pi::EngineOptions& opt, const std::string& on, const BenchRun& run) {
  Result r;
  r.model_filename = m.path;
  r.model_type = m.model_type;
  r.model_size = m.model.TotalWeightBytes();
  r.model_n_params = m.model.ParameterCount();
  r.isa = pi::CpuIsaName(pi::ActiveCpuIsa());
  if (pi::ActiveCpuIsa() == pi::CpuIsa::kAvx2 && pi::AvxVnniEnabled()) r.isa += "+vnni";
  if (run.repacked && UsesPanels(m.model)) r.isa += "+rp";
  r.n_threads = t.n_threads;
  r.n_batch = b.n_batch;
  r.n_prompt = t.n_prompt;
  r.n_gen = t.n_gen;
  r.n_parallel = t.n_parallel;
  r.test = t.n_prompt > 0 ? "pp" + std::to_string(t.n_prompt) : "tg" + std::to_string(t.n_gen);
  if (t.n_parallel > 1) r.test += "x" + std::to_string(t.n_parallel);
  r.test_time = IsoNow();
  r.mem_bw_gbs = t.mem_bw_gbs;
  r.sparse = std::string(pi::SparseModeName(opt.sparse)) +
             (pi::UsesGateThresholds(opt.sparse) ? Fmt("@%g", run.target) : "") +
             (opt.device                     ? "+gpu"
              : opt.hot_shard && t.n_gen > 0 ? "+split"
                                             : "") +
             (run.worker || on == "gpu-shm" ? "+" + on : "");
  r.backend = m.split_info.backend;
  r.vram_budget = m.split_info.vram_budget;
  r.device_budgets = m.split_info.device_budgets;
  r.plan_fingerprint = m.split_info.plan_fingerprint;
  r.gpu_bw_gbs = m.gpu_bw;
  r.link_gbs = b.link_gbs;
  return r;
}

// Every mode of a test gets an engine: every mode on every transport, each
// with and without repacking as -nr asks (prompt batches run here, dense:
// one pp row is enough).
pi::Status MakeRuns(const BenchFlags& b, const BenchModel& m, const BenchTest& t,
                    BenchWorkers* workers, std::vector<BenchRun>* runs) {
  const bool pp = t.n_prompt > 0;
  for (int64_t nr : b.no_repack) {
    std::vector<std::pair<pi::SparseMode, size_t>> modes;  // cats once per target
    for (pi::SparseMode mode :
         pp ? std::vector<pi::SparseMode>{pi::SparseMode::kOff} : b.sparse_modes) {
      const size_t targets = pi::UsesGateThresholds(mode) ? b.targets.size() : 1;
      for (size_t ti = 0; ti < targets; ++ti) modes.emplace_back(mode, ti);
    }
    for (const auto& [mode, ti] : modes) {
      for (const std::string& transport : b.transports) {
        if (pp && transport != b.transports[0]) continue;
        const std::string on = pp ? "inproc" : transport;
        BenchRun& run = runs->emplace_back();
        run.mode = mode;
        if (pi::UsesGateThresholds(mode)) run.target = b.targets[ti];
        run.repacked = nr == 0;
        run.worker = workers->Get(on);
        pi::EngineOptions opt;
        opt.n_threads = t.n_threads;
        opt.n_batch = b.n_batch;
        opt.n_ctx = std::max(t.n_prompt + t.n_gen, 16);
        opt.n_seq = t.n_parallel;
        opt.sparse = run.mode;
        opt.sparse_threshold = b.sparse_threshold;
        if (pi::UsesGateThresholds(mode)) {
          // Workers and a split hold thresholds from their hello: one per
          // process, not one per run — a split's, cats with one target.
          const bool split = m.split_opt.hot_shard || m.split_opt.device || on == "gpu-shm";
          const bool split_holds = split && mode == m.split_opt.sparse &&
                                   m.split_opt.gate_thresholds == m.gate_thresholds[ti];
          if (run.worker || (split && !split_holds)) {
            return pi::Status::Unsupported(
                "pi-bench runs --sparse cats or teal with --vram-budget for one "
                "--target-sparsity and one of the two, and through no cpu worker transport "
                "(pi-run and pi-launch split both)");
          }
          opt.gate_thresholds = m.gate_thresholds[ti];
          if (mode == pi::SparseMode::kTeal) {
            for (int k = 0; k < pi::kProjectionInputs; ++k) {
              opt.input_thresholds[k] = m.input_thresholds[ti][k];
            }
          }
        }
        opt.cache_type_k = b.cache_type_k;
        opt.cache_type_v = b.cache_type_v;
        opt.hot_shard = m.split_opt.hot_shard;
        opt.device = on == "gpu-shm" ? workers->devices.device() : m.split_opt.device;
        if (run.worker) opt.cold_shards = {run.worker};
        PI_RETURN_IF_ERROR(pi::Engine::Create(&m.model, opt, &run.engine));
        run.r = DescribeRun(b, m, t, opt, on, run);
      }
    }
  }
  return pi::Status::Ok();
}

// The timed repetitions, interleaved (rep 1 of each run, then rep 2, ...), so
// the ratios between runs hold even when other work on a shared machine comes
// and goes during the benchmark; one warm-up round first.
pi::Status TimeRuns(const BenchFlags& b, const BenchTest& t, const std::vector<int32_t>& toks,
                    std::vector<BenchRun>* runs) {
  const int np = t.n_prompt, ng = t.n_gen, par = t.n_parallel;
  std::vector<pi::Engine::BatchRow> rows(par);
  pi::ProgressBar bar("pi-bench " + (*runs)[0].r.test + " t=" + std::to_string(t.n_threads),
                      (b.reps + 1) * static_cast<int64_t>(runs->size()), "runs");
  int64_t done = 0;
  for (int rep = -1; rep < b.reps; ++rep) {  // rep -1: warmup
    for (BenchRun& run : *runs) {
      pi::SetWeightPanelsEnabled(run.repacked);
      pi::Engine* engine = run.engine.get();
      for (int q = 0; q < par; ++q) engine->ResetSeq(q);
      if (run.worker) run.worker->ClearLatencies();
      const pi::NeuronFfnTimes times_before = engine->ffn_neuron_times();
      const double t0 = pi::NowSeconds();
      pi::Status s;
      if (np > 0) {
        s = engine->Eval(toks.data(), np);
      } else {
        for (int i = 0; i < ng && s.ok(); ++i) {
          s = DecodeStep(engine, toks, i, par, &rows);
          if (rep >= 0) {
            run.ffn_neurons += static_cast<double>(engine->last_ffn_neurons());
            run.gate_rows += static_cast<double>(engine->last_ffn_gate_rows());
            run.hot_fired += static_cast<double>(engine->last_ffn_hot_fired());
            run.device_seconds += engine->last_device_wait_seconds();
            run.cold_seconds += engine->last_cold_seconds();
            run.cold_parts += static_cast<double>(engine->last_cold_layers());
          }
        }
      }
      const double dt = pi::NowSeconds() - t0;
      PI_RETURN_IF_ERROR(s);
      if (rep >= 0) run.r.samples_ns.push_back(dt * 1e9);
      if (rep >= 0 && ng > 0)
        AddTimesSince(engine->ffn_neuron_times(), times_before, &run.ffn_times);
      if (rep >= 0 && run.worker) {
        const std::vector<float>& l = run.worker->latencies_us();
        run.step_us.insert(run.step_us.end(), l.begin(), l.end());
        const std::vector<float>& o = run.worker->overheads_us();
        run.overhead_us.insert(run.overhead_us.end(), o.begin(), o.end());
      }
      bar.Update(++done);
    }
  }
  bar.Finish();
  return pi::Status::Ok();
}

// A single-sequence tg run's derived figures: bytes per token, the share of
// neurons computed and on the GPU, the CPU's sparse FFN phases, the device
// wait, the time bound.
void AddDecodeFigures(const BenchFlags& b, const BenchModel& m, const BenchTest& t, BenchRun* run,
                      std::set<std::string>* notes) {
  const pi::LlamaConfig& c = m.model.config;
  const int ng = t.n_gen, nt = t.n_threads, reps = b.reps;
  Result& r = run->r;
  pi::DecodeCounters k;
  k.mode = run->mode;
  k.n_gen = ng;
  k.reps = reps;
  k.kv_cache_bytes = run->engine->kv_cache_bytes();
  k.n_ctx = run->engine->n_ctx();
  k.ffn_neurons = run->ffn_neurons;
  k.gate_rows = run->gate_rows;
  k.hot_fired = run->hot_fired;
  k.input_kept_share = run->engine->input_kept_share();
  r.weight_bytes_per_token = pi::DecodeBytesPerToken(m.model, k);
  r.ffn_active = run->ffn_neurons / (static_cast<double>(reps) * ng * c.n_layer * c.n_ff);
  if (m.split_info.plan && run->ffn_neurons > 0)
    r.gpu_fired_share = run->hot_fired / run->ffn_neurons;
  r.device_bytes = pi::DecodeDeviceBytes(m.model, m.split_info.plan, k);
  if (run->ffn_times.calls > 0) {
    const double per_token = 1e6 / (static_cast<double>(reps) * ng);
    pi::NeuronFfnTimes& f = r.ffn_phase_us;
    f = run->ffn_times;
    for (double* p : {&f.prepare, &f.gate, &f.select, &f.up_down, &f.sum}) *p *= per_token;
    fprintf(stderr,
            "pi-bench: %s %s -t %d: per token %.0f µs in the CPU's sparse FFN (%.1f "
            "calls): input %.0f, gate dots %.0f, select %.0f, up/down %.0f, sum %.0f\n",
            r.test.c_str(), r.sparse.c_str(), nt, f.prepare + f.gate + f.select + f.up_down + f.sum,
            static_cast<double>(f.calls) / (static_cast<double>(reps) * ng), f.prepare, f.gate,
            f.select, f.up_down, f.sum);
  }
  if (run->device_seconds > 0) {
    const double tokens = static_cast<double>(reps) * ng;
    r.device_wait_us = run->device_seconds / tokens * 1e6;
    r.cold_us = run->cold_seconds / tokens * 1e6;
    r.cold_parts = run->cold_parts / tokens;
    if (r.cold_us > 0) r.cold_gbs = r.device_bytes.cpu / (r.cold_us * 1e3);
    fprintf(stderr,
            "pi-bench: %s %s -t %d: per token %.0f µs waiting on the device, %.0f µs in "
            "%.1f cold parts here (%.1f GB/s of the CPU's bytes while in them)\n",
            r.test.c_str(), r.sparse.c_str(), nt, r.device_wait_us, r.cold_us, r.cold_parts,
            r.cold_gbs);
  }
  if (b.bw_probe) {
    const pi::TimeBound bound =
        pi::ComputeTimeBound(r.device_bytes, m.gpu_bw, r.mem_bw_gbs, b.link_gbs);
    if (bound.computable) r.bound_ms_per_token = bound.seconds * 1e3;
    if (!bound.note.empty()) {
      NoteOnce(std::string(bound.computable ? "time bound: " : "no time bound: ") + bound.note,
               notes);
    }
  }
}

// The figures a run's samples and counters give, into its result row.
void FinishRun(const BenchFlags& b, const BenchModel& m, const BenchTest& t, BenchRun* run,
               std::set<std::string>* notes) {
  Result& r = run->r;
  if (!run->step_us.empty()) {
    std::sort(run->step_us.begin(), run->step_us.end());
    r.step_p50_us = run->step_us[run->step_us.size() / 2];
    r.step_p99_us = run->step_us[run->step_us.size() * 99 / 100];
    std::sort(run->overhead_us.begin(), run->overhead_us.end());
    r.step_overhead_p50_us = run->overhead_us[run->overhead_us.size() / 2];
  }
  if (t.n_gen > 0 && t.n_parallel > 1) {
    // Per token of a sequence; weight bytes and bounds are left out: the
    // sequences of a step share their reads.
    const pi::LlamaConfig& c = m.model.config;
    r.ffn_active = run->ffn_neurons /
                   (static_cast<double>(b.reps) * t.n_gen * t.n_parallel * c.n_layer * c.n_ff);
  } else if (t.n_gen > 0) {
    AddDecodeFigures(b, m, t, run, notes);
  }
}

// Every test of one model at every thread count: pp tests, then tg tests.
pi::Status BenchOneModel(const BenchFlags& b, const BenchModel& m, BenchState* st) {
  for (int nt : b.threads) {
    // One worker per process transport, with this run's thread count.
    BenchWorkers workers;
    pi::Status s = StartBenchWorkers(
        b.transports, m.path, m.model, b.worker_threads > 0 ? b.worker_threads : nt,
        b.coordinator_share, std::min(b.max_parallel(), pi::NeuronFfn::kMaxRows), m.split_opt,
        m.split, &workers);
    PI_RETURN_IF_ERROR(s.WithContext("--transport"));
    BenchTest t;
    t.n_threads = nt;
    if (b.bw_probe) {
      pi::ThreadPool probe_pool(nt);
      t.mem_bw_gbs = pi::MeasureReadBandwidthGBs(&probe_pool);
    }
    std::vector<std::tuple<int, int, int>> tests;  // (n_prompt, n_gen, sequences)
    for (int pp : b.n_prompt)
      if (pp > 0) tests.emplace_back(pp, 0, 1);
    for (int tg : b.n_gen) {
      for (int par : b.n_parallel)
        if (tg > 0) tests.emplace_back(0, tg, par);
    }
    for (const auto& [np, ng, par] : tests) {
      t.n_prompt = np;
      t.n_gen = ng;
      t.n_parallel = par;
      std::vector<BenchRun> runs;
      PI_RETURN_IF_ERROR(MakeRuns(b, m, t, &workers, &runs));
      std::vector<int32_t> toks(std::max(np, ng));
      for (size_t i = 0; i < toks.size(); ++i) {
        toks[i] = m.text_tokens.empty() ? static_cast<int32_t>(st->rng() % m.model.config.n_vocab)
                                        : m.text_tokens[i % m.text_tokens.size()];
      }
      PI_RETURN_IF_ERROR(TimeRuns(b, t, toks, &runs));
      for (BenchRun& run : runs) {
        FinishRun(b, m, t, &run, &st->notes);
        st->results.push_back(std::move(run.r));
      }
    }
  }
  return pi::Status::Ok();
}

}  // namespace

static int Run(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--server") return pi::RunServerBench(argc, argv);
  }
  BenchFlags b;
  const int rc = ParseBenchFlags(argc, argv, &b);
  if (rc >= 0) return rc;
  BenchState st;
  for (const std::string& path : b.models) {
    BenchModel m;
    m.path = path;
    pi::Status s = LoadBenchModel(b, &st, &m);
    if (s.ok()) s = BenchOneModel(b, m, &st);
    if (!s.ok()) {
      fprintf(stderr, "pi-bench: %s\n", s.message().c_str());
      return 1;
    }
  }
  PrintResults(st.results, b.out_fmt);
  return 0;
}

int main(int argc, char** argv) {
  return pi::RunTool("pi-bench", Run, argc, argv);
}
