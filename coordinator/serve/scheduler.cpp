#include "coordinator/serve/scheduler.h"

#include <utility>

#include "common/base/progress.h"

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

void Scheduler::Refuse(RequestJob* job, std::string why) {
  hooks_.started(job);
  job->result.stop_reason = "error";
  job->result.error = std::move(why);
  job->result.client_error = true;
  hooks_.finished(job);
}

void Scheduler::RefuseSeq(RequestJob* job, int n_seq) {
  Refuse(job, "id_slot " + std::to_string(job->request.seq) + ": this server's slots are 0 to " +
                  std::to_string(n_seq - 1) + " (-np)");
}

void Scheduler::RefuseDraft(RequestJob* job) {
  Refuse(job, NoDraftModel().message());
}

void Scheduler::RunSlotOp(Engine* engine, PromptStore* store, RequestJob* job,
                          std::vector<int32_t>* cached, std::vector<float>* logits) {
  hooks_.started(job);
  const GenerationRequest& r = job->request;
  GenerationResult& g = job->result;
  const double start = NowSeconds();
  // A restore keeps what the sequence held in the store (as a request
  // taking it would); an erase is asked to forget it.
  if (r.slot_op == SlotOp::kRestore && store && !cached->empty()) {
    (void)store->Save(engine, r.seq, *cached, logits->empty() ? nullptr : logits->data());
  }
  Status s;
  // (Both schedulers take a slot action's sequence before they run it.)
  const bool on_a_sequence = r.seq >= 0 && r.seq < engine->n_seq();
  switch (on_a_sequence ? r.slot_op : SlotOp::kNone) {
    case SlotOp::kSave:
      s = SaveSlot(engine, r.seq, *cached, logits->empty() ? nullptr : logits->data(), r.slot_path,
                   &g.slot_bytes);
      g.slot_tokens = static_cast<int64_t>(cached->size());
      break;
    case SlotOp::kRestore:
      s = RestoreSlot(engine, r.seq, r.slot_path, cached, logits, &g.slot_bytes);
      g.slot_tokens = static_cast<int64_t>(cached->size());
      break;
    case SlotOp::kErase:
      g.slot_tokens = static_cast<int64_t>(cached->size());
      engine->KeepSeq(r.seq, 0);
      cached->clear();
      logits->clear();
      break;
    case SlotOp::kNone:
      s = Status::Internal("slot action %s on sequence %d", SlotOpName(r.slot_op), r.seq);
      break;
  }
  g.prompt_s = NowSeconds() - start;
  if (!s.ok()) {
    g.stop_reason = "error";
    g.error = s.message();
    // (The client named the file: the server's directory stays its own.)
    const std::string name = r.slot_path.substr(r.slot_path.rfind('/') + 1);
    for (size_t at;
         !r.slot_path.empty() && (at = g.error.find(r.slot_path)) != std::string::npos;) {
      g.error.replace(at, r.slot_path.size(), name);
    }
    g.client_error = s.code() != Status::Code::kIo && s.code() != Status::Code::kInternal;
    g.slot_tokens = 0;
  }
  hooks_.finished(job);
}

}  // namespace pi
