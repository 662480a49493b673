// CoordinatorService: the gRPC face of a loaded engine (proto/pi.proto's
// Coordinator): Generate streams a request's tokens, Tokenize, Health and
// Models answer what is loaded. Requests share the engine one at a time in
// arrival order (Admission); beyond --max-queue waiting they are refused
// with RESOURCE_EXHAUSTED at once, and a client that cancels frees the
// engine at the next token. pi-launch serves it.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "common/tokenizer.h"
#include "coordinator/admission.h"
#include "coordinator/engine.h"
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

// The engine served and what Models says of it; pointers not owned.
struct ServedModel {
  std::string model_path;
  Engine* engine = nullptr;
  const Tokenizer* tok = nullptr;
  std::string sparse = "off";  // the engine's --sparse mode
  int64_t vram_budget = -1;
  std::string hot_backend = "none";
  std::vector<WorkerDescription> workers;
};

class CoordinatorService final : public v1::Coordinator::Service {
 public:
  // `log_prefix` starts the line logged per request ("pi-launch").
  CoordinatorService(ServedModel served, int max_queue, std::string log_prefix);

  grpc::Status Generate(grpc::ServerContext* context, const v1::GenerateRequest* request,
                        grpc::ServerWriter<v1::GenerateReply>* writer) override;
  grpc::Status Tokenize(grpc::ServerContext* context, const v1::TokenizeRequest* request,
                        v1::TokenizeReply* reply) override;
  grpc::Status Health(grpc::ServerContext* context, const v1::HealthRequest* request,
                      v1::HealthReply* reply) override;
  grpc::Status Models(grpc::ServerContext* context, const v1::ModelsRequest* request,
                      v1::ModelsReply* reply) override;

 private:
  const ServedModel served_;
  Admission admission_;
  const std::string log_prefix_;
  std::atomic<uint64_t> next_request_{1};
  // The engine's worker failure counts, copied after each request (the
  // engine is only read by the request that holds it).
  std::atomic<int64_t> shard_failures_{0};
  std::atomic<int64_t> shard_recoveries_{0};
};

}  // namespace pi
