#include "coordinator/generation.h"

#include <algorithm>

#include "common/progress.h"

namespace pi {

size_t FindStopString(const std::string& text, size_t fresh,
                      const std::vector<std::string>& stops) {
  size_t best = std::string::npos;
  for (const std::string& stop : stops) {
    const size_t from = text.size() > fresh + stop.size() ? text.size() - fresh - stop.size() : 0;
    best = std::min(best, text.find(stop, from));
  }
  return best;
}

size_t StopPrefixAtEnd(const std::string& text, const std::vector<std::string>& stops) {
  size_t longest = 0;
  for (const std::string& stop : stops) {
    if (stop.empty()) continue;
    for (size_t k = std::min(stop.size() - 1, text.size()); k > longest; --k) {
      if (text.compare(text.size() - k, k, stop, 0, k) == 0) {
        longest = k;
        break;
      }
    }
  }
  return longest;
}

void Generate(Engine* engine, const Tokenizer& tok, Sampler* sampler,
              const GenerationRequest& request, const TokenCallback& on_token,
              GenerationResult* g) {
  *g = GenerationResult();
  const double t_prompt = NowSeconds();
  Status s = engine->Eval(request.prompt.data(), static_cast<int>(request.prompt.size()));
  const double t_gen = NowSeconds();
  g->prompt_s = t_gen - t_prompt;
  if (!s.ok()) {
    g->stop_reason = "error";
    g->error = s.message();
    return;
  }
  for (int32_t id : request.prompt) sampler->Accept(id);
  const int limit = request.n_predict < 0 ? engine->n_ctx() : request.n_predict;
  g->ids.reserve(std::min(limit, engine->n_ctx()));
  // What the callback sees: whole UTF-8 (`stream`), and never a stop
  // string: text that could be the start of one is held back until the next
  // tokens tell, so the streamed text always equals the final text.
  Utf8Stream stream;
  std::string whole;   // the text as streamed, sent or held
  size_t emitted = 0;  // bytes of `whole` sent
  bool cancelled = false;
  while (static_cast<int>(g->ids.size()) < limit) {
    const double ts = NowSeconds();
    const int32_t id = sampler->Sample(engine->logits());
    g->sample_s += NowSeconds() - ts;
    if (!request.ignore_eos && tok.IsEog(id)) {
      g->stop_reason = "eos";
      break;
    }
    g->ids.push_back(id);
    sampler->Accept(id);
    const std::string piece = tok.TokenToPiece(id);
    g->text += piece;
    const std::string fresh = stream.Push(piece);
    whole += fresh;
    const size_t stop_at = FindStopString(g->text, piece.size(), request.stops);
    const size_t shown_stop = FindStopString(whole, fresh.size(), request.stops);
    const size_t sendable = shown_stop != std::string::npos
                                ? std::max(shown_stop, emitted)
                                : whole.size() - StopPrefixAtEnd(whole, request.stops);
    if (on_token && !on_token(id, whole.substr(emitted, std::max(sendable, emitted) - emitted))) {
      g->stop_reason = "cancelled";
      cancelled = true;
      break;
    }
    emitted = std::max(sendable, emitted);
    if (stop_at != std::string::npos || shown_stop != std::string::npos) {
      if (stop_at != std::string::npos) g->text.resize(stop_at);
      g->stop_reason = "stop";
      break;
    }
    if (static_cast<int>(g->ids.size()) >= limit) break;
    if (engine->n_past() >= engine->n_ctx()) {
      g->stop_reason = "context";
      break;
    }
    s = engine->Eval(&id, 1);
    if (!s.ok()) {
      g->stop_reason = "error";
      g->error = s.message();
      break;
    }
    ++g->n_eval;
    g->ffn_neurons += engine->last_ffn_neurons();
    g->ffn_hot += engine->last_ffn_hot_fired();
  }
  g->eval_s = NowSeconds() - t_gen - g->sample_s;
  if (on_token && !cancelled && std::string(g->stop_reason) != "stop") {
    whole += stream.Flush();
    on_token(-1, whole.substr(emitted));
  }
}

}  // namespace pi
