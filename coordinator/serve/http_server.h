// HttpServer: the OpenAI-style HTTP API on the coordinator (pi-launch
// --http HOST:PORT), on Boost.Beast's asynchronous API: POST /v1/completions
// and /v1/chat/completions (whole, or streamed as server-sent events exactly
// as OpenAI does: text deltas, a last chunk with finish_reason and usage,
// then "data: [DONE]"; a failure mid-stream ends with an error event and no
// [DONE]), GET /v1/models, GET /health, POST /tokenize and /detokenize
// (llama-server's shapes), and GET /metrics (Prometheus's text format:
// RequestRunner::RenderMetrics). Requests run through the RequestRunner the
// gRPC service shares. Errors are OpenAI's JSON with the right status (400
// naming the field, 401, 404, 405, 408, 413, 431, 503 with Retry-After when
// the queue is full).
//
// No client can stall another: every connection works under deadlines on
// its own strand (http_connection.h) of a few I/O threads; open connections
// are capped overall and per client address (one more is answered 503 and
// closed); the engine never writes to a socket.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "common/base/status.h"
#include "common/text/chat_template.h"
#include "coordinator/serve/http_options.h"
#include "coordinator/serve/request_runner.h"

namespace pi {

class HttpServer {
 public:
  HttpServer();
  ~HttpServer();
  // `runner` must outlive the server's requests (Shutdown first).
  // *address: what was bound. With a null runner the server answers while
  // the model loads: GET / (the page), GET /health 503 {"status": "loading"},
  // anything else 503 saying so, until Ready().
  Status Start(const HttpServerOptions& options, RequestRunner* runner, std::string* address);
  // The engine is loaded: requests run on `runner` from now on, chats with
  // `chat_template` when set.
  // gpu_worker: the hot neurons run in a pi-gpu-worker (the page says where
  // the fired neurons ran only then).
  void Ready(RequestRunner* runner, std::optional<ChatTemplate> chat_template,
             bool gpu_worker = false);
  // Stops accepting, closes every connection (their requests cancelled)
  // and joins the threads.
  void Shutdown();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace pi
