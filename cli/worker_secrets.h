// The files that secure the worker link, read the same way by both ends
// (pi-cpu-worker --listen and pi-launch --cpu-worker): the shared token
// (--auth-token-file) and TLS's PEM files (--tls-cert, --tls-key, --tls-ca).
#pragma once

#include <string>

#include "common/base/status.h"

namespace pi {

struct WorkerSecretFiles {
  std::string token, tls_cert, tls_key, tls_ca;  // paths; empty: not given
};

struct WorkerSecrets {
  std::string token, tls_cert, tls_key, tls_ca;  // contents
};

// An error naming the flag when the combination is incomplete (a
// certificate without its key, or `require_token` without a token file).
Status CheckWorkerSecretFiles(const WorkerSecretFiles& files, bool require_token);

// Reads and checks the files (the token: auth_token.h's rules); errors name
// the flag and the file.
Status ReadWorkerSecrets(const WorkerSecretFiles& files, WorkerSecrets* out);

}  // namespace pi
