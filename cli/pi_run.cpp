// pi-run: generate text with a model in one process (llama-cli's common
// flags). Without -m it runs the bundled demo model.
//
//   pi-run -p "In the beginning" -n 64
//   pi-run -m model.gguf -f prompt.txt -n 128 -t 2 --temp 0 --json
#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "cli/args.h"
#include "cli/cache_type_flags.h"
#include "cli/context_note.h"
#include "cli/default_model.h"
#include "cli/gpu_split.h"
#include "cli/read_file.h"
#include "cli/sparse_note.h"
#include "cli/tool_main.h"
#include "common/executable_path.h"
#include "common/json.h"
#include "common/llama_model.h"
#include "common/progress.h"
#include "common/sampler.h"
#include "common/tensor_check.h"
#include "common/tokenizer.h"
#include "coordinator/engine.h"
#include "coordinator/generation.h"
#include "coordinator/local_workers.h"

namespace {

void Usage() {
  fprintf(stderr,
          "usage: pi-run [options]\n"
          "  -m, --model FILE        GGUF model (default: the bundled demo model)\n"
          "  -p, --prompt TEXT       prompt\n"
          "  -f, --file FILE         read the prompt from a file\n"
          "  -n, --n-predict N       tokens to generate (-1 = until end of text or context; "
          "default -1)\n"
          "  -t, --threads N         threads (default: %u)\n"
          "  -c, --ctx-size N        context size (0 = the model's, capped at 4096; default 0)\n"
          "  -b, --batch-size N      prompt batch size (default 64)\n"
          "  --temp X                temperature, <= 0 is greedy (default 0.8)\n"
          "  --top-k N               (default 40, 0 = off)\n"
          "  --top-p X               (default 0.95, 1 = off)\n"
          "  --min-p X               (default 0.05, 0 = off)\n"
          "  --repeat-penalty X      (default 1.0 = off)\n"
          "  --repeat-last-n N       (default 64, -1 = the context; capped at the context)\n"
          "  -s, --seed N            (default -1 = random)\n"
          "  --ignore-eos            keep generating past end of text\n"
          "  --sparse MODE           FFN neurons computed per decoded token: off = all\n"
          "                          (default), oracle = exactly those that fire, predictor =\n"
          "                          those the model's predictor picks (ReLU models with\n"
          "                          ffn_down_t; predictor: fc1/fc2, see pi-train-predictor)\n"
          "  --sparse-threshold X    predictor score threshold (default: env\n"
          "                          LLAMA_SPARSE_PRED_THRESHOLD, else the file's)\n"
          "  --stop TEXT             stop when the generated text contains TEXT (repeatable)\n"
          "  --check-tensors         check every weight is finite when loading\n"
          "  --cpu-workers N         the cold FFN neurons in N local pi-cpu-worker processes\n"
          "                          over shared memory (a sparse-capable model; a worker that\n"
          "                          dies is replaced by this process, same tokens)\n"
          "  --json                  print one JSON object (ids, text, timings, stop reason)\n"
          "                          instead of text\n",
          std::max(1u, std::thread::hardware_concurrency()));
  fputs(pi::kCacheTypeUsage, stderr);
  fputs(pi::kGpuSplitUsage, stderr);
}

struct RunFlags {
  std::string model_path, prompt, prompt_file;
  bool json = false, ignore_eos = false, check_tensors = false;
  int n_predict = -1;
  int cpu_workers = 0;
  std::vector<std::string> stops;
  pi::EngineOptions opt;
  pi::SamplerParams sp;
  pi::GpuSplitFlags split;
};

// Returns -1 to go on, else the exit status (0 after --help).
int ParseFlags(int argc, char** argv, RunFlags* r) {
  pi::ArgReader args("pi-run", argc, argv);
  r->opt.n_threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  pi::SamplerParams& sp = r->sp;
  while (!args.Done() && !args.failed()) {
    const std::string f = args.Next();
    if (f == "-m" || f == "--model")
      r->model_path = args.String(f);
    else if (f == "-p" || f == "--prompt") {
      r->prompt = args.String(f);
    } else if (f == "-f" || f == "--file")
      r->prompt_file = args.String(f);
    else if (f == "-n" || f == "--n-predict")
      r->n_predict = args.Int(f);
    else if (f == "-t" || f == "--threads")
      r->opt.n_threads = args.Int(f);
    else if (f == "-c" || f == "--ctx-size")
      r->opt.n_ctx = args.Int(f);
    else if (f == "-b" || f == "--batch-size")
      r->opt.n_batch = args.Int(f);
    else if (pi::ParseCacheTypeFlag(f, &args, &r->opt.cache_type_k, &r->opt.cache_type_v)) {
    } else if (f == "--temp")
      sp.temp = args.Float(f);
    else if (f == "--top-k")
      sp.top_k = args.Int(f);
    else if (f == "--top-p")
      sp.top_p = args.Float(f);
    else if (f == "--min-p")
      sp.min_p = args.Float(f);
    else if (f == "--repeat-penalty")
      sp.repeat_penalty = args.Float(f);
    else if (f == "--repeat-last-n")
      sp.repeat_last_n = args.Int(f);
    else if (f == "-s" || f == "--seed")
      sp.seed = static_cast<uint32_t>(args.Int64(f));
    else if (f == "--ignore-eos")
      r->ignore_eos = true;
    else if (f == "--stop") {
      const std::string stop = args.String(f);
      if (!args.failed() && stop.empty()) args.Fail("--stop expects a non-empty text");
      r->stops.push_back(stop);
    } else if (f == "--cpu-workers")
      r->cpu_workers = args.Int(f);
    else if (f == "--check-tensors")
      r->check_tensors = true;
    else if (f == "--json")
      r->json = true;
    else if (pi::ParseSparseFlag(f, &args, &r->opt.sparse, &r->opt.sparse_threshold)) {
    } else if (pi::ParseGpuSplitFlag(f, &args, &r->split)) {
    } else if (f == "-h" || f == "--help") {
      Usage();
      return 0;
    } else
      args.Fail("unknown flag '" + f + "' (see --help)");
  }
  if (args.failed()) return 2;
  if (r->opt.n_threads < 1) {
    fprintf(stderr, "pi-run: -t must be >= 1\n");
    return 2;
  }
  if (r->cpu_workers < 0 || r->cpu_workers > 64) {
    fprintf(stderr, "pi-run: --cpu-workers must be 0 to 64, got %d\n", r->cpu_workers);
    return 2;
  }
  if (r->opt.n_ctx < 0) {
    fprintf(stderr, "pi-run: -c must be 0 (the model's) or positive, got %d\n", r->opt.n_ctx);
    return 2;
  }
  if (r->opt.n_batch < 1) {
    fprintf(stderr, "pi-run: -b must be at least 1, got %d\n", r->opt.n_batch);
    return 2;
  }
  if (sp.top_k < 0 || sp.top_p <= 0.0f || sp.top_p > 1.0f || sp.min_p < 0.0f || sp.min_p > 1.0f ||
      sp.repeat_penalty <= 0.0f || sp.repeat_last_n < -1) {
    fprintf(stderr, "pi-run: sampling parameters out of range (see --help)\n");
    return 2;
  }
  return -1;
}

struct Times {
  double load_ms, prompt_ms, eval_ms;
};

double PerSecond(int n, double ms) {
  return ms > 0 ? 1e3 * n / ms : 0.0;
}

void PrintTimings(const Times& t, int n_prompt, const pi::GenerationResult& g, double total_ms) {
  fprintf(stderr, "\npi-run:        load time = %10.2f ms\n", t.load_ms);
  fprintf(stderr,
          "pi-run: prompt eval time = %10.2f ms / %5d tokens (%8.2f ms per token, %8.2f tokens per "
          "second)\n",
          t.prompt_ms, n_prompt, t.prompt_ms / std::max(1, n_prompt),
          PerSecond(n_prompt, t.prompt_ms));
  fprintf(stderr,
          "pi-run:        eval time = %10.2f ms / %5d runs   (%8.2f ms per token, %8.2f tokens per "
          "second)\n",
          t.eval_ms, g.n_eval, t.eval_ms / std::max(1, g.n_eval), PerSecond(g.n_eval, t.eval_ms));
  fprintf(stderr, "pi-run:    sampling time = %10.2f ms / %5zu runs\n", g.sample_s * 1e3,
          g.ids.size());
  fprintf(stderr, "pi-run:       total time = %10.2f ms / %5zu tokens\n", total_ms,
          n_prompt + g.ids.size());
}

void PrintJson(const RunFlags& r, const pi::Engine& engine, uint32_t seed,
               const std::vector<int32_t>& prompt_ids, const pi::GenerationResult& g,
               const Times& t) {
  const int n_prompt = static_cast<int>(prompt_ids.size());
  printf(
      "{\"model\":%s,\"seed\":%u,\"n_threads\":%d,\"n_ctx\":%d,\"sparse\":\"%s\",\"prompt\":%s,"
      "\"prompt_tokens\":%s,\"generated_tokens\":%s,\"text\":%s,\"stop_reason\":\"%s\",",
      pi::JsonEscape(r.model_path).c_str(), seed, engine.n_threads(), engine.n_ctx(),
      pi::SparseModeName(r.opt.sparse), pi::JsonEscape(r.prompt).c_str(),
      pi::JsonIntArray(prompt_ids).c_str(), pi::JsonIntArray(g.ids).c_str(),
      pi::JsonEscape(g.text).c_str(), g.stop_reason);
  if (!g.error.empty()) printf("\"error\":%s,", pi::JsonEscape(g.error).c_str());
  printf(
      "\"timings\":{\"load_ms\":%s,\"prompt_n\":%d,\"prompt_ms\":%s,"
      "\"prompt_per_second\":%s,\"predicted_n\":%zu,\"eval_n\":%d,\"predicted_ms\":%s,"
      "\"predicted_per_second\":%s,\"sampling_ms\":%s}}\n",
      pi::JsonNumber(t.load_ms).c_str(), n_prompt, pi::JsonNumber(t.prompt_ms).c_str(),
      pi::JsonNumber(PerSecond(n_prompt, t.prompt_ms)).c_str(), g.ids.size(), g.n_eval,
      pi::JsonNumber(t.eval_ms).c_str(), pi::JsonNumber(PerSecond(g.n_eval, t.eval_ms)).c_str(),
      pi::JsonNumber(g.sample_s * 1e3).c_str());
}

// Loads the model, its tokenizer and an engine (with the GPU split), and
// encodes the prompt.
pi::Status Load(RunFlags* r, pi::LlamaModel* model, std::unique_ptr<pi::Tokenizer>* tok,
                pi::GpuSplit* split, std::vector<std::unique_ptr<pi::ShmWorker>>* workers,
                std::unique_ptr<pi::Engine>* engine, std::vector<int32_t>* prompt_ids) {
  PI_RETURN_IF_ERROR(pi::LoadLlamaModel(r->model_path, model));
  if (r->check_tensors) {
    PI_RETURN_IF_ERROR(pi::CheckTensorValues(*model->file, true).WithContext(r->model_path));
  }
  PI_RETURN_IF_ERROR(pi::Tokenizer::FromGguf(*model->file, tok).WithContext(r->model_path));
  pi::NoteSparseSupport("pi-run", *model, r->opt.sparse);
  const int n_ctx = pi::Engine::ContextSize(model->config, r->opt.n_ctx);
  pi::NoteContextSize("pi-run", *model, n_ctx);
  PI_RETURN_IF_ERROR(
      pi::SetUpGpuSplit("pi-run", r->model_path, *model, r->split, n_ctx, split, &r->opt));
  if (r->cpu_workers > 0) {
    PI_RETURN_IF_ERROR(pi::StartLocalCpuWorkers(
        pi::PathNextToExecutable("pi-cpu-worker"), r->model_path, *model, r->cpu_workers,
        std::max(1, r->opt.n_threads / r->cpu_workers), &r->opt, workers));
    for (const auto& w : *workers) {
      fprintf(stderr, "pi-run: %s: %s backend, %.1f MiB of cold neurons\n", w->name(),
              w->backend().c_str(), w->resident_bytes() / 1048576.0);
    }
  }
  PI_RETURN_IF_ERROR(pi::Engine::Create(model, r->opt, engine));
  PI_RETURN_IF_ERROR((*tok)->Encode(r->prompt, (*tok)->add_bos_token(), prompt_ids));
  if (prompt_ids->empty()) return pi::Status::Error("the prompt encodes to no tokens");
  if (static_cast<int>(prompt_ids->size()) > (*engine)->n_ctx()) {
    return pi::Status::Error(
        "the prompt is %zu tokens, longer than the context (%d); raise -c or shorten the prompt",
        prompt_ids->size(), (*engine)->n_ctx());
  }
  r->sp.repeat_last_n = pi::RepeatLastNForContext(r->sp.repeat_last_n, (*engine)->n_ctx());
  return pi::Status::Ok();
}

}  // namespace

static int Run(int argc, char** argv) {
  RunFlags r;
  const int flags_status = ParseFlags(argc, argv, &r);
  if (flags_status >= 0) return flags_status;
  if (!r.prompt_file.empty()) {
    const pi::Status rs = pi::ReadWholeFile(r.prompt_file, &r.prompt);
    if (!rs.ok()) {
      fprintf(stderr, "pi-run: prompt file: %s\n", rs.message().c_str());
      return 1;
    }
  }
  if (r.model_path.empty()) r.model_path = pi::DefaultModelPath();

  const double t_start = pi::NowSeconds();
  pi::LlamaModel model;
  std::unique_ptr<pi::Tokenizer> tok;
  pi::GpuSplit split;
  std::vector<std::unique_ptr<pi::ShmWorker>> workers;  // outlive the engine
  std::unique_ptr<pi::Engine> engine;
  std::vector<int32_t> prompt_ids;
  pi::Status s = Load(&r, &model, &tok, &split, &workers, &engine, &prompt_ids);
  if (!s.ok()) {
    fprintf(stderr, "pi-run: %s\n", s.message().c_str());
    return 1;
  }
  pi::Sampler sampler(r.sp, engine->n_vocab());
  const pi::LlamaConfig& c = model.config;
  fprintf(stderr,
          "pi-run: %s (%s, %d layers, d=%d, ff=%d, %s), %.1f M params, ctx %d, %d threads, "
          "seed %u\n",
          r.model_path.c_str(), c.arch.c_str(), c.n_layer, c.n_embd, c.n_ff,
          pi::FfnActivationName(c.activation), model.ParameterCount() / 1e6, engine->n_ctx(),
          engine->n_threads(), sampler.seed());

  if (!r.json) {
    fputs(r.prompt.c_str(), stdout);
    fflush(stdout);
  }
  const double t_prompt = pi::NowSeconds();
  pi::GenerationRequest request;
  request.prompt = prompt_ids;
  request.n_predict = r.n_predict;
  request.ignore_eos = r.ignore_eos;
  request.stops = r.stops;
  pi::GenerationResult g;
  pi::Generate(
      engine.get(), *tok, &sampler, request,
      [&r](const std::string& text) {
        if (!r.json) {
          fputs(text.c_str(), stdout);
          fflush(stdout);
        }
        return true;
      },
      &g);
  if (!r.json) fputs("\n", stdout);
  const double t_end = pi::NowSeconds();
  if (!g.error.empty()) fprintf(stderr, "pi-run: %s\n", g.error.c_str());
  if (std::string(g.stop_reason) == "context") {
    fprintf(stderr, "pi-run: stopped: the context (%d) is full\n", engine->n_ctx());
  }
  if (engine->shard_failures() > 0) {
    fprintf(stderr,
            "pi-run: warning: cpu workers failed %lld time(s) and were restarted %lld time(s); "
            "their neurons ran here meanwhile, the tokens are the same (last: %s)\n",
            static_cast<long long>(engine->shard_failures()),
            static_cast<long long>(engine->shard_recoveries()), engine->shard_error().c_str());
  }
  for (auto& w : workers) {
    const pi::Status stopped = w->Stop();
    if (!stopped.ok() && engine->shard_failures() == 0) {
      fprintf(stderr, "pi-run: %s\n", stopped.message().c_str());
    }
  }
  const Times t = {(t_prompt - t_start) * 1e3, g.prompt_s * 1e3, g.eval_s * 1e3};
  PrintTimings(t, static_cast<int>(prompt_ids.size()), g, (t_end - t_start) * 1e3);
  if (r.json) PrintJson(r, *engine, sampler.seed(), prompt_ids, g, t);
  return g.error.empty() ? 0 : 1;
}

int main(int argc, char** argv) {
  return pi::RunTool("pi-run", Run, argc, argv);
}
