#include "common/transport/grpc_serve.h"

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <memory>
#include <mutex>
#include <thread>

#include "common/transport/auth_token.h"
#include "common/transport/grpc_metadata.h"
#include "common/transport/h2_guard.h"
#include "common/transport/hello_message.h"
#include "common/transport/listen_address.h"
#include "common/transport/step_message.h"
#include "proto/pi.grpc.pb.h"

namespace pi {
namespace {

constexpr char kSessionKey[] = "pi-session";
// The largest message a worker takes: a batch's step (its rows' inputs and
// candidate ids), or a hello's neuron lists.
constexpr int kMaxWorkerMessage = 64 << 20;

// A coordinator's session: its shard, and the one Steps stream that may use
// it at a time (a second is refused: two streams on one shard would run its
// Handle at once).
struct Session {
  uint64_t id = 0;
  std::unique_ptr<WorkerShard> shard;
  std::atomic<int64_t> steps{0};
  std::mutex mu;
  std::condition_variable released;       // the stream let go of the shard
  grpc::ServerContext* stream = nullptr;  // the live Steps stream's call
  bool replaced = false;                  // a newer hello took over
};

// TLS calls: the token checked from the call's metadata before any handler
// runs or a message is taken (gRPC runs this processor on secure channels
// only; on plaintext the handlers check it first thing, see Authenticate).
class TokenProcessor final : public grpc::AuthMetadataProcessor {
 public:
  explicit TokenProcessor(std::string token) : token_(std::move(token)) {}
  bool IsBlocking() const override { return false; }
  grpc::Status Process(const InputMetadata& metadata, grpc::AuthContext*, OutputMetadata*,
                       OutputMetadata*) override {
    const auto it = metadata.find(kAuthMetadataKey);
    const std::string presented =
        it == metadata.end() ? "" : std::string(it->second.data(), it->second.size());
    if (BearerMatches(presented, token_)) return grpc::Status::OK;
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                        presented.empty() ? "no token (authorization: Bearer ...)" : "wrong token");
  }

 private:
  const std::string token_;
};

class WorkerService final : public v1::Worker::Service {
 public:
  WorkerService(const LlamaModel& model, const GrpcServeOptions& options,
                const WorkerShardFactory& make_shard)
      : model_(model), options_(options), make_shard_(make_shard) {}

  bool shutdown_requested() const { return shutdown_; }

  grpc::Status Hello(grpc::ServerContext* context, const v1::HelloRequest* in,
                     v1::HelloReply* reply) override {
    grpc::Status auth = Authenticate(*context, "Hello");
    if (!auth.ok()) return auth;
    if (in->protocol_version() != kStepProtocolVersion) {
      return Refuse(*context, "hello: protocol version " + std::to_string(in->protocol_version()) +
                                  ", this worker speaks " + std::to_string(kStepProtocolVersion));
    }
    // The same checks as the shared-memory hello, on the same bytes.
    std::vector<std::vector<int32_t>> owned;
    for (const v1::TokenIds& layer : in->owned())
      owned.emplace_back(layer.ids().begin(), layer.ids().end());
    std::vector<uint8_t> hello;
    if (in->has_device()) {
      const v1::DevicePlan& d = in->device();
      DevicePlan plan;
      plan.first_layer = d.first_layer();
      plan.n_layers = d.n_layers();
      plan.output = d.output();
      plan.n_ctx = d.n_ctx();
      plan.cache_type_k = static_cast<DType>(d.cache_type_k());
      plan.cache_type_v = static_cast<DType>(d.cache_type_v());
      plan.mode = static_cast<SparseMode>(d.mode());
      plan.threshold = d.threshold();
      plan.n_seq = d.n_seq();  // 0 when unset: refused by the hello's check
      plan.hot = std::move(owned);
      plan.gate_thresholds.assign(in->gate_thresholds().begin(), in->gate_thresholds().end());
      // Three equal lists, else all in the first: the hello's count check refuses it.
      const auto& inputs = d.input_thresholds();
      const int per = inputs.size() % kProjectionInputs == 0 ? inputs.size() / kProjectionInputs
                                                             : inputs.size();
      for (int k = 0, at = 0; k < kProjectionInputs && at < inputs.size(); ++k, at += per) {
        plan.input_thresholds[k].assign(inputs.begin() + at, inputs.begin() + at + per);
      }
      hello = WriteDeviceHello(in->model_fingerprint(), plan);  // its scalars checked there
    } else {
      hello =
          WriteHello(in->model_fingerprint(), in->max_batch(), owned,
                     {in->gate_thresholds().begin(), in->gate_thresholds().end()}, in->gate_dots());
    }
    // One hello at a time, and the session it replaces gone first: its
    // stream cancelled and its shard freed before this one's is made, so the
    // memory check sees what this worker really has free.
    std::lock_guard<std::mutex> hello_lock(hello_mu_);
    std::shared_ptr<Session> old;
    {
      std::lock_guard<std::mutex> lock(mu_);
      old = std::move(session_);
    }
    if (old) Retire(old.get());
    auto session = std::make_shared<Session>();
    session->shard = make_shard_();
    const Status s =
        session->shard->InitFromHello(hello.data(), hello.size(), model_, options_.n_threads);
    if (!s.ok()) return Refuse(*context, s.message());
    {
      std::lock_guard<std::mutex> lock(mu_);
      session->id = ++last_session_;
      session_ = session;
    }
    fprintf(stderr, "%s: session %llu from %s: %.1f MiB of %s\n", options_.log_prefix.c_str(),
            static_cast<unsigned long long>(session->id), context->peer().c_str(),
            session->shard->resident_bytes() / 1048576.0, session->shard->what());
    reply->set_session(session->id);
    reply->set_backend(session->shard->backend());
    reply->set_resident_bytes(session->shard->resident_bytes());
    reply->set_n_threads(options_.n_threads);
    return grpc::Status::OK;
  }

  grpc::Status Steps(grpc::ServerContext* context,
                     grpc::ServerReaderWriter<v1::StepFrame, v1::StepFrame>* stream) override {
    grpc::Status auth = Authenticate(*context, "Steps");
    if (!auth.ok()) return auth;
    const std::string named = ClientMetadata(*context, kSessionKey);
    std::shared_ptr<Session> session = Current();
    if (!session || named != std::to_string(session->id)) {
      return grpc::Status(
          grpc::StatusCode::FAILED_PRECONDITION,
          "no session " + named + " here (the worker restarted?): send Hello first");
    }
    {
      std::lock_guard<std::mutex> lock(session->mu);
      if (session->replaced) {
        return grpc::Status(grpc::StatusCode::ABORTED, "replaced by a newer session");
      }
      if (session->stream) {
        fprintf(stderr, "%s: refused a second stream for session %s from %s\n",
                options_.log_prefix.c_str(), named.c_str(), context->peer().c_str());
        return grpc::Status(grpc::StatusCode::ALREADY_EXISTS,
                            "session " + named + " already has a live stream");
      }
      session->stream = context;
    }
    const grpc::Status status = ServeSteps(session.get(), stream);
    {
      std::lock_guard<std::mutex> lock(session->mu);
      session->stream = nullptr;
    }
    session->released.notify_all();
    return status;
  }

  grpc::Status Health(grpc::ServerContext* context, const v1::HealthRequest*,
                      v1::WorkerHealthReply* reply) override {
    grpc::Status auth = Authenticate(*context, "Health");
    if (!auth.ok()) return auth;
    std::shared_ptr<Session> session = Current();
    reply->set_status(session ? "serving" : "idle");
    reply->set_session(session ? session->id : 0);
    reply->set_steps(session ? session->steps.load() : 0);
    return grpc::Status::OK;
  }

  grpc::Status Shutdown(grpc::ServerContext* context, const v1::ShutdownRequest*,
                        v1::ShutdownReply*) override {
    grpc::Status auth = Authenticate(*context, "Shutdown");
    if (!auth.ok()) return auth;
    fprintf(stderr, "%s: shutdown asked by %s\n", options_.log_prefix.c_str(),
            context->peer().c_str());
    shutdown_ = true;
    return grpc::Status::OK;
  }

 private:
  // The stream's steps, on the session's shard (this stream alone uses it).
  grpc::Status ServeSteps(Session* session,
                          grpc::ServerReaderWriter<v1::StepFrame, v1::StepFrame>* stream) {
    const size_t capacity = session->shard->reply_capacity();
    v1::StepFrame in, out;
    while (stream->Read(&in)) {
      {
        std::lock_guard<std::mutex> lock(session->mu);
        if (session->replaced) {
          return grpc::Status(grpc::StatusCode::ABORTED, "replaced by a newer session");
        }
      }
      const std::string& request = in.message();
      std::string* reply = out.mutable_message();
      reply->resize(capacity);
      const size_t n =
          session->shard->Handle(reinterpret_cast<const uint8_t*>(request.data()), request.size(),
                                 reinterpret_cast<uint8_t*>(reply->data()), capacity);
      reply->resize(n);
      ++session->steps;
      if (!stream->Write(out)) break;
    }
    return grpc::Status::OK;
  }

  // Ends a replaced session: its stream cancelled, waited for (at most 5 s:
  // a stream blocked in a write ends when its call is cancelled), its shard
  // freed.
  void Retire(Session* old) {
    std::unique_lock<std::mutex> lock(old->mu);
    old->replaced = true;
    if (old->stream) old->stream->TryCancel();
    old->released.wait_for(lock, std::chrono::seconds(5), [&] { return !old->stream; });
    if (!old->stream) old->shard.reset();
  }

  grpc::Status Authenticate(const grpc::ServerContext& context, const char* call) {
    const std::string presented = ClientMetadata(context, kAuthMetadataKey);
    if (BearerMatches(presented, options_.auth_token)) return grpc::Status::OK;
    fprintf(stderr, "%s: refused %s from %s: %s token\n", options_.log_prefix.c_str(), call,
            context.peer().c_str(), presented.empty() ? "no" : "a wrong");
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                        presented.empty() ? "no token (authorization: Bearer ...)" : "wrong token");
  }

  grpc::Status Refuse(const grpc::ServerContext& context, const std::string& why) {
    fprintf(stderr, "%s: refused a hello from %s: %s\n", options_.log_prefix.c_str(),
            context.peer().c_str(), why.c_str());
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, why);
  }

  std::shared_ptr<Session> Current() {
    std::lock_guard<std::mutex> lock(mu_);
    return session_;
  }

  const LlamaModel& model_;
  const GrpcServeOptions& options_;
  const WorkerShardFactory& make_shard_;
  std::mutex hello_mu_;  // one hello at a time
  std::mutex mu_;
  std::shared_ptr<Session> session_;
  uint64_t last_session_ = 0;
  std::atomic<bool> shutdown_{false};
};

std::shared_ptr<grpc::ServerCredentials> TlsCredentials(const GrpcServeOptions& o) {
  grpc::SslServerCredentialsOptions ssl(
      o.tls_ca.empty() ? GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE
                       : GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  ssl.pem_root_certs = o.tls_ca;
  ssl.pem_key_cert_pairs.push_back({o.tls_key, o.tls_cert});
  std::shared_ptr<grpc::ServerCredentials> credentials = grpc::SslServerCredentials(ssl);
  credentials->SetAuthMetadataProcessor(std::make_shared<TokenProcessor>(o.auth_token));
  return credentials;
}

}  // namespace

Status ServeGrpc(const GrpcServeOptions& options, const LlamaModel& model,
                 const WorkerShardFactory& make_shard,
                 const std::function<void(const std::string&)>& on_listening) {
  std::string host;
  int requested_port = 0;
  PI_RETURN_IF_ERROR(SplitHostPort(options.listen, "--listen", &host, &requested_port));
  if (options.auth_token.empty())
    return Status::Error("a worker needs a token (--auth-token-file)");
  WorkerService service(model, options, make_shard);
  grpc::ServerBuilder builder;
  // Plaintext: gRPC on a private Unix socket behind an H2Guard on the
  // address (connection caps; stream, reset and SETTINGS budgets). TLS
  // carries HTTP/2 the guard cannot read: gRPC listens itself, and the
  // token is checked before a call starts (TokenProcessor).
  const bool tls = !options.tls_cert.empty();
  H2Guard guard;
  std::string backend = options.listen;
  if (!tls) PI_RETURN_IF_ERROR(guard.MakeBackendAddress(&backend));
  int port = 0;
  builder.AddListeningPort(
      backend, tls ? TlsCredentials(options) : grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&service);
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  // A coordinator needs a call or two at once: few threads and streams.
  grpc::ResourceQuota quota(options.log_prefix);
  quota.SetMaxThreads(16);
  builder.SetResourceQuota(quota);
  builder.AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS, 4);
  builder.AddChannelArgument(GRPC_ARG_SERVER_HANDSHAKE_TIMEOUT_MS, 10000);
  // The coordinator pings every second to notice a dead host: allow it.
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 500);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PING_STRIKES, 0);
  builder.SetMaxReceiveMessageSize(kMaxWorkerMessage);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (!server || port == 0) {
    return Status::Error("cannot listen on %s (in use, or not an address of this host)",
                         options.listen.c_str());
  }
  std::string bound = host + ":" + std::to_string(port);
  if (!tls) {
    H2GuardOptions g;
    // A coordinator holds one connection (two while it reconnects).
    g.max_connections = 8;
    g.max_connections_per_client = 4;
    g.max_unanswered_bytes = kMaxWorkerMessage + (1 << 20);
    g.log_prefix = options.log_prefix;
    if (!guard.Start(options.listen, g, &bound).ok()) {
      server->Shutdown(std::chrono::system_clock::now());
      return Status::Error("cannot listen on %s (in use, or not an address of this host)",
                           options.listen.c_str());
    }
  }
  if (on_listening) on_listening(bound);
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  const timespec poll = {0, 100 * 1000 * 1000};
  while (!service.shutdown_requested()) {
    const int sig = sigtimedwait(&set, nullptr, &poll);
    if (sig > 0) {
      fprintf(stderr, "%s: %s: shutting down\n", options.log_prefix.c_str(),
              sig == SIGINT ? "SIGINT" : "SIGTERM");
      break;
    }
  }
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::milliseconds(1000));
  server->Wait();
  guard.Shutdown();
  return Status::Ok();
}

}  // namespace pi
