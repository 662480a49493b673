#include "coordinator/grpc_worker.h"

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <utility>

#include "common/format/fingerprint.h"
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

}  // namespace

GrpcWorker::GrpcWorker() = default;

GrpcWorker::~GrpcWorker() {
  if (reconnect_.joinable()) reconnect_.join();
}

Status GrpcWorker::Open(int timeout_ms, std::unique_ptr<GrpcSession>* out) {
  v1::HelloRequest hello;
  hello.set_protocol_version(kStepProtocolVersion);
  hello.set_model_fingerprint(ModelFingerprint(*model_->file));
  hello.set_max_batch(options_.max_batch);
  for (const std::vector<int32_t>& ids : owned_) {
    hello.add_owned()->mutable_ids()->Add(ids.begin(), ids.end());
  }
  return GrpcSession::Open(options_, hello, name_, timeout_ms, options_.hello_timeout_ms, out);
}

Status GrpcWorker::Connect(const GrpcWorkerOptions& options, const LlamaModel& model,
                           const std::vector<std::vector<int32_t>>& owned) {
  options_ = options;
  model_ = &model;
  owned_ = owned;
  n_embd_ = model.config.n_embd;
  name_ = "cpu worker " + options.address;
  PI_RETURN_IF_ERROR(Open(options.connect_timeout_ms, &session_));
  backend_ = session_->backend();
  resident_bytes_ = session_->resident_bytes();
  return Status::Ok();
}

void GrpcWorker::Start(const ShardStep& step) {
  batch_ = step.batch;
  ++step_id_;
  write_failed_ = false;
  if (!session_) return;
  step_start_ns_ = NowNs();
  std::string* m = session_->message();
  m->resize(StepRequestBytes(step.batch, n_embd_, StepIdCount(step.batch, step.row_n)));
  WriteStepRequest(step_id_, step.layer, step.batch, n_embd_, step.x, step.ids, step.row_n,
                   reinterpret_cast<uint8_t*>(m->data()));
  write_failed_ = !session_->Write();
}

Status GrpcWorker::Wait(const float** y, int64_t* fired) {
  if (!session_) return Status::Lost("%s is not connected", name_.c_str());
  const GrpcSession::Reply r = write_failed_ ? GrpcSession::Reply::kEnded
                                             : session_->Await(options_.step_timeout_ms, &reply_);
  if (r != GrpcSession::Reply::kReceived) {
    const std::string why = session_->Close();
    session_.reset();
    if (r == GrpcSession::Reply::kEnded)
      return Status::Lost("%s: lost at step %llu: %s", name_.c_str(),
                          static_cast<unsigned long long>(step_id_), why.c_str());
    return Status::Timeout("%s did not answer step %llu within %d ms", name_.c_str(),
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
      session_ = std::move(reconnected_);
      backend_ = session_->backend();
      resident_bytes_ = session_->resident_bytes();
      ++reconnects_;
      return Status::Ok();
    }
    // Failed: try again (below); the engine backs off between calls.
  }
  if (!reconnect_.joinable()) {
    reconnect_done_ = false;
    reconnect_ = std::thread([this] {
      std::unique_ptr<GrpcSession> s;
      const Status st = Open(options_.reconnect_timeout_ms, &s);
      std::lock_guard<std::mutex> done_lock(reconnect_mu_);
      reconnected_ = std::move(s);
      reconnect_status_ = st;
      reconnect_done_ = true;
    });
  }
  return Status::Lost("%s: reconnecting%s%s", name_.c_str(),
                      reconnect_status_.ok() ? "" : " (last try: ",
                      reconnect_status_.ok() ? "" : (reconnect_status_.message() + ")").c_str());
}

Status GrpcWorker::Stop(int timeout_ms) {
  if (reconnect_.joinable()) reconnect_.join();
  reconnected_.reset();
  if (!session_) return Status::Ok();
  const std::string why = session_->Finish(timeout_ms);
  session_.reset();
  return why == "the stream ended" ? Status::Ok()
                                   : Status::Error("%s: %s", name_.c_str(), why.c_str());
}

}  // namespace pi
