// DeviceLink over shared memory: a local pi-gpu-worker process
// (worker_process.h), the request written in place in its request slot and
// the reply read in place in its reply slot.
#include <memory>

#include "common/transport/hello_message.h"
#include "coordinator/device_link.h"

namespace pi {
namespace {

constexpr int kSpinUs = 50;  // a layer's hand-off on another core answers within this

class ShmDeviceLink : public DeviceLink {
 public:
  explicit ShmDeviceLink(const WorkerProcessOptions& o) : options_(o) {}

  const std::string& name() const override { return process_.name(); }
  const char* transport() const override { return "shm"; }
  Status Open(uint64_t model_fingerprint, const DevicePlan& plan, size_t request_bytes,
              size_t reply_bytes, int64_t* resident_bytes, std::string* backend) override {
    return process_.Spawn(options_, WriteDeviceHello(model_fingerprint, plan), request_bytes,
                          reply_bytes, resident_bytes, backend);
  }
  void Drop() override { process_.Kill(); }
  uint8_t* request() override { return process_.channel()->slot(ShmChannel::kRequest); }
  Status Exchange(size_t n, int timeout_ms, const char* what, uint64_t id, const uint8_t** reply,
                  size_t* reply_size) override {
    ShmChannel* ch = process_.channel();
    ch->Publish(ShmChannel::kRequest, n);
    PI_RETURN_IF_ERROR(process_.AwaitReply(timeout_ms, kSpinUs, what, id, reply_size));
    *reply = ch->slot(ShmChannel::kReply);
    return Status::Ok();
  }
  Status Stop(int timeout_ms) override { return process_.Stop(timeout_ms); }
  pid_t pid() const override { return process_.pid(); }

 private:
  WorkerProcessOptions options_;
  WorkerProcess process_;
};

}  // namespace

std::unique_ptr<DeviceLink> NewShmDeviceLink(const WorkerProcessOptions& options) {
  return std::make_unique<ShmDeviceLink>(options);
}

}  // namespace pi
