#include "coordinator/workers/grpc_link.h"

#include <string>
#include <vector>

#include "common/transport/step_message.h"

namespace pi {
namespace {

v1::HelloRequest HelloRequestOf(const WorkerHello& h) {
  v1::HelloRequest hello;
  hello.set_protocol_version(kStepProtocolVersion);
  hello.set_model_fingerprint(h.model_fingerprint);
  hello.set_max_batch(h.device ? 1 : h.max_batch);
  for (const std::vector<int32_t>& ids : h.device ? h.device->hot : *h.owned) {
    hello.add_owned()->mutable_ids()->Add(ids.begin(), ids.end());
  }
  if (h.gate_thresholds) {
    hello.mutable_gate_thresholds()->Add(h.gate_thresholds->begin(), h.gate_thresholds->end());
  }
  hello.set_gate_dots(h.gate_dots);
  if (const DevicePlan* plan = h.device) {
    v1::DevicePlan* d = hello.mutable_device();
    d->set_first_layer(plan->first_layer);
    d->set_n_layers(plan->n_layers);
    d->set_output(plan->output);
    d->set_n_ctx(plan->n_ctx);
    d->set_cache_type_k(static_cast<int32_t>(plan->cache_type_k));
    d->set_cache_type_v(static_cast<int32_t>(plan->cache_type_v));
    d->set_mode(static_cast<int32_t>(plan->mode));
    d->set_threshold(plan->threshold);
    d->set_n_seq(plan->n_seq);
    for (const std::vector<float>& t : plan->input_thresholds) {
      d->mutable_input_thresholds()->Add(t.begin(), t.end());
    }
    // --sparse cats: the device's gate thresholds ride the shard's field.
    hello.mutable_gate_thresholds()->Add(plan->gate_thresholds.begin(),
                                         plan->gate_thresholds.end());
  }
  return hello;
}

class GrpcLink : public WorkerLink {
 public:
  explicit GrpcLink(const GrpcLinkOptions& o) : options_(o), name_(o.role + " " + o.address) {}

  const std::string& name() const override { return name_; }
  const char* transport() const override { return "grpc"; }
  bool reopens_in_background() const override { return true; }

  Status Open(const WorkerHello& hello, size_t request_bytes, size_t, int64_t* resident_bytes,
              std::string* backend) override {
    session_.reset();
    const int timeout = opened_ ? options_.reconnect_timeout_ms : options_.connect_timeout_ms;
    PI_RETURN_IF_ERROR(GrpcSession::Open(options_, HelloRequestOf(hello), name_, timeout,
                                         options_.hello_timeout_ms, &session_));
    opened_ = true;
    session_->message()->reserve(request_bytes);
    *resident_bytes = session_->resident_bytes();
    *backend = session_->backend();
    return Status::Ok();
  }
  void Drop() override { session_.reset(); }

  uint8_t* request(size_t bytes) override {
    // Within the capacity reserved at Open: no allocation per message.
    std::string* m = session_ ? session_->message() : &scratch_;
    m->resize(bytes);
    return reinterpret_cast<uint8_t*>(m->data());
  }
  void Send(size_t bytes) override {
    write_failed_ = !session_;
    if (!session_) return;
    session_->message()->resize(bytes);
    write_failed_ = !session_->Write();
  }
  Status Await(int timeout_ms, const char* what, uint64_t id, const uint8_t** reply,
               size_t* reply_size) override {
    if (!session_) return Status::Lost("%s is not connected", name_.c_str());
    const GrpcSession::Reply r =
        write_failed_ ? GrpcSession::Reply::kEnded : session_->Await(timeout_ms, &reply_);
    if (r != GrpcSession::Reply::kReceived) {
      const std::string why = session_->Close();
      session_.reset();
      if (r == GrpcSession::Reply::kEnded) {
        return Status::Lost("%s: lost at %s %llu: %s", name_.c_str(), what,
                            static_cast<unsigned long long>(id), why.c_str());
      }
      return Status::Timeout("%s did not answer %s %llu within %d ms", name_.c_str(), what,
                             static_cast<unsigned long long>(id), timeout_ms);
    }
    *reply = reinterpret_cast<const uint8_t*>(reply_.data());
    *reply_size = reply_.size();
    return Status::Ok();
  }

  Status Stop(int timeout_ms) override {
    if (!session_) return Status::Ok();
    const std::string why = session_->Finish(timeout_ms);
    session_.reset();
    return why == "the stream ended" ? Status::Ok()
                                     : Status::Error("%s: %s", name_.c_str(), why.c_str());
  }

 private:
  GrpcLinkOptions options_;
  std::string name_;
  std::unique_ptr<GrpcSession> session_;  // null while lost
  bool opened_ = false;
  bool write_failed_ = false;
  std::string reply_;    // the last reply (swapped out of the reader's slot)
  std::string scratch_;  // where a request is written while no session is open
};

}  // namespace

std::unique_ptr<WorkerLink> NewGrpcLink(const GrpcLinkOptions& options) {
  return std::make_unique<GrpcLink>(options);
}

}  // namespace pi
