// WorkerLink over shared memory: a local worker process (worker_process.h),
// the request written in place in its request slot and the reply read in
// place in its reply slot — the one copy each way.
#include <memory>

#include "common/transport/hello_message.h"
#include "coordinator/workers/worker_link.h"

namespace pi {
namespace {

// A worker on another core answers a step well within this; past it the
// wait sleeps (a core shared with the worker is never spun on).
constexpr int kSpinUs = 50;

class ShmLink : public WorkerLink {
 public:
  explicit ShmLink(const WorkerProcessOptions& o) : options_(o) {}

  const std::string& name() const override { return process_.name(); }
  const char* transport() const override { return "shm"; }
  pid_t pid() const override { return process_.pid(); }

  Status Open(const WorkerHello& h, size_t request_bytes, size_t reply_bytes,
              int64_t* resident_bytes, std::string* backend) override {
    const std::vector<uint8_t> hello =
        h.device ? WriteDeviceHello(h.model_fingerprint, *h.device)
                 : WriteHello(h.model_fingerprint, h.max_batch, *h.owned,
                              h.gate_thresholds ? *h.gate_thresholds : std::vector<float>(),
                              h.gate_dots);
    return process_.Spawn(options_, hello, request_bytes, reply_bytes, resident_bytes, backend);
  }
  void Drop() override { process_.Kill(); }

  uint8_t* request(size_t) override { return process_.channel()->slot(ShmChannel::kRequest); }
  void Send(size_t bytes) override { process_.channel()->Publish(ShmChannel::kRequest, bytes); }
  Status Await(int timeout_ms, const char* what, uint64_t id, const uint8_t** reply,
               size_t* reply_size) override {
    PI_RETURN_IF_ERROR(process_.AwaitReply(timeout_ms, kSpinUs, what, id, reply_size));
    *reply = process_.channel()->slot(ShmChannel::kReply);
    return Status::Ok();
  }

  Status Stop(int timeout_ms) override { return process_.Stop(timeout_ms); }

 private:
  WorkerProcessOptions options_;
  WorkerProcess process_;
};

}  // namespace

std::unique_ptr<WorkerLink> NewShmLink(const WorkerProcessOptions& options) {
  return std::make_unique<ShmLink>(options);
}

}  // namespace pi
