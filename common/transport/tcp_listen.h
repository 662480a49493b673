// The TCP side every front door shares (the HTTP server, the H2 guard): a
// listening socket opened on HOST:PORT, and the address a connection's
// peer counts under for per-client caps and logs.
#pragma once

#include <boost/asio/ip/tcp.hpp>
#include <memory>
#include <string>

#include "common/base/status.h"
#include "common/transport/listen_address.h"

namespace pi {

// Opens *acceptor on `listen` (HOST:PORT, "localhost" as 127.0.0.1; port 0
// picks one) with SO_REUSEADDR, so a restart binds at once; *bound is what
// was bound. Errors name `flag`.
inline Status ListenTcp(boost::asio::io_context& ioc, const std::string& listen, const char* flag,
                        std::unique_ptr<boost::asio::ip::tcp::acceptor>* acceptor,
                        std::string* bound) {
  namespace net = boost::asio;
  std::string host;
  int port = 0;
  PI_RETURN_IF_ERROR(SplitHostPort(listen, flag, &host, &port));
  boost::system::error_code ec;
  const net::ip::address ip = net::ip::make_address(host == "localhost" ? "127.0.0.1" : host, ec);
  if (ec) {
    return Status::Error("%s %s: '%s' is not an IP address", flag, listen.c_str(), host.c_str());
  }
  auto a = std::make_unique<net::ip::tcp::acceptor>(ioc);
  const net::ip::tcp::endpoint endpoint(ip, static_cast<uint16_t>(port));
  a->open(endpoint.protocol(), ec);
  if (!ec) a->set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) a->bind(endpoint, ec);
  if (!ec) a->listen(net::socket_base::max_listen_connections, ec);
  if (ec) return Status::Error("cannot listen on %s: %s", listen.c_str(), ec.message().c_str());
  *bound = host + ":" + std::to_string(a->local_endpoint().port());
  *acceptor = std::move(a);
  return Status::Ok();
}

inline std::string PeerAddress(const boost::asio::ip::tcp::socket& socket) {
  boost::system::error_code ec;
  const boost::asio::ip::tcp::endpoint peer = socket.remote_endpoint(ec);
  if (ec) return "?";
  boost::asio::ip::address a = peer.address();
  if (a.is_v6() && a.to_v6().is_v4_mapped()) {
    a = boost::asio::ip::make_address_v4(boost::asio::ip::v4_mapped, a.to_v6());
  }
  return a.to_string();
}

}  // namespace pi
