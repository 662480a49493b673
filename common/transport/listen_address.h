// HOST:PORT addresses as the servers and workers take them (--listen,
// --server, --cpu-worker): checked once, the same way everywhere.
#pragma once

#include <string>

#include "common/base/status.h"

namespace pi {

// Splits "host:port" ("[::1]:50051" for IPv6) into its parts; the port must
// be 0..65535 (0: the server picks one). The error names `flag`.
Status SplitHostPort(const std::string& address, const char* flag, std::string* host, int* port);

// True when `address`'s host is a loopback address or "localhost".
bool IsLoopbackHost(const std::string& address);

}  // namespace pi
