// POST /v1/embeddings (OpenAI's): each input's embedding (embedding.h: the
// final hidden states pooled as pi-launch --pooling says, unit length), as
// a list in input order, floats or base64 (little-endian float32 bytes).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/base/status.h"
#include "coordinator/serve/http_routes.h"
#include "coordinator/serve/mixed_prompt.h"

namespace pi {

// At most this many inputs in one request (OpenAI's limit).
inline constexpr size_t kMaxEmbeddingInputs = 2048;

struct EmbeddingRequest {
  // The inputs: each a text, token ids, or llama-server's mix of both.
  std::vector<MixedPrompt> inputs;
  bool base64 = false;  // encoding_format "base64"
};

// Reads a body: input (a string, token ids, both mixed, or an array of
// those), encoding_format (float or base64), model (as the completions'),
// user; dimensions and any other field refused by name. *http_status 400 or
// 404 on an error.
Status ParseEmbeddingRequest(const std::string& body, const std::string& model_id,
                             EmbeddingRequest* out, int* http_status, bool any_model = false);

// The response: {"object": "list", "data": [{"object": "embedding", "index",
// "embedding"}...], "model", "usage": {"prompt_tokens", "total_tokens"}}.
std::string EmbeddingsJson(const std::string& model, const std::vector<std::vector<float>>& data,
                           bool base64, int prompt_tokens);

// Reads, tokenizes and submits an embeddings body (a 400 for a model served
// with a GPU worker: hidden states stay on the host path).
void StartEmbedding(const HttpContext& c, const std::string& body, std::function<void()> notify,
                    CompletionStart* out);

}  // namespace pi
