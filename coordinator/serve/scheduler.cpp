#include "coordinator/serve/scheduler.h"

#include <utility>

namespace pi {

WorkerHealth ReadWorkerHealth(const Engine& engine) {
  WorkerHealth h;
  h.failures = engine.shard_failures();
  h.recoveries = engine.shard_recoveries();
  h.error = engine.shard_error();
  h.device_failures = engine.device_failures();
  h.device_recoveries = engine.device_recoveries();
  h.device_error = engine.device_error();
  return h;
}

void Scheduler::Submit(std::shared_ptr<RequestJob> job) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    pending_.push_back(std::move(job));
  }
  wake_.notify_all();
}

WorkerHealth Scheduler::worker_health() const {
  std::lock_guard<std::mutex> lock(health_mu_);
  return health_;
}

void Scheduler::StartLoop() {
  thread_ = std::thread([this] { Loop(); });
}

void Scheduler::StopLoop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Scheduler::SetHealth(const WorkerHealth& h) {
  std::lock_guard<std::mutex> lock(health_mu_);
  health_ = h;
}

void Scheduler::CancelPending() {
  for (auto& job : pending_) {
    if (!job->Start()) continue;  // its client left while it waited
    hooks_.started(job.get());
    job->result.stop_reason = "cancelled";
    hooks_.finished(job.get());
  }
  pending_.clear();
}

}  // namespace pi
