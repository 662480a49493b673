// The HTTP API's routes, apart from the connection that carries them: which
// path and method is which route, and each route's answer — a whole reply,
// or for a completion a job on the engine whose tokens the connection
// streams (completion_reply.h). Errors are OpenAI's JSON with the status
// that fits: 400 naming the field, 404, 405, 503 with Retry-After.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "coordinator/serve/completion_choices.h"
#include "coordinator/serve/completion_reply.h"
#include "coordinator/serve/http_options.h"
#include "coordinator/serve/request_runner.h"

namespace pi {

struct HttpReply {
  int status = 200;
  std::string body;
  std::string content_type = "application/json";
  int retry_after_s = 0;
};

HttpReply ErrorReply(int status, const std::string& message, int retry_after_s = 0);
// 503: max_queue requests already wait (retry in a second).
HttpReply QueueFullReply(int max_queue);

enum class HttpRoute {
  kPage,              // GET /: the chat page
  kHealth,            // GET /health
  kMetrics,           // GET /metrics
  kModels,            // GET /v1/models (and llama-server's /models)
  kModel,             // GET /v1/models/{id}
  kCompletions,       // POST /v1/completions (and /completions)
  kChatCompletions,   // POST /v1/chat/completions (and /chat/completions)
  kTokenize,          // POST /tokenize
  kDetokenize,        // POST /detokenize
  kProps,             // GET /props (llama-server's)
  kSlots,             // GET /slots (llama-server's, read-only)
  kApplyTemplate,     // POST /apply-template (llama-server's)
  kNativeCompletion,  // POST /completion (llama-server's native)
  kInfill,            // POST /infill (llama-server's fill-in-the-middle)
  kEmbeddings,        // POST /v1/embeddings
  kNativeEmbeddings,  // POST /embedding, /embeddings (llama-server's shape)
  kResponses,         // POST /v1/responses (OpenAI's Responses API, whole replies)
  kSlotAction,        // POST /slots/{id}?action=... (llama-server's: slots_api.h)
};

// Which completion a route starts: OpenAI's two, or llama-server's native
// completion and infill (a native completion of an infill prompt).
// Embeddings go the same way: a job, its whole reply.
enum class CompletionKind {
  kCompletions,
  kChat,
  kNative,
  kInfill,
  kEmbeddings,
  kNativeEmbeddings,
  kResponses,
  kSlotAction
};

// The route of `path` (without the query) and `method`; false with *status
// 404 (no such path) or 405 (the path takes another method, *allow says which).
bool FindRoute(const std::string& path, const std::string& method, HttpRoute* route, int* status,
               std::string* allow);
// Served without the API key: the page (it asks for the key itself) and /health.
bool IsPublic(HttpRoute route);

// What the routes read.
struct HttpContext {
  const HttpServerOptions* options = nullptr;
  RequestRunner* runner = nullptr;  // null while the model loads
  int64_t started_at = 0;           // the server's start (Unix seconds)
  std::string path;                 // the request's (without the query)
  std::string query;                // what follows its '?'
};

// The answer of every route but the completions.
HttpReply HandleRoute(HttpRoute route, const HttpContext& c, const std::string& body);

// A completion started: its choices run (their tokens, with their replies,
// become the answer: completion_choices.h), or `refusal` is the answer (a
// bad request, the queue full).
struct CompletionStart {
  HttpReply refusal;
  CompletionChoices choices;
  bool stream = false;
  bool started() const { return choices.size() > 0; }
};

// A job whose reply is whole and not a generation's (an embedding, a slot
// action) submitted as *out's one choice: its reply, to be told its kind,
// or null with *out's refusal (the queue full).
CompletionReply* SubmitWholeJob(RequestRunner* runner, GenerationRequest request,
                                std::function<void()> notify, CompletionStart* out);

// Reads, checks and tokenizes a completion's body and submits it; `notify`
// is the job's stream's (called on the engine's thread).
void StartCompletion(const HttpContext& c, CompletionKind kind, const std::string& body,
                     uint64_t number, std::function<void()> notify, CompletionStart* out);

}  // namespace pi
