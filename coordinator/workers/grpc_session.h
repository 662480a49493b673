// GrpcSession: one session with a remote worker (proto/pi.proto's Worker
// service) — the channel (keepalive pings every second notice a host that
// died silently), the Hello, and the one long-lived Steps stream, with a
// reader thread taking replies off it so a wait can be bounded. The gRPC
// WorkerLink (grpc_link.h) runs each session on one.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "common/base/status.h"
#include "proto/pi.grpc.pb.h"

namespace pi {

// Where a remote worker is and how to reach it.
struct GrpcEndpoint {
  std::string address;  // host:port
  std::string auth_token;
  // TLS (PEM contents): a CA makes the connection TLS, checking the
  // worker's certificate; a certificate and key are presented to a worker
  // that requires them.
  std::string tls_ca, tls_cert, tls_key;
};

class GrpcSession {
 public:
  // Connects (tried until `connect_timeout_ms` while the worker is
  // unreachable: it may still be starting; a stopped one never answers),
  // then says hello — given `hello_timeout_ms`, since the worker loads its
  // shard before it answers (a GPU worker's weights take seconds) — then
  // opens the Steps stream. The error names `name` and says why
  // (unreachable, wrong token, hello refused).
  static Status Open(const GrpcEndpoint& endpoint, const v1::HelloRequest& hello,
                     const std::string& name, int connect_timeout_ms, int hello_timeout_ms,
                     std::unique_ptr<GrpcSession>* out);
  ~GrpcSession();  // Close()
  GrpcSession(const GrpcSession&) = delete;
  GrpcSession& operator=(const GrpcSession&) = delete;

  // The request buffer (reused: no allocation per message), and its write;
  // false: the stream is broken.
  std::string* message() { return frame_.mutable_message(); }
  bool Write() { return stream_->Write(frame_); }

  enum class Reply { kReceived, kEnded, kTimedOut };
  // Waits at most `timeout_ms` for the next reply (swapped into *reply).
  Reply Await(int timeout_ms, std::string* reply);

  // Ends the stream (cancelling it unless it ended); the status gRPC gave,
  // as text ("the stream ended" when it ended cleanly). Idempotent.
  std::string Close();
  // Half-closes (the worker's handler sees the end and returns), waits at
  // most `timeout_ms` for the stream to end, then Close().
  std::string Finish(int timeout_ms);

  const std::string& backend() const { return backend_; }
  int64_t resident_bytes() const { return resident_bytes_; }

 private:
  GrpcSession() = default;
  void ReadReplies();

  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Worker::Stub> stub_;
  grpc::ClientContext context_;
  std::unique_ptr<grpc::ClientReaderWriter<v1::StepFrame, v1::StepFrame>> stream_;
  std::thread reader_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::string reply_;  // the latest reply (the reader's slot)
  bool has_reply_ = false;
  bool ended_ = false;
  bool closed_ = false;
  std::string close_status_;
  v1::StepFrame frame_;  // the request being written
  std::string backend_;
  int64_t resident_bytes_ = 0;
};

}  // namespace pi
