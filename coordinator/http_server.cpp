#include "coordinator/http_server.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>

#include <boost/asio.hpp>
#include <boost/beast.hpp>
#include <chrono>
#include <nlohmann/json.hpp>

#include "common/transport/auth_token.h"
#include "common/transport/listen_address.h"
#include "coordinator/generate_request.h"
#include "coordinator/openai_api.h"
#include "coordinator/web_page.h"

namespace pi {
namespace {

namespace beast = boost::beast;
namespace http = beast::http;
namespace net = boost::asio;
using tcp = net::ip::tcp;
using json = nlohmann::json;
using Request = http::request<http::string_body>;

struct Connection {
  explicit Connection(tcp::socket s) : socket(std::move(s)) {}
  tcp::socket socket;
  std::thread thread;
  std::atomic<bool> done{false};
};

// Whether the peer has closed its side (or the connection broke): polled
// while a request waits or runs, so a client that left frees the engine.
bool ClientGone(int fd) {
  pollfd p = {fd, POLLRDHUP, 0};
  return poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0;
}

// Writes a whole response; false when the client is gone.
bool Reply(tcp::socket* socket, const Request& req, int status, const std::string& body,
           const char* content_type = "application/json", int retry_after_s = 0) {
  http::response<http::string_body> res{static_cast<http::status>(status), req.version()};
  res.set(http::field::server, "pi-launch");
  res.set(http::field::content_type, content_type);
  if (retry_after_s > 0) res.set(http::field::retry_after, std::to_string(retry_after_s));
  res.keep_alive(req.keep_alive());
  res.body() = body;
  res.prepare_payload();
  beast::error_code ec;
  http::write(*socket, res, ec);
  return !ec;
}

// Closing with unread input would reset the connection and could destroy
// the answer before the client reads it: stop sending, then read and drop
// what the client still sends, for at most a second.
void LingeringClose(tcp::socket* socket) {
  beast::error_code ec;
  socket->shutdown(tcp::socket::shutdown_send, ec);
  const int fd = socket->native_handle();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(1);
  char buf[65536];
  while (std::chrono::steady_clock::now() < deadline) {
    pollfd p = {fd, POLLIN, 0};
    if (poll(&p, 1, 100) <= 0) continue;
    if (recv(fd, buf, sizeof buf, 0) <= 0) break;
  }
}

bool ReplyError(tcp::socket* socket, const Request& req, int status, const std::string& message,
                int retry_after_s = 0) {
  return Reply(socket, req, status, ErrorJson(status, message), "application/json", retry_after_s);
}

}  // namespace

struct HttpServer::Impl {
  HttpServerOptions options;
  std::atomic<RequestRunner*> ready_runner{nullptr};  // null while the model loads
  net::io_context ioc;
  std::unique_ptr<tcp::acceptor> acceptor;
  std::thread accept_thread;
  std::mutex mu;
  std::vector<std::shared_ptr<Connection>> connections;
  std::atomic<bool> stopping{false};
  std::atomic<uint64_t> next_id{1};
  int64_t started_at = 0;

  void AcceptLoop();
  void Serve(Connection* c);
  // Handles one request; false: close the connection.
  bool Handle(const Request& req, Connection* c);
  void Completion(const Request& req, Connection* c, bool chat);
  void Tokenize(const Request& req, Connection* c, bool detokenize);
};

void HttpServer::Impl::AcceptLoop() {
  const int fd = acceptor->native_handle();
  while (!stopping) {
    pollfd p = {fd, POLLIN, 0};
    if (poll(&p, 1, 100) <= 0) continue;
    beast::error_code ec;
    tcp::socket socket(ioc);
    acceptor->accept(socket, ec);
    if (ec) continue;
    // A streamed token is a small write: without this, Nagle's algorithm
    // holds it until the client's delayed ACK of the one before (40 ms).
    socket.set_option(tcp::no_delay(true), ec);
    std::lock_guard<std::mutex> lock(mu);
    // Reap finished connections; refuse beyond the limit.
    for (auto it = connections.begin(); it != connections.end();) {
      if ((*it)->done) {
        (*it)->thread.join();
        it = connections.erase(it);
      } else {
        ++it;
      }
    }
    if (static_cast<int>(connections.size()) >= options.max_connections) {
      Request req;
      req.version(11);
      req.keep_alive(false);
      ReplyError(&socket, req, 503, "too many connections; retry later", 1);
      continue;
    }
    auto c = std::make_shared<Connection>(std::move(socket));
    Connection* raw = c.get();
    c->thread = std::thread([this, raw] { Serve(raw); });
    connections.push_back(std::move(c));
  }
}

void HttpServer::Impl::Serve(Connection* c) {
  // A silent client is dropped after the idle timeout (reads and writes).
  timeval tv = {options.idle_timeout_s, 0};
  setsockopt(c->socket.native_handle(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  setsockopt(c->socket.native_handle(), SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  beast::flat_buffer buffer;
  while (!stopping) {
    http::request_parser<http::string_body> parser;
    parser.header_limit(16 * 1024);
    parser.body_limit(options.max_body_bytes);
    beast::error_code ec;
    http::read(c->socket, buffer, parser, ec);
    if (ec == http::error::body_limit) {
      Request req;
      req.version(11);
      req.keep_alive(false);
      ReplyError(&c->socket, req, 413,
                 "the body is over " + std::to_string(options.max_body_bytes) + " bytes");
      LingeringClose(&c->socket);
      break;
    }
    if (ec == http::error::header_limit) {
      Request req;
      req.version(11);
      req.keep_alive(false);
      ReplyError(&c->socket, req, 431, "the headers are over 16 KiB");
      break;
    }
    if (ec) break;  // closed, timed out, or not HTTP
    const Request& req = parser.get();
    if (!Handle(req, c) || !req.keep_alive()) break;
  }
  beast::error_code ignored;
  c->socket.shutdown(tcp::socket::shutdown_both, ignored);
  c->done = true;
}

bool HttpServer::Impl::Handle(const Request& req, Connection* c) {
  const std::string target(req.target());
  const std::string path = target.substr(0, target.find('?'));
  if (path == "/" && req.method() == http::verb::get) {  // the page asks for the key itself
    return Reply(&c->socket, req, 200, kWebPage, "text/html; charset=utf-8");
  }
  RequestRunner* runner = ready_runner.load(std::memory_order_acquire);
  if (!runner) {
    if (path == "/health" && req.method() == http::verb::get) {
      return Reply(&c->socket, req, 503, json{{"status", "loading"}}.dump(), "application/json", 1);
    }
    return ReplyError(&c->socket, req, 503, "the model is still loading; retry shortly", 1);
  }
  if (path == "/health" && req.method() == http::verb::get) {
    json j = {{"status", runner->degraded() ? "degraded" : "ok"},
              {"running", runner->running()},
              {"queued", runner->queued()}};
    return Reply(&c->socket, req, 200, j.dump());
  }
  if (!options.api_key.empty() &&
      !BearerMatches(std::string(req[http::field::authorization]), options.api_key)) {
    return ReplyError(&c->socket, req, 401, "a valid API key is required (Authorization: Bearer)");
  }
  if (path == "/metrics" && req.method() == http::verb::get) {
    std::string body;
    runner->RenderMetrics(&body);
    if (options.more_metrics) options.more_metrics(&body);
    return Reply(&c->socket, req, 200, body, "text/plain; version=0.0.4; charset=utf-8");
  }
  if (path == "/v1/models" && req.method() == http::verb::get) {
    const Engine& e = runner->engine();
    json model = {
        {"id", options.model_id},
        {"object", "model"},
        {"created", started_at},
        {"owned_by", "pi"},
        {"meta",
         {{"chat_template",
           options.chat_template ? json(ChatTemplateName(*options.chat_template)) : json(nullptr)},
          {"n_ctx", e.n_ctx()},
          {"n_vocab", e.n_vocab()},
          {"n_params", e.model().ParameterCount()}}}};
    json j = {{"object", "list"}, {"data", {model}}};
    return Reply(&c->socket, req, 200, j.dump(-1, ' ', false, json::error_handler_t::replace));
  }
  if ((path == "/v1/completions" || path == "/v1/chat/completions") &&
      req.method() == http::verb::post) {
    Completion(req, c, path == "/v1/chat/completions");
    return true;
  }
  if ((path == "/tokenize" || path == "/detokenize") && req.method() == http::verb::post) {
    Tokenize(req, c, path == "/detokenize");
    return true;
  }
  return ReplyError(&c->socket, req, 404,
                    "no " + std::string(req.method_string()) + " " + path + " here");
}

void HttpServer::Impl::Completion(const Request& req, Connection* c, bool chat) {
  CompletionRequest cr;
  int status = 400;
  Status s = chat ? ParseChatRequest(req.body(), options.model_id,
                                     options.chat_template ? &*options.chat_template : nullptr, &cr,
                                     &status)
                  : ParseCompletionRequest(req.body(), options.model_id, &cr, &status);
  RequestRunner* runner = ready_runner.load(std::memory_order_acquire);
  const Engine& engine = runner->engine();
  GenerationRequest job;
  SamplerParams sampling;
  if (s.ok()) {
    s = ParseGenerateRequest(cr.request, engine.n_vocab(), engine.n_ctx(), runner->tokenizer(),
                             &job, &sampling);
    status = 400;
  }
  if (!s.ok()) {
    ReplyError(&c->socket, req, status, s.message());
    return;
  }
  CompletionInfo info;
  info.id = (chat ? "chatcmpl-" : "cmpl-") + std::to_string(next_id++);
  info.created = std::chrono::duration_cast<std::chrono::seconds>(
                     std::chrono::system_clock::now().time_since_epoch())
                     .count();
  info.model = options.model_id;
  const int fd = c->socket.native_handle();
  // Streaming: the headers go out with the first token (a refusal before it
  // is still an error status), then a chunk per token.
  http::response<http::empty_body> head{http::status::ok, req.version()};
  head.set(http::field::server, "pi-launch");
  head.set(http::field::content_type, "text/event-stream");
  head.set(http::field::cache_control, "no-cache");
  head.keep_alive(req.keep_alive());
  head.chunked(true);
  http::response_serializer<http::empty_body> serializer{head};
  bool head_sent = false;
  auto send_event = [&](const std::string& data) {
    beast::error_code ec;
    if (!head_sent) {
      http::write_header(c->socket, serializer, ec);
      head_sent = true;
      if (ec) return false;
    }
    const std::string event = "data: " + data + "\n\n";
    net::write(c->socket, http::make_chunk(net::buffer(event)), ec);
    return !ec;
  };
  RunOutcome run;
  // Streamed logprobs: each chunk carries the tokens told since the last one
  // (a token whose text is held back for a stop string goes with the next).
  std::vector<TokenLogprob> chunk_logprobs;
  size_t told = 0, streamed_bytes = 0;
  runner->Run(
      job, sampling, [&] { return stopping || ClientGone(fd); },
      [&](int32_t id, const std::string& piece) {
        if (!cr.stream) return true;
        if (id >= 0 && job.logprobs >= 0) chunk_logprobs.push_back(run.result.logprobs[told++]);
        if (piece.empty()) return true;
        CompletionInfo chunk = info;
        if (job.logprobs >= 0) {
          chunk.logprobs = &chunk_logprobs;
          chunk.tok = &runner->tokenizer();
          chunk.logprob_offset = streamed_bytes;
        }
        streamed_bytes += piece.size();
        const bool first = !head_sent;
        const bool sent = chat ? send_event(ChatChunkJson(chunk, first, piece, nullptr, 0, 0))
                               : send_event(CompletionChunkJson(chunk, piece, nullptr, 0, 0));
        chunk_logprobs.clear();
        return sent;
      },
      &run);
  if (run.kind == RunOutcome::kQueueFull) {
    ReplyError(&c->socket, req, 503,
               "the queue is full (" + std::to_string(runner->max_queue()) +
                   " requests waiting, --max-queue); retry later",
               1);
    return;
  }
  const GenerationResult& g = run.result;
  if (run.kind == RunOutcome::kCancelledWaiting || std::string(g.stop_reason) == "cancelled") {
    return;  // the client is gone
  }
  if (!g.error.empty() && !head_sent) {
    ReplyError(&c->socket, req, 500, g.error);
    return;
  }
  const int n_prompt = static_cast<int>(job.prompt.size());
  const int n_gen = static_cast<int>(g.ids.size());
  const char* finish = FinishReason(g.stop_reason);
  ReplyTimings timings;
  timings.prompt_n = n_prompt;
  timings.prompt_ms = g.prompt_s * 1e3;
  timings.predicted_n = g.n_eval;
  timings.predicted_ms = g.eval_s * 1e3;
  timings.ffn_neurons = g.ffn_neurons;
  timings.ffn_hot = g.ffn_hot;
  info.timings = &timings;
  if (job.logprobs >= 0 && !cr.stream) {
    info.logprobs = &g.logprobs;
    info.tok = &runner->tokenizer();
  }
  if (!cr.stream) {
    // The text as it would stream (bytes that are not UTF-8 as U+FFFD), cut
    // before a stop string.
    Utf8Stream whole;
    const std::string text = whole.Push(g.text) + whole.Flush();
    Reply(&c->socket, req, 200,
          chat ? ChatCompletionJson(info, text, finish, n_prompt, n_gen)
               : CompletionJson(info, text, finish, n_prompt, n_gen));
    return;
  }
  // The last chunk carries the tokens no text went out with (a stop string's).
  CompletionInfo end = info;
  if (job.logprobs >= 0 && !chunk_logprobs.empty()) {
    end.logprobs = &chunk_logprobs;
    end.tok = &runner->tokenizer();
    end.logprob_offset = streamed_bytes;
  }
  const std::string last = chat ? ChatChunkJson(end, !head_sent, "", finish, n_prompt, n_gen)
                                : CompletionChunkJson(end, "", finish, n_prompt, n_gen);
  if (send_event(last) && send_event("[DONE]")) {
    beast::error_code ec;
    net::write(c->socket, http::make_chunk_last(), ec);
  }
}

void HttpServer::Impl::Tokenize(const Request& req, Connection* c, bool detokenize) {
  const Tokenizer& tok = ready_runner.load(std::memory_order_acquire)->tokenizer();
  const json j = json::parse(req.body(), nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    ReplyError(&c->socket, req, 400, "the body must be a JSON object");
    return;
  }
  if (detokenize) {
    const auto tokens = j.find("tokens");
    if (tokens == j.end() || !tokens->is_array()) {
      ReplyError(&c->socket, req, 400, "tokens must be an array of token ids");
      return;
    }
    std::vector<int32_t> ids;
    for (const json& t : *tokens) {
      if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= tok.n_vocab()) {
        ReplyError(&c->socket, req, 400, "tokens: not a token id of this model");
        return;
      }
      ids.push_back(static_cast<int32_t>(t.get<int64_t>()));
    }
    json out = {{"content", tok.Decode(ids)}};
    Reply(&c->socket, req, 200, out.dump(-1, ' ', false, json::error_handler_t::replace));
    return;
  }
  const auto content = j.find("content");
  if (content == j.end() || !content->is_string()) {
    ReplyError(&c->socket, req, 400, "content must be a string");
    return;
  }
  const auto special = j.find("add_special");
  const bool add_bos = special != j.end() && special->is_boolean() ? special->get<bool>() : false;
  std::vector<int32_t> ids;
  const Status s = tok.Encode(content->get<std::string>(), add_bos && tok.add_bos_token(), &ids);
  if (!s.ok()) {
    ReplyError(&c->socket, req, 400, s.message());
    return;
  }
  Reply(&c->socket, req, 200, json({{"tokens", ids}}).dump());
}

HttpServer::HttpServer() : impl_(std::make_unique<Impl>()) {}

HttpServer::~HttpServer() {
  Shutdown();
}

Status HttpServer::Start(const HttpServerOptions& options, RequestRunner* runner,
                         std::string* address) {
  std::string host;
  int port = 0;
  PI_RETURN_IF_ERROR(SplitHostPort(options.listen, "--http", &host, &port));
  Impl& m = *impl_;
  m.options = options;
  m.ready_runner.store(runner, std::memory_order_release);
  m.started_at = std::chrono::duration_cast<std::chrono::seconds>(
                     std::chrono::system_clock::now().time_since_epoch())
                     .count();
  beast::error_code ec;
  const net::ip::address ip = net::ip::make_address(host == "localhost" ? "127.0.0.1" : host, ec);
  if (ec)
    return Status::Error("--http %s: '%s' is not an IP address", options.listen.c_str(),
                         host.c_str());
  m.acceptor = std::make_unique<tcp::acceptor>(m.ioc);
  const tcp::endpoint endpoint(ip, static_cast<uint16_t>(port));
  m.acceptor->open(endpoint.protocol(), ec);
  if (!ec) m.acceptor->bind(endpoint, ec);
  if (!ec) m.acceptor->listen(net::socket_base::max_listen_connections, ec);
  if (ec) {
    m.acceptor.reset();
    return Status::Error("cannot listen on %s: %s", options.listen.c_str(), ec.message().c_str());
  }
  *address = host + ":" + std::to_string(m.acceptor->local_endpoint().port());
  m.accept_thread = std::thread([&m] { m.AcceptLoop(); });
  return Status::Ok();
}

void HttpServer::Ready(RequestRunner* runner, std::optional<ChatTemplate> chat_template) {
  // Written before the runner is published: no request reads the options
  // until it sees the runner.
  if (chat_template) impl_->options.chat_template = chat_template;
  impl_->ready_runner.store(runner, std::memory_order_release);
}

void HttpServer::Shutdown() {
  Impl& m = *impl_;
  if (!m.accept_thread.joinable()) return;
  m.stopping = true;
  m.accept_thread.join();
  std::lock_guard<std::mutex> lock(m.mu);
  for (auto& c : m.connections) {
    beast::error_code ignored;
    c->socket.shutdown(tcp::socket::shutdown_both, ignored);
  }
  for (auto& c : m.connections) c->thread.join();
  m.connections.clear();
}

}  // namespace pi
