// pi-launch: loads a model, places it (--vram-budget), starts the local
// cpu_worker processes and serves clients over gRPC (pi-client, or any
// client of proto/pi.proto) until SIGINT/SIGTERM, then stops its workers.
//
//   pi-launch --vram-budget 11G -m model.gguf
//   pi-launch --listen 127.0.0.1:0 --cpu-workers 2 --sparse oracle -m model.gguf
#include <cstdio>
#include <filesystem>
#include <string>

#include "cli/api_key_flags.h"
#include "cli/args.h"
#include "cli/cache_type_flags.h"
#include "cli/default_model.h"
#include "cli/engine_flags.h"
#include "cli/gpu_split.h"
#include "cli/tool_main.h"
#include "common/base/memory_limits.h"
#include "common/compute/sparse_mode.h"
#include "common/text/chat_template.h"
#include "common/transport/listen_address.h"
#include "coordinator/serve/grpc_server.h"
#include "coordinator/serve/http_server.h"
#include "coordinator/workers/worker_metrics.h"

namespace {

void Usage() {
  fputs(
      "usage: pi-launch [options]\n"
      "  --listen HOST:PORT      where clients connect (default 127.0.0.1:50051; port 0\n"
      "                          picks a free one, printed at start)\n"
      "  -np, --parallel N       requests generating at once (default 1): each step\n"
      "                          evaluates them all together (continuous batching), each\n"
      "                          with its own KV cache of -c positions; the rows of a\n"
      "                          step go to each worker in one message\n"
      "  --max-queue N           requests that may wait behind the running one; more are\n"
      "                          refused at once with RESOURCE_EXHAUSTED (default 8)\n"
      "  --http HOST:PORT        also serve the OpenAI-style HTTP API there (e.g.\n"
      "                          127.0.0.1:8080): /v1/completions, /v1/chat/completions,\n"
      "                          /v1/models, /health, /metrics, /tokenize, /detokenize and\n"
      "                          llama-server's /props, /slots, /apply-template\n"
      "  --alias NAME            the model's name in the HTTP API (default: the file's)\n"
      "  --any-model-name        take any \"model\" a request names, as llama-server does\n"
      "                          (default: another name is a 404)\n"
      "  --cors ORIGIN           answer cross-origin requests from ORIGIN (* : any), and\n"
      "                          their preflights; default: none\n"
      "  --api-key-file F        every client (HTTP and gRPC; /health and Health excepted)\n"
      "                          must send Authorization: Bearer KEY, KEY on F's first line\n"
      "                          (16+ printable characters)\n"
      "  --api-key KEY           the same, KEY on the command line (where `ps` shows it)\n"
      "  -to, --timeout S        an HTTP body's read and each write (a streamed token's\n"
      "                          too) must finish within S seconds, or the connection\n"
      "                          closes and its request is cancelled (default 30)\n"
      "  --http-idle-timeout S   an HTTP connection waits S seconds for a request (and a\n"
      "                          request's headers take at most min(S, 10)) (default 15)\n"
      "  --http-max-connections N             open HTTP connections (default 256)\n"
      "  --http-max-connections-per-client N  of them from one address (default 32; 0:\n"
      "                          no limit, e.g. behind a reverse proxy)\n"
      "  --spm-infill            /infill and suffix prompts put the suffix first (a model\n"
      "                          trained suffix-prefix-middle)\n"
      "  -cram, --cache-ram MIB  prompts whose sequence went to another request stay in\n"
      "                          host memory up to MIB (least recently used out), and a\n"
      "                          request starts from the longest prefix kept (default:\n"
      "                          8192 or a quarter of the memory free after loading,\n"
      "                          the less; 0: off; -1: no limit)\n"
      "  -s, --seed N, --temp X  the HTTP API's seed and temperature for requests that\n"
      "                          give none (default: a random seed each, 0.8)\n"
      "  -n, --n-predict N       the HTTP API's default and cap of tokens generated per\n"
      "                          request (default -1: none)\n"
      "  --slot-save-path DIR    POST /slots/{id}?action=save|restore writes and reads a\n"
      "                          slot's cached prompt as DIR/filename (made if missing;\n"
      "                          the host path only)\n"
      "  --no-webui              GET / answers 404 instead of the chat page\n"
      "  -v, --verbose           whole chat and completions replies carry \"__verbose\":\n"
      "                          the native /completion reply of the same generation\n"
      "                          (the prompt as the model read it), as llama-server's\n"
      "  --no-context-shift      llama-server's flag, accepted: a reply stops when its\n"
      "                          sequence's context is full (\"truncated\": true), always\n"
      "  --pooling mean|last|cls|none\n"
      "                          embeddings: the prompt's final hidden states averaged, the\n"
      "                          last token's or the first's (default mean); none: each\n"
      "                          token's, unnormalized (POST /embeddings only)\n"
      "  --chat-template NAME    how /v1/chat/completions renders messages: chatml, llama2,\n"
      "                          llama3, mistral, mistral-v3, phi4, deepseek-r1, command-r,\n"
      "                          ... (an unknown name lists the 31; default: the model's\n"
      "                          tokenizer.chat_template, when it is one of these)\n"
      "  (--cpu-workers defaults to 1 when the model's FFN can be split, else 0; the hot\n"
      "  neurons of a --vram-budget split run in a pi-gpu-worker process unless\n"
      "  --no-gpu-worker)\n",
      stderr);
  fputs(pi::kEngineUsage, stderr);
  fputs(pi::kDraftUsage, stderr);
  fputs(pi::kCacheTypeUsage, stderr);
  fputs(pi::kGpuSplitUsage, stderr);
}

// How long running requests get to end at shutdown before they are cancelled.
constexpr int kShutdownGraceMs = 2000;

struct LaunchFlags {
  pi::EngineFlags engine;
  std::string listen = "127.0.0.1:50051";
  int max_queue = 8;
  bool cpu_workers_given = false;
  pi::HttpServerOptions http;
  bool http_enabled = false;
  std::string alias;  // --alias: the model's name in the HTTP API
  pi::ApiKeyFlags api_key;
  int timeout_s = 30;
  int idle_timeout_s = 15;
  int64_t cache_ram_mib = -2;  // --cache-ram (-2: the default)
};

// --cache-ram in bytes: the default is llama-server's 8192 MiB, or a quarter
// of the memory free after loading where that is less.
int64_t PromptStoreBytes(int64_t mib) {
  if (mib == -1) return INT64_MAX;
  if (mib >= 0) return mib << 20;
  return std::min<int64_t>(int64_t{8192} << 20, pi::AvailableMemory().bytes / 4);
}

// Returns -1 to go on, else the exit status (0 after --help).
int ParseFlags(int argc, char** argv, LaunchFlags* l) {
  pi::ArgReader args("pi-launch", argc, argv);
  l->engine.gpu_worker = true;  // the hot neurons in a pi-gpu-worker process
  const int flags_rc = args.ReadFlags(
      [&](const std::string& f) {
        if (f == "--listen")
          l->listen = args.String(f);
        else if (f == "-np" || f == "--parallel")
          l->engine.opt.n_seq = args.Int(f);
        else if (f == "--max-queue")
          l->max_queue = args.Int(f);
        else if (f == "-s" || f == "--seed") {
          const int64_t seed = args.Int64(f);
          if (!args.failed() && (seed < -1 || seed >= 0xFFFFFFFFll)) {
            args.Fail("--seed must be -1 (random) to 4294967294");
          }
          l->http.default_seed = seed < 0 ? pi::kRandomSeed : static_cast<uint32_t>(seed);
        } else if (f == "--temp") {
          l->http.default_temperature = args.Float(f);
          if (!args.failed() && !(l->http.default_temperature >= 0)) {
            args.Fail("--temp must be 0 (greedy) or more");
          }
        } else if (f == "-n" || f == "--n-predict") {
          l->http.n_predict = args.Int(f);
          if (!args.failed() && l->http.n_predict < -1) args.Fail("--n-predict must be -1 or more");
        } else if (f == "-cram" || f == "--cache-ram") {
          l->cache_ram_mib = args.Int(f);
          if (!args.failed() && (l->cache_ram_mib < -1 || l->cache_ram_mib > (int64_t{1} << 30))) {
            args.Fail("--cache-ram must be -1 (no limit), 0 (off) or MiB up to 2^30");
          }
        } else if (f == "--http") {
          l->http.listen = args.String(f);
          l->http_enabled = true;
        } else if (f == "--api-key") {
          l->api_key.key = args.String(f);
          l->api_key.key_given = true;
        } else if (f == "--api-key-file")
          l->api_key.key_file = args.String(f);
        else if (f == "-to" || f == "--timeout")
          l->timeout_s = args.Int(f);
        else if (f == "--http-idle-timeout")
          l->idle_timeout_s = args.Int(f);
        else if (f == "--http-max-connections")
          l->http.max_connections = args.Int(f);
        else if (f == "--http-max-connections-per-client")
          l->http.max_connections_per_client = args.Int(f);
        else if (f == "--alias") {
          // A name /v1/models/{id} can carry.
          l->alias = args.String(f);
          if (!args.failed() && (l->alias.empty() || l->alias.size() > 256 ||
                                 l->alias.find('/') != std::string::npos)) {
            args.Fail("--alias must be 1 to 256 characters, without '/'");
          }
        } else if (f == "--any-model-name")
          l->http.any_model_name = true;
        else if (f == "--cors") {
          l->http.cors_origin = args.String(f);
          if (!args.failed() && l->http.cors_origin.empty()) args.Fail("--cors expects an origin");
        } else if (f == "-v" || f == "--verbose") {
          l->http.verbose = true;
        } else if (f == "--slot-save-path") {
          l->http.slot_save_path = args.String(f);
          std::error_code ec;
          if (!args.failed() && !l->http.slot_save_path.empty()) {
            std::filesystem::create_directories(l->http.slot_save_path, ec);
          }
          if (!args.failed() && (l->http.slot_save_path.empty() ||
                                 !std::filesystem::is_directory(l->http.slot_save_path, ec))) {
            args.Fail("--slot-save-path: " + l->http.slot_save_path +
                      " is not a directory and cannot be made one");
          }
        } else if (f == "--no-webui") {
          l->http.web_page = false;
        } else if (f == "--no-context-shift") {
          // What the server always does: it never shifts a sequence's context.
        } else if (f == "--spm-infill") {
          l->http.spm_infill = true;
        } else if (f == "--pooling") {
          const pi::Status known = pi::ParsePooling(args.String(f), &l->http.pooling);
          if (!args.failed() && !known.ok()) args.Fail("--pooling: " + known.message());
        } else if (f == "--chat-template") {
          const std::string name = args.String(f);
          pi::ChatTemplate t;
          const pi::Status known = pi::ParseChatTemplateName(name, &t);
          if (!args.failed() && !known.ok()) args.Fail("--chat-template: " + known.message());
          l->http.chat_template = t;
        } else if (pi::ParseEngineFlag(f, &args, &l->engine)) {
          if (f == "--cpu-workers") l->cpu_workers_given = true;
        } else {
          return false;
        }
        return true;
      },
      Usage);
  if (flags_rc >= 0) return flags_rc;
  l->engine.cpu_workers_auto = !l->cpu_workers_given;
  pi::Status s = pi::CheckEngineFlags(l->engine);
  if (s.ok() && (l->engine.opt.n_seq < 1 || l->engine.opt.n_seq > 256)) {
    s = pi::Status::Error("-np must be 1 to 256, got %d", l->engine.opt.n_seq);
  }
  if (s.ok() && (l->max_queue < 0 || l->max_queue > 100000)) {
    s = pi::Status::Error("--max-queue must be 0 to 100000, got %d", l->max_queue);
  }
  if (s.ok() && (l->timeout_s < 1 || l->timeout_s > 86400)) {
    s = pi::Status::Error("--timeout must be 1 to 86400 seconds, got %d", l->timeout_s);
  }
  if (s.ok() && (l->idle_timeout_s < 1 || l->idle_timeout_s > 86400)) {
    s = pi::Status::Error("--http-idle-timeout must be 1 to 86400 seconds, got %d",
                          l->idle_timeout_s);
  }
  if (s.ok() && (l->http.max_connections < 1 || l->http.max_connections > 100000)) {
    s = pi::Status::Error("--http-max-connections must be 1 to 100000, got %d",
                          l->http.max_connections);
  }
  if (s.ok() &&
      (l->http.max_connections_per_client < 0 || l->http.max_connections_per_client > 100000)) {
    s = pi::Status::Error("--http-max-connections-per-client must be 0 to 100000, got %d",
                          l->http.max_connections_per_client);
  }
  if (s.ok() && l->api_key.key_given && !l->api_key.key_file.empty()) {
    s = pi::Status::Error("--api-key and --api-key-file: give one of them");
  }
  l->http.io_timeout_ms = l->timeout_s * 1000;
  l->http.idle_timeout_ms = l->idle_timeout_s * 1000;
  l->http.header_timeout_ms = std::min(l->idle_timeout_s, 10) * 1000;
  if (!s.ok()) {
    fprintf(stderr, "pi-launch: %s\n", s.message().c_str());
    return 2;
  }
  return -1;
}

// The id clients name the model by: the file's name without .gguf.
std::string ModelId(const std::string& path) {
  std::string name = path.substr(path.rfind('/') + 1);
  if (name.size() > 5 && name.compare(name.size() - 5, 5, ".gguf") == 0)
    name.resize(name.size() - 5);
  return name;
}

// The chat template: --chat-template, else the model's when it is a known
// family (a note says what happens otherwise).
void ResolveChatTemplate(const pi::LlamaModel& model, pi::HttpServerOptions* http) {
  if (http->chat_template) return;
  pi::ChatTemplate t;
  const pi::Status s = pi::ChatTemplateOfModel(*model.file, &t);
  if (!s.ok()) {
    fprintf(stderr, "pi-launch: note: /v1/chat/completions: %s\n", s.message().c_str());
    return;
  }
  http->chat_template = t;
  fprintf(stderr, "pi-launch: chat template: %s (from the model)\n", pi::ChatTemplateName(t));
}

pi::ServedModel Describe(const LaunchFlags& l, const pi::LoadedEngine& loaded) {
  pi::ServedModel served;
  served.model_path = l.engine.model_path;
  served.sparse = pi::SparseModeName(l.engine.opt.sparse);
  served.vram_budget = loaded.split.vram_budget;
  served.hot_backend = pi::HotBackendName(loaded);
  for (const auto& g : loaded.workers.devices) {
    int64_t hot = 0;
    for (const auto& layer : g->plan().hot) hot += static_cast<int64_t>(layer.size());
    served.workers.push_back({g->name(), g->transport(), g->backend(), g->resident_bytes(), hot});
  }
  if (loaded.workers.gpu_worker) {
    const pi::RemoteShard& g = *loaded.workers.gpu_worker;
    served.workers.push_back(
        {g.name(), g.transport(), g.backend(), g.resident_bytes(), g.neurons()});
  }
  for (const auto& w : loaded.workers.cold) {
    served.workers.push_back(
        {w->name(), w->transport(), w->backend(), w->resident_bytes(), w->neurons()});
  }
  return served;
}

}  // namespace

static int Run(int argc, char** argv) {
  // Before any thread exists: only the server's waiter takes SIGINT/SIGTERM.
  pi::BlockTerminationSignals();
  LaunchFlags l;
  const int flags_status = ParseFlags(argc, argv, &l);
  if (flags_status >= 0) return flags_status;
  pi::LoadedEngine loaded;
  pi::HttpServer http_server;
  std::unique_ptr<pi::RequestRunner> runner;  // shut down http_server before it goes
  // The key file is read here (exit 1 when it cannot be), its rules checked with the flag's.
  pi::Status s = pi::ResolveApiKey(l.api_key, &l.http.api_key);
  if (!s.ok() && l.api_key.key_file.empty()) {
    fprintf(stderr, "pi-launch: %s\n", s.message().c_str());
    return 2;
  }
  if (!pi::IsLoopbackHost(l.listen) && l.http.api_key.empty()) {
    fprintf(stderr,
            "pi-launch: warning: --listen %s is beyond loopback with no --api-key-file: anyone "
            "who can reach it may submit requests\n",
            l.listen.c_str());
  }
  if (l.http_enabled && !pi::IsLoopbackHost(l.http.listen) && l.http.api_key.empty()) {
    fprintf(stderr,
            "pi-launch: warning: --http %s is beyond loopback with no --api-key-file: anyone "
            "who can reach it may submit requests\n",
            l.http.listen.c_str());
  }
  if (l.api_key.key_given) {
    fprintf(stderr,
            "pi-launch: note: --api-key shows the key to every user of this machine (ps); "
            "--api-key-file F keeps it in a file\n");
  }
  std::string address, http_address;
  if (s.ok() && l.http_enabled) {
    // Up while the model loads: /health says 503 "loading" until it is ready.
    if (l.engine.model_path.empty()) l.engine.model_path = pi::DefaultModelPath();
    l.http.model_id = l.alias.empty() ? ModelId(l.engine.model_path) : l.alias;
    l.http.model_path = l.engine.model_path;
    l.http.system_fingerprint = pi::BuildFingerprint();
    l.http.more_metrics = [&loaded](std::string* out) {
      std::vector<const pi::RemoteShard*> cpu;
      for (const auto& w : loaded.workers.cold) cpu.push_back(w.get());
      std::vector<const pi::DeviceWorker*> devices;
      for (const auto& w : loaded.workers.devices) devices.push_back(w.get());
      pi::AppendWorkerMetrics(cpu, loaded.workers.gpu_worker.get(), devices, out);
    };
    s = http_server.Start(l.http, nullptr, &http_address);
    if (s.ok()) {
      fprintf(stderr, "pi-launch: listening on http://%s while the model loads (/health: 503)\n",
              http_address.c_str());
    }
  }
  if (s.ok()) s = pi::LoadEngine("pi-launch", &l.engine, &loaded);
  if (s.ok()) {
    const int64_t store_bytes = PromptStoreBytes(l.cache_ram_mib);
    runner = std::make_unique<pi::RequestRunner>(loaded.engine.get(), loaded.tok.get(), l.max_queue,
                                                 "pi-launch", pi::StreamLimits(), store_bytes,
                                                 loaded.draft.drafter.get());
    if (store_bytes > 0) {
      fprintf(stderr, "pi-launch: prompts let go by their sequences kept up to %s (--cache-ram)\n",
              store_bytes == INT64_MAX ? "no limit" : pi::HumanBytes(store_bytes).c_str());
    }
    pi::CoordinatorServer rpc_server;
    pi::CoordinatorServiceOptions rpc;
    rpc.api_key = l.http.api_key;
    // A thread for each request running or waiting, and some for the rest.
    const int max_threads = std::min(4096, l.engine.opt.n_seq + l.max_queue + 16);
    s = rpc_server.Start(l.listen, Describe(l, loaded), runner.get(), rpc, max_threads, &address);
    if (s.ok()) {
      fprintf(stderr,
              "pi-launch: serving %s on %s (%d cpu worker(s), %d at once (-np), max queue %d)%s\n",
              l.engine.model_path.c_str(), address.c_str(),
              static_cast<int>(loaded.workers.cold.size()), l.engine.opt.n_seq, l.max_queue,
              l.http.api_key.empty() ? "" : " (API key required)");
    }
    if (s.ok() && l.http_enabled) {
      ResolveChatTemplate(loaded.model, &l.http);
      http_server.Ready(runner.get(), l.http.chat_template,
                        loaded.workers.gpu_worker != nullptr || !loaded.workers.devices.empty());
      fprintf(stderr, "pi-launch: HTTP API (model '%s') on http://%s%s\n", l.http.model_id.c_str(),
              http_address.c_str(), l.http.api_key.empty() ? "" : " (API key required)");
    }
    if (s.ok()) {
      fprintf(stderr, "pi-launch: %s: shutting down\n", pi::WaitForTerminationSignal());
    }
    http_server.Shutdown();
    rpc_server.Shutdown(kShutdownGraceMs);
  }
  http_server.Shutdown();
  pi::StopWorkers("pi-launch", &loaded);
  if (!s.ok()) {
    fprintf(stderr, "pi-launch: %s\n", s.message().c_str());
    return 1;
  }
  fprintf(stderr, "pi-launch: stopped\n");
  return 0;
}

int main(int argc, char** argv) {
  return pi::RunTool("pi-launch", Run, argc, argv);
}
