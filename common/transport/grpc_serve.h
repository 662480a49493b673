// ServeGrpc: a worker reached over the network (proto/pi.proto's Worker
// service). The coordinator's Hello names the shard (checked like the
// shared-memory hello: protocol version, model fingerprint, fit); its steps
// then flow on one long-lived bidirectional stream, each frame the same step
// bytes as over shared memory, answered by the same shard code. Every
// call must carry the shared token (auth_token.h): without it, or with
// another, the call is UNAUTHENTICATED and logged (on TLS before the call
// starts; on plaintext by each handler before it reads a message). One
// session at a time, and one live Steps stream per session (a second is
// ALREADY_EXISTS): a new Hello (a restarted coordinator reconnects) first
// ends the old session — its stream cancelled (ABORTED) and its shard
// freed — then makes its own. Plaintext is served behind an H2Guard
// (h2_guard.h); at most 16 threads and 4 streams per connection.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "common/base/status.h"
#include "common/model/llama_model.h"
#include "common/transport/worker_shard.h"

namespace pi {

struct GrpcServeOptions {
  std::string listen = "127.0.0.1:50061";  // host:port; port 0 picks a free one
  std::string auth_token;                  // required
  int n_threads = 1;
  // TLS (PEM file contents): a certificate and key make the server TLS-only;
  // a CA also requires and checks the coordinator's client certificate.
  std::string tls_cert, tls_key, tls_ca;
  std::string log_prefix = "pi-cpu-worker";  // the tool's name, in its log lines
};

// Serves until SIGINT/SIGTERM (blocked by the caller before any thread
// started) or a Shutdown call. `on_listening` gets the bound address.
Status ServeGrpc(const GrpcServeOptions& options, const LlamaModel& model,
                 const WorkerShardFactory& make_shard,
                 const std::function<void(const std::string& address)>& on_listening);

}  // namespace pi
