// CoordinatorService: the gRPC face of a loaded engine (proto/pi.proto's
// Coordinator): Generate streams a request's tokens, Tokenize, Health and
// Models answer what is loaded. Requests run through the RequestRunner the
// front ends share (one at a time in arrival order; beyond --max-queue
// waiting they are refused with RESOURCE_EXHAUSTED at once), and a client
// that cancels frees the engine at the next token. With an API key, every
// call but Health must carry it (authorization: Bearer KEY), as on HTTP.
// The engine never waits on a client: a request's tokens reach this
// handler's thread through its bounded stream (request_stream.h), and
// gRPC 1.51 takes a stream's messages into its buffers without waiting for
// the client to read them. A generation that fails ends with INTERNAL
// naming why, never a normal end. pi-launch serves it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/text/tokenizer.h"
#include "coordinator/serve/request_runner.h"
#include "proto/pi.grpc.pb.h"

namespace pi {

// What Models reports of a worker.
struct WorkerDescription {
  std::string name;       // "cpu worker 1234"
  std::string transport;  // shm | grpc
  std::string backend;    // cpu
  int64_t resident_bytes = 0;
  int64_t neurons = 0;
};

// What Models says of the engine served.
struct ServedModel {
  std::string model_path;
  std::string sparse = "off";  // the engine's --sparse mode
  int64_t vram_budget = -1;
  std::string hot_backend = "none";
  std::vector<WorkerDescription> workers;
};

struct CoordinatorServiceOptions {
  std::string api_key;  // empty: none asked for
};

class CoordinatorService final : public v1::Coordinator::Service {
 public:
  // `runner` (not owned) runs the requests; it must outlive the service.
  CoordinatorService(ServedModel served, RequestRunner* runner,
                     CoordinatorServiceOptions options = CoordinatorServiceOptions());

  grpc::Status Generate(grpc::ServerContext* context, const v1::GenerateRequest* request,
                        grpc::ServerWriter<v1::GenerateReply>* writer) override;
  grpc::Status Tokenize(grpc::ServerContext* context, const v1::TokenizeRequest* request,
                        v1::TokenizeReply* reply) override;
  grpc::Status Health(grpc::ServerContext* context, const v1::HealthRequest* request,
                      v1::HealthReply* reply) override;
  grpc::Status Models(grpc::ServerContext* context, const v1::ModelsRequest* request,
                      v1::ModelsReply* reply) override;

 private:
  grpc::Status Authenticate(const grpc::ServerContext& context, const char* call) const;

  const ServedModel served_;
  RequestRunner* runner_;
  const CoordinatorServiceOptions options_;
};

}  // namespace pi
