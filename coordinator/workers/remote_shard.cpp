#include "coordinator/workers/remote_shard.h"

#include <chrono>
#include <utility>

#include "common/format/fingerprint.h"
#include "common/transport/step_message.h"

namespace pi {

namespace {

constexpr size_t kMessageSlack = 1024;  // error messages, hello replies

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

RemoteShard::RemoteShard(std::unique_ptr<WorkerLink> link, const RemoteShardOptions& options)
    : link_(std::move(link)), options_(options) {
  latencies_us_.reserve(kMaxLatencies);
  overheads_us_.reserve(kMaxLatencies);
}

RemoteShard::~RemoteShard() {
  if (reopen_.joinable()) reopen_.join();
}

Status RemoteShard::Open(const LlamaModel& model, const std::vector<std::vector<int32_t>>& owned,
                         const std::vector<float>& gate_thresholds, bool gate_dots) {
  model_ = &model;
  owned_ = owned;
  gate_thresholds_ = gate_thresholds;
  gate_dots_ = gate_dots;
  n_embd_ = model.config.n_embd;
  return OpenSession(&resident_bytes_, &backend_);
}

Status RemoteShard::OpenSession(int64_t* resident_bytes, std::string* backend) {
  const LlamaConfig& c = model_->config;
  const int b = options_.max_batch;
  WorkerHello hello;
  hello.model_fingerprint = ModelFingerprint(*model_->file);
  hello.max_batch = b;
  hello.owned = &owned_;
  if (!gate_thresholds_.empty()) hello.gate_thresholds = &gate_thresholds_;
  hello.gate_dots = gate_dots_;
  const int64_t most = int64_t{b} * c.n_ff;
  return link_->Open(hello, StepRequestBytes(b, c.n_embd, most, gate_dots_ ? most : 0),
                     StepReplyBytes(b, c.n_embd) + kMessageSlack, resident_bytes, backend);
}

int64_t RemoteShard::neurons() const {
  int64_t n = 0;
  for (const auto& layer : owned_) n += static_cast<int64_t>(layer.size());
  return n;
}

void RemoteShard::Start(const ShardStep& step) {
  batch_ = step.batch;
  step_start_ns_ = NowNs();
  ++step_id_;
  start_error_ = Status::Ok();
  if (gate_dots_ && !step.gate_dots) {
    start_error_ =
        Status::Internal("%s: a step without gate dots in a --sparse teal session", name());
    return;
  }
  const int64_t n_ids = StepIdCount(step.batch, step.row_n);
  const std::vector<int32_t>& owned = owned_[step.layer];
  const int64_t n_gates = !gate_dots_ ? 0
                          : n_ids < 0 ? static_cast<int64_t>(owned.size()) * step.batch
                                      : n_ids;
  const size_t bytes = StepRequestBytes(step.batch, n_embd_, n_ids, n_gates);
  float* gates = WriteStepRequest(step_id_, step.layer, step.batch, n_embd_, step.x, step.ids,
                                  step.row_n, link_->request(bytes));
  if (gate_dots_) {  // each candidate's dot, row by row in the order of its ids
    const int64_t n_ff = model_->config.n_ff;
    const int32_t* ids = step.ids;
    for (int b = 0; b < step.batch; ++b) {
      const float* row = step.gate_dots + b * n_ff;
      const int64_t n = step.row_n ? step.row_n[b] : static_cast<int64_t>(owned.size());
      const int32_t* row_ids = step.row_n ? ids : owned.data();
      for (int64_t k = 0; k < n; ++k) *gates++ = row[row_ids[k]];
      if (step.row_n) ids += n;
    }
  }
  link_->Send(bytes);
}

Status RemoteShard::Wait(const float** y, int64_t* fired) {
  if (!start_error_.ok()) return start_error_;
  const uint8_t* reply = nullptr;
  size_t n = 0;
  PI_RETURN_IF_ERROR(link_->Await(options_.step_timeout_ms, "step", step_id_, &reply, &n));
  const float round_trip_us = static_cast<float>(NowNs() - step_start_ns_) * 1e-3f;
  int64_t worker_ns = 0;
  const Status parsed = ParseStepReply(reply, n, step_id_, batch_, n_embd_, y, fired, &worker_ns);
  if (!parsed.ok()) return parsed.WithContext(name());
  RecordStep(round_trip_us, worker_ns);
  return Status::Ok();
}

Status RemoteShard::Recover() {
  if (link_->reopens_in_background()) return RecoverInBackground();
  link_->Drop();  // stopped or wedged: it will not come back by itself
  ++restarts_;
  return OpenSession(&resident_bytes_, &backend_);
}

Status RemoteShard::RecoverInBackground() {
  std::lock_guard<std::mutex> lock(reopen_mu_);
  if (reopen_.joinable() && reopen_done_) {
    reopen_.join();
    if (reopen_status_.ok()) {
      // What the new session loaded, taken over on this thread (readers of
      // backend() never see it change under them).
      resident_bytes_ = reopened_resident_bytes_;
      backend_ = reopened_backend_;
      return Status::Ok();
    }
    // Failed: try again (below); the router backs off between calls.
  }
  if (!reopen_.joinable()) {
    reopen_done_ = false;
    ++restarts_;
    link_->Drop();
    reopen_ = std::thread([this] {
      const Status s = OpenSession(&reopened_resident_bytes_, &reopened_backend_);
      std::lock_guard<std::mutex> done_lock(reopen_mu_);
      reopen_status_ = s;
      reopen_done_ = true;
    });
  }
  return Status::Lost("%s: reconnecting%s%s", name(), reopen_status_.ok() ? "" : " (last try: ",
                      reopen_status_.ok() ? "" : (reopen_status_.message() + ")").c_str());
}

Status RemoteShard::Stop(int timeout_ms) {
  if (reopen_.joinable()) reopen_.join();
  return link_->Stop(timeout_ms);
}

void RemoteShard::RecordStep(float round_trip_us, int64_t worker_ns) {
  step_seconds_.Observe(round_trip_us * 1e-6);
  if (latencies_us_.size() == kMaxLatencies) return;
  latencies_us_.push_back(round_trip_us);
  overheads_us_.push_back(round_trip_us - static_cast<float>(worker_ns) * 1e-3f);
}

}  // namespace pi
