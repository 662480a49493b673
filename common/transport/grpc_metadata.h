// A call's client metadata value by key ("" when absent), as every gRPC
// service here reads its token and session from it.
#pragma once

#include <grpcpp/server_context.h>

#include <string>

namespace pi {

inline std::string ClientMetadata(const grpc::ServerContext& context, const char* key) {
  const auto it = context.client_metadata().find(key);
  return it == context.client_metadata().end() ? ""
                                               : std::string(it->second.data(), it->second.size());
}

}  // namespace pi
