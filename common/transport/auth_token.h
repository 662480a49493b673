// The shared token that authenticates a coordinator to its remote workers.
// Both read it from a file (--auth-token-file: a credentials or environment
// file, never the command line, where `ps` would show it); every worker RPC
// carries it as "authorization: Bearer <token>" and the worker compares it
// in constant time (the SHA-256 of each, compared with CRYPTO_memcmp), so
// the comparison's time says nothing about how much of a guess was right.
#pragma once

#include <string>

#include "common/base/status.h"

namespace pi {

inline constexpr char kAuthMetadataKey[] = "authorization";

// The token in a file's contents: the first line without surrounding
// whitespace. It must be 16 to 4096 printable ASCII characters (it travels
// as an HTTP/2 header value).
Status ParseAuthToken(const std::string& file_contents, std::string* token);

// The metadata value for a token: "Bearer <token>".
std::string BearerValue(const std::string& token);

// Whether a presented "authorization" value is "Bearer <token>"; the time
// taken does not depend on where the two differ.
bool BearerMatches(const std::string& presented, const std::string& token);

}  // namespace pi
