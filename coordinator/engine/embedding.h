// Embeddings: a prompt's final-normed hidden states (what the head reads,
// Engine::BatchRow::hidden) pooled into one vector — their mean, the last
// token's or the first's (llama-server's --pooling mean|last|cls) — then
// scaled to unit Euclidean length, as llama-server returns them to OpenAI
// clients; or, unpooled (llama-server's --pooling none), every token's
// state as it is. A request's prompts are evaluated one after another from an
// empty sequence (a pooled mean needs every position's state, so no cached
// prefix is reused); nothing is generated.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/base/status.h"
#include "coordinator/engine/engine.h"

namespace pi {

// kNone: not an embedding request; kTokens: each token's state (its name
// is llama-server's "none").
enum class Pooling { kNone, kMean, kLast, kCls, kTokens };

const char* PoolingName(Pooling p);
// mean, last, cls or none (kTokens) into *out; an error listing them otherwise.
Status ParsePooling(const std::string& name, Pooling* out);

// One prompt's pooled embedding, fed its positions' hidden states.
class EmbeddingPool {
 public:
  void Start(Pooling pooling, int n_embd, int n_tokens);
  // Whether position `pos` of the prompt is pooled (its row asks for hidden).
  bool Wants(int pos) const;
  void Add(int pos, const float* hidden);
  // The embedding, unit length (a zero vector stays zero); kTokens: the
  // states of the n_tokens positions one after another, as they are.
  std::vector<float> Finish() const;

 private:
  Pooling pooling_ = Pooling::kMean;
  int n_tokens_ = 0, n_embd_ = 0;
  std::vector<double> sum_;
};

// Each of `prompts` (non-empty, each at most n_ctx tokens) evaluated on
// sequence 0 in chunks of n_batch rows, its embedding appended to *out;
// `cancelled` is asked between chunks (true: stops with "cancelled").
// Sequence 0 then holds the last prompt.
Status EmbedPrompts(Engine* engine, Pooling pooling,
                    const std::vector<std::vector<int32_t>>& prompts,
                    const std::function<bool()>& cancelled, std::vector<std::vector<float>>* out);

}  // namespace pi
