// H2Guard: the front door of a plaintext gRPC server. gRPC 1.51 has no
// defence against HTTP/2 rapid reset (CVE-2023-44487: streams opened and
// reset at once, which stop counting against MAX_CONCURRENT_STREAMS while
// the server still makes a call of each): measured on pi-launch, four such
// connections queued 250,000 calls in 5 s, 3.5 GB that stayed, and the
// server answered nothing meanwhile. It has no cap on connections either.
// So the server listens on a Unix socket in a private folder, and the guard
// takes the public address: it caps connections (overall and per client
// address), relays each one's bytes unchanged both ways, and reads the
// frames a client sends — a client that opens streams, resets them or sends
// SETTINGS faster than its budget (token buckets: a burst, then a rate) is
// disconnected, as is one whose streams carry more bytes before the server
// has answered any of them than one message may hold (gRPC takes a unary
// call's whole message before its handler can refuse it: this keeps an
// unauthenticated peer to one message in flight per connection). A relay
// costs one more pass through the kernel each way.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "common/base/status.h"

namespace pi {

struct H2GuardOptions {
  int max_connections = 256;
  int max_connections_per_client = 32;  // 0: no limit
  // New connections from one address: a burst, then a rate (a client cut
  // for its budget cannot come straight back with a fresh one).
  double connects_per_second = 50, connect_burst = 200;
  // A client's budgets: `burst` at once, then `per_second`.
  double streams_per_second = 500, stream_burst = 1000;  // new streams (HEADERS)
  double resets_per_second = 5, reset_burst = 20;        // RST_STREAM
  double settings_per_second = 10, settings_burst = 50;  // SETTINGS
  // Bytes of DATA a connection's streams may carry before the server sends
  // anything on them (0: no limit): the server's largest message and some.
  int64_t max_unanswered_bytes = 0;
  std::string log_prefix = "pi";  // in its log lines
};

class H2Guard {
 public:
  H2Guard();
  ~H2Guard();  // Shutdown()
  H2Guard(const H2Guard&) = delete;
  H2Guard& operator=(const H2Guard&) = delete;

  // A private folder (mode 0700) for the server's Unix socket; *address is
  // what gRPC listens on ("unix:/tmp/pi-grpc-XXXXXX/grpc.sock").
  Status MakeBackendAddress(std::string* address);
  // Listens on `listen` (HOST:PORT; port 0 picks one; *bound is what was
  // bound) and relays each connection to the backend address.
  Status Start(const std::string& listen, const H2GuardOptions& options, std::string* bound);
  // Stops listening, closes every relay, removes the socket's folder.
  void Shutdown();

  struct Counts {
    int64_t accepted = 0;
    int64_t refused = 0;       // over a connection cap
    int64_t disconnected = 0;  // over a budget, or not HTTP/2
  };
  Counts counts() const;

  struct Impl;  // h2_guard.cpp's (its relays use it)

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace pi
