// HttpServerOptions: what pi-launch --http serves and the limits that keep
// one client from holding the server: sizes, deadlines, connections.
#pragma once

#include <cstddef>
#include <functional>
#include <optional>
#include <string>

#include "common/text/chat_template.h"
#include "common/text/sampler.h"
#include "coordinator/engine/embedding.h"

namespace pi {

struct HttpServerOptions {
  std::string listen = "127.0.0.1:8080";  // port 0 picks a free one
  std::string api_key;                    // empty: no key required
  std::string model_id = "pi";            // what /v1/models lists and "model" must name
  std::string system_fingerprint;         // OpenAI's: the backend's version and build
  // Take any "model" a request names, as llama-server does (clients that
  // hard-code a name); false: another name is a 404.
  bool any_model_name = false;
  // Cross-origin requests from this origin ("*": any) get CORS headers and
  // their preflights (OPTIONS) an answer; empty: none.
  std::string cors_origin;
  std::string model_path;   // what /props reports
  bool gpu_worker = false;  // the hot neurons run in a pi-gpu-worker (/v1/models' meta)
  // The chat template /v1/chat/completions renders messages with; unset:
  // the model has none (chat requests get a 400 saying how to choose one).
  std::optional<ChatTemplate> chat_template;
  // /infill and a completion's suffix: the suffix before the prefix (a model
  // trained suffix-prefix-middle; infill.h).
  bool spm_infill = false;
  // /v1/embeddings: how a prompt's hidden states become one vector (embedding.h).
  Pooling pooling = Pooling::kMean;
  // Where slot actions save and restore slot files (--slot-save-path;
  // slots_api.h); empty: only erase is served.
  std::string slot_save_path;
  bool web_page = true;  // GET / serves the chat page (false: 404, --no-webui)
  // Whole chat and completions replies carry "__verbose": the native reply of
  // the same generation, the prompt as the model read it (--verbose).
  bool verbose = false;
  // For completions that leave them out (llama-server's --seed, --temp,
  // -n): the seed (kRandomSeed: each request draws one), the temperature
  // (< 0: the sampler's 0.8); n_predict > 0 is also a cap on what a request
  // may ask for (-1: none).
  uint32_t default_seed = kRandomSeed;
  float default_temperature = -1.0f;
  int n_predict = -1;
  size_t max_body_bytes = 1 << 20;
  size_t max_header_bytes = 16 << 10;  // the request line and fields (and a body's trailer)
  // Deadlines (ms): a connection's wait for a request's first byte (between
  // keep-alive requests too); the first byte to the end of the headers; the
  // body's read; each write (a streamed event's too). Past one, the
  // connection closes (and its request, if one runs, is cancelled).
  int idle_timeout_ms = 15000;
  int header_timeout_ms = 10000;
  int io_timeout_ms = 30000;
  int max_connections = 256;
  int max_connections_per_client = 32;  // by address; 0: no limit (behind a proxy)
  int max_requests_per_connection = 1000;
  int io_threads = 2;
  // Appends more of /metrics (the workers'); may be empty.
  std::function<void(std::string*)> more_metrics;
};

}  // namespace pi
