// HttpServer: the OpenAI-style HTTP API on the coordinator (pi-launch
// --http HOST:PORT), with Boost.Beast: POST /v1/completions and
// /v1/chat/completions (whole, or
// streamed as server-sent events exactly as OpenAI does: text deltas, a last
// chunk with finish_reason and usage, then "data: [DONE]"), GET /v1/models,
// GET /health, POST /tokenize and /detokenize (llama-server's shapes), and
// GET /metrics (Prometheus's text format: RequestRunner::RenderMetrics).
// Requests run through the RequestRunner the gRPC service shares. Errors
// are OpenAI's JSON with the right status (400 naming the field, 401, 404,
// 413, 503 with Retry-After when the queue is full). A client that goes
// away (mid-stream or while waiting) frees the engine at the next token.
// Limits: body and header sizes, an idle timeout per connection, and a
// bounded number of connections (a thread each).
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/chat_template.h"
#include "common/status.h"
#include "coordinator/request_runner.h"

namespace pi {

struct HttpServerOptions {
  std::string listen = "127.0.0.1:8080";  // port 0 picks a free one
  std::string api_key;                    // empty: no key required
  std::string model_id = "pi";            // what /v1/models lists and "model" must name
  // The chat template /v1/chat/completions renders messages with; unset:
  // the model has none (chat requests get a 400 saying how to choose one).
  std::optional<ChatTemplate> chat_template;
  size_t max_body_bytes = 1 << 20;
  int idle_timeout_s = 30;  // a connection silent this long is closed
  int max_connections = 64;
  // Appends more of /metrics (the workers'); may be empty.
  std::function<void(std::string*)> more_metrics;
};

class HttpServer {
 public:
  HttpServer();
  ~HttpServer();
  // `runner` must outlive the server. *address: what was bound. With a null
  // runner the server answers while the model loads: GET / (the page),
  // GET /health 503 {"status": "loading"}, anything else 503 saying so,
  // until Ready().
  Status Start(const HttpServerOptions& options, RequestRunner* runner, std::string* address);
  // The engine is loaded: requests run on `runner` (which must outlive the
  // server) from now on, chats with `chat_template` when set.
  void Ready(RequestRunner* runner, std::optional<ChatTemplate> chat_template);
  // Stops accepting, closes every connection (running requests are
  // cancelled at their next token) and joins the threads.
  void Shutdown();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace pi
