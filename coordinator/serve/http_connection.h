// HttpConnection: one client connection of the HTTP API, on Beast's
// asynchronous API, every step on the connection's strand under a deadline:
// the wait for a request's first byte (idle), its headers (a total, which
// defeats a client that sends a byte at a time), its body, each write; past
// one the connection closes. A request that breaks the framing gets 400,
// 413 or 431 and the connection closes; an exception stays in its connection, never the
// process. The engine never writes here: a request's tokens come through
// its stream (request_stream.h), which the connection drains when told;
// a client that does not take them within the write deadline is cancelled.
// While a request runs the connection watches the socket: a reset cancels
// it; an end of input (a client that half-closed after its request) does
// not, and the answer still goes out — a client that left entirely is found
// by the writes (for a request whose answer has not begun: an interim
// "100 Continue" each second, which HTTP/1.1 clients skip).
#pragma once

#include <atomic>
#include <boost/asio.hpp>
#include <boost/beast.hpp>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "coordinator/serve/http_options.h"
#include "coordinator/serve/http_routes.h"
#include "coordinator/serve/request_runner.h"

namespace pi {

class HttpConnection;

// What the connections of one server share.
struct HttpShared {
  HttpServerOptions options;
  std::atomic<RequestRunner*> runner{nullptr};  // null while the model loads
  int64_t started_at = 0;
  std::atomic<uint64_t> next_id{1};
  std::atomic<bool> stopping{false};
  // Open connections, overall and by client address (the caps).
  std::mutex mu;
  int open = 0;
  std::unordered_map<std::string, int> open_by_client;
  std::unordered_map<HttpConnection*, std::weak_ptr<HttpConnection>> live;
};

class HttpConnection : public std::enable_shared_from_this<HttpConnection> {
 public:
  // `socket` bound to a strand of its own; its place in the caps is taken
  // already (and given back when the connection goes).
  HttpConnection(boost::asio::ip::tcp::socket socket, HttpShared* shared, std::string client);
  ~HttpConnection();
  HttpConnection(const HttpConnection&) = delete;
  HttpConnection& operator=(const HttpConnection&) = delete;

  void Start();  // from the acceptor
  void Stop();   // from any thread: the request cancelled, the socket closed

 private:
  using Parser = boost::beast::http::request_parser<boost::beast::http::string_body>;
  using ErrorCode = boost::beast::error_code;

  // Runs a handler's body; an exception closes this connection only.
  template <class F>
  void Guarded(const char* where, F&& body);

  void AwaitRequest();
  void ReadHeader();
  void OnHeader(ErrorCode ec);
  void ReadBody();
  void OnBody(ErrorCode ec);
  void Dispatch();
  // A request the framing lost: its status (400, 413, 431), then close.
  void FramingError(ErrorCode ec, bool in_body);

  // The CORS headers of a reply to origin_, when --cors allows it.
  template <class Message>
  void AddCors(Message* m) const;
  // A whole reply; then the next request, or close (`close`: the request's
  // body was not read, so the connection cannot go on).
  void Reply(const HttpReply& reply, bool close);
  void AfterReply(bool keep_alive, bool linger);
  void LingeringClose();

  void StartJob(CompletionStart start);
  void Drain();  // the jobs' tokens (or their end) that are there, written
  void OnWritten(ErrorCode ec);
  void EndJob();      // after its last byte: the next request, or close
  void ReleaseJob();  // the finished job's state let go
  void CancelJob(const std::string& why);
  void Watch();
  void OnWatch(ErrorCode ec);
  // Writes what a client skips (100 Continue, or an SSE comment) after
  // `after_ms`, then again: a socket its client closed answers the first
  // write with a reset, which fails the next.
  void Probe(int after_ms);
  void Write(std::string bytes);  // raw bytes (an interim reply, a ping), then Drain

  void Close();
  const HttpServerOptions& options() const { return shared_->options; }

  boost::beast::tcp_stream stream_;
  boost::beast::flat_buffer buffer_;
  std::optional<Parser> parser_;
  HttpShared* const shared_;
  const std::string client_;
  std::string origin_;  // the request's Origin header (CORS)
  int requests_ = 0;
  HttpRoute route_ = HttpRoute::kHealth;  // the request's (from its headers)
  unsigned version_ = 11;
  bool keep_alive_ = true;
  bool closed_ = false;
  bool peer_eof_ = false;  // the client half-closed: no request follows
  std::optional<boost::beast::http::response<boost::beast::http::string_body>> response_;

  // The running completion.
  std::shared_ptr<HttpConnection> self_while_job_;  // a job keeps its connection
  std::optional<CompletionChoices> choices_;        // its jobs and replies
  bool streaming_ = false;
  // A write is in flight: what it reads (events_, and while the stream's head
  // goes out head_ and serializer_) outlives the job until it completes, even
  // when the job is released meanwhile (a client that resets mid-write).
  bool writing_ = false;
  bool head_sent_ = false;  // the stream's status line and headers
  bool last_written_ = false;
  std::optional<boost::beast::http::response<boost::beast::http::empty_body>> head_;
  std::optional<boost::beast::http::response_serializer<boost::beast::http::empty_body>>
      serializer_;
  std::string events_;  // what is being written
  bool watching_ = false;
  bool await_after_watch_ = false;
  boost::asio::steady_timer probe_timer_;
};

}  // namespace pi
