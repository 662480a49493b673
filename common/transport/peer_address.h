// The address a TCP connection's peer counts under for per-client caps and
// logs: an IPv4-mapped IPv6 address as the IPv4 one, "?" when the socket
// has no peer (reset before it was asked).
#pragma once

#include <boost/asio/ip/tcp.hpp>
#include <string>

namespace pi {

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
