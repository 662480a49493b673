#include "common/transport/listen_address.h"

#include <cstdlib>

namespace pi {

Status SplitHostPort(const std::string& address, const char* flag, std::string* host, int* port) {
  const size_t colon = address.rfind(':');
  const Status bad = Status::Error("%s expects HOST:PORT, got '%s'", flag, address.c_str());
  if (colon == std::string::npos || colon == 0 || colon + 1 == address.size()) return bad;
  const std::string digits = address.substr(colon + 1);
  if (digits.size() > 5 || digits.find_first_not_of("0123456789") != std::string::npos) return bad;
  const int p = std::atoi(digits.c_str());
  if (p > 65535) return bad;
  *host = address.substr(0, colon);
  *port = p;
  return Status::Ok();
}

bool IsLoopbackHost(const std::string& address) {
  std::string host = address.substr(0, address.rfind(':'));
  if (host.size() >= 2 && host.front() == '[') host = host.substr(1, host.size() - 2);
  return host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0;
}

}  // namespace pi
