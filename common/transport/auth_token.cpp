#include "common/transport/auth_token.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>

namespace pi {
namespace {

void Sha256(const std::string& s, unsigned char out[32]) {
  unsigned int n = 0;
  EVP_Digest(s.data(), s.size(), out, &n, EVP_sha256(), nullptr);
}

}  // namespace

Status ParseAuthToken(const std::string& contents, std::string* token) {
  const size_t end_of_line = contents.find_first_of("\r\n");
  std::string line = contents.substr(0, end_of_line);
  const size_t first = line.find_first_not_of(" \t");
  const size_t last = line.find_last_not_of(" \t");
  line = first == std::string::npos ? "" : line.substr(first, last - first + 1);
  if (line.size() < 16 || line.size() > 4096) {
    return Status::Error("the token must be 16 to 4096 characters on the first line, got %zu",
                         line.size());
  }
  for (unsigned char c : line) {
    if (c < 0x21 || c > 0x7e) {
      return Status::Error("the token must be printable ASCII without spaces (byte 0x%02x)", c);
    }
  }
  *token = line;
  return Status::Ok();
}

std::string BearerValue(const std::string& token) {
  return "Bearer " + token;
}

bool BearerMatches(const std::string& presented, const std::string& token) {
  unsigned char a[32], b[32];
  Sha256(presented, a);
  Sha256(BearerValue(token), b);
  return CRYPTO_memcmp(a, b, sizeof a) == 0;
}

}  // namespace pi
