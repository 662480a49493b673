// Prompt caching: a sequence's KV cache keeps its last prompt, and the next
// request on it evaluates only what follows the prefix the two prompts share.
//
// A cached answer is the uncached one, bit for bit, because every position
// is computed exactly as an uncached run computes it:
// - only a prompt's own positions are reused, never the generated tokens'
//   (decode steps may run sparse where a prompt runs dense);
// - the reused prefix ends on a multiple of n_batch (-b) within the cached
//   prompt's whole chunks, so what follows is evaluated in the same chunks
//   as an evaluation of the whole prompt from position 0, and the prefix was
//   too. (Some kernels round differently for other chunk sizes: a chunk of
//   one token runs as a decode step, and the file-layout matrix products
//   switch kernels at a batch size.)
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/base/status.h"
#include "coordinator/engine/engine.h"
#include "coordinator/engine/generation.h"

namespace pi {

// How many of `prompt`'s first tokens a sequence whose cache holds `cached`
// (a prompt evaluated on it, in n_batch chunks from position 0) can keep:
// their common prefix, at most all but the last token (whose logits are
// needed) and the cached prompt's whole chunks, rounded down to a multiple
// of n_batch.
size_t ReusablePrefix(const int32_t* cached, size_t n_cached, const std::vector<int32_t>& prompt,
                      int n_batch);
inline size_t ReusablePrefix(const std::vector<int32_t>& cached, const std::vector<int32_t>& prompt,
                             int n_batch) {
  return ReusablePrefix(cached.data(), cached.size(), prompt, n_batch);
}

// Whether `prompt` starts with all of `held` (a request that goes on from
// what a sequence holds: a chat's next turn).
bool GoesOnFrom(const std::vector<int32_t>& held, const std::vector<int32_t>& prompt);

// Whether a sequence still holds `prompt_size` positions as the prompt's
// evaluation wrote them after generation `g` ran on it (n_past: the
// sequence's positions now): not after a failure, nor a context shift (which
// moved them), nor a prompt cut short.
bool HoldsPrompt(const GenerationResult& g, int n_past, size_t prompt_size);

// Evaluates prompt[reuse, end) on sequence 0, keeping the engine's first
// `reuse` positions (a ReusablePrefix; 0: the whole prompt, whatever the
// engine held). Afterwards logits() holds the last token's.
Status EvalPromptFrom(Engine* engine, const std::vector<int32_t>& prompt, size_t reuse);

}  // namespace pi
