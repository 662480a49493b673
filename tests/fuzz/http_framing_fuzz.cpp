// libFuzzer target for the HTTP server's framing: any bytes a client sends on
// a connection — request lines, headers, bodies by Content-Length or chunked
// (chunk lines, extensions, trailers), several pipelined requests, then the
// end of input — go through the server's own connection code
// (HttpConnection on Beast's parser, with the server's limits, over a socket
// pair), with no model loaded (every API route answers 503 "loading", so the
// framing is what runs). The server must answer or close, never crash, throw
// out of its handlers or hang: what it writes back is a sequence of HTTP/1.1
// responses.
#include <sys/socket.h>
#include <unistd.h>

#include <boost/asio.hpp>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>

#include "coordinator/serve/http_connection.h"

namespace {

namespace net = boost::asio;

pi::HttpShared* Shared() {
  static pi::HttpShared* shared = [] {
    auto* s = new pi::HttpShared;
    s->options.api_key = "a-fuzz-api-key-0123456789";
    s->options.idle_timeout_ms = 1000;
    s->options.header_timeout_ms = 1000;
    s->options.io_timeout_ms = 1000;
    return s;
  }();
  return shared;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  int fds[2];
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, fds) != 0) abort();
  net::io_context ioc;
  net::ip::tcp::socket server(net::make_strand(ioc));
  server.assign(net::ip::tcp::v4(), fds[0]);
  {
    std::lock_guard<std::mutex> lock(Shared()->mu);
    ++Shared()->open;
    ++Shared()->open_by_client["fuzz"];
  }
  auto c = std::make_shared<pi::HttpConnection>(std::move(server), Shared(), "fuzz");
  c->Start();
  c.reset();
  // The client: sends everything, closes its side, reads what comes back.
  std::string reply;
  std::thread client([&] {
    size_t sent = 0;
    while (sent < size) {
      const ssize_t n = send(fds[1], data + sent, size - sent, MSG_NOSIGNAL);
      if (n <= 0) break;
      sent += static_cast<size_t>(n);
    }
    shutdown(fds[1], SHUT_WR);
    char buf[65536];
    ssize_t n;
    while ((n = recv(fds[1], buf, sizeof buf, 0)) > 0) reply.append(buf, static_cast<size_t>(n));
  });
  ioc.run();  // returns when the connection is gone
  shutdown(fds[1], SHUT_RDWR);
  client.join();
  close(fds[1]);
  if (!reply.empty() && reply.compare(0, 9, "HTTP/1.1 ") != 0 &&
      reply.compare(0, 9, "HTTP/1.0 ") != 0) {
    abort();
  }
  return 0;
}
