#include "cli/draft_flags.h"

#include <cstdio>

namespace pi {

const char kDraftUsage[] =
    "  -md, --model-draft FILE speculative decoding: a small model of the same vocabulary\n"
    "                          proposes tokens, the model evaluates them in one run and\n"
    "                          keeps those its own sampling agrees with (-np 1, host path)\n"
    "  --draft-max N           proposals per run, at most (default 16)\n"
    "  --draft-min N           fewer proposals than this: none (default 0)\n"
    "  --draft-p-min P         a proposal's probability under the draft, at least\n"
    "                          (default 0.75)\n";

bool ParseDraftFlag(const std::string& f, ArgReader* args, DraftFlags* d) {
  if (f == "-md" || f == "--model-draft") {
    d->model_path = args->String(f);
  } else if (f == "--draft-max" || f == "--draft" || f == "--draft-n") {
    d->opt.n_max = args->Int(f);
  } else if (f == "--draft-min" || f == "--draft-n-min") {
    d->opt.n_min = args->Int(f);
  } else if (f == "--draft-p-min") {
    d->opt.p_min = args->Float(f);
  } else {
    return false;
  }
  return true;
}

Status CheckDraftFlags(const DraftFlags& d) {
  if (d.opt.n_max < 1 || d.opt.n_max > 256) {
    return Status::Error("--draft-max must be 1 to 256, got %d", d.opt.n_max);
  }
  if (d.opt.n_min < 0 || d.opt.n_min > d.opt.n_max) {
    return Status::Error("--draft-min must be 0 to --draft-max (%d), got %d", d.opt.n_max,
                         d.opt.n_min);
  }
  if (!(d.opt.p_min >= 0.0f && d.opt.p_min <= 1.0f)) {
    return Status::Error("--draft-p-min must be 0 to 1, got %g", d.opt.p_min);
  }
  return Status::Ok();
}

Status LoadDraft(const char* tool, const DraftFlags& flags, Engine* target,
                 const Tokenizer& target_tok, LoadedDraft* out) {
  if (target->has_device()) {
    return Status::Error(
        "--model-draft: this model's layers run on a GPU (--vram-budget), which evaluates a "
        "run of tokens one at a time, so drafting gains nothing there; serve without it");
  }
  if (target->n_seq() > 1) {
    return Status::Error(
        "--model-draft drafts one request at a time: give -np 1 (speculative decoding with "
        "continuous batching is not supported)");
  }
  PI_RETURN_IF_ERROR(LoadLlamaModel(flags.model_path, &out->model).WithContext(flags.model_path));
  PI_RETURN_IF_ERROR(
      Tokenizer::FromGguf(*out->model.file, &out->tok).WithContext(flags.model_path));
  PI_RETURN_IF_ERROR(CheckDraftVocabulary(target_tok, *out->tok).WithContext(flags.model_path));
  EngineOptions opt;
  opt.n_threads = target->n_threads();
  opt.n_ctx = target->n_ctx();
  opt.n_batch = target->n_batch();
  opt.sparse = SparseMode::kOff;
  PI_RETURN_IF_ERROR(Engine::Create(&out->model, opt, &out->engine).WithContext(flags.model_path));
  out->drafter = std::make_unique<Drafter>(out->engine.get(), target->n_vocab(), flags.opt);
  const LlamaConfig& c = out->model.config;
  fprintf(stderr,
          "%s: draft model %s: %d layers, n_embd %d; up to %d proposals a run (--draft-max), "
          "each at least p %.2f (--draft-p-min)\n",
          tool, flags.model_path.c_str(), c.n_layer, c.n_embd, flags.opt.n_max, flags.opt.p_min);
  return Status::Ok();
}

}  // namespace pi
