#include "coordinator/serial_scheduler.h"

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

SerialScheduler::SerialScheduler(Engine* engine, const Tokenizer* tok, SchedulerHooks hooks)
    : engine_(engine), tok_(tok), hooks_(std::move(hooks)), thread_([this] { Loop(); }) {}

SerialScheduler::~SerialScheduler() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

void SerialScheduler::Submit(std::shared_ptr<RequestJob> job) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    pending_.push_back(std::move(job));
  }
  wake_.notify_all();
}

WorkerHealth SerialScheduler::worker_health() const {
  std::lock_guard<std::mutex> lock(health_mu_);
  return health_;
}

void SerialScheduler::Loop() {
  while (true) {
    std::shared_ptr<RequestJob> job;
    {
      std::unique_lock<std::mutex> lock(mu_);
      wake_.wait(lock, [&] { return stopping_ || !pending_.empty(); });
      if (stopping_) break;
      job = std::move(pending_.front());
      pending_.pop_front();
    }
    if (job->Start()) RunJob(job.get());  // else its client left while it waited
  }
  // Stopping: the jobs still waiting end as cancelled.
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& job : pending_) {
    if (!job->Start()) continue;
    hooks_.started(job.get());
    job->result.stop_reason = "cancelled";
    hooks_.finished(job.get());
  }
  pending_.clear();
}

void SerialScheduler::RunJob(RequestJob* job) {
  hooks_.started(job);
  engine_->Reset();
  Generate(
      engine_, *tok_, &job->sampler, job->request,
      [&](int32_t id, const std::string& text) {
        if (stopping_) return false;
        return hooks_.token(job, id, text);
      },
      &job->result);
  {
    std::lock_guard<std::mutex> lock(health_mu_);
    health_ = ReadWorkerHealth(*engine_);
  }
  hooks_.finished(job);
}

}  // namespace pi
