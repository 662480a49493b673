#include "cli/interactive.h"

#include "coordinator/engine/generation.h"

namespace pi {
namespace {

bool EndsWithAny(const std::string& text, const std::vector<std::string>& suffixes) {
  for (const std::string& s : suffixes) {
    if (!s.empty() && text.size() >= s.size() &&
        text.compare(text.size() - s.size(), s.size(), s) == 0) {
      return true;
    }
  }
  return false;
}

}  // namespace

Status RunInteractive(const InteractiveOptions& o, const std::vector<int32_t>& prompt,
                      LoadedEngine* loaded, Sampler* sampler, std::istream& in, FILE* out) {
  Engine* engine = loaded->engine.get();
  const Tokenizer& tok = *loaded->tok;
  const int keep = ContextKeepTokens(tok, prompt, o.context_keep < 0 ? -2 : o.context_keep);
  std::vector<int32_t> context;
  // Appends tokens to the context, shifting it first while they do not fit.
  auto feed = [&](const int32_t* ids, int n) -> Status {
    while (static_cast<int>(context.size()) + n > engine->n_ctx()) {
      if (static_cast<int>(context.size()) <= keep + 2) {
        return Status::Error("%d tokens do not fit the context (%d) beside the %d kept", n,
                             engine->n_ctx(), keep);
      }
      PI_RETURN_IF_ERROR(ShiftContext(engine, keep, &context));
    }
    PI_RETURN_IF_ERROR(engine->Eval(ids, n));
    context.insert(context.end(), ids, ids + n);
    for (int i = 0; i < n; ++i) sampler->Accept(ids[i]);
    return Status::Ok();
  };
  PI_RETURN_IF_ERROR(feed(prompt.data(), static_cast<int>(prompt.size())));
  std::string line;
  for (bool model_turn = !o.input_first;; model_turn = true) {
    // The model's turn.
    Utf8Stream stream;
    std::string recent;  // the turn's output, for the reverse prompts
    for (int produced = 0; model_turn && (o.n_predict < 0 || produced < o.n_predict); ++produced) {
      const int32_t id = sampler->Sample(engine->logits());
      if (!o.ignore_eos && tok.IsEog(id)) break;
      const std::string piece = tok.TokenToPiece(id);
      fputs(stream.Push(piece).c_str(), out);
      fflush(out);
      recent += piece;
      PI_RETURN_IF_ERROR(feed(&id, 1));
      if (EndsWithAny(recent, o.reverse_prompts)) break;
    }
    fputs(stream.Flush().c_str(), out);
    // The user's.
    fputs(o.in_prefix.c_str(), out);
    fflush(out);
    if (!std::getline(in, line)) break;
    fputs(o.in_suffix.c_str(), out);
    fflush(out);
    std::vector<int32_t> ids;
    PI_RETURN_IF_ERROR(tok.Encode(o.in_prefix + line + "\n" + o.in_suffix, false, &ids));
    if (!ids.empty()) PI_RETURN_IF_ERROR(feed(ids.data(), static_cast<int>(ids.size())));
  }
  fputs("\n", out);
  return Status::Ok();
}

}  // namespace pi
