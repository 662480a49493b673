#include "cli/conversation.h"

#include <vector>

#include "coordinator/engine/generation.h"
#include "coordinator/engine/prompt_cache.h"

namespace pi {

Status RunConversation(const ConversationOptions& o, LoadedEngine* loaded, Sampler* sampler,
                       std::istream& in, FILE* out, FILE* prompt_out) {
  Engine* engine = loaded->engine.get();
  const Tokenizer& tok = *loaded->tok;
  std::vector<ChatMessage> messages;
  std::vector<int32_t> cached;  // the prompt the engine's cache holds
  if (!o.system_prompt.empty()) messages.push_back({"system", o.system_prompt});
  std::string line;
  while (true) {
    fputs("> ", prompt_out);
    fflush(prompt_out);
    if (!std::getline(in, line) || line == "/exit") break;
    if (line.empty()) continue;
    messages.push_back({"user", line});
    std::string text;
    std::vector<TextSpan> contents;  // typed text: never control tokens
    PI_RETURN_IF_ERROR(RenderChat(o.chat_template, messages, true, &text, &contents));
    GenerationRequest job;
    PI_RETURN_IF_ERROR(tok.Encode(text, tok.add_bos_token(), &job.prompt, true, &contents));
    if (static_cast<int>(job.prompt.size()) >= engine->n_ctx()) {
      return Status::Error(
          "the conversation is %zu tokens, more than the context holds (%d): raise -c or start "
          "over",
          job.prompt.size(), engine->n_ctx());
    }
    job.n_predict = o.n_predict;
    job.ignore_eos = o.ignore_eos;
    job.stops = o.stops;
    // The whole conversation again, from the prefix the last turn's prompt
    // left in the cache (prompt_cache.h: the same answer as from scratch).
    GenerationResult g;
    Generate(
        engine, tok, sampler, job,
        [out](int32_t, const std::string& piece) {
          fputs(piece.c_str(), out);
          fflush(out);
          return true;
        },
        &g, ReusablePrefix(cached, job.prompt, engine->n_batch()), nullptr,
        loaded->draft.drafter.get());
    if (HoldsPrompt(g, engine->n_past(), job.prompt.size())) {
      cached = job.prompt;
    } else {
      cached.clear();
    }
    fputs("\n", out);
    fflush(out);
    if (!g.error.empty()) return Status::Error("%s", g.error.c_str());
    messages.push_back({"assistant", g.text});
  }
  return Status::Ok();
}

}  // namespace pi
