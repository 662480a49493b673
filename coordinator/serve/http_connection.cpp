#include "coordinator/serve/http_connection.h"

#include <sys/socket.h>

#include <chrono>
#include <cstdio>
#include <utility>

#include "common/transport/auth_token.h"
#include "coordinator/serve/openai_api.h"

namespace pi {
namespace {

namespace beast = boost::beast;
namespace http = beast::http;
namespace net = boost::asio;
using tcp = net::ip::tcp;
using Ms = std::chrono::milliseconds;

constexpr char kContinue[] = "HTTP/1.1 100 Continue\r\n\r\n";

bool IsHttpError(const beast::error_code& ec) {
  return ec.category() == make_error_code(http::error::bad_method).category();
}

// One chunk of a chunked body ("" ends the body).
void AppendChunk(const std::string& data, std::string* out) {
  char size[24];
  snprintf(size, sizeof size, "%zx\r\n", data.size());
  *out += size;
  *out += data;
  *out += "\r\n";
}

}  // namespace

HttpConnection::HttpConnection(tcp::socket socket, HttpShared* shared, std::string client)
    : stream_(std::move(socket)),
      buffer_(std::max<size_t>(64 << 10, shared->options.max_header_bytes * 2)),
      shared_(shared),
      client_(std::move(client)),
      probe_timer_(stream_.get_executor()) {}

HttpConnection::~HttpConnection() {
  if (choices_) choices_->Cancel(shared_->runner.load(), "the connection closed");
  std::lock_guard<std::mutex> lock(shared_->mu);
  --shared_->open;
  if (--shared_->open_by_client[client_] <= 0) shared_->open_by_client.erase(client_);
  shared_->live.erase(this);
}

template <class F>
void HttpConnection::Guarded(const char* where, F&& body) {
  try {
    body();
  } catch (const std::exception& e) {
    fprintf(stderr, "pi-launch: http: %s: %s (%s): connection closed\n", client_.c_str(), where,
            e.what());
    Close();
  } catch (...) {
    fprintf(stderr, "pi-launch: http: %s: %s: unknown exception: connection closed\n",
            client_.c_str(), where);
    Close();
  }
}

void HttpConnection::Start() {
  net::dispatch(stream_.get_executor(), [self = shared_from_this()] {
    self->Guarded("start", [&] { self->AwaitRequest(); });
  });
}

void HttpConnection::Stop() {
  net::post(stream_.get_executor(), [self = shared_from_this()] {
    self->Guarded("stop", [&] {
      self->CancelJob("the server is stopping");
      self->Close();
    });
  });
}

void HttpConnection::Close() {
  if (closed_) return;
  closed_ = true;
  if (choices_) CancelJob("the connection closed");
  self_while_job_.reset();
  probe_timer_.cancel();
  beast::error_code ignored;
  stream_.socket().shutdown(tcp::socket::shutdown_both, ignored);
  stream_.socket().close(ignored);
}

void HttpConnection::AwaitRequest() {
  if (closed_) return;
  if (shared_->stopping || peer_eof_ || requests_ >= options().max_requests_per_connection) {
    return Close();
  }
  if (buffer_.size() > 0) return ReadHeader();  // pipelined: already here
  stream_.expires_after(Ms(options().idle_timeout_ms));
  stream_.async_read_some(buffer_.prepare(std::min<size_t>(4096, buffer_.max_size())),
                          [self = shared_from_this()](beast::error_code ec, size_t n) {
                            self->Guarded("waiting for a request", [&] {
                              if (ec) return self->Close();  // idle past the deadline, or gone
                              self->buffer_.commit(n);
                              self->ReadHeader();
                            });
                          });
}

void HttpConnection::ReadHeader() {
  parser_.emplace();
  parser_->header_limit(static_cast<uint32_t>(options().max_header_bytes));
  parser_->body_limit(options().max_body_bytes);
  stream_.expires_after(Ms(options().header_timeout_ms));
  http::async_read_header(stream_, buffer_, *parser_,
                          [self = shared_from_this()](beast::error_code ec, size_t) {
                            self->Guarded("reading headers", [&] { self->OnHeader(ec); });
                          });
}

void HttpConnection::FramingError(beast::error_code ec, bool in_body) {
  int status = 0;
  std::string message;
  // (Past a deadline the stream has closed the socket already: nobody to answer.)
  if (ec == beast::error::timeout) {
    return Close();
  } else if (ec == http::error::body_limit) {
    status = 413;
    message = "the body is over " + std::to_string(options().max_body_bytes) + " bytes";
  } else if (ec == http::error::header_limit || ec == http::error::buffer_overflow) {
    status = 431;
    message = in_body ? "a chunk line or the trailer is over " +
                            std::to_string(buffer_.max_size() / 1024) + " KiB"
                      : "the headers are over " +
                            std::to_string(options().max_header_bytes / 1024) + " KiB";
  } else if (IsHttpError(ec) && ec != http::error::end_of_stream &&
             ec != http::error::partial_message) {
    status = 400;
    message = "malformed HTTP (" + ec.message() + ")";
  }
  if (status == 0) return Close();  // closed or reset by the client: nobody to answer
  keep_alive_ = false;
  Reply(ErrorReply(status, message), /*close=*/true);
}

void HttpConnection::OnHeader(beast::error_code ec) {
  if (ec) return FramingError(ec, false);
  ++requests_;
  const auto& req = parser_->get();
  version_ = req.version();
  keep_alive_ = req.keep_alive();
  const std::string target(req.target());
  const std::string path = target.substr(0, target.find('?'));
  int status = 0;
  std::string allow;
  const bool no_body = parser_->is_done();
  origin_ = std::string(req[http::field::origin]);
  if (req.method() == http::verb::options && !options().cors_origin.empty()) {
    // A browser's preflight: no key asked (it carries none), the methods and
    // headers the API takes.
    HttpReply r;
    r.status = 204;
    r.content_type.clear();
    return Reply(r, !no_body);
  }
  if (!FindRoute(path, std::string(req.method_string()), &route_, &status, &allow)) {
    HttpReply r = ErrorReply(
        status, status == 405
                    ? std::string(req.method_string()) + " " + path + ": this path takes " + allow
                    : "no " + std::string(req.method_string()) + " " + path + " here");
    return Reply(r, !no_body);
  }
  const std::string& key = options().api_key;
  if (!IsPublic(route_) && !key.empty() &&
      !BearerMatches(std::string(req[http::field::authorization]), key)) {
    return Reply(ErrorReply(401, "a valid API key is required (Authorization: Bearer)"), !no_body);
  }
  if (no_body) return Dispatch();
  if (beast::iequals(req[http::field::expect], "100-continue") && version_ == 11) {
    // The client waits for this before it sends the body.
    stream_.expires_after(Ms(options().io_timeout_ms));
    net::async_write(stream_, net::buffer(kContinue, sizeof kContinue - 1),
                     [self = shared_from_this()](beast::error_code write_ec, size_t) {
                       self->Guarded("writing 100 Continue", [&] {
                         if (write_ec) return self->Close();
                         self->ReadBody();
                       });
                     });
    return;
  }
  ReadBody();
}

void HttpConnection::ReadBody() {
  stream_.expires_after(Ms(options().io_timeout_ms));
  http::async_read(stream_, buffer_, *parser_,
                   [self = shared_from_this()](beast::error_code ec, size_t) {
                     self->Guarded("reading the body", [&] {
                       if (ec) return self->FramingError(ec, true);
                       self->Dispatch();
                     });
                   });
}

void HttpConnection::Dispatch() {
  const auto& req = parser_->get();
  const HttpRoute route = route_;
  HttpContext c;
  c.options = &options();
  c.runner = shared_->runner.load(std::memory_order_acquire);
  c.started_at = shared_->started_at;
  const std::string target(req.target());
  const size_t question = target.find('?');
  c.path = target.substr(0, question);
  if (question != std::string::npos) c.query = target.substr(question + 1);
  CompletionKind kind;
  switch (route) {
    case HttpRoute::kCompletions:
      kind = CompletionKind::kCompletions;
      break;
    case HttpRoute::kChatCompletions:
      kind = CompletionKind::kChat;
      break;
    case HttpRoute::kNativeCompletion:
      kind = CompletionKind::kNative;
      break;
    case HttpRoute::kInfill:
      kind = CompletionKind::kInfill;
      break;
    case HttpRoute::kEmbeddings:
      kind = CompletionKind::kEmbeddings;
      break;
    case HttpRoute::kNativeEmbeddings:
      kind = CompletionKind::kNativeEmbeddings;
      break;
    case HttpRoute::kResponses:
      kind = CompletionKind::kResponses;
      break;
    case HttpRoute::kSlotAction:
      kind = CompletionKind::kSlotAction;
      break;
    default:
      return Reply(HandleRoute(route, c, req.body()), false);
  }
  CompletionStart start;
  std::weak_ptr<HttpConnection> weak = weak_from_this();
  auto executor = stream_.get_executor();
  StartCompletion(
      c, kind, req.body(), shared_->next_id++,
      [weak, executor] {
        net::post(executor, [weak] {
          if (auto self = weak.lock()) self->Guarded("streaming", [&] { self->Drain(); });
        });
      },
      &start);
  if (!start.started()) return Reply(start.refusal, false);
  StartJob(std::move(start));
}

template <class Message>
void HttpConnection::AddCors(Message* m) const {
  const std::string& allowed = options().cors_origin;
  if (allowed.empty() || origin_.empty()) return;
  if (allowed != "*" && allowed != origin_) return;
  m->set(http::field::access_control_allow_origin, allowed == "*" ? "*" : origin_);
  m->set(http::field::vary, "Origin");
}

void HttpConnection::Reply(const HttpReply& r, bool close) {
  const bool keep_alive = !close && keep_alive_ && !peer_eof_ && !shared_->stopping &&
                          requests_ < options().max_requests_per_connection;
  response_.emplace(static_cast<http::status>(r.status), version_);
  response_->set(http::field::server, "pi-launch");
  if (!r.content_type.empty()) response_->set(http::field::content_type, r.content_type);
  AddCors(&*response_);
  if (r.status == 204 && !options().cors_origin.empty()) {
    response_->set(http::field::access_control_allow_methods, "GET, POST, OPTIONS");
    response_->set(http::field::access_control_allow_headers, "Authorization, Content-Type");
    response_->set(http::field::access_control_max_age, "600");
  }
  if (r.retry_after_s > 0)
    response_->set(http::field::retry_after, std::to_string(r.retry_after_s));
  response_->keep_alive(keep_alive);
  response_->body() = r.body;
  response_->prepare_payload();
  stream_.expires_after(Ms(options().io_timeout_ms));
  http::async_write(stream_, *response_,
                    [self = shared_from_this(), keep_alive, close](beast::error_code ec, size_t) {
                      self->Guarded("writing a reply", [&] {
                        self->response_.reset();
                        if (ec) return self->Close();
                        self->AfterReply(keep_alive, close);
                      });
                    });
}

void HttpConnection::AfterReply(bool keep_alive, bool linger) {
  if (keep_alive) return AwaitRequest();
  if (linger) return LingeringClose();
  Close();
}

void HttpConnection::LingeringClose() {
  // Closing with unread input would reset the connection and could destroy
  // the answer before the client reads it: stop sending, then read and drop
  // what the client still sends, for at most a second.
  beast::error_code ignored;
  stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
  buffer_.clear();
  stream_.expires_after(Ms(1000));
  stream_.async_read_some(buffer_.prepare(std::min<size_t>(4096, buffer_.max_size())),
                          [self = shared_from_this()](beast::error_code ec, size_t) {
                            self->Guarded("closing", [&] {
                              if (ec) return self->Close();
                              self->LingeringClose();
                            });
                          });
}

void HttpConnection::StartJob(CompletionStart start) {
  choices_.emplace(std::move(start.choices));
  streaming_ = start.stream;
  head_sent_ = last_written_ = false;
  self_while_job_ = shared_from_this();
  if (streaming_) {
    head_.emplace(http::status::ok, version_);
    head_->set(http::field::server, "pi-launch");
    head_->set(http::field::content_type, "text/event-stream");
    head_->set(http::field::cache_control, "no-cache");
    AddCors(&*head_);
    head_->keep_alive(keep_alive_ && !peer_eof_ &&
                      requests_ < options().max_requests_per_connection);
    head_->chunked(true);
    serializer_.emplace(*head_);
  }
  Watch();
  Drain();
}

void HttpConnection::CancelJob(const std::string& why) {
  if (!choices_) return;
  choices_->Cancel(shared_->runner.load(), why);
  ReleaseJob();
}

void HttpConnection::Drain() {
  if (!choices_ || writing_ || closed_) return;
  int status = 0;
  std::string body;
  switch (choices_->Drain(streaming_, shared_->runner.load(), &events_, &last_written_, &status,
                          &body)) {
    case CompletionChoices::Step::kCancelled:
      return Close();  // the client left, did not read, or the server stops: no normal end
    case CompletionChoices::Step::kWhole: {
      ReleaseJob();
      HttpReply r;
      r.status = status;
      r.body = std::move(body);
      // A watch still pending would read the next request: it is cancelled first.
      if (watching_) {
        beast::error_code ignored;
        stream_.socket().cancel(ignored);
      }
      return Reply(r, false);
    }
    case CompletionChoices::Step::kGoing:
      break;
  }
  if (events_.empty()) return;
  std::string chunked;
  AppendChunk(events_, &chunked);
  if (last_written_) chunked += "0\r\n\r\n";
  events_ = std::move(chunked);
  writing_ = true;
  stream_.expires_after(Ms(options().io_timeout_ms));
  auto done = [self = shared_from_this()](beast::error_code ec, size_t) {
    self->Guarded("streaming", [&] { self->OnWritten(ec); });
  };
  if (!head_sent_) {
    head_sent_ = true;
    http::async_write_header(stream_, *serializer_,
                             [self = shared_from_this(), done](beast::error_code ec, size_t) {
                               self->Guarded("streaming", [&] {
                                 if (ec) return self->OnWritten(ec);
                                 net::async_write(self->stream_, net::buffer(self->events_), done);
                               });
                             });
    return;
  }
  net::async_write(stream_, net::buffer(events_), done);
}

void HttpConnection::OnWritten(beast::error_code ec) {
  writing_ = false;
  if (!choices_) {  // released while the write was in flight (closing): its head goes only now
    serializer_.reset();
    head_.reset();
    return Close();
  }
  if (ec) {
    CancelJob(ec == beast::error::timeout
                  ? "the client did not take its stream within " +
                        std::to_string(options().io_timeout_ms / 1000) + " s"
                  : "the client went away (" + ec.message() + ")");
    return Close();
  }
  if (last_written_) return EndJob();
  Drain();
}

void HttpConnection::ReleaseJob() {
  choices_.reset();
  streaming_ = false;
  if (!writing_) {  // else the write in flight still reads them: OnWritten lets them go
    serializer_.reset();
    head_.reset();
  }
  probe_timer_.cancel();
  self_while_job_.reset();  // (the handler running this holds the connection too)
}

void HttpConnection::EndJob() {
  const bool keep_alive = head_ && head_->keep_alive() && !peer_eof_;
  ReleaseJob();
  if (!keep_alive) return Close();
  if (watching_) {  // its completion goes on to the next request
    await_after_watch_ = true;
    beast::error_code ignored;
    stream_.socket().cancel(ignored);
    return;
  }
  AwaitRequest();
}

void HttpConnection::Watch() {
  if (watching_ || peer_eof_) return;
  watching_ = true;
  stream_.socket().async_wait(tcp::socket::wait_read,
                              [self = shared_from_this()](beast::error_code ec) {
                                self->Guarded("watching", [&] { self->OnWatch(ec); });
                              });
}

void HttpConnection::OnWatch(beast::error_code ec) {
  watching_ = false;
  if (closed_) return;
  if (ec == net::error::operation_aborted) {
    if (await_after_watch_) {
      await_after_watch_ = false;
      AwaitRequest();
    }
    return;
  }
  char byte;
  const ssize_t n =
      ec ? -1 : recv(stream_.socket().native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  if (n > 0) {  // the next request, pipelined: read once this one is answered
    if (await_after_watch_) {
      await_after_watch_ = false;
      AwaitRequest();
    }
    return;
  }
  if (n < 0 && !ec && (errno == EAGAIN || errno == EWOULDBLOCK)) return Watch();
  if (n == 0) {
    // End of input: a client that half-closed waits for its answer, one
    // that left entirely is found by the second write (within ~0.1 s).
    peer_eof_ = true;
    if (await_after_watch_) return Close();
    return Probe(0);
  }
  CancelJob("the connection broke");
  Close();
}

void HttpConnection::Probe(int after_ms) {
  if (!choices_ || closed_) return;
  probe_timer_.expires_after(Ms(after_ms));
  probe_timer_.async_wait([self = shared_from_this(), after_ms](beast::error_code ec) {
    self->Guarded("probing", [&] {
      if (ec || !self->choices_ || self->closed_) return;
      if (!self->writing_) {
        if (!self->head_sent_ && self->version_ == 11) {
          self->Write(kContinue);  // skipped by the client; refused by a socket nobody holds
        } else if (self->head_sent_) {
          std::string ping;
          AppendChunk(": ping\n\n", &ping);  // an SSE comment
          self->Write(std::move(ping));
        }
      }
      // The second write soon after the first; then one a second.
      self->Probe(after_ms == 0 ? 100 : 1000);
    });
  });
}

void HttpConnection::Write(std::string bytes) {
  events_ = std::move(bytes);
  writing_ = true;
  stream_.expires_after(Ms(options().io_timeout_ms));
  net::async_write(stream_, net::buffer(events_),
                   [self = shared_from_this()](beast::error_code ec, size_t) {
                     self->Guarded("probing", [&] { self->OnWritten(ec); });
                   });
}

}  // namespace pi
