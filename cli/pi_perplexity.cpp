// pi-perplexity: the perplexity of a model over a text file, computed the way
// llama.cpp's llama-perplexity does, so the two tools' numbers are comparable.
//
//   pi-perplexity -f models/kjv-valid.txt -c 256
//   pi-perplexity -m model.gguf -f wiki.test.raw --chunks 20 --json
//
// The whole file is tokenized as one string (BOS first when the tokenizer adds
// one) and cut into chunks of n_ctx tokens. Each chunk is evaluated from an
// empty context with its first token replaced by BOS; only the predictions of
// the second half are scored, so every scored token sees at least n_ctx/2
// tokens of context.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "cli/activation_flag.h"
#include "cli/args.h"
#include "cli/cache_type_flags.h"
#include "cli/corpus.h"
#include "cli/default_model.h"
#include "cli/gpu_split.h"
#include "cli/read_file.h"
#include "cli/sparse_note.h"
#include "cli/tool_main.h"
#include "common/base/progress.h"
#include "common/model/llama_model.h"
#include "common/text/json.h"
#include "common/text/tokenizer.h"
#include "coordinator/engine/engine.h"

namespace {

constexpr int kDefaultCtx = 512;  // llama-perplexity's customary chunk size

void Usage() {
  fprintf(stderr,
          "usage: pi-perplexity -f FILE [options]\n"
          "  -m, --model FILE        GGUF model (default: the bundled demo model)\n"
          "  -f, --file FILE         text to score (required)\n"
          "  -c, --ctx-size N        tokens per chunk (0 = min(model context, %d); default 0)\n"
          "  -b, --batch-size N      tokens per forward batch (default 64)\n"
          "  -t, --threads N         threads (default: %u)\n"
          "  --chunks N              score at most N chunks (default -1 = all)\n"
          "  --json                  print one JSON object instead of the running values\n"
          "  --check-tensors         check every weight is finite when loading\n"
          "  --sparse off|oracle|predictor|cats|teal  FFN neurons computed (sparse modes feed\n"
          "                          one token at a time, and the share skipped is reported;\n"
          "                          teal also thresholds the inputs of q, k, v, o and the gate)\n"
          "  --sparse-threshold X    predictor score threshold (default: env\n"
          "                          LLAMA_SPARSE_PRED_THRESHOLD, else the file's)\n"
          "  --target-sparsity F     --sparse cats/teal: the share skipped (default 0.5;\n"
          "                          thresholds from the --stats file, MODEL.stats.gguf)\n"
          "  --sparse-allocation A   uniform (default) or greedy: as pi-run's\n",
          kDefaultCtx, std::max(1u, std::thread::hardware_concurrency()));
  fputs(pi::kCacheTypeUsage, stderr);
  fputs(pi::kGpuSplitUsage, stderr);
  fputs(pi::kFfnActivationUsage, stderr);
}

// -log softmax(logits)[target], in double: the exponentials of a large vocabulary
// summed in float lose the digits that separate two close perplexities.
double TokenNll(const float* logits, int n_vocab, int32_t target) {
  float max_logit = logits[0];
  for (int i = 1; i < n_vocab; ++i) max_logit = std::max(max_logit, logits[i]);
  double sum_exp = 0.0;
  for (int i = 0; i < n_vocab; ++i) sum_exp += std::exp(static_cast<double>(logits[i]) - max_logit);
  return std::log(sum_exp) - (static_cast<double>(logits[target]) - max_logit);
}

// Running sums of the per-token negative log-likelihood.
struct NllStats {
  double sum = 0.0;
  double sum_sq = 0.0;
  int64_t count = 0;

  void Add(double nll) {
    sum += nll;
    sum_sq += nll * nll;
    ++count;
  }
  double Mean() const { return count > 0 ? sum / count : NAN; }
  // Standard error of the mean nll (NaN with fewer than two tokens).
  double StdErr() const {
    if (count < 2) return NAN;
    const double mean = Mean();
    const double var = sum_sq / count - mean * mean;
    return var > 0 ? std::sqrt(var / (count - 1)) : 0.0;
  }
};

struct Report {
  NllStats nll;
  int n_chunks = 0;
  int n_ctx = 0;
  int64_t n_tokens = 0;  // of the whole text
  double seconds = 0.0;  // evaluation and scoring, model loading excluded
  // Per layer, the share of FFN neurons a token did not compute (sparse
  // modes; empty with --sparse off).
  std::vector<double> layer_sparsity;
  double input_sparsity = -1;  // --sparse teal: the thresholded inputs' share dropped
};

// The per-layer shares as a JSON array ([] when none were measured).
std::string LayerList(const std::vector<double>& shares) {
  std::string out = "[";
  for (size_t l = 0; l < shares.size(); ++l) {
    out += (l ? "," : "") + pi::JsonNumber(shares[l]);
  }
  return out + "]";
}

// The share of each layer's neurons left out over `tokens` evaluated tokens.
std::vector<double> LayerSparsity(const pi::Engine& engine, int64_t tokens) {
  const pi::LlamaConfig& c = engine.model().config;
  std::vector<double> out(c.n_layer, 0.0);
  const double all = static_cast<double>(tokens) * c.n_ff;
  for (int l = 0; l < c.n_layer; ++l) {
    const double computed = engine.ffn_computed(l, false) + engine.ffn_computed(l, true);
    out[l] = all > 0 ? 1.0 - computed / all : 0.0;
  }
  return out;
}

double Mean(const std::vector<double>& v) {
  double sum = 0;
  for (double x : v) sum += x;
  return v.empty() ? 0.0 : sum / v.size();
}

// Scores `n_chunks` chunks of `n_ctx` tokens. `running` (may be null) receives
// "[i]ppl," after every chunk, as llama-perplexity prints them.
pi::Status ScoreChunks(pi::Engine* engine, const std::vector<int32_t>& tokens, int n_ctx,
                       int n_chunks, int32_t bos, FILE* running, pi::ProgressBar* progress,
                       Report* report) {
  const int n_vocab = engine->n_vocab();
  const int first = n_ctx / 2;
  std::vector<int32_t> chunk(n_ctx);
  const double t0 = pi::NowSeconds();
  for (int c = 0; c < n_chunks; ++c) {
    const size_t start = static_cast<size_t>(c) * n_ctx;
    std::copy(tokens.begin() + start, tokens.begin() + start + n_ctx, chunk.begin());
    // Every chunk starts like a document: the model was trained with BOS there.
    if (bos >= 0) chunk[0] = bos;
    engine->Reset();
    pi::Status s = engine->Eval(chunk.data(), n_ctx, /*all_logits=*/true);
    if (!s.ok()) return s.WithContext("chunk " + std::to_string(c + 1));
    // Position j predicts token j + 1 of the chunk (the original one: only
    // position 0 was replaced, and it is never a target).
    for (int j = first; j < n_ctx - 1; ++j) {
      const double nll =
          TokenNll(engine->logits() + static_cast<size_t>(j) * n_vocab, n_vocab, chunk[j + 1]);
      if (!std::isfinite(nll)) {
        return pi::Status::Error("chunk %d, position %d: non-finite logits (nll %g)", c + 1, j,
                                 nll);
      }
      report->nll.Add(nll);
    }
    if (running) {
      fprintf(running, "[%d]%.4f,", c + 1, std::exp(report->nll.Mean()));
      fflush(running);
    }
    if (progress) progress->Update(static_cast<int64_t>(c + 1) * n_ctx);
  }
  report->seconds = pi::NowSeconds() - t0;
  report->n_chunks = n_chunks;
  report->n_ctx = n_ctx;
  return pi::Status::Ok();
}

// What the flags ask for.
struct Options {
  std::string ffn_activation;  // --ffn-activation
  pi::GpuSplitFlags split_flags;
  std::string model_path, text_path;
  bool json = false, check_tensors = false;
  int n_ctx = 0;
  int max_chunks = -1;
  double target_sparsity = pi::kDefaultTargetSparsity;  // --sparse cats
  pi::SparsityAllocation allocation = pi::SparsityAllocation::kUniform;
  pi::EngineOptions engine;
};

bool ParseFlag(const std::string& f, pi::ArgReader* args, Options* o) {
  pi::EngineOptions& e = o->engine;
  if (f == "-m" || f == "--model")
    o->model_path = args->String(f);
  else if (f == "-f" || f == "--file")
    o->text_path = args->String(f);
  else if (f == "-c" || f == "--ctx-size")
    o->n_ctx = args->Int(f);
  else if (f == "-b" || f == "--batch-size")
    e.n_batch = args->Int(f);
  else if (f == "-t" || f == "--threads")
    e.n_threads = args->Int(f);
  else if (f == "--chunks")
    o->max_chunks = args->Int(f);
  else if (f == "--check-tensors")
    o->check_tensors = true;
  else if (f == "--json")
    o->json = true;
  else
    return pi::ParseSparseFlag(f, args, &e.sparse, &e.sparse_threshold, &o->target_sparsity,
                               nullptr, &o->allocation) ||
           pi::ParseCacheTypeFlag(f, args, &e.cache_type_k, &e.cache_type_v) ||
           pi::ParseGpuSplitFlag(f, args, &o->split_flags) ||
           pi::ParseFfnActivationFlag(f, args, &o->ffn_activation);
  return true;
}

// Reads and checks the flags: -1 to go on, else the exit status.
int ParseOptions(int argc, char** argv, Options* o) {
  pi::ArgReader args("pi-perplexity", argc, argv);
  o->engine.n_threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const int flags_rc =
      args.ReadFlags([&](const std::string& f) { return ParseFlag(f, &args, o); }, Usage);
  if (flags_rc >= 0) return flags_rc;
  if (o->text_path.empty()) {
    fprintf(stderr, "pi-perplexity: -f FILE is required (see --help)\n");
    return 2;
  }
  if (o->engine.n_threads < 1 || o->engine.n_batch < 1) {
    fprintf(stderr, "pi-perplexity: -t and -b must be >= 1\n");
    return 2;
  }
  // Fewer than 4 tokens per chunk leaves the second half without a prediction
  // to score (n_ctx - 1 - n_ctx/2 predictions per chunk).
  if (o->n_ctx != 0 && o->n_ctx < 4) {
    fprintf(stderr, "pi-perplexity: -c must be 0 (default) or >= 4, got %d\n", o->n_ctx);
    return 2;
  }
  if (o->max_chunks == 0 || o->max_chunks < -1) {
    fprintf(stderr, "pi-perplexity: --chunks must be >= 1 (or -1 for all), got %d\n",
            o->max_chunks);
    return 2;
  }
  if (o->model_path.empty()) o->model_path = pi::DefaultModelPath();
  return -1;
}

// The estimate, its error and the speed, as text or one JSON object.
void PrintResult(const Options& o, const Report& report, int n_threads) {
  const double nll_mean = report.nll.Mean();
  const double ppl = std::exp(nll_mean);
  // As llama.cpp: the error of exp(mean nll) to first order, ppl * stderr(nll).
  const double ppl_stderr = ppl * report.nll.StdErr();
  const int64_t n_evaluated = static_cast<int64_t>(report.n_chunks) * report.n_ctx;
  const double tokens_per_s = report.seconds > 0 ? n_evaluated / report.seconds : 0.0;
  fprintf(stderr, "pi-perplexity: %lld tokens evaluated in %.2f s (%.1f tokens/s), %lld scored\n",
          static_cast<long long>(n_evaluated), report.seconds, tokens_per_s,
          static_cast<long long>(report.nll.count));
  if (!report.layer_sparsity.empty()) {
    const auto [lo, hi] =
        std::minmax_element(report.layer_sparsity.begin(), report.layer_sparsity.end());
    fprintf(stderr,
            "pi-perplexity: --sparse %s: %.1f%% of the FFN neurons skipped model-wide (layers "
            "%.1f%% to %.1f%%)\n",
            pi::SparseModeName(o.engine.sparse), 100 * Mean(report.layer_sparsity), 100 * *lo,
            100 * *hi);
  }
  if (report.input_sparsity >= 0) {
    fprintf(stderr,
            "pi-perplexity: --sparse teal: %.1f%% of the entries of q, k, v, o and the gate's "
            "inputs dropped\n",
            100 * report.input_sparsity);
  }
  if (o.json) {
    printf(
        "{\"model\":%s,\"file\":%s,\"ppl\":%s,\"ppl_stderr\":%s,\"nll_mean\":%s,"
        "\"n_chunks\":%d,\"n_ctx\":%d,\"n_tokens\":%lld,\"n_tokens_scored\":%lld,"
        "\"n_threads\":%d,\"sparse\":\"%s\",\"ffn_sparsity\":%s,\"ffn_layer_sparsity\":%s,"
        "\"input_sparsity\":%s,\"seconds\":%s,"
        "\"tokens_per_second\":%s}\n",
        pi::JsonEscape(o.model_path).c_str(), pi::JsonEscape(o.text_path).c_str(),
        pi::JsonNumber(ppl).c_str(), pi::JsonNumber(ppl_stderr).c_str(),
        pi::JsonNumber(nll_mean).c_str(), report.n_chunks, report.n_ctx,
        static_cast<long long>(report.n_tokens), static_cast<long long>(report.nll.count),
        n_threads, pi::SparseModeName(o.engine.sparse),
        pi::JsonNumber(Mean(report.layer_sparsity)).c_str(),
        LayerList(report.layer_sparsity).c_str(),
        report.input_sparsity >= 0 ? pi::JsonNumber(report.input_sparsity).c_str() : "null",
        pi::JsonNumber(report.seconds).c_str(), pi::JsonNumber(tokens_per_s).c_str());
  } else if (std::isfinite(ppl_stderr)) {
    printf("Final estimate: PPL = %.4f +/- %.5f\n", ppl, ppl_stderr);
  } else {
    printf("Final estimate: PPL = %.4f (too few tokens scored for an error estimate)\n", ppl);
  }
}

}  // namespace

static int Run(int argc, char** argv) {
  Options o;
  const int rc = ParseOptions(argc, argv, &o);
  if (rc >= 0) return rc;
  std::string text;
  pi::Status s = pi::ReadWholeFile(o.text_path, &text);
  const double t_start = pi::NowSeconds();
  pi::LlamaModel model;
  std::unique_ptr<pi::Tokenizer> tok;
  if (s.ok()) {
    s = pi::LoadModelAndTokenizer("pi-perplexity", o.model_path, o.ffn_activation, o.check_tensors,
                                  &model, &tok);
  }
  std::vector<int32_t> tokens;
  if (s.ok()) s = tok->Encode(text, tok->add_bos_token(), &tokens).WithContext(o.text_path);
  if (!s.ok()) {
    fprintf(stderr, "pi-perplexity: %s\n", s.message().c_str());
    return 1;
  }
  const int n_ctx = o.n_ctx != 0 ? o.n_ctx : std::min(model.config.n_ctx_train, kDefaultCtx);
  pi::NoteSparseSupport("pi-perplexity", model, o.engine.sparse);
  {
    const pi::Status t =
        pi::PrepareSparseMode("pi-perplexity", o.model_path, o.split_flags.stats_path,
                              o.target_sparsity, &model, &o.engine, o.allocation);
    if (!t.ok()) {
      fprintf(stderr, "pi-perplexity: %s\n", t.message().c_str());
      return 1;
    }
  }
  // Sparse modes act on single-token steps (prompt batches run dense), so a
  // sparse perplexity feeds the chunk one token at a time: the same path
  // generation takes.
  if (o.engine.sparse != pi::SparseMode::kOff) o.engine.n_batch = 1;
  // Checked before the engine exists: the KV cache is sized by n_ctx, and the
  // text bounds any n_ctx worth allocating.
  const int64_t n_tokens = static_cast<int64_t>(tokens.size());
  if (n_tokens < n_ctx) {
    fprintf(stderr,
            "pi-perplexity: '%s' is %lld tokens, fewer than one chunk of %d (-c); use a "
            "longer text or a smaller -c\n",
            o.text_path.c_str(), static_cast<long long>(n_tokens), n_ctx);
    return 1;
  }
  if (n_ctx > model.config.n_ctx_train) {
    fprintf(stderr, "pi-perplexity: warning: -c %d is beyond the model's training context %d\n",
            n_ctx, model.config.n_ctx_train);
  }
  int n_chunks = static_cast<int>(std::min<int64_t>(n_tokens / n_ctx, 1 << 30));
  if (o.max_chunks > 0) n_chunks = std::min(n_chunks, o.max_chunks);

  o.engine.n_ctx = n_ctx;
  pi::GpuSplit split;
  s = pi::SetUpGpuSplit("pi-perplexity", o.model_path, model, o.split_flags, n_ctx, &split,
                        &o.engine);
  // The split, like the sparse modes, acts on single-token steps.
  if (o.engine.hot_shard) o.engine.n_batch = 1;
  std::unique_ptr<pi::Engine> engine;
  if (s.ok()) s = pi::Engine::Create(&model, o.engine, &engine);
  if (!s.ok()) {
    fprintf(stderr, "pi-perplexity: %s\n", s.message().c_str());
    return 1;
  }
  const int32_t bos = tok->add_bos_token() ? tok->bos() : -1;
  fprintf(stderr,
          "pi-perplexity: %s, %.1f M params, %d threads; '%s': %lld tokens, %d chunks of %d "
          "(scoring the last %d of each), load %.2f s\n",
          o.model_path.c_str(), model.ParameterCount() / 1e6, engine->n_threads(),
          o.text_path.c_str(), static_cast<long long>(n_tokens), n_chunks, n_ctx,
          n_ctx - 1 - n_ctx / 2, pi::NowSeconds() - t_start);

  // The running values go to stdout; when stdout shares the terminal with
  // stderr they are the progress report, and a redrawn bar would erase them.
  const bool show_bar = o.json || isatty(fileno(stdout)) == 0 || isatty(fileno(stderr)) == 0;
  std::unique_ptr<pi::ProgressBar> bar;
  if (show_bar) {
    bar = std::make_unique<pi::ProgressBar>("pi-perplexity", static_cast<int64_t>(n_chunks) * n_ctx,
                                            "tokens");
  }
  Report report;
  report.n_tokens = n_tokens;
  s = ScoreChunks(engine.get(), tokens, n_ctx, n_chunks, bos, o.json ? nullptr : stdout, bar.get(),
                  &report);
  if (!o.json) fputs("\n", stdout);
  if (!s.ok()) {
    fprintf(stderr, "pi-perplexity: %s\n", s.message().c_str());
    return 1;
  }
  if (bar) bar->Finish();
  if (o.engine.sparse != pi::SparseMode::kOff) {
    report.layer_sparsity =
        LayerSparsity(*engine, static_cast<int64_t>(report.n_chunks) * report.n_ctx);
  }
  if (o.engine.sparse == pi::SparseMode::kTeal)
    report.input_sparsity = 1 - engine->input_kept_share();
  PrintResult(o, report, engine->n_threads());
  return 0;
}

int main(int argc, char** argv) {
  return pi::RunTool("pi-perplexity", Run, argc, argv);
}
