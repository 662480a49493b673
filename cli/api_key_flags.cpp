#include "cli/api_key_flags.h"

#include "cli/read_file.h"
#include "common/transport/auth_token.h"

namespace pi {

Status ResolveApiKey(const ApiKeyFlags& flags, std::string* key) {
  key->clear();
  if (flags.key_given && !flags.key_file.empty()) {
    return Status::Error("--api-key and --api-key-file: give one of them");
  }
  if (!flags.key_file.empty()) {
    std::string contents;
    PI_RETURN_IF_ERROR(ReadWholeFile(flags.key_file, &contents).WithContext("--api-key-file"));
    return ParseAuthToken(contents, key).WithContext("--api-key-file");
  }
  if (!flags.key_given) return Status::Ok();
  if (flags.key.empty()) {
    return Status::Error("--api-key: the key is empty (that would leave the server open)");
  }
  return ParseAuthToken(flags.key, key).WithContext("--api-key");
}

}  // namespace pi
