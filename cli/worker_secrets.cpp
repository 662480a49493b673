#include "cli/worker_secrets.h"

#include "cli/read_file.h"
#include "common/transport/auth_token.h"

namespace pi {

Status CheckWorkerSecretFiles(const WorkerSecretFiles& f, bool require_token) {
  if (require_token && f.token.empty()) {
    return Status::Error("workers reached over gRPC need --auth-token-file");
  }
  if (f.tls_cert.empty() != f.tls_key.empty()) {
    return Status::Error("--tls-cert and --tls-key go together");
  }
  return Status::Ok();
}

Status ReadWorkerSecrets(const WorkerSecretFiles& f, WorkerSecrets* out) {
  if (!f.token.empty()) {
    std::string contents;
    PI_RETURN_IF_ERROR(ReadWholeFile(f.token, &contents).WithContext("--auth-token-file"));
    PI_RETURN_IF_ERROR(
        ParseAuthToken(contents, &out->token).WithContext("--auth-token-file " + f.token));
  }
  const struct {
    const std::string& path;
    std::string* contents;
    const char* flag;
  } pems[] = {{f.tls_cert, &out->tls_cert, "--tls-cert"},
              {f.tls_key, &out->tls_key, "--tls-key"},
              {f.tls_ca, &out->tls_ca, "--tls-ca"}};
  for (const auto& pem : pems) {
    if (pem.path.empty()) continue;
    PI_RETURN_IF_ERROR(ReadWholeFile(pem.path, pem.contents).WithContext(pem.flag));
    if (pem.contents->find("-----BEGIN ") == std::string::npos) {
      return Status::Error("%s %s: not a PEM file (no -----BEGIN line)", pem.flag,
                           pem.path.c_str());
    }
  }
  return Status::Ok();
}

}  // namespace pi
