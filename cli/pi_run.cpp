// pi-run: generate text with a model in one process (llama-cli's common
// flags). Without -m it runs the bundled demo model.
//
//   pi-run -p "In the beginning" -n 64
//   pi-run -m model.gguf -f prompt.txt -n 128 -t 2 --temp 0 --json
//   pi-run -m chat-model.gguf -cnv            (a conversation in the terminal)
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cli/args.h"
#include "cli/cache_type_flags.h"
#include "cli/context_note.h"
#include "cli/conversation.h"
#include "cli/engine_flags.h"
#include "cli/gpu_split.h"
#include "cli/interactive.h"
#include "cli/request_flags.h"
#include "cli/tool_main.h"
#include "common/base/progress.h"
#include "common/text/chat_template.h"
#include "common/text/grammar.h"
#include "common/text/json.h"
#include "common/text/sampler.h"
#include "coordinator/engine/engine.h"
#include "coordinator/engine/generation.h"

namespace {

void Usage() {
  fputs(
      "usage: pi-run [options]\n"
      "  --json                  print one JSON object (ids, text, timings, stop reason)\n"
      "                          instead of text\n"
      "  -cnv, --conversation    chat in the terminal: each line read is your turn, the\n"
      "                          reply follows (-n per reply); end with EOF or /exit\n"
      "  -sys, --system-prompt TEXT  the conversation's system message (-cnv; -p too)\n"
      "  --chat-template NAME    the template -cnv renders with (default: the model's):\n"
      "                          chatml, llama2, llama3, mistral, mistral-v3, phi4,\n"
      "                          deepseek-r1, command-r, ... (an unknown name lists them)\n"
      "  --keep N                when the context fills, keep the first N prompt tokens (-1:\n"
      "                          the whole prompt; default 0: BOS alone), drop half of the\n"
      "                          rest and go on (llama-cli's context shift); -n -1 then\n"
      "                          means until end of text\n"
      "  --no-context-shift      stop when the context fills instead\n"
      "  -i, --interactive       llama-cli's interactive mode: after the prompt, generate\n"
      "                          until a reverse prompt, end of text or -n tokens, then read\n"
      "                          a line and go on; ends at the end of input\n"
      "  -if, --interactive-first  the same, starting with your line\n"
      "  -r, --reverse-prompt TEXT  hand over to you when the output ends with TEXT\n"
      "                          (repeatable; implies -i)\n"
      "  --in-prefix TEXT, --in-suffix TEXT  put around each line you type\n",
      stderr);
  fputs(pi::kRequestUsage, stderr);
  fputs(pi::kEngineUsage, stderr);
  fputs(pi::kDraftUsage, stderr);
  fputs(pi::kCacheTypeUsage, stderr);
  fputs(pi::kGpuSplitUsage, stderr);
}

struct RunFlags {
  pi::RequestFlags request;
  pi::EngineFlags engine;
  bool json = false;
  bool conversation = false;
  pi::InteractiveOptions interactive;
  bool is_interactive = false;
  int keep = 0;               // --keep: -1 the whole prompt
  bool context_shift = true;  // --no-context-shift: false
  std::string system_prompt;
  std::optional<pi::ChatTemplate> chat_template;
};

// Returns -1 to go on, else the exit status (0 after --help).
int ParseFlags(int argc, char** argv, RunFlags* r) {
  pi::ArgReader args("pi-run", argc, argv);
  const int flags_rc = args.ReadFlags(
      [&](const std::string& f) {
        if (f == "--json") {
          r->json = true;
        } else if (f == "-cnv" || f == "--conversation") {
          r->conversation = true;
        } else if (f == "--keep") {
          r->keep = args.Int(f);
          if (!args.failed() && r->keep < -1) args.Fail("--keep expects -1 or more");
        } else if (f == "--no-context-shift") {
          r->context_shift = false;
        } else if (f == "-i" || f == "--interactive") {
          r->is_interactive = true;
        } else if (f == "-if" || f == "--interactive-first") {
          r->is_interactive = r->interactive.input_first = true;
        } else if (f == "-r" || f == "--reverse-prompt") {
          r->interactive.reverse_prompts.push_back(args.String(f));
          r->is_interactive = true;
        } else if (f == "--in-prefix") {
          r->interactive.in_prefix = args.String(f);
        } else if (f == "--in-suffix") {
          r->interactive.in_suffix = args.String(f);
        } else if (f == "-sys" || f == "--system-prompt") {
          r->system_prompt = args.String(f);
        } else if (f == "--chat-template") {
          pi::ChatTemplate t;
          const pi::Status s = pi::ParseChatTemplateName(args.String(f), &t);
          if (!s.ok() && !args.failed()) args.Fail(s.message());
          r->chat_template = t;
        } else if (pi::ParseRequestFlag(f, &args, &r->request) ||
                   pi::ParseEngineFlag(f, &args, &r->engine)) {
        } else {
          return false;
        }
        return true;
      },
      Usage);
  if (flags_rc >= 0) return flags_rc;
  pi::Status s = pi::CheckEngineFlags(r->engine);
  if (s.ok()) s = pi::CheckRequestFlags(r->request);
  if (s.ok() && r->conversation && r->json) s = pi::Status::Error("-cnv prints text, not --json");
  if (s.ok() && r->is_interactive && (r->json || r->conversation)) {
    s = pi::Status::Error("-i is its own mode: not with --json or -cnv");
  }
  if (!s.ok()) {
    fprintf(stderr, "pi-run: %s\n", s.message().c_str());
    return 2;
  }
  return -1;
}

struct Times {
  double load_ms, prompt_ms, eval_ms;
};

// The decode steps' FFN: the share of neurons computed per token (as
// pi-bench's "FFN active") and of those, the hot side's.
struct DecodeFfn {
  double active = 0, hot_share = 0;
  std::vector<double> layer_active;  // each layer's share computed (empty: not counted)
};

DecodeFfn DecodeShares(const pi::LlamaConfig& c, const pi::GenerationResult& g) {
  DecodeFfn d;
  if (g.n_eval > 0) {
    d.active = static_cast<double>(g.ffn_neurons) / (1.0 * g.n_eval * c.n_layer * c.n_ff);
    for (int64_t n : g.layer_neurons) {
      d.layer_active.push_back(static_cast<double>(n) / (1.0 * g.n_eval * c.n_ff));
    }
  }
  if (g.ffn_neurons > 0) d.hot_share = static_cast<double>(g.ffn_hot) / g.ffn_neurons;
  return d;
}

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
               const Times& t, const std::string& hot_backend, const DecodeFfn& ffn) {
  const int n_prompt = static_cast<int>(prompt_ids.size());
  printf(
      "{\"model\":%s,\"seed\":%u,\"n_threads\":%d,\"n_ctx\":%d,\"sparse\":\"%s\",\"prompt\":%s,"
      "\"prompt_tokens\":%s,\"generated_tokens\":%s,\"text\":%s,\"stop_reason\":\"%s\",",
      pi::JsonEscape(r.engine.model_path).c_str(), seed, engine.n_threads(), engine.n_ctx(),
      pi::SparseModeName(r.engine.opt.sparse), pi::JsonEscape(r.request.prompt).c_str(),
      pi::JsonIntArray(prompt_ids).c_str(), pi::JsonIntArray(g.ids).c_str(),
      pi::JsonEscape(g.text).c_str(), g.stop_reason);
  if (!g.error.empty()) printf("\"error\":%s,", pi::JsonEscape(g.error).c_str());
  printf("\"sparse_threshold\":%s,\"hot_backend\":%s,\"ffn_active\":%s,\"gpu_fired_share\":%s,",
         pi::JsonNumber(engine.predictor_threshold()).c_str(), pi::JsonEscape(hot_backend).c_str(),
         pi::JsonNumber(ffn.active).c_str(), pi::JsonNumber(ffn.hot_share).c_str());
  std::string layers = "null";  // a device counts its hot neurons over its layers together
  if (!ffn.layer_active.empty()) {
    layers = "[";
    for (size_t l = 0; l < ffn.layer_active.size(); ++l) {
      layers += (l ? "," : "") + pi::JsonNumber(ffn.layer_active[l]);
    }
    layers += "]";
  }
  printf("\"ffn_layer_active\":%s,", layers.c_str());
  printf(
      "\"timings\":{\"load_ms\":%s,\"prompt_n\":%d,\"prompt_ms\":%s,"
      "\"prompt_per_second\":%s,\"predicted_n\":%zu,\"eval_n\":%d,\"predicted_ms\":%s,"
      "\"predicted_per_second\":%s,\"sampling_ms\":%s}}\n",
      pi::JsonNumber(t.load_ms).c_str(), n_prompt, pi::JsonNumber(t.prompt_ms).c_str(),
      pi::JsonNumber(PerSecond(n_prompt, t.prompt_ms)).c_str(), g.ids.size(), g.n_eval,
      pi::JsonNumber(t.eval_ms).c_str(), pi::JsonNumber(PerSecond(g.n_eval, t.eval_ms)).c_str(),
      pi::JsonNumber(g.sample_s * 1e3).c_str());
}

// Loads the engine, then checks what needed its vocabulary (--logit-bias).
pi::Status LoadForRun(RunFlags* r, pi::LoadedEngine* loaded) {
  PI_RETURN_IF_ERROR(pi::LoadEngine("pi-run", &r->engine, loaded));
  return pi::CheckLogitBias(r->request.sampling, loaded->engine->n_vocab());
}

// Encodes the prompt for the loaded engine.
pi::Status EncodePrompt(const RunFlags& r, const pi::LoadedEngine& e,
                        std::vector<int32_t>* prompt_ids) {
  PI_RETURN_IF_ERROR(e.tok->Encode(r.request.prompt, e.tok->add_bos_token(), prompt_ids));
  if (prompt_ids->empty()) return pi::Status::Error("the prompt encodes to no tokens");
  if (static_cast<int>(prompt_ids->size()) > e.engine->n_ctx()) {
    return pi::Status::Error(
        "the prompt is %zu tokens, longer than the context (%d); raise -c or shorten the prompt",
        prompt_ids->size(), e.engine->n_ctx());
  }
  return pi::Status::Ok();
}

// -i: llama-cli's interactive mode (cli/interactive.h) on the loaded engine.
int Interact(RunFlags* r) {
  pi::LoadedEngine loaded;
  std::vector<int32_t> prompt_ids;
  pi::Status s = LoadForRun(r, &loaded);
  if (s.ok()) s = EncodePrompt(*r, loaded, &prompt_ids);
  if (s.ok()) {
    fprintf(stderr, "pi-run: interactive mode: type a line when the model stops; end with EOF\n");
    r->request.sampling.repeat_last_n =
        pi::RepeatLastNForContext(r->request.sampling.repeat_last_n, loaded.engine->n_ctx());
    pi::Sampler sampler(r->request.sampling, loaded.engine->n_vocab());
    r->interactive.n_predict = r->request.n_predict;
    r->interactive.ignore_eos = r->request.ignore_eos;
    r->interactive.context_keep = r->keep;
    fputs(r->request.prompt.c_str(), stdout);
    fflush(stdout);
    s = pi::RunInteractive(r->interactive, prompt_ids, &loaded, &sampler, std::cin, stdout);
  }
  pi::StopWorkers("pi-run", &loaded);
  if (!s.ok()) {
    fprintf(stderr, "pi-run: %s\n", s.message().c_str());
    return 1;
  }
  return 0;
}

// -cnv: the conversation loop (cli/conversation.h) on the loaded engine.
int Converse(RunFlags* r) {
  pi::LoadedEngine loaded;
  pi::Status s = LoadForRun(r, &loaded);
  pi::ConversationOptions o;
  if (s.ok()) {
    if (r->chat_template) {
      o.chat_template = *r->chat_template;
    } else {
      s = pi::ChatTemplateOfModel(*loaded.model.file, &o.chat_template);
    }
  }
  if (s.ok()) {
    fprintf(stderr,
            "pi-run: conversation (chat template %s): type a message, end with EOF or /exit\n",
            pi::ChatTemplateName(o.chat_template));
    o.system_prompt = r->system_prompt.empty() ? r->request.prompt : r->system_prompt;
    o.n_predict = r->request.n_predict;
    o.stops = r->request.stops;
    o.ignore_eos = r->request.ignore_eos;
    r->request.sampling.repeat_last_n =
        pi::RepeatLastNForContext(r->request.sampling.repeat_last_n, loaded.engine->n_ctx());
    pi::Sampler sampler(r->request.sampling, loaded.engine->n_vocab());
    s = pi::RunConversation(o, &loaded, &sampler, std::cin, stdout, stderr);
  }
  pi::StopWorkers("pi-run", &loaded);
  if (!s.ok()) {
    fprintf(stderr, "pi-run: %s\n", s.message().c_str());
    return 1;
  }
  return 0;
}

}  // namespace

static int Run(int argc, char** argv) {
  RunFlags r;
  const int flags_status = ParseFlags(argc, argv, &r);
  if (flags_status >= 0) return flags_status;
  pi::Status read = pi::ReadPromptFile(&r.request);
  if (read.ok()) read = pi::ReadGrammarFlags(&r.request);
  // The grammar is checked before the model loads: its errors come at once.
  std::shared_ptr<const pi::Grammar> grammar;
  if (read.ok() && !r.request.grammar.empty()) {
    if (r.conversation || r.is_interactive) {
      read = pi::Status::Error("a grammar holds one generation: not with -cnv or -i");
    } else {
      read = pi::Grammar::Parse(r.request.grammar, &grammar);
    }
  }
  if (!read.ok()) {
    fprintf(stderr, "pi-run: %s\n", read.message().c_str());
    return 1;
  }

  if (r.conversation) return Converse(&r);
  if (r.is_interactive) return Interact(&r);
  const double t_start = pi::NowSeconds();
  pi::LoadedEngine loaded;
  std::vector<int32_t> prompt_ids;
  pi::Status s = LoadForRun(&r, &loaded);
  if (s.ok()) s = EncodePrompt(r, loaded, &prompt_ids);
  if (!s.ok()) {
    fprintf(stderr, "pi-run: %s\n", s.message().c_str());
    return 1;
  }
  pi::Engine* engine = loaded.engine.get();
  r.request.sampling.repeat_last_n =
      pi::RepeatLastNForContext(r.request.sampling.repeat_last_n, engine->n_ctx());
  pi::Sampler sampler(r.request.sampling, engine->n_vocab());
  const pi::LlamaConfig& c = loaded.model.config;
  fprintf(stderr,
          "pi-run: %s (%s, %d layers, d=%d, ff=%d, %s), %.1f M params, ctx %d, %d threads, "
          "seed %u\n",
          r.engine.model_path.c_str(), c.arch.c_str(), c.n_layer, c.n_embd, c.n_ff,
          pi::FfnActivationName(c.activation), loaded.model.ParameterCount() / 1e6, engine->n_ctx(),
          engine->n_threads(), sampler.seed());
  const std::string hot_backend = pi::HotBackendName(loaded);
  const pi::SparseMode mode = r.engine.opt.sparse;
  const std::string mode_note =
      mode == pi::SparseMode::kPredictor
          ? " (threshold " + std::to_string(engine->predictor_threshold()) + ")"
      : mode == pi::SparseMode::kCats
          ? " (target " + std::to_string(static_cast<int>(100 * r.engine.target_sparsity + 0.5)) +
                "% of the FFN neurons skipped)"
      : mode == pi::SparseMode::kTeal
          ? " (target " + std::to_string(static_cast<int>(100 * r.engine.target_sparsity + 0.5)) +
                "% of the FFN neurons and of the entries of q, k, v, o and the gate's inputs "
                "skipped)"
          : "";
  fprintf(stderr, "pi-run: sparse %s%s, hot neurons: %s\n", pi::SparseModeName(mode),
          mode_note.c_str(),
          hot_backend == "none" ? "no split" : (hot_backend + " backend").c_str());

  if (!r.json) {
    fputs(r.request.prompt.c_str(), stdout);
    fflush(stdout);
  }
  const double t_prompt = pi::NowSeconds();
  pi::GenerationRequest job;
  job.prompt = prompt_ids;
  job.n_predict = r.request.n_predict;
  job.ignore_eos = r.request.ignore_eos;
  job.stops = r.request.stops;
  job.context_keep = !r.context_shift ? -1 : r.keep < 0 ? -2 : r.keep;
  job.grammar = grammar;
  pi::GenerationResult g;
  pi::Generate(
      engine, *loaded.tok, &sampler, job,
      [&r](int32_t, const std::string& text) {
        if (!r.json) {
          fputs(text.c_str(), stdout);
          fflush(stdout);
        }
        return true;
      },
      &g, 0, nullptr, loaded.draft.drafter.get());
  if (!r.json) fputs("\n", stdout);
  const double t_end = pi::NowSeconds();
  if (!g.error.empty()) fprintf(stderr, "pi-run: %s\n", g.error.c_str());
  if (std::string(g.stop_reason) == "context") {
    fprintf(stderr, "pi-run: stopped: the context (%d) is full\n", engine->n_ctx());
  }
  if (g.context_shifts > 0) {
    fprintf(stderr, "pi-run: the context (%d) filled and was shifted %d time(s) (--keep %d)\n",
            engine->n_ctx(), g.context_shifts, r.keep);
  }
  if (engine->shard_failures() > 0) {
    fprintf(stderr,
            "pi-run: warning: cpu workers failed %lld time(s) and were restarted %lld time(s); "
            "their neurons ran here meanwhile, the tokens are the same (last: %s)\n",
            static_cast<long long>(engine->shard_failures()),
            static_cast<long long>(engine->shard_recoveries()), engine->shard_error().c_str());
  }
  if (engine->device_failures() > 0) {
    fprintf(stderr,
            "pi-run: warning: the gpu worker failed %lld time(s) and was restarted %lld time(s), "
            "its KV cache rebuilt from the tokens; the tokens are the same (last: %s)\n",
            static_cast<long long>(engine->device_failures()),
            static_cast<long long>(engine->device_recoveries()), engine->device_error().c_str());
  }
  if (const pi::Drafter* d = loaded.draft.drafter.get()) {
    fprintf(stderr, "pi-run: speculative: %lld proposed, %lld accepted (%.1f %%)",
            static_cast<long long>(d->proposed()), static_cast<long long>(d->accepted()),
            d->proposed() ? 100.0 * static_cast<double>(d->accepted()) / d->proposed() : 0.0);
    if (d->failures() > 0) {
      fprintf(stderr, "; the draft failed %lld time(s) (last: %s)",
              static_cast<long long>(d->failures()), d->last_error().c_str());
    }
    fprintf(stderr, "\n");
  }
  pi::StopWorkers("pi-run", &loaded);
  const Times t = {(t_prompt - t_start) * 1e3, g.prompt_s * 1e3, g.eval_s * 1e3};
  PrintTimings(t, static_cast<int>(prompt_ids.size()), g, (t_end - t_start) * 1e3);
  const DecodeFfn ffn = DecodeShares(c, g);
  if (g.n_eval > 0) {
    fprintf(stderr, "pi-run:   FFN per token = %9.1f %% of the neurons computed", 100 * ffn.active);
    if (hot_backend != "none") fprintf(stderr, ", %.1f %% of them hot", 100 * ffn.hot_share);
    if (!ffn.layer_active.empty()) {
      const auto [lo, hi] = std::minmax_element(ffn.layer_active.begin(), ffn.layer_active.end());
      fprintf(stderr, " (layers %.1f %% to %.1f %%)", 100 * *lo, 100 * *hi);
    }
    fprintf(stderr, "\n");
  }
  if (r.json) PrintJson(r, *engine, sampler.seed(), prompt_ids, g, t, hot_backend, ffn);
  return g.error.empty() ? 0 : 1;
}

int main(int argc, char** argv) {
  return pi::RunTool("pi-run", Run, argc, argv);
}
