#include "coordinator/shm_worker.h"

#include <chrono>
#include <string>

#include "common/format/fingerprint.h"
#include "common/transport/hello_message.h"
#include "common/transport/step_message.h"

namespace pi {

namespace {

constexpr int kSpinUs = 50;             // a worker on another core answers a step well within this
constexpr size_t kMessageSlack = 1024;  // error messages, hello replies

}  // namespace

Status ShmWorker::Start(const ShmWorkerOptions& o, const LlamaModel& model,
                        const std::vector<std::vector<int32_t>>& owned) {
  options_ = o;
  model_ = &model;
  owned_ = owned;
  step_timeout_ms_ = o.step_timeout_ms;
  return Spawn();
}

Status ShmWorker::Recover() {
  process_.Kill();  // stopped or wedged: it will not come back by itself
  ++restarts_;
  return Spawn();
}

Status ShmWorker::Spawn() {
  const ShmWorkerOptions& o = options_;
  const LlamaConfig& c = model_->config;
  n_embd_ = c.n_embd;
  step_id_ = 0;
  return process_.Spawn(o, WriteHello(ModelFingerprint(*model_->file), o.max_batch, owned_),
                        StepRequestBytes(o.max_batch, c.n_embd, int64_t{o.max_batch} * c.n_ff),
                        StepReplyBytes(o.max_batch, c.n_embd) + kMessageSlack, &resident_bytes_,
                        &backend_);
}

void ShmWorker::StartStep(int layer, int batch, const float* x, const int32_t* ids,
                          const int32_t* row_n) {
  batch_ = batch;
  step_start_ = std::chrono::steady_clock::now();
  ShmChannel* ch = process_.channel();
  WriteStepRequest(++step_id_, layer, batch, n_embd_, x, ids, row_n,
                   ch->slot(ShmChannel::kRequest));
  ch->Publish(ShmChannel::kRequest, StepRequestBytes(batch, n_embd_, StepIdCount(batch, row_n)));
}

Status ShmWorker::WaitStep(int timeout_ms, const float** y, int64_t* fired, int64_t* worker_ns) {
  size_t n = 0;
  PI_RETURN_IF_ERROR(process_.AwaitReply(timeout_ms, kSpinUs, "step", step_id_, &n));
  const float round_trip_us =
      std::chrono::duration<float, std::micro>(std::chrono::steady_clock::now() - step_start_)
          .count();
  int64_t ns = 0;
  PI_RETURN_IF_ERROR(ParseStepReply(process_.channel()->slot(ShmChannel::kReply), n, step_id_,
                                    batch_, n_embd_, y, fired, &ns));
  RecordStep(round_trip_us, ns);
  if (worker_ns) *worker_ns = ns;
  return Status::Ok();
}

Status ShmWorker::Stop(int timeout_ms) {
  return process_.Stop(timeout_ms);
}

}  // namespace pi
