// The client API key of pi-launch (which asks for it on every client port,
// HTTP and gRPC) and pi-client (which sends it): --api-key-file F, the key
// on the file's first line, or --api-key KEY, which `ps` shows to every
// user of the machine (so the file is the way to recommend). Either way the
// key must be 16 to 4096 printable ASCII characters (auth_token.h's rules).
#pragma once

#include <string>

#include "common/base/status.h"

namespace pi {

inline constexpr char kApiKeyUsage[] =
    "  --api-key-file F        the client API key, on F's first line (16+ characters)\n"
    "  --api-key KEY           the same on the command line (seen by `ps`: prefer the file)\n";

struct ApiKeyFlags {
  std::string key;       // --api-key
  std::string key_file;  // --api-key-file
  bool key_given = false;
};

// The key (empty: none asked for); an error naming the flag when it is
// empty, too short, not printable, or both flags are given.
Status ResolveApiKey(const ApiKeyFlags& flags, std::string* key);

}  // namespace pi
