// pi-dump-logits: evaluates a token sequence and writes every position's
// logits as raw float32 [n_tokens, n_vocab], row-major. The reference checks
// (tests/reference/check_forward.py) compare these with an independent numpy
// forward pass. --mode decode feeds one token per Eval (the decode path),
// --mode prompt the whole sequence in batches of -b (the prompt path).
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "cli/activation_flag.h"
#include "cli/args.h"
#include "cli/cache_type_flags.h"
#include "cli/sparse_note.h"
#include "cli/tool_main.h"
#include "common/base/atomic_file.h"
#include "common/base/thread_pool.h"
#include "common/model/weight_repack.h"
#include "coordinator/engine/engine.h"

namespace {

void Usage() {
  fprintf(stderr,
          "usage: pi-dump-logits -m MODEL --tokens 1,2,3 --out FILE [--mode decode|prompt] "
          "[-t N] [-b N] [-c N] [--sparse off|oracle|predictor|cats] [-nr]\n"
          "  --target-sparsity F   --sparse cats: the share of neurons skipped (default 0.5)\n"
          "  --sparse-allocation A uniform (default) or greedy: as pi-run's\n"
          "  --stats FILE       --sparse cats: the gate quantiles (default MODEL.stats.gguf)\n"
          "  -nr, --no-repack   keep Q4_0, Q4_K, Q5_K and float matrices in the file's layout\n"
          "                     (default: repacked for the CPU kernels, as pi-run does)\n");
  fputs(pi::kFfnActivationUsage, stderr);
}

}  // namespace

static int Run(int argc, char** argv) {
  pi::ArgReader args("pi-dump-logits", argc, argv);
  std::string ffn_activation;  // --ffn-activation
  std::string model_path, out_path, mode = "decode";
  std::vector<int64_t> token_list;
  pi::EngineOptions opt;
  double target_sparsity = pi::kDefaultTargetSparsity;
  pi::SparsityAllocation allocation = pi::SparsityAllocation::kUniform;
  std::string stats_path;
  bool repack = true;
  const int flags_rc = args.ReadFlags(
      [&](const std::string& f) {
        if (f == "-m" || f == "--model")
          model_path = args.String(f);
        else if (f == "--tokens")
          token_list = args.IntList(f, INT32_MIN, INT32_MAX);
        else if (f == "--out")
          out_path = args.String(f);
        else if (f == "--mode")
          mode = args.String(f);
        else if (f == "-t" || f == "--threads")
          opt.n_threads = args.Int(f);
        else if (f == "-b" || f == "--batch-size")
          opt.n_batch = args.Int(f);
        else if (f == "-c" || f == "--ctx-size")
          opt.n_ctx = args.Int(f);
        else if (f == "-nr" || f == "--no-repack")
          repack = false;
        else if (pi::ParseSparseFlag(f, &args, &opt.sparse, &opt.sparse_threshold, &target_sparsity,
                                     nullptr, &allocation)) {
        } else if (f == "--stats")
          stats_path = args.String(f);
        else if (pi::ParseCacheTypeFlag(f, &args, &opt.cache_type_k, &opt.cache_type_v)) {
        } else if (pi::ParseFfnActivationFlag(f, &args, &ffn_activation)) {
        } else {
          return false;
        }
        return true;
      },
      Usage);
  if (flags_rc >= 0) return flags_rc;
  const std::string bad = model_path.empty()   ? "-m MODEL is required"
                          : token_list.empty() ? "--tokens 1,2,3 is required"
                          : out_path.empty()   ? "--out FILE is required"
                          : mode != "decode" && mode != "prompt"
                              ? "--mode expects decode or prompt, got '" + mode + "'"
                          : opt.n_threads < 1 ? "-t must be at least 1"
                          : opt.n_batch < 1   ? "-b must be at least 1"
                          : opt.n_ctx < 0     ? "-c must be 0 (the model's) or more"
                                              : "";
  if (!bad.empty()) {
    fprintf(stderr, "pi-dump-logits: %s (see --help)\n", bad.c_str());
    return 2;
  }
  const std::vector<int32_t> tokens(token_list.begin(), token_list.end());
  if (!pi::CheckOutputs("pi-dump-logits", {out_path})) return 1;

  pi::LlamaModel model;
  pi::Status s = pi::LoadLlamaModel(model_path, &model);
  if (s.ok()) s = pi::ApplyFfnActivationFlag("pi-dump-logits", ffn_activation, &model);
  if (s.ok()) {
    s = pi::PrepareSparseMode("pi-dump-logits", model_path, stats_path, target_sparsity, &model,
                              &opt, allocation);
  }
  if (s.ok() && repack) {
    pi::ThreadPool pool(opt.n_threads);
    pi::RepackStats stats;
    s = pi::RepackModelWeights(&model, pi::HostRepackScope(opt), &pool, &stats);
  }
  std::unique_ptr<pi::Engine> engine;
  if (s.ok()) s = pi::Engine::Create(&model, opt, &engine);
  if (!s.ok()) {
    fprintf(stderr, "pi-dump-logits: %s\n", s.message().c_str());
    return 1;
  }
  const int n_vocab = engine->n_vocab();
  // Checked here, by their place in --tokens: decode mode evaluates one token
  // at a time, so the engine's own message would always say index 0.
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] < 0 || tokens[i] >= n_vocab) {
      fprintf(stderr, "pi-dump-logits: --tokens entry %zu: token id %d is out of range [0, %d)\n",
              i, tokens[i], n_vocab);
      return 1;
    }
  }
  std::vector<float> all(tokens.size() * static_cast<size_t>(n_vocab));
  if (mode == "prompt") {
    s = engine->Eval(tokens.data(), static_cast<int>(tokens.size()), /*all_logits=*/true);
    if (s.ok()) std::copy(engine->logits(), engine->logits() + all.size(), all.begin());
  } else {
    for (size_t i = 0; i < tokens.size() && s.ok(); ++i) {
      s = engine->Eval(&tokens[i], 1);
      if (s.ok())
        std::copy(engine->logits(), engine->logits() + n_vocab, all.begin() + i * n_vocab);
    }
  }
  if (!s.ok()) {
    fprintf(stderr, "pi-dump-logits: %s\n", s.message().c_str());
    return 1;
  }
  s = pi::WriteFileAtomically(out_path, [&all](pi::AtomicFile* f) {
    return f->Write(all.data(), sizeof(float) * all.size());
  });
  if (!s.ok()) {
    fprintf(stderr, "pi-dump-logits: %s\n", s.message().c_str());
    return 1;
  }
  return 0;
}

int main(int argc, char** argv) {
  return pi::RunTool("pi-dump-logits", Run, argc, argv);
}
