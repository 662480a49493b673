#include "coordinator/grpc_worker.h"

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <utility>

#include "common/activation_stats.h"
#include "common/transport/auth_token.h"
#include "common/transport/step_message.h"
#include "proto/pi.grpc.pb.h"

namespace pi {
namespace {

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// What a failed Hello means, for the error.
std::string HelloFailure(const grpc::Status& s, int timeout_ms) {
  switch (s.error_code()) {
    case grpc::StatusCode::UNAUTHENTICATED:
      return "refused our token (--auth-token-file): " + s.error_message();
    case grpc::StatusCode::FAILED_PRECONDITION:
      return "refused the hello: " + s.error_message();
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return "no answer within " + std::to_string(timeout_ms) +
             " ms (is pi-cpu-worker --listen running there?)";
    default:
      return "unreachable: " + s.error_message() + " (status " +
             std::to_string(static_cast<int>(s.error_code())) + ")";
  }
}

}  // namespace

struct GrpcWorker::Session {
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<v1::Worker::Stub> stub;
  grpc::ClientContext context;
  std::unique_ptr<grpc::ClientReaderWriter<v1::StepFrame, v1::StepFrame>> stream;
  std::thread reader;
  std::mutex mu;
  std::condition_variable cv;
  std::string reply;  // the latest reply (the reader's slot)
  bool has_reply = false;
  bool ended = false;
  v1::StepFrame frame;  // the request being written (its buffer reused)
  std::string backend;
  int64_t resident_bytes = 0;

  void ReadReplies() {
    v1::StepFrame in;
    while (stream->Read(&in)) {
      std::lock_guard<std::mutex> lock(mu);
      reply.swap(*in.mutable_message());
      has_reply = true;
      cv.notify_one();
    }
    std::lock_guard<std::mutex> lock(mu);
    ended = true;
    cv.notify_one();
  }
};

GrpcWorker::GrpcWorker() = default;

GrpcWorker::~GrpcWorker() {
  if (reconnect_.joinable()) reconnect_.join();
  if (reconnected_) Close(&reconnected_);
  if (session_) Close(&session_);
}

Status GrpcWorker::Open(int timeout_ms, std::unique_ptr<Session>* out) {
  auto s = std::make_unique<Session>();
  grpc::ChannelArguments args;
  // Pings every second (answered or the connection is dropped within a
  // second more) notice a host that died silently; a new connection is
  // tried soon after a failure, not after C-core's default second.
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 1000);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 1000);
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 2000);
  args.SetMaxReceiveMessageSize(64 << 20);
  std::shared_ptr<grpc::ChannelCredentials> credentials = grpc::InsecureChannelCredentials();
  if (!options_.tls_ca.empty()) {
    grpc::SslCredentialsOptions ssl;
    ssl.pem_root_certs = options_.tls_ca;
    ssl.pem_cert_chain = options_.tls_cert;
    ssl.pem_private_key = options_.tls_key;
    credentials = grpc::SslCredentials(ssl);
  }
  s->channel = grpc::CreateCustomChannel(options_.address, credentials, args);
  s->stub = v1::Worker::NewStub(s->channel);

  v1::HelloRequest hello;
  hello.set_protocol_version(kStepProtocolVersion);
  hello.set_model_fingerprint(ModelFingerprint(*model_->file));
  hello.set_max_batch(options_.max_batch);
  for (const std::vector<int32_t>& ids : owned_) {
    hello.add_owned()->mutable_ids()->Add(ids.begin(), ids.end());
  }
  // Tried until the deadline while the worker is unreachable (it may still
  // be starting), so the error is the last real reason (refused, a TLS
  // handshake that failed), not just a deadline.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  v1::HelloReply reply;
  grpc::Status st;
  while (true) {
    grpc::ClientContext context;
    context.AddMetadata(kAuthMetadataKey, BearerValue(options_.auth_token));
    context.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::duration_cast<std::chrono::system_clock::duration>(
                             deadline - std::chrono::steady_clock::now()));
    st = s->stub->Hello(&context, hello, &reply);
    if (st.error_code() != grpc::StatusCode::UNAVAILABLE ||
        std::chrono::steady_clock::now() + std::chrono::milliseconds(100) >= deadline) {
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  if (!st.ok()) return Status::Error("%s %s", name_.c_str(), HelloFailure(st, timeout_ms).c_str());
  s->backend = reply.backend();
  s->resident_bytes = reply.resident_bytes();
  s->context.AddMetadata(kAuthMetadataKey, BearerValue(options_.auth_token));
  s->context.AddMetadata("pi-session", std::to_string(reply.session()));
  s->stream = s->stub->Steps(&s->context);
  Session* raw = s.get();
  s->reader = std::thread([raw] { raw->ReadReplies(); });
  *out = std::move(s);
  return Status::Ok();
}

std::string GrpcWorker::Close(std::unique_ptr<Session>* session) {
  Session* s = session->get();
  bool ended = false;
  {
    std::lock_guard<std::mutex> lock(s->mu);
    ended = s->ended;
  }
  // A stream that ended keeps the status it ended with (a cancel before
  // Finish would replace it).
  if (!ended) s->context.TryCancel();
  s->reader.join();
  const grpc::Status st = s->stream->Finish();
  session->reset();
  return st.ok() ? "the stream ended"
                 : st.error_message() + " (status " +
                       std::to_string(static_cast<int>(st.error_code())) + ")";
}

Status GrpcWorker::Connect(const GrpcWorkerOptions& options, const LlamaModel& model,
                           const std::vector<std::vector<int32_t>>& owned) {
  options_ = options;
  model_ = &model;
  owned_ = owned;
  n_embd_ = model.config.n_embd;
  name_ = "cpu worker " + options.address;
  PI_RETURN_IF_ERROR(Open(options.connect_timeout_ms, &session_));
  backend_ = session_->backend;
  resident_bytes_ = session_->resident_bytes;
  return Status::Ok();
}

void GrpcWorker::Start(const ShardStep& step) {
  batch_ = step.batch;
  ++step_id_;
  write_failed_ = false;
  if (!session_) return;
  step_start_ns_ = NowNs();
  std::string* m = session_->frame.mutable_message();
  m->resize(StepRequestBytes(step.batch, n_embd_, step.n_ids < 0 ? 0 : step.n_ids));
  WriteStepRequest(step_id_, step.layer, step.batch, n_embd_, step.x, step.ids, step.n_ids,
                   reinterpret_cast<uint8_t*>(m->data()));
  write_failed_ = !session_->stream->Write(session_->frame);
}

Status GrpcWorker::Wait(const float** y, int64_t* fired) {
  if (!session_) return Status::Error("%s is not connected", name_.c_str());
  Session* s = session_.get();
  bool answered = false;
  if (!write_failed_) {
    std::unique_lock<std::mutex> lock(s->mu);
    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::milliseconds(options_.step_timeout_ms);
    s->cv.wait_until(lock, deadline, [s] { return s->has_reply || s->ended; });
    if (s->has_reply) {
      s->has_reply = false;
      reply_.swap(s->reply);
      answered = true;
    }
  }
  if (!answered) {
    const bool ended = write_failed_ || s->ended;
    const std::string why = Close(&session_);
    if (ended)
      return Status::Error("%s: lost at step %llu: %s", name_.c_str(),
                           static_cast<unsigned long long>(step_id_), why.c_str());
    return Status::Error("%s did not answer step %llu within %d ms", name_.c_str(),
                         static_cast<unsigned long long>(step_id_), options_.step_timeout_ms);
  }
  int64_t worker_ns = 0;
  const Status parsed =
      ParseStepReply(reinterpret_cast<const uint8_t*>(reply_.data()), reply_.size(), step_id_,
                     batch_, n_embd_, y, fired, &worker_ns);
  if (!parsed.ok()) return parsed.WithContext(name_);
  RecordStep(static_cast<float>(NowNs() - step_start_ns_) * 1e-3f, worker_ns);
  return Status::Ok();
}

Status GrpcWorker::Recover() {
  std::lock_guard<std::mutex> lock(reconnect_mu_);
  if (reconnect_.joinable() && reconnect_done_) {
    reconnect_.join();
    if (reconnect_status_.ok()) {
      if (session_) Close(&session_);
      session_ = std::move(reconnected_);
      backend_ = session_->backend;
      resident_bytes_ = session_->resident_bytes;
      ++reconnects_;
      return Status::Ok();
    }
    // Failed: try again (below); the engine backs off between calls.
  }
  if (!reconnect_.joinable()) {
    reconnect_done_ = false;
    reconnect_ = std::thread([this] {
      std::unique_ptr<Session> s;
      const Status st = Open(options_.reconnect_timeout_ms, &s);
      std::lock_guard<std::mutex> done_lock(reconnect_mu_);
      reconnected_ = std::move(s);
      reconnect_status_ = st;
      reconnect_done_ = true;
    });
  }
  return Status::Error("%s: reconnecting%s%s", name_.c_str(),
                       reconnect_status_.ok() ? "" : " (last try: ",
                       reconnect_status_.ok() ? "" : (reconnect_status_.message() + ")").c_str());
}

Status GrpcWorker::Stop(int timeout_ms) {
  if (reconnect_.joinable()) reconnect_.join();
  if (reconnected_) Close(&reconnected_);
  if (!session_) return Status::Ok();
  Session* s = session_.get();
  s->stream->WritesDone();  // the worker's handler sees the end and returns OK
  {
    std::unique_lock<std::mutex> lock(s->mu);
    s->cv.wait_for(lock, std::chrono::milliseconds(timeout_ms), [s] { return s->ended; });
  }
  const std::string why = Close(&session_);
  return why == "the stream ended" ? Status::Ok()
                                   : Status::Error("%s: %s", name_.c_str(), why.c_str());
}

}  // namespace pi
