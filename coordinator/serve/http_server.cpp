#include "coordinator/serve/http_server.h"

#include <sys/socket.h>

#include <boost/asio.hpp>
#include <chrono>
#include <cstdio>
#include <thread>
#include <vector>

#include "common/transport/tcp_listen.h"
#include "coordinator/serve/http_connection.h"
#include "coordinator/serve/openai_api.h"

namespace pi {
namespace {

namespace net = boost::asio;
using tcp = net::ip::tcp;

// Over a cap: a short 503 without reading anything, then close. A fresh
// socket's send buffer always takes it whole, so this never blocks.
void Refuse(tcp::socket* socket, const std::string& why) {
  const std::string body = ErrorJson(503, why + "; retry later");
  const std::string reply =
      "HTTP/1.1 503 Service Unavailable\r\nServer: pi-launch\r\n"
      "Content-Type: application/json\r\nRetry-After: 1\r\n"
      "Connection: close\r\nContent-Length: " +
      std::to_string(body.size()) + "\r\n\r\n" + body;
  ::send(socket->native_handle(), reply.data(), reply.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  boost::system::error_code ignored;
  socket->shutdown(tcp::socket::shutdown_both, ignored);
  socket->close(ignored);
}

}  // namespace

struct HttpServer::Impl {
  HttpShared shared;
  // After `shared`: destroyed first, with the handlers (and connections) it holds.
  net::io_context ioc;
  std::optional<net::executor_work_guard<net::io_context::executor_type>> work;
  std::unique_ptr<tcp::acceptor> acceptor;
  std::vector<std::thread> threads;

  void Accept();
  void OnAccept(boost::system::error_code ec, tcp::socket socket);
  void RunThread();
};

void HttpServer::Impl::Accept() {
  acceptor->async_accept(net::make_strand(ioc),
                         [this](boost::system::error_code ec, tcp::socket socket) {
                           OnAccept(ec, std::move(socket));
                         });
}

void HttpServer::Impl::OnAccept(boost::system::error_code ec, tcp::socket socket) {
  if (shared.stopping) return;
  if (ec) {
    // Out of descriptors (or a connection reset before it was taken): the
    // listener goes on after a pause instead of spinning.
    if (ec != net::error::operation_aborted) {
      auto timer = std::make_shared<net::steady_timer>(ioc, std::chrono::milliseconds(50));
      timer->async_wait([this, timer](boost::system::error_code) { Accept(); });
    }
    return;
  }
  boost::system::error_code ignored;
  // A streamed token is a small write: without this, Nagle's algorithm
  // holds it until the client's delayed ACK of the one before (40 ms).
  socket.set_option(tcp::no_delay(true), ignored);
  const std::string client = PeerAddress(socket);
  const HttpServerOptions& o = shared.options;
  std::string refused;
  {
    std::lock_guard<std::mutex> lock(shared.mu);
    if (shared.open >= o.max_connections) {
      refused = "too many connections (" + std::to_string(o.max_connections) + ")";
    } else if (o.max_connections_per_client > 0 &&
               shared.open_by_client[client] >= o.max_connections_per_client) {
      refused = "too many connections from " + client + " (" +
                std::to_string(o.max_connections_per_client) + ")";
      if (shared.open_by_client[client] == 0) shared.open_by_client.erase(client);
    } else {
      ++shared.open;
      ++shared.open_by_client[client];
    }
  }
  if (!refused.empty()) {
    Refuse(&socket, refused);
  } else {
    auto c = std::make_shared<HttpConnection>(std::move(socket), &shared, client);
    {
      std::lock_guard<std::mutex> lock(shared.mu);
      shared.live[c.get()] = c;
    }
    c->Start();
    if (shared.stopping) c->Stop();  // Shutdown took its list meanwhile
  }
  Accept();
}

void HttpServer::Impl::RunThread() {
  // A handler's exception leaves run(); each connection's own are caught
  // there (HttpConnection::Guarded), so this only logs what escaped them.
  while (true) {
    try {
      ioc.run();
      return;
    } catch (const std::exception& e) {
      fprintf(stderr, "pi-launch: http: %s (the server goes on)\n", e.what());
    }
  }
}

HttpServer::HttpServer() : impl_(std::make_unique<Impl>()) {}

HttpServer::~HttpServer() {
  Shutdown();
}

Status HttpServer::Start(const HttpServerOptions& options, RequestRunner* runner,
                         std::string* address) {
  Impl& m = *impl_;
  m.shared.options = options;
  m.shared.runner.store(runner, std::memory_order_release);
  m.shared.started_at = std::chrono::duration_cast<std::chrono::seconds>(
                            std::chrono::system_clock::now().time_since_epoch())
                            .count();
  PI_RETURN_IF_ERROR(ListenTcp(m.ioc, options.listen, "--http", &m.acceptor, address));
  m.work.emplace(m.ioc.get_executor());
  m.Accept();
  for (int i = 0; i < std::max(1, options.io_threads); ++i) {
    m.threads.emplace_back([&m] { m.RunThread(); });
  }
  return Status::Ok();
}

void HttpServer::Ready(RequestRunner* runner, std::optional<ChatTemplate> chat_template,
                       bool gpu_worker) {
  // Written before the runner is published: no request reads the options
  // until it sees the runner.
  if (chat_template) impl_->shared.options.chat_template = chat_template;
  impl_->shared.options.gpu_worker = gpu_worker;
  impl_->shared.runner.store(runner, std::memory_order_release);
}

void HttpServer::Shutdown() {
  Impl& m = *impl_;
  if (m.threads.empty()) return;
  m.shared.stopping = true;
  net::post(m.ioc, [&m] {
    boost::system::error_code ignored;
    m.acceptor->close(ignored);
  });
  std::vector<std::shared_ptr<HttpConnection>> open;
  {
    std::lock_guard<std::mutex> lock(m.shared.mu);
    for (auto& [raw, weak] : m.shared.live) {
      if (auto c = weak.lock()) open.push_back(std::move(c));
    }
  }
  for (auto& c : open) c->Stop();
  open.clear();
  m.work.reset();  // run() returns once the connections are gone
  for (std::thread& t : m.threads) t.join();
  m.threads.clear();
}

}  // namespace pi
