#include "coordinator/workers/device_worker.h"

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstring>
#include <string>

#include "common/format/fingerprint.h"

namespace pi {

namespace {

constexpr size_t kMessageSlack = 1024;  // hello replies

}  // namespace

Status DeviceWorker::Load(const LlamaModel& model, const DevicePlan& plan) {
  const LlamaConfig& c = model.config;
  if (plan.first_layer < 0 || plan.first_layer > plan.n_layers || plan.n_layers > c.n_layer ||
      plan.hot.size() != static_cast<size_t>(c.n_layer)) {
    return Status::Error("device plan: layers [%d, %d) and %zu hot lists for a model of %d layers",
                         plan.first_layer, plan.n_layers, plan.hot.size(), c.n_layer);
  }
  model_ = &model;
  plan_ = plan;
  layout_ = DeviceLayoutFor(c, plan);
  return Open();
}

Status DeviceWorker::Open() {
  stopped_ = false;
  step_id_ = 0;
  pending_ = false;
  WorkerHello hello;
  hello.model_fingerprint = ModelFingerprint(*model_->file);
  hello.device = &plan_;
  return link_->Open(hello, DeviceRequestBytes(layout_.n_embd),
                     DeviceReplyCapacity(layout_) + kMessageSlack, &resident_bytes_, &backend_);
}

Status DeviceWorker::Recover() {
  link_->Drop();  // stopped or wedged: it would not come back by itself
  ++restarts_;
  return Open();
}

void DeviceWorker::BeginToken(const float* h, int seq, int pos, bool dense) {
  uint8_t* slot = link_->request(DeviceRequestBytes(layout_.n_embd));
  WriteDeviceRequest(++step_id_, StepKind::kBegin, seq, pos, dense, 0, layout_.n_embd,
                     DeviceOut::kNothing, slot);
  memcpy(DeviceRequestPayload(slot), h, sizeof(float) * layout_.n_embd);
  pending_ = true;
}

Status DeviceWorker::RoundTrip(const uint8_t** reply, size_t* size) {
  pending_ = false;
  const auto start = std::chrono::steady_clock::now();
  link_->Send(DeviceRequestBytes(layout_.n_embd));
  PI_RETURN_IF_ERROR(link_->Await(step_timeout_ms_, "device step", step_id_, reply, size));
  step_seconds_.Observe(
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  return Status::Ok();
}

Status DeviceWorker::Exchange(DeviceOut out, DeviceReply* reply) {
  const int32_t o = static_cast<int32_t>(out);
  memcpy(link_->request(DeviceRequestBytes(layout_.n_embd)) + offsetof(StepRequestHeader, out), &o,
         sizeof o);
  const uint8_t* bytes = nullptr;
  size_t n = 0;
  PI_RETURN_IF_ERROR(RoundTrip(&bytes, &n));
  const Status parsed = ParseDeviceReply(bytes, n, step_id_, out, layout_, reply);
  return parsed.ok() ? parsed : parsed.WithContext(link_->name());
}

Status DeviceWorker::RunLayer(int il, ColdStep* cold) {
  *cold = ColdStep{};
  if (il < layout_.first_layer || il >= layout_.n_layers || !layout_.cold[il]) {
    return Status::Ok();
  }
  if (!pending_) return Status::Error("%s: layer %d outside a token", name(), il);
  DeviceReply reply;
  PI_RETURN_IF_ERROR(Exchange(DeviceOut::kNothing, &reply));
  if (reply.kind != StepReplyKind::kCold || reply.layer != il) {
    return Status::Error("%s answered with %s of layer %d, expected layer %d's cold part", name(),
                         reply.kind == StepReplyKind::kCold ? "the cold part" : "the end",
                         reply.layer, il);
  }
  // y goes straight into the next request's payload: the sum is written once.
  uint8_t* slot = link_->request(DeviceRequestBytes(layout_.n_embd));
  WriteDeviceRequest(++step_id_, StepKind::kResume, 0, 0, false, il, layout_.n_embd,
                     DeviceOut::kNothing, slot);
  float* y = DeviceRequestPayload(slot);
  memset(y, 0, sizeof(float) * layout_.n_embd);
  pending_ = true;
  cold->x = reply.x;
  cold->mask = reply.mask;
  cold->y = y;
  return Status::Ok();
}

Status DeviceWorker::FinishToken(float* h_out, float* logits, int64_t* hot_fired) {
  if (!pending_) return Status::Error("%s: a token's end without its start", name());
  const DeviceOut out = h_out ? DeviceOut::kH : logits ? DeviceOut::kLogits : DeviceOut::kNothing;
  DeviceReply reply;
  PI_RETURN_IF_ERROR(Exchange(out, &reply));
  if (reply.kind != StepReplyKind::kDone) {
    return Status::Error("%s answered with layer %d's cold part, expected the token's end", name(),
                         reply.layer);
  }
  if (h_out) memcpy(h_out, reply.out, sizeof(float) * layout_.n_embd);
  if (logits && !h_out) memcpy(logits, reply.out, sizeof(float) * layout_.n_vocab);
  if (hot_fired) *hot_fired = reply.hot_fired;
  return Status::Ok();
}

Status DeviceWorker::Head(const float* h, float* logits) {
  uint8_t* slot = link_->request(DeviceRequestBytes(layout_.n_embd));
  WriteDeviceRequest(++step_id_, StepKind::kHead, 0, 0, false, 0, layout_.n_embd,
                     DeviceOut::kLogits, slot);
  memcpy(DeviceRequestPayload(slot), h, sizeof(float) * layout_.n_embd);
  DeviceReply reply;
  PI_RETURN_IF_ERROR(Exchange(DeviceOut::kLogits, &reply));
  memcpy(logits, reply.out, sizeof(float) * layout_.n_vocab);
  return Status::Ok();
}

Status DeviceWorker::SeqStep(StepKind kind, int seq, int n, int dst, uint64_t key) {
  if (layout_.n_layers == layout_.first_layer) return Status::Ok();  // the head keeps no cache
  if (stopped_) return Status::Error("%s was stopped", name());
  WriteDeviceSeqRequest(++step_id_, kind, seq, n, dst, key, layout_.n_embd,
                        link_->request(DeviceRequestBytes(layout_.n_embd)));
  DeviceReply reply;
  return Exchange(DeviceOut::kNothing, &reply);
}

Status DeviceWorker::CopySeq(int src, int dst, int n) {
  PI_RETURN_IF_ERROR(CheckDeviceSeq(plan_, src, n, name()));
  PI_RETURN_IF_ERROR(CheckDeviceSeq(plan_, dst, n, name()));
  return src == dst ? Status::Ok() : SeqStep(StepKind::kSeqCopy, src, n, dst, 0);
}

Status DeviceWorker::SaveSeq(int seq, int n, uint64_t key) {
  PI_RETURN_IF_ERROR(CheckDeviceSeq(plan_, seq, n, name()));
  return SeqStep(StepKind::kSeqSave, seq, n, 0, key);
}

Status DeviceWorker::LoadSeq(uint64_t key, int seq, int n) {
  PI_RETURN_IF_ERROR(CheckDeviceSeq(plan_, seq, n, name()));
  return SeqStep(StepKind::kSeqLoad, seq, n, 0, key);
}

Status DeviceWorker::DropSeq(uint64_t key) {
  return SeqStep(StepKind::kSeqDrop, 0, 0, 0, key);
}

Status DeviceWorker::ReadKept(uint64_t key, int n, int64_t offset, int64_t size, uint8_t* out) {
  PI_RETURN_IF_ERROR(CheckDeviceSeq(plan_, 0, n, name()));
  if (layout_.n_layers == layout_.first_layer) return NothingKept(offset, size, name());
  if (stopped_) return Status::Error("%s was stopped", name());
  const int64_t chunk = DeviceKeptReadChunk(layout_);
  for (int64_t done = 0; done < size;) {
    const int64_t part = std::min(chunk, size - done);
    WriteDeviceKeptRequest(++step_id_, StepKind::kSeqRead, n, key, offset + done, part, nullptr,
                           layout_.n_embd, link_->request(DeviceRequestBytes(layout_.n_embd)));
    const uint8_t* reply = nullptr;
    size_t reply_size = 0;
    PI_RETURN_IF_ERROR(RoundTrip(&reply, &reply_size));
    const uint8_t* bytes = nullptr;
    const Status s = ParseDeviceKeptReply(reply, reply_size, step_id_, part, &bytes);
    if (!s.ok()) return s.WithContext(link_->name());
    memcpy(out + done, bytes, static_cast<size_t>(part));
    done += part;
  }
  return Status::Ok();
}

Status DeviceWorker::WriteKept(uint64_t key, int n, int64_t offset, const uint8_t* data,
                               int64_t size) {
  PI_RETURN_IF_ERROR(CheckDeviceSeq(plan_, 0, n, name()));
  if (layout_.n_layers == layout_.first_layer) return NothingKept(offset, size, name());
  if (stopped_) return Status::Error("%s was stopped", name());
  const int64_t chunk = DeviceKeptWriteChunk(layout_.n_embd);
  int64_t done = 0;
  do {  // (an empty range at 0 still makes the entry: a sequence of no positions)
    const int64_t part = std::min(chunk, size - done);
    WriteDeviceKeptRequest(++step_id_, StepKind::kSeqWrite, n, key, offset + done, part,
                           data + done, layout_.n_embd,
                           link_->request(DeviceRequestBytes(layout_.n_embd)));
    DeviceReply reply;
    const Status s = Exchange(DeviceOut::kNothing, &reply);
    if (!s.ok()) {
      // What this call began is not left half written (the worker drops a
      // first range that failed itself).
      if (offset == 0 && done > 0) (void)DropSeq(key);
      return s;
    }
    done += part;
  } while (done < size);
  return Status::Ok();
}

}  // namespace pi
