// pi-bench --server HOST:PORT: drives a running server's OpenAI-style HTTP
// API (pi-launch --http, or any server that streams /v1/completions as
// OpenAI does) with C concurrent clients for a bounded count of streamed
// requests, and reports, per client count, the aggregate decode tokens/s,
// the time to first token and the gap between tokens (p50/p99), and the
// errors and refusals (503) seen. With --conversation T, one client's
// conversation of T turns instead, each asked with the prompt cache and
// without: the times to first token side by side.
//
//   pi-bench --server 127.0.0.1:8080 --clients 1,8 --requests 32 -n 64
//   pi-bench --server 127.0.0.1:8080 --conversation 10 -n 48
#pragma once

namespace pi {

// The whole of pi-bench's run in --server mode (its own flags); returns the
// exit status.
int RunServerBench(int argc, char** argv);

}  // namespace pi
