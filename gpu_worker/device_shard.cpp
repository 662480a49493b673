#include "gpu_worker/device_shard.h"

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstring>

#include "common/base/memory_limits.h"
#include "common/compute/predictor.h"
#include "common/format/fingerprint.h"
#include "common/model/kv_cache.h"
#include "common/shard/shard.h"
#include "common/transport/hello_message.h"
#include "gpu_worker/backend_factory.h"
#include "gpu_worker/host_device_backend.h"
#include "gpu_worker/layer_range_device.h"

namespace pi {

Status DeviceShard::InitFromHello(const uint8_t* hello, size_t size, const LlamaModel& model,
                                  int n_threads) {
  const LlamaConfig& c = model.config;
  DevicePlan plan;
  PI_RETURN_IF_ERROR(ParseDeviceHello(hello, size, ModelFingerprint(*model.file), &plan));
  if (plan.hot.size() != static_cast<size_t>(c.n_layer)) {
    return Status::Error("device hello: a plan of %zu layers for a model of %d", plan.hot.size(),
                         c.n_layer);
  }
  bool any_hot = false;
  for (const std::vector<int32_t>& h : plan.hot) any_hot = any_hot || !h.empty();
  if (any_hot) {
    PI_RETURN_IF_ERROR(ValidateHotNeurons(model, plan.hot, UsesGateThresholds(plan.mode)));
  }
  if (UsesGateThresholds(plan.mode)) PI_RETURN_IF_ERROR(CheckCatsSupport(model));
  if (plan.mode == SparseMode::kPredictor) PI_RETURN_IF_ERROR(CheckPredictorPresent(model));
  std::string why;
  const bool cuda = kind_ != "host" && CudaAvailable(&why);
  if (kind_ == "cuda" && !cuda) {
    return Status::Error("--ffn-backend cuda is not available: %s", why.c_str());
  }
  // On the host backend the KV caches are host memory: every sequence's, for
  // the range's layers (none for the head alone). (CUDA's are in VRAM: its
  // allocation says when they do not fit.)
  if (!cuda) {
    const int64_t per_seq =
        KvCache::BytesFor(plan.n_layers - plan.first_layer, plan.n_ctx, c.n_head_kv, c.head_dim,
                          plan.cache_type_k, plan.cache_type_v);
    PI_RETURN_IF_ERROR(CheckMemory(
        "the device's KV caches (" + std::to_string(plan.n_seq) + " sequences of " +
            std::to_string(plan.n_ctx) + " positions)",
        per_seq > INT64_MAX / std::max(plan.n_seq, 1) ? -1 : per_seq * std::max(plan.n_seq, 1)));
  }
  std::unique_ptr<DeviceBackend> device;
  if (cuda) {
    PI_RETURN_IF_ERROR(CreateDeviceBackend(&device));
  } else {
    device = std::make_unique<HostDeviceBackend>(n_threads);
  }
  // A range of a chain (--gpus) runs on the backend through a view of its layers.
  device = std::make_unique<LayerRangeDevice>(std::move(device), cuda ? 0 : n_threads);
  PI_RETURN_IF_ERROR(device->Load(model, plan));
  device_ = std::move(device);
  layout_ = DeviceLayoutFor(c, plan);
  in_token_ = false;
  waiting_layer_ = -1;
  return Status::Ok();
}

Status DeviceShard::RunLayers(uint64_t step_id, DeviceOut out, uint8_t* reply, size_t* reply_size) {
  uint8_t* payload = reply + sizeof(StepReplyHeader);
  const size_t embd_bytes = sizeof(float) * static_cast<size_t>(layout_.n_embd);
  while (next_layer_ < layout_.n_layers) {
    const int il = next_layer_++;
    PI_RETURN_IF_ERROR(device_->RunLayer(il, &cold_));
    if (!cold_.x) continue;
    if (!layout_.cold[il]) return Status::Internal("layer %d handed out a cold part it lacks", il);
    memcpy(payload, cold_.x, embd_bytes);
    const uint32_t words = cold_.mask ? static_cast<uint32_t>(layout_.mask_words()) : 0;
    if (words) memcpy(payload + embd_bytes, cold_.mask, sizeof(uint32_t) * words);
    waiting_layer_ = il;
    *reply_size =
        WriteReplyHeader(step_id, StepReplyKind::kCold, il, 0, 0, words, DeviceOut::kNothing,
                         embd_bytes + sizeof(uint32_t) * words, reply);
    return Status::Ok();
  }
  in_token_ = false;
  float* h = out == DeviceOut::kH ? reinterpret_cast<float*>(payload) : nullptr;
  float* logits = out == DeviceOut::kLogits ? reinterpret_cast<float*>(payload) : nullptr;
  int64_t fired = 0;
  PI_RETURN_IF_ERROR(device_->FinishToken(h, logits, &fired));
  const size_t bytes = h        ? embd_bytes
                       : logits ? sizeof(float) * static_cast<size_t>(layout_.n_vocab)
                                : 0;
  *reply_size = WriteReplyHeader(step_id, StepReplyKind::kDone, 0, fired, 0, 0, out, bytes, reply);
  return Status::Ok();
}

Status DeviceShard::Answer(const DeviceRequest& r, uint8_t* reply, size_t* reply_size) {
  switch (r.kind) {
    case StepKind::kFfn:
      break;  // ParseDeviceRequest takes only a device's kinds
    case StepKind::kBegin:
      // A token left unfinished (its coordinator gave up on it) is dropped.
      device_->BeginToken(r.payload, r.seq, r.pos, r.dense);
      in_token_ = true;
      next_layer_ = layout_.first_layer;
      waiting_layer_ = -1;
      return RunLayers(r.step_id, r.out, reply, reply_size);
    case StepKind::kResume:
      if (!in_token_ || r.layer != waiting_layer_) {
        return waiting_layer_ < 0
                   ? Status::Invalid("a cold sum for layer %d, and none is due", r.layer)
                   : Status::Invalid("a cold sum for layer %d, while layer %d's is due", r.layer,
                                     waiting_layer_);
      }
      memcpy(cold_.y, r.payload, sizeof(float) * static_cast<size_t>(layout_.n_embd));
      waiting_layer_ = -1;
      return RunLayers(r.step_id, r.out, reply, reply_size);
    case StepKind::kHead: {
      if (in_token_) return Status::Invalid("the head alone while a token's layers are under way");
      PI_RETURN_IF_ERROR(
          device_->Head(r.payload, reinterpret_cast<float*>(reply + sizeof(StepReplyHeader))));
      const size_t bytes = sizeof(float) * static_cast<size_t>(layout_.n_vocab);
      *reply_size = WriteReplyHeader(r.step_id, StepReplyKind::kDone, 0, 0, 0, 0,
                                     DeviceOut::kLogits, bytes, reply);
      return Status::Ok();
    }
    case StepKind::kSeqCopy:
    case StepKind::kSeqSave:
    case StepKind::kSeqLoad:
    case StepKind::kSeqDrop:
    case StepKind::kSeqWrite:
      PI_RETURN_IF_ERROR(SeqStep(r));
      *reply_size = WriteReplyHeader(r.step_id, StepReplyKind::kDone, 0, 0, 0, 0,
                                     DeviceOut::kNothing, 0, reply);
      return Status::Ok();
    case StepKind::kSeqRead:
      // (the size was checked against the chunk a reply holds)
      PI_RETURN_IF_ERROR(
          device_->ReadKept(r.key, r.n, r.offset, r.size, reply + sizeof(StepReplyHeader)));
      *reply_size = WriteReplyHeader(r.step_id, StepReplyKind::kDone, 0, 0, 0, 0,
                                     DeviceOut::kNothing, static_cast<size_t>(r.size), reply);
      return Status::Ok();
  }
  return Status::Invalid("unknown kind");
}

Status DeviceShard::SeqStep(const DeviceRequest& r) {
  // A token left unfinished (its coordinator gave up on it) is dropped, as
  // by a kBegin.
  in_token_ = false;
  waiting_layer_ = -1;
  switch (r.kind) {
    case StepKind::kSeqCopy:
      return device_->CopySeq(r.seq, r.dst, r.n);
    case StepKind::kSeqSave:
      return device_->SaveSeq(r.seq, r.n, r.key);
    case StepKind::kSeqLoad:
      return device_->LoadSeq(r.key, r.seq, r.n);
    case StepKind::kSeqDrop:
      return device_->DropSeq(r.key);
    case StepKind::kSeqWrite:
      return device_->WriteKept(r.key, r.n, r.offset, r.bytes, r.size);
    default:
      return Status::Invalid("not a sequence's kind");
  }
}

size_t DeviceShard::Handle(const uint8_t* request, size_t size, uint8_t* reply, size_t capacity) {
  const auto start = std::chrono::steady_clock::now();
  DeviceRequest r;
  Status s = ParseDeviceRequest(request, size, layout_, &r);
  size_t n = 0;
  if (s.ok()) s = Answer(r, reply, &n);
  if (!s.ok()) return WriteErrorReply(request, size, s, reply, capacity);
  const int64_t ns =
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start)
          .count();
  memcpy(reply + offsetof(StepReplyHeader, worker_ns), &ns, sizeof ns);
  return n;
}

}  // namespace pi
