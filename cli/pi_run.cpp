// pi-run: generate text with a model in one process (llama-cli's common
// flags). Without -m it runs the bundled demo model.
//
//   pi-run -p "In the beginning" -n 64
//   pi-run -m model.gguf -f prompt.txt -n 128 -t 2 --temp 0 --json
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "cli/args.h"
#include "cli/cache_type_flags.h"
#include "cli/default_model.h"
#include "cli/gpu_split.h"
#include "cli/read_file.h"
#include "cli/sparse_note.h"
#include "common/json.h"
#include "common/llama_model.h"
#include "common/progress.h"
#include "common/sampler.h"
#include "common/tokenizer.h"
#include "coordinator/engine.h"

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
          "  --repeat-last-n N       (default 64)\n"
          "  -s, --seed N            (default -1 = random)\n"
          "  --ignore-eos            keep generating past end of text\n"
          "  --sparse MODE           FFN neurons computed per decoded token: off = all\n"
          "                          (default), oracle = exactly those that fire, predictor =\n"
          "                          those the model's predictor picks (ReLU models with\n"
          "                          ffn_down_t; predictor: fc1/fc2, see pi-train-predictor)\n"
          "  --sparse-threshold X    predictor score threshold (default: env\n"
          "                          LLAMA_SPARSE_PRED_THRESHOLD, else the file's)\n"
          "  --json                  print one JSON object (ids, text, timings) instead of text\n",
          std::max(1u, std::thread::hardware_concurrency()));
  fputs(pi::kCacheTypeUsage, stderr);
  fputs(pi::kGpuSplitUsage, stderr);
}

}  // namespace

int main(int argc, char** argv) {
  pi::ArgReader args("pi-run", argc, argv);
  pi::GpuSplitFlags split_flags;
  std::string model_path, prompt, prompt_file;
  bool have_prompt = false, json = false, ignore_eos = false;
  int n_predict = -1;
  pi::EngineOptions opt;
  opt.n_threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  pi::SamplerParams sp;
  while (!args.Done() && !args.failed()) {
    const std::string f = args.Next();
    if (f == "-m" || f == "--model")
      model_path = args.String(f);
    else if (f == "-p" || f == "--prompt") {
      prompt = args.String(f);
      have_prompt = true;
    } else if (f == "-f" || f == "--file")
      prompt_file = args.String(f);
    else if (f == "-n" || f == "--n-predict")
      n_predict = args.Int(f);
    else if (f == "-t" || f == "--threads")
      opt.n_threads = args.Int(f);
    else if (f == "-c" || f == "--ctx-size")
      opt.n_ctx = args.Int(f);
    else if (f == "-b" || f == "--batch-size")
      opt.n_batch = args.Int(f);
    else if (pi::ParseCacheTypeFlag(f, &args, &opt.cache_type_k, &opt.cache_type_v)) {
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
      ignore_eos = true;
    else if (f == "--json")
      json = true;
    else if (pi::ParseSparseFlag(f, &args, &opt.sparse, &opt.sparse_threshold)) {
    } else if (pi::ParseGpuSplitFlag(f, &args, &split_flags)) {
    } else if (f == "-h" || f == "--help") {
      Usage();
      return 0;
    } else
      args.Fail("unknown flag '" + f + "' (see --help)");
  }
  if (args.failed()) return 2;
  if (opt.n_threads < 1) {
    fprintf(stderr, "pi-run: -t must be >= 1\n");
    return 2;
  }
  if (sp.top_k < 0 || sp.top_p <= 0.0f || sp.top_p > 1.0f || sp.min_p < 0.0f || sp.min_p > 1.0f ||
      sp.repeat_penalty <= 0.0f || sp.repeat_last_n < 0) {
    fprintf(stderr, "pi-run: sampling parameters out of range (see --help)\n");
    return 2;
  }
  if (!prompt_file.empty()) {
    const pi::Status rs = pi::ReadWholeFile(prompt_file, &prompt);
    if (!rs.ok()) {
      fprintf(stderr, "pi-run: prompt file: %s\n", rs.message().c_str());
      return 1;
    }
    have_prompt = true;
  }
  if (!have_prompt) prompt = "";
  if (model_path.empty()) model_path = pi::DefaultModelPath();

  const double t_start = pi::NowSeconds();
  pi::LlamaModel model;
  pi::Status s = pi::LoadLlamaModel(model_path, &model);
  std::unique_ptr<pi::Tokenizer> tok;
  if (s.ok()) s = pi::Tokenizer::FromGguf(*model.file, &tok).WithContext(model_path);
  std::unique_ptr<pi::Engine> engine;
  if (s.ok()) pi::NoteSparseSupport("pi-run", model, opt.sparse);
  pi::GpuSplit split;
  if (s.ok()) {
    const int n_ctx = opt.n_ctx > 0 ? opt.n_ctx : std::min(model.config.n_ctx_train, 4096);
    s = pi::SetUpGpuSplit("pi-run", model_path, model, split_flags, n_ctx, &split, &opt);
  }
  if (s.ok()) s = pi::Engine::Create(&model, opt, &engine);
  std::vector<int32_t> prompt_ids;
  if (s.ok()) s = tok->Encode(prompt, tok->add_bos_token(), &prompt_ids);
  if (s.ok() && prompt_ids.empty()) s = pi::Status::Error("the prompt encodes to no tokens");
  if (s.ok() && static_cast<int>(prompt_ids.size()) > engine->n_ctx()) {
    s = pi::Status::Error(
        "the prompt is %zu tokens, longer than the context (%d); raise -c or "
        "shorten the prompt",
        prompt_ids.size(), engine->n_ctx());
  }
  if (!s.ok()) {
    fprintf(stderr, "pi-run: %s\n", s.message().c_str());
    return 1;
  }
  pi::Sampler sampler(sp, engine->n_vocab());
  const pi::LlamaConfig& c = model.config;
  fprintf(stderr,
          "pi-run: %s (%s, %d layers, d=%d, ff=%d, %s), %.1f M params, ctx %d, %d threads, "
          "seed %u\n",
          model_path.c_str(), c.arch.c_str(), c.n_layer, c.n_embd, c.n_ff,
          pi::FfnActivationName(c.activation), model.ParameterCount() / 1e6, engine->n_ctx(),
          engine->n_threads(), sampler.seed());

  // Prompt.
  if (!json) {
    fputs(prompt.c_str(), stdout);
    fflush(stdout);
  }
  const double t_prompt = pi::NowSeconds();
  s = engine->Eval(prompt_ids.data(), static_cast<int>(prompt_ids.size()));
  if (!s.ok()) {
    fprintf(stderr, "pi-run: %s\n", s.message().c_str());
    return 1;
  }
  for (int32_t id : prompt_ids) sampler.Accept(id);
  const double t_gen = pi::NowSeconds();

  // Generation: sample, stream, evaluate — until -n, end of text or a full context.
  std::vector<int32_t> out_ids;
  out_ids.reserve(n_predict > 0 ? n_predict : 256);
  std::string out_text;  // the generated pieces, exactly as streamed
  pi::Utf8Stream stream;
  int n_eval = 0;
  double t_sample = 0.0;
  const int limit = n_predict < 0 ? engine->n_ctx() : n_predict;
  bool stopped_by_context = false;
  while (static_cast<int>(out_ids.size()) < limit) {
    const double ts = pi::NowSeconds();
    const int32_t id = sampler.Sample(engine->logits());
    t_sample += pi::NowSeconds() - ts;
    if (!ignore_eos && tok->IsEog(id)) break;
    out_ids.push_back(id);
    sampler.Accept(id);
    const std::string piece = tok->TokenToPiece(id);
    out_text += piece;
    if (!json) {
      fputs(stream.Push(piece).c_str(), stdout);
      fflush(stdout);
    }
    if (static_cast<int>(out_ids.size()) >= limit) break;
    if (engine->n_past() >= engine->n_ctx()) {
      stopped_by_context = true;
      break;
    }
    s = engine->Eval(&id, 1);
    if (!s.ok()) {
      fprintf(stderr, "\npi-run: %s\n", s.message().c_str());
      return 1;
    }
    ++n_eval;
  }
  const double t_end = pi::NowSeconds();
  if (!json) {
    fputs(stream.Flush().c_str(), stdout);
    fputs("\n", stdout);
  }
  if (stopped_by_context)
    fprintf(stderr, "pi-run: stopped: the context (%d) is full\n", engine->n_ctx());

  const double load_ms = (t_prompt - t_start) * 1e3;
  const double prompt_ms = (t_gen - t_prompt) * 1e3;
  const double eval_ms = (t_end - t_gen - t_sample) * 1e3;
  const int n_prompt = static_cast<int>(prompt_ids.size());
  auto per_s = [](int n, double ms) { return ms > 0 ? 1e3 * n / ms : 0.0; };
  fprintf(stderr, "\npi-run:        load time = %10.2f ms\n", load_ms);
  fprintf(stderr,
          "pi-run: prompt eval time = %10.2f ms / %5d tokens (%8.2f ms per token, %8.2f tokens per "
          "second)\n",
          prompt_ms, n_prompt, prompt_ms / std::max(1, n_prompt), per_s(n_prompt, prompt_ms));
  fprintf(stderr,
          "pi-run:        eval time = %10.2f ms / %5d runs   (%8.2f ms per token, %8.2f tokens per "
          "second)\n",
          eval_ms, n_eval, eval_ms / std::max(1, n_eval), per_s(n_eval, eval_ms));
  fprintf(stderr, "pi-run:    sampling time = %10.2f ms / %5zu runs\n", t_sample * 1e3,
          out_ids.size());
  fprintf(stderr, "pi-run:       total time = %10.2f ms / %5zu tokens\n", (t_end - t_start) * 1e3,
          prompt_ids.size() + out_ids.size());

  if (json) {
    printf(
        "{\"model\":%s,\"seed\":%u,\"n_threads\":%d,\"n_ctx\":%d,\"sparse\":\"%s\",\"prompt\":%s,"
        "\"prompt_tokens\":%s,\"generated_tokens\":%s,\"text\":%s,"
        "\"timings\":{\"load_ms\":%s,\"prompt_n\":%d,\"prompt_ms\":%s,"
        "\"prompt_per_second\":%s,\"predicted_n\":%zu,\"eval_n\":%d,\"predicted_ms\":%s,"
        "\"predicted_per_second\":%s,\"sampling_ms\":%s}}\n",
        pi::JsonEscape(model_path).c_str(), sampler.seed(), engine->n_threads(), engine->n_ctx(),
        pi::SparseModeName(opt.sparse), pi::JsonEscape(prompt).c_str(),
        pi::JsonIntArray(prompt_ids).c_str(), pi::JsonIntArray(out_ids).c_str(),
        pi::JsonEscape(out_text).c_str(), pi::JsonNumber(load_ms).c_str(), n_prompt,
        pi::JsonNumber(prompt_ms).c_str(), pi::JsonNumber(per_s(n_prompt, prompt_ms)).c_str(),
        out_ids.size(), n_eval, pi::JsonNumber(eval_ms).c_str(),
        pi::JsonNumber(per_s(n_eval, eval_ms)).c_str(), pi::JsonNumber(t_sample * 1e3).c_str());
  }
  return 0;
}
