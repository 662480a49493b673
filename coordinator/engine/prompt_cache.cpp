#include "coordinator/engine/prompt_cache.h"

#include <algorithm>
#include <string>

namespace pi {

size_t ReusablePrefix(const int32_t* cached, size_t n_cached, const std::vector<int32_t>& prompt,
                      int n_batch) {
  const size_t b = static_cast<size_t>(n_batch > 0 ? n_batch : 1);
  const size_t whole_chunks = n_cached / b * b;
  size_t p = 0;
  while (p < whole_chunks && p + 1 < prompt.size() && cached[p] == prompt[p]) ++p;
  return p / b * b;
}

bool GoesOnFrom(const std::vector<int32_t>& held, const std::vector<int32_t>& prompt) {
  return held.size() <= prompt.size() && std::equal(held.begin(), held.end(), prompt.begin());
}

bool HoldsPrompt(const GenerationResult& g, int n_past, size_t prompt_size) {
  return std::string(g.stop_reason) != "error" && g.context_shifts == 0 &&
         n_past >= static_cast<int>(prompt_size);
}

Status EvalPromptFrom(Engine* engine, const std::vector<int32_t>& prompt, size_t reuse) {
  engine->KeepSeq(0, static_cast<int>(reuse));
  if (!prompt.empty() && reuse >= prompt.size()) {
    return Status::Error("nothing to evaluate: the whole prompt is cached");
  }
  // Eval cuts every n_batch tokens from `reuse`, a multiple of n_batch: the
  // whole prompt's chunks.
  return engine->Eval(prompt.data() + reuse, static_cast<int>(prompt.size() - reuse));
}

}  // namespace pi
