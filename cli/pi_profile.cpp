// pi-profile: runs a model over a text corpus and counts, per layer and FFN
// neuron, how often the neuron fires (activation != 0): the statistics that
// neuron placement ranks by (PowerInfer's activation/*.pt). Writes them as a
// GGUF stats file that names the model it was made from.
//
//   pi-profile -m model.gguf -f corpus.txt
//   pi-profile -m model.gguf -f texts/ -c 256 --max-tokens 100000 -o m.stats.gguf --csv m.csv
#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "cli/activation_flag.h"
#include "cli/args.h"
#include "cli/read_file.h"
#include "cli/tool_main.h"
#include "common/activation_stats.h"
#include "common/atomic_file.h"
#include "common/llama_model.h"
#include "common/progress.h"
#include "common/tokenizer.h"
#include "coordinator/engine.h"

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
          "  --csv FILE              also write layer,neuron,count,frequency\n",
          std::max(1u, std::thread::hardware_concurrency()));
  fputs(pi::kFfnActivationUsage, stderr);
}

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// The corpus files: `path` itself, or the *.txt files of a folder, sorted by name.
pi::Status ListCorpus(const std::string& path, std::vector<std::string>* files) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) return pi::Status::Error("cannot open '%s'", path.c_str());
  if (!S_ISDIR(st.st_mode)) {
    files->push_back(path);
    return pi::Status::Ok();
  }
  DIR* dir = opendir(path.c_str());
  if (dir == nullptr) return pi::Status::Error("cannot read folder '%s'", path.c_str());
  std::vector<std::string> names;
  while (dirent* e = readdir(dir)) {
    const std::string name = e->d_name;
    if (EndsWith(name, ".txt")) names.push_back(name);
  }
  closedir(dir);
  std::sort(names.begin(), names.end());
  if (names.empty()) return pi::Status::Error("folder '%s' has no *.txt files", path.c_str());
  const std::string sep = EndsWith(path, "/") ? "" : "/";
  for (const std::string& n : names) files->push_back(path + sep + n);
  return pi::Status::Ok();
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

}  // namespace

static int Run(int argc, char** argv) {
  pi::ArgReader args("pi-profile", argc, argv);
  std::string ffn_activation;  // --ffn-activation
  std::string model_path, corpus, out_path, csv_path;
  int64_t max_tokens = -1;
  pi::EngineOptions opt;
  opt.n_threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  while (!args.Done() && !args.failed()) {
    const std::string f = args.Next();
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
    else if (pi::ParseFfnActivationFlag(f, &args, &ffn_activation)) {
    } else if (f == "-h" || f == "--help") {
      Usage();
      return 0;
    } else
      args.Fail("unknown flag '" + f + "' (see --help)");
  }
  if (args.failed()) return 2;
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
  pi::Status s = pi::LoadLlamaModel(model_path, &model);
  if (s.ok()) s = pi::ApplyFfnActivationFlag("pi-profile", ffn_activation, &model);
  std::unique_ptr<pi::Tokenizer> tok;
  if (s.ok()) s = pi::Tokenizer::FromGguf(*model.file, &tok).WithContext(model_path);
  std::vector<std::string> files;
  if (s.ok()) s = ListCorpus(corpus, &files);
  if (!s.ok()) {
    fprintf(stderr, "pi-profile: %s\n", s.message().c_str());
    return 1;
  }
  const pi::LlamaConfig& c = model.config;
  if (opt.n_ctx == 0) opt.n_ctx = std::min(c.n_ctx_train > 0 ? c.n_ctx_train : 512, 512);
  std::unique_ptr<pi::Engine> engine;
  s = pi::Engine::Create(&model, opt, &engine);
  if (!s.ok()) {
    fprintf(stderr, "pi-profile: %s\n", s.message().c_str());
    return 1;
  }

  // Tokenize every file (no bos: each chunk gets its own), concatenated in order.
  std::vector<int32_t> tokens, ids;
  std::string text;
  size_t files_read = 0;
  for (const std::string& path : files) {
    s = pi::ReadWholeFile(path, &text);
    if (s.ok()) s = tok->Encode(text, false, &ids).WithContext(path);
    if (!s.ok()) {
      fprintf(stderr, "pi-profile: %s\n", s.message().c_str());
      return 1;
    }
    tokens.insert(tokens.end(), ids.begin(), ids.end());
    ++files_read;
    if (max_tokens > 0 && static_cast<int64_t>(tokens.size()) >= max_tokens) break;
  }
  if (tokens.empty()) {
    fprintf(stderr, "pi-profile: the corpus '%s' encodes to no tokens\n", corpus.c_str());
    return 1;
  }

  // Chunks of n_ctx positions; with a bos token each chunk starts with it, as
  // every real prompt does. --max-tokens counts evaluated positions.
  const int n_ctx = engine->n_ctx();
  const bool bos = tok->add_bos_token() && tok->bos() >= 0;
  const int per_chunk = bos ? n_ctx - 1 : n_ctx;
  if (per_chunk < 1) {
    fprintf(stderr, "pi-profile: -c %d leaves no room for text after bos\n", n_ctx);
    return 2;
  }
  int64_t total = 0;
  for (size_t i = 0; i < tokens.size(); i += per_chunk) {
    total += std::min<int64_t>(per_chunk, tokens.size() - i) + (bos ? 1 : 0);
  }
  if (max_tokens > 0) total = std::min(total, max_tokens);

  pi::ActivationStats stats;
  pi::InitActivationStatsFor(model, &stats);
  // The path as given; for a folder also how many of its *.txt files were read.
  stats.corpus = files.size() == 1 ? files[0]
                                   : corpus + " (" + std::to_string(files_read) + " of " +
                                         std::to_string(files.size()) + " *.txt files)";
  stats.n_ctx = n_ctx;
  engine->SetFfnObserver(&stats);
  fprintf(stderr,
          "pi-profile: %s (%s, %d layers, n_ff %d, %s), %zu corpus tokens from %zu of %zu file(s), "
          "chunks "
          "of %d, batch %d, %d threads\n",
          model_path.c_str(), c.arch.c_str(), c.n_layer, c.n_ff,
          pi::FfnActivationName(c.activation), tokens.size(), files_read, files.size(), n_ctx,
          opt.n_batch, engine->n_threads());

  pi::ProgressBar bar("pi-profile", total, "tok");
  std::vector<int32_t> chunk;
  chunk.reserve(n_ctx);
  int64_t done = 0;
  for (size_t i = 0; i < tokens.size() && done < total; i += per_chunk) {
    chunk.clear();
    if (bos) chunk.push_back(tok->bos());
    const size_t end = std::min(tokens.size(), i + per_chunk);
    chunk.insert(chunk.end(), tokens.begin() + i, tokens.begin() + end);
    if (static_cast<int64_t>(chunk.size()) > total - done) chunk.resize(total - done);
    engine->Reset();
    // Batch by batch, so the bar moves within a chunk.
    for (size_t j = 0; j < chunk.size(); j += opt.n_batch) {
      const int n = static_cast<int>(std::min<size_t>(opt.n_batch, chunk.size() - j));
      s = engine->Eval(chunk.data() + j, n);
      if (!s.ok()) {
        fprintf(stderr, "\npi-profile: %s\n", s.message().c_str());
        return 1;
      }
      done += n;
      bar.Update(done);
    }
  }
  bar.Finish();

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
        "note: %s uses %s: activations are (almost) never exactly zero, so sparsity is ~0%% "
        "and every neuron fires on every token. The profile is valid but flat; ReLU-form "
        "models (relu, drelu) are the ones whose neurons can be skipped.\n",
        model_path.c_str(), pi::FfnActivationName(c.activation));
  }

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
