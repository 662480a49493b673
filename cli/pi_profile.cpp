// pi-profile: runs a model over a text corpus and counts, per layer and FFN
// neuron, how often the neuron fires (activation != 0): the statistics that
// neuron placement ranks by (PowerInfer's activation/*.pt), and per layer the
// quantiles of |act(gate x)| that --sparse cats' thresholds come from. Writes
// them as a GGUF stats file that names the model it was made from.
//
//   pi-profile -m model.gguf -f corpus.txt
//   pi-profile -m model.gguf -f texts/ -c 256 --max-tokens 100000 -o m.stats.gguf --csv m.csv
#include <algorithm>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "cli/activation_flag.h"
#include "cli/args.h"
#include "cli/corpus.h"
#include "cli/sparse_note.h"
#include "cli/tool_main.h"
#include "common/base/atomic_file.h"
#include "common/base/progress.h"
#include "common/model/llama_model.h"
#include "common/plan/activation_stats.h"
#include "common/plan/gate_thresholds.h"
#include "common/text/tokenizer.h"
#include "coordinator/engine/engine.h"

namespace {

void Usage() {
  fprintf(stderr,
          "usage: pi-profile -m MODEL -f FILE|DIR [options]\n"
          "  -m, --model FILE        GGUF model\n"
          "  -f, --file PATH         a text file, or a folder (all *.txt in it, sorted)\n"
          "  -c, --ctx-size N        chunk context (default min(model context, 512))\n"
          "  -b, --batch-size N      tokens per forward batch (default 64)\n"
          "  -t, --threads N         threads (default: %u)\n"
          "  --max-tokens N          stop after N tokens (default: the whole corpus)\n"
          "  -o, --output FILE       stats file (default: MODEL without .gguf + .stats.gguf)\n"
          "  --csv FILE              also write layer,neuron,count,frequency\n"
          "  --target-sparsity F     --sparse cats' share of skipped neurons the thresholds\n"
          "                          printed are for and, for a SiLU/GELU model, the counts\n"
          "                          (a second pass: how often each neuron passes; default\n"
          "                          0.5; the quantiles serve every target)\n",
          std::max(1u, std::thread::hardware_concurrency()));
  fputs(pi::kFfnActivationUsage, stderr);
}

pi::Status WriteCsv(const pi::ActivationStats& st, const std::string& path) {
  return pi::WriteFileAtomically(path, [&st](pi::AtomicFile* f) {
    std::string text = "layer,neuron,count,frequency\n";
    const double n = static_cast<double>(st.n_tokens());
    char line[96];
    for (int il = 0; il < st.n_layer(); ++il) {
      const int64_t* c = st.counts(il);
      for (int i = 0; i < st.n_ff(); ++i) {
        const int len = snprintf(line, sizeof(line), "%d,%d,%lld,%.6g\n", il, i,
                                 static_cast<long long>(c[i]), n > 0 ? c[i] / n : 0.0);
        text.append(line, static_cast<size_t>(len));
      }
      PI_RETURN_IF_ERROR(f->Write(text.data(), text.size()));
      text.clear();
    }
    return f->Write(text.data(), text.size());
  });
}

// --sparse cats' thresholds at `target` per layer, as the run tools will
// take them from the file.
void PrintGateThresholds(const pi::ActivationStats& st, double target) {
  std::vector<float> t;
  if (pi::GateThresholdsFor(st.gate_quantiles, st.n_layer(), target, &t).ok()) {
    printf("--sparse cats --target-sparsity %.2f: |act(gate)| thresholds per layer:", target);
    for (float v : t) printf(" %.4g", v);
    printf("\n");
  }
}

}  // namespace

static int Run(int argc, char** argv) {
  pi::ArgReader args("pi-profile", argc, argv);
  std::string ffn_activation;  // --ffn-activation
  std::string model_path, corpus, out_path, csv_path;
  int64_t max_tokens = -1;
  double target_sparsity = pi::kDefaultTargetSparsity;
  pi::EngineOptions opt;
  opt.n_threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const int flags_rc = args.ReadFlags(
      [&](const std::string& f) {
        if (f == "-m" || f == "--model")
          model_path = args.String(f);
        else if (f == "-f" || f == "--file")
          corpus = args.String(f);
        else if (f == "-c" || f == "--ctx-size")
          opt.n_ctx = args.Int(f);
        else if (f == "-b" || f == "--batch-size")
          opt.n_batch = args.Int(f);
        else if (f == "-t" || f == "--threads")
          opt.n_threads = args.Int(f);
        else if (f == "--max-tokens")
          max_tokens = args.Int64(f);
        else if (f == "-o" || f == "--output")
          out_path = args.String(f);
        else if (f == "--csv")
          csv_path = args.String(f);
        else if (f == "--target-sparsity") {
          target_sparsity = args.Float(f);
          if (!args.failed() && !(target_sparsity >= 0 && target_sparsity < 1))
            args.Fail("--target-sparsity expects a share in [0, 1)");
        } else if (pi::ParseFfnActivationFlag(f, &args, &ffn_activation)) {
        } else {
          return false;
        }
        return true;
      },
      Usage);
  if (flags_rc >= 0) return flags_rc;
  if (model_path.empty() || corpus.empty()) {
    fprintf(stderr, "pi-profile: -m MODEL and -f FILE|DIR are required (see --help)\n");
    return 2;
  }
  if (opt.n_threads < 1 || opt.n_ctx < 0 || opt.n_batch < 1 || max_tokens == 0 || max_tokens < -1) {
    fprintf(stderr, "pi-profile: -t, -b, --max-tokens must be >= 1 and -c >= 0\n");
    return 2;
  }
  if (out_path.empty()) out_path = pi::DefaultStatsWritePath(model_path);
  if (!pi::CheckOutputs("pi-profile", {out_path, csv_path})) return 1;

  pi::LlamaModel model;
  std::unique_ptr<pi::Tokenizer> tok;
  pi::Status s =
      pi::LoadModelAndTokenizer("pi-profile", model_path, ffn_activation, false, &model, &tok);
  pi::Corpus text;
  if (s.ok()) s = pi::ReadCorpus(corpus, *tok, max_tokens, &text);
  const pi::LlamaConfig& c = model.config;
  if (opt.n_ctx == 0) opt.n_ctx = std::min(c.n_ctx_train > 0 ? c.n_ctx_train : 512, 512);
  std::unique_ptr<pi::Engine> engine;
  if (s.ok()) s = pi::Engine::Create(&model, opt, &engine);
  if (!s.ok()) {
    fprintf(stderr, "pi-profile: %s\n", s.message().c_str());
    return 1;
  }
  // --max-tokens counts evaluated positions.
  pi::CorpusChunks chunks;
  s = pi::CorpusChunks::Make(&text.tokens, engine->n_ctx(), tok->add_bos_token() ? tok->bos() : -1,
                             max_tokens, &chunks);
  if (!s.ok()) {  // -c too small: a flag out of range
    fprintf(stderr, "pi-profile: %s\n", s.message().c_str());
    return 2;
  }

  pi::ActivationStats stats;
  pi::InitActivationStatsFor(model, &stats);
  stats.corpus = text.name;
  stats.n_ctx = engine->n_ctx();
  engine->SetFfnObserver(&stats);
  fprintf(stderr,
          "pi-profile: %s (%s, %d layers, n_ff %d, %s), %zu corpus tokens from %zu of %zu file(s), "
          "chunks of %d, batch %d, %d threads\n",
          model_path.c_str(), c.arch.c_str(), c.n_layer, c.n_ff,
          pi::FfnActivationName(c.activation), text.tokens.size(), text.files_read,
          text.files_found, engine->n_ctx(), opt.n_batch, engine->n_threads());

  pi::ProgressBar bar("pi-profile", chunks.positions(), "tok");
  s = chunks.Eval(engine.get(), opt.n_batch, &bar);
  if (!s.ok()) {
    fprintf(stderr, "\npi-profile: %s\n", s.message().c_str());
    return 1;
  }
  bar.Finish();
  stats.FinishGateQuantiles();
  if (!pi::FfnIsReluFamily(c.activation)) {
    // Its neurons never fall silent: what placement ranks by is how often
    // each passes --sparse cats' threshold, counted over the corpus again.
    std::vector<float> thresholds;
    s = pi::GateThresholdsFor(stats.gate_quantiles, c.n_layer, target_sparsity, &thresholds);
    if (s.ok()) {
      stats.CountGatePasses(thresholds, target_sparsity);
      fprintf(stderr,
              "pi-profile: %s: counting, per neuron, the tokens whose |%s(gate)| passes "
              "--sparse cats' threshold at --target-sparsity %.2f\n",
              model_path.c_str(), pi::FfnActivationName(c.activation), target_sparsity);
      pi::ProgressBar passes("pi-profile", chunks.positions(), "tok");
      s = chunks.Eval(engine.get(), opt.n_batch, &passes);
      if (s.ok()) passes.Finish();
    }
    if (!s.ok()) {
      fprintf(stderr, "\npi-profile: %s\n", s.message().c_str());
      return 1;
    }
  }

  // Report.
  printf("layer  sparsity  neurons for 50%%   80%%     95%% of firings\n");
  double mean_sparsity = 0;
  for (int il = 0; il < c.n_layer; ++il) {
    const int64_t* counts = stats.counts(il);
    const double sp = stats.Sparsity(il);
    mean_sparsity += sp / c.n_layer;
    printf("%5d  %7.2f%%  %14.2f%%  %6.2f%%  %6.2f%%\n", il, 100 * sp,
           100 * pi::FiringConcentration(counts, c.n_ff, 0.5),
           100 * pi::FiringConcentration(counts, c.n_ff, 0.8),
           100 * pi::FiringConcentration(counts, c.n_ff, 0.95));
  }
  printf("mean sparsity %.2f%% over %llu tokens\n", 100 * mean_sparsity,
         static_cast<unsigned long long>(stats.n_tokens()));
  if (!pi::FfnIsReluFamily(c.activation)) {
    printf(
        "note: %s uses %s, never exactly zero: the counts above are of neurons whose |%s(gate)| "
        "passed --sparse cats' threshold at --target-sparsity %.2f (what --vram-budget ranks "
        "by); the file also holds the quantiles every other target's thresholds come from.\n",
        model_path.c_str(), pi::FfnActivationName(c.activation),
        pi::FfnActivationName(c.activation), target_sparsity);
  }
  PrintGateThresholds(stats, target_sparsity);

  s = pi::WriteActivationStats(stats, out_path);
  if (s.ok() && !csv_path.empty()) s = WriteCsv(stats, csv_path);
  if (!s.ok()) {
    fprintf(stderr, "pi-profile: %s\n", s.message().c_str());
    return 1;
  }
  fprintf(stderr, "pi-profile: wrote %s (model fingerprint %s)%s%s\n", out_path.c_str(),
          pi::FingerprintHex(stats.model_fingerprint).c_str(), csv_path.empty() ? "" : " and ",
          csv_path.c_str());
  return 0;
}

int main(int argc, char** argv) {
  return pi::RunTool("pi-profile", Run, argc, argv);
}
