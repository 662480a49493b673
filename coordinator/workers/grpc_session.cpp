#include "coordinator/workers/grpc_session.h"

#include <grpcpp/grpcpp.h>

#include <chrono>

#include "common/transport/auth_token.h"

namespace pi {
namespace {

// What a failed Hello means, for the error.
std::string HelloFailure(const grpc::Status& s, int timeout_ms) {
  switch (s.error_code()) {
    case grpc::StatusCode::UNAUTHENTICATED:
      return "refused our token (--auth-token-file): " + s.error_message();
    case grpc::StatusCode::FAILED_PRECONDITION:
      return "refused the hello: " + s.error_message();
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return "did not answer its hello within " + std::to_string(timeout_ms) + " ms";
    default:
      return "unreachable: " + s.error_message() + " (status " +
             std::to_string(static_cast<int>(s.error_code())) + ")";
  }
}

}  // namespace

Status GrpcSession::Open(const GrpcEndpoint& e, const v1::HelloRequest& hello,
                         const std::string& name, int connect_timeout_ms, int hello_timeout_ms,
                         std::unique_ptr<GrpcSession>* out) {
  std::unique_ptr<GrpcSession> s(new GrpcSession());
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
  if (!e.tls_ca.empty()) {
    grpc::SslCredentialsOptions ssl;
    ssl.pem_root_certs = e.tls_ca;
    ssl.pem_cert_chain = e.tls_cert;
    ssl.pem_private_key = e.tls_key;
    credentials = grpc::SslCredentials(ssl);
  }
  s->channel_ = grpc::CreateCustomChannel(e.address, credentials, args);
  s->stub_ = v1::Worker::NewStub(s->channel_);
  const auto system_deadline = [](int ms) {
    return std::chrono::system_clock::now() + std::chrono::milliseconds(ms);
  };
  v1::HelloReply reply;
  grpc::Status st;
  if (!s->channel_->WaitForConnected(system_deadline(connect_timeout_ms))) {
    // Why it could not connect (refused, a TLS handshake that failed): a
    // Hello that fails at once says what the channel last saw.
    grpc::ClientContext context;
    context.set_deadline(system_deadline(100));
    st = s->stub_->Hello(&context, hello, &reply);
    return Status::Error(
        "%s unreachable within %d ms (is the worker's --listen running there?): %s", name.c_str(),
        connect_timeout_ms, st.error_message().c_str());
  }
  grpc::ClientContext context;
  context.AddMetadata(kAuthMetadataKey, BearerValue(e.auth_token));
  context.set_deadline(system_deadline(hello_timeout_ms));
  st = s->stub_->Hello(&context, hello, &reply);
  if (!st.ok()) {
    return Status::Error("%s %s", name.c_str(), HelloFailure(st, hello_timeout_ms).c_str());
  }
  s->backend_ = reply.backend();
  s->resident_bytes_ = reply.resident_bytes();
  s->context_.AddMetadata(kAuthMetadataKey, BearerValue(e.auth_token));
  s->context_.AddMetadata("pi-session", std::to_string(reply.session()));
  s->stream_ = s->stub_->Steps(&s->context_);
  GrpcSession* raw = s.get();
  s->reader_ = std::thread([raw] { raw->ReadReplies(); });
  *out = std::move(s);
  return Status::Ok();
}

GrpcSession::~GrpcSession() {
  Close();
}

void GrpcSession::ReadReplies() {
  v1::StepFrame in;
  while (stream_->Read(&in)) {
    std::lock_guard<std::mutex> lock(mu_);
    reply_.swap(*in.mutable_message());
    has_reply_ = true;
    cv_.notify_one();
  }
  std::lock_guard<std::mutex> lock(mu_);
  ended_ = true;
  cv_.notify_one();
}

GrpcSession::Reply GrpcSession::Await(int timeout_ms, std::string* reply) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait_until(lock, std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms),
                 [this] { return has_reply_ || ended_; });
  if (has_reply_) {
    has_reply_ = false;
    reply->swap(reply_);
    return Reply::kReceived;
  }
  return ended_ ? Reply::kEnded : Reply::kTimedOut;
}

std::string GrpcSession::Close() {
  if (closed_) return close_status_;
  closed_ = true;
  if (!stream_) return close_status_ = "no stream was opened";  // Open failed before it
  bool ended = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    ended = ended_;
  }
  // A stream that ended keeps the status it ended with (a cancel before
  // Finish would replace it).
  if (!ended) context_.TryCancel();
  reader_.join();
  const grpc::Status st = stream_->Finish();
  close_status_ = st.ok() ? "the stream ended"
                          : st.error_message() + " (status " +
                                std::to_string(static_cast<int>(st.error_code())) + ")";
  return close_status_;
}

std::string GrpcSession::Finish(int timeout_ms) {
  if (!closed_) {
    stream_->WritesDone();
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, std::chrono::milliseconds(timeout_ms), [this] { return ended_; });
  }
  return Close();
}

}  // namespace pi
