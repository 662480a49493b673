// POST /v1/embeddings (OpenAI's): each input's embedding (embedding.h: the
// final hidden states pooled as pi-launch --pooling says, unit length), as
// a list in input order, floats or base64 (little-endian float32 bytes).
// POST /embedding and /embeddings (llama-server's): the same inputs (or in
// "content"), the reply [{"index", "embedding": [[...]]}]: one vector, or
// with --pooling none each token's state as it is.
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
// At most this many values in one reply of each token's state (64 MiB of
// floats; a request asking more is refused before it runs).
inline constexpr int64_t kMaxTokenEmbeddingValues = int64_t{1} << 24;

struct EmbeddingRequest {
  // The inputs: each a text, token ids, or llama-server's mix of both.
  std::vector<MixedPrompt> inputs;
  bool base64 = false;  // encoding_format "base64"
};

// Reads a body: input (a string, token ids, both mixed, or an array of
// those), encoding_format (float or base64), model (as the completions'),
// user; dimensions and any other field refused by name. *http_status 400 or
// 404 on an error.
// native: llama-server's route, which also takes the inputs as "content"
// (and floats only).
Status ParseEmbeddingRequest(const std::string& body, const std::string& model_id,
                             EmbeddingRequest* out, int* http_status, bool any_model = false,
                             bool native = false);

// The response: {"object": "list", "data": [{"object": "embedding", "index",
// "embedding"}...], "model", "usage": {"prompt_tokens", "total_tokens"}}.
std::string EmbeddingsJson(const std::string& model, const std::vector<std::vector<float>>& data,
                           bool base64, int prompt_tokens);
// llama-server's: [{"index", "embedding": [[n_embd floats]...]}], each
// input's values cut into rows of n_embd.
std::string NativeEmbeddingsJson(const std::vector<std::vector<float>>& data, int n_embd);

// Reads, tokenizes and submits an embeddings body (a 400 for a model served
// with a GPU worker: hidden states stay on the host path).
void StartEmbedding(const HttpContext& c, const std::string& body, bool native,
                    std::function<void()> notify, CompletionStart* out);

}  // namespace pi
