#include "common/transport/device_message.h"

#include <algorithm>
#include <cinttypes>
#include <cstring>

namespace pi {

DeviceLayout DeviceLayoutFor(const LlamaConfig& c, const DevicePlan& plan) {
  DeviceLayout l;
  l.n_layer = c.n_layer;
  l.first_layer = plan.first_layer;
  l.n_layers = plan.n_layers;
  l.output = plan.output;
  l.n_embd = c.n_embd;
  l.n_ff = c.n_ff;
  l.n_vocab = c.n_vocab;
  l.n_ctx = plan.n_ctx;
  l.n_seq = plan.n_seq;
  l.cold.assign(plan.n_layers, 0);
  for (int il = plan.first_layer; il < plan.n_layers; ++il) {
    l.cold[il] = static_cast<int>(plan.hot[il].size()) < c.n_ff;
  }
  return l;
}

size_t DeviceRequestBytes(int n_embd) {
  return sizeof(DeviceRequestHeader) + sizeof(float) * static_cast<size_t>(n_embd);
}

size_t DeviceReplyCapacity(const DeviceLayout& l) {
  const size_t cold = sizeof(float) * static_cast<size_t>(l.n_embd) +
                      sizeof(uint32_t) * static_cast<size_t>(l.mask_words());
  const size_t done = sizeof(float) * static_cast<size_t>(std::max(l.n_embd, l.n_vocab));
  return sizeof(DeviceReplyHeader) + std::max({cold, done, kMaxDeviceErrorBytes});
}

void WriteDeviceRequest(uint64_t step_id, DeviceOp op, int seq, int pos, int layer, int n_embd,
                        DeviceOut out, uint8_t* message) {
  const DeviceRequestHeader h{kDeviceRequestMagic,
                              kStepProtocolVersion,
                              step_id,
                              static_cast<int32_t>(op),
                              pos,
                              layer,
                              1,
                              n_embd,
                              static_cast<int32_t>(out),
                              seq,
                              0};
  memcpy(message, &h, sizeof h);
}

Status ParseDeviceRequest(const uint8_t* data, size_t size, const DeviceLayout& l,
                          DeviceRequest* out) {
  DeviceRequestHeader h;
  if (size < sizeof h) {
    return Status::Error("device request: %zu bytes, shorter than its %zu-byte header", size,
                         sizeof h);
  }
  memcpy(&h, data, sizeof h);
  if (h.magic != kDeviceRequestMagic) {
    return Status::Error("device request: bad magic 0x%08x", h.magic);
  }
  if (h.version != kStepProtocolVersion) {
    return Status::Error("device request: protocol version %u, this worker speaks %u", h.version,
                         kStepProtocolVersion);
  }
  const uint64_t id = h.step_id;
  if (h.op < static_cast<int32_t>(DeviceOp::kBegin) ||
      h.op > static_cast<int32_t>(DeviceOp::kHead)) {
    return Status::Error("device request %" PRIu64 ": unknown op %d", id, h.op);
  }
  if (h.batch != 1) {
    return Status::Error("device request %" PRIu64 ": batch %d (the device takes 1 row)", id,
                         h.batch);
  }
  if (h.n_embd != l.n_embd) {
    return Status::Error("device request %" PRIu64 ": n_embd %d, the model's is %d", id, h.n_embd,
                         l.n_embd);
  }
  if (size != DeviceRequestBytes(l.n_embd)) {
    return Status::Error("device request %" PRIu64 ": %zu bytes, expected %zu (1 x n_embd %d f32)",
                         id, size, DeviceRequestBytes(l.n_embd), l.n_embd);
  }
  const DeviceOp op = static_cast<DeviceOp>(h.op);
  if (op != DeviceOp::kHead) {
    if (h.out < static_cast<int32_t>(DeviceOut::kNothing) ||
        h.out > static_cast<int32_t>(DeviceOut::kLogits)) {
      return Status::Error("device request %" PRIu64 ": unknown output %d", id, h.out);
    }
    if (h.out == static_cast<int32_t>(DeviceOut::kLogits) && !l.output) {
      return Status::Error("device request %" PRIu64 ": logits asked of a device without the head",
                           id);
    }
    if (l.n_layers == l.first_layer) {
      return Status::Error("device request %" PRIu64 ": no layers on this device (the head only)",
                           id);
    }
  } else if (!l.output) {
    return Status::Error("device request %" PRIu64 ": the head is not on this device", id);
  }
  if (op == DeviceOp::kBegin && (h.seq < 0 || h.seq >= l.n_seq)) {
    return Status::Error("device request %" PRIu64 ": sequence %d is out of range [0, %d)", id,
                         h.seq, l.n_seq);
  }
  if (op == DeviceOp::kBegin && (h.pos < 0 || h.pos >= l.n_ctx)) {
    return Status::Error("device request %" PRIu64 ": position %d is outside the context [0, %d)",
                         id, h.pos, l.n_ctx);
  }
  if (op == DeviceOp::kResume && (h.layer < l.first_layer || h.layer >= l.n_layers)) {
    return Status::Error("device request %" PRIu64 ": layer %d is out of the device's [%d, %d)", id,
                         h.layer, l.first_layer, l.n_layers);
  }
  out->step_id = id;
  out->op = op;
  out->out = op == DeviceOp::kHead ? DeviceOut::kLogits : static_cast<DeviceOut>(h.out);
  out->seq = h.seq;
  out->pos = h.pos;
  out->layer = h.layer;
  out->payload = reinterpret_cast<const float*>(data + sizeof h);
  return Status::Ok();
}

size_t WriteDeviceReply(uint64_t step_id, DeviceReplyKind kind, int layer, int64_t hot_fired,
                        int64_t worker_ns, uint32_t mask_words, DeviceOut out, size_t payload_bytes,
                        uint8_t* message) {
  const DeviceReplyHeader h{kDeviceReplyMagic,
                            static_cast<uint32_t>(StepStatus::kOk),
                            step_id,
                            static_cast<int32_t>(kind),
                            layer,
                            hot_fired,
                            worker_ns,
                            mask_words,
                            static_cast<int32_t>(out),
                            payload_bytes};
  memcpy(message, &h, sizeof h);
  return sizeof h + payload_bytes;
}

size_t WriteDeviceError(uint64_t step_id, StepStatus status, const std::string& why,
                        uint8_t* message, size_t capacity) {
  const size_t n =
      std::min({why.size(), kMaxDeviceErrorBytes, capacity - sizeof(DeviceReplyHeader)});
  DeviceReplyHeader h{};
  h.magic = kDeviceReplyMagic;
  h.status = static_cast<uint32_t>(status);
  h.step_id = step_id;
  h.payload_bytes = n;
  memcpy(message, &h, sizeof h);
  memcpy(message + sizeof h, why.data(), n);
  return sizeof h + n;
}

Status ParseDeviceReply(const uint8_t* data, size_t size, uint64_t step_id, DeviceOut out,
                        const DeviceLayout& l, DeviceReply* reply) {
  DeviceReplyHeader h;
  if (size < sizeof h)
    return Status::Error("device reply: %zu bytes, shorter than its header", size);
  memcpy(&h, data, sizeof h);
  if (h.magic != kDeviceReplyMagic) return Status::Error("device reply: bad magic 0x%08x", h.magic);
  if (h.step_id != step_id) {
    return Status::Error("device reply for step %" PRIu64 " while waiting for %" PRIu64, h.step_id,
                         step_id);
  }
  if (h.payload_bytes != size - sizeof h) {
    return Status::Error("device reply: payload of %" PRIu64 " bytes in a %zu-byte message",
                         h.payload_bytes, size);
  }
  const uint8_t* payload = data + sizeof h;
  if (h.status != static_cast<uint32_t>(StepStatus::kOk)) {
    const std::string message(reinterpret_cast<const char*>(payload), h.payload_bytes);
    return Status::Error("the device refused step %" PRIu64 " (status %u): %s", step_id, h.status,
                         message.c_str());
  }
  const size_t embd_bytes = sizeof(float) * static_cast<size_t>(l.n_embd);
  *reply = DeviceReply{};
  reply->hot_fired = h.hot_fired;
  reply->worker_ns = h.worker_ns;
  if (h.kind == static_cast<int32_t>(DeviceReplyKind::kCold)) {
    if (h.layer < l.first_layer || h.layer >= l.n_layers || !l.cold[h.layer] ||
        (h.mask_words != 0 && h.mask_words != static_cast<uint32_t>(l.mask_words())) ||
        h.payload_bytes != embd_bytes + sizeof(uint32_t) * h.mask_words) {
      return Status::Error("device reply: a cold part of layer %d with %u mask words in %" PRIu64
                           " bytes",
                           h.layer, h.mask_words, h.payload_bytes);
    }
    reply->kind = DeviceReplyKind::kCold;
    reply->layer = h.layer;
    reply->x = reinterpret_cast<const float*>(payload);
    if (h.mask_words) reply->mask = reinterpret_cast<const uint32_t*>(payload + embd_bytes);
    return Status::Ok();
  }
  const size_t want = out == DeviceOut::kH        ? embd_bytes
                      : out == DeviceOut::kLogits ? sizeof(float) * static_cast<size_t>(l.n_vocab)
                                                  : 0;
  if (h.kind != static_cast<int32_t>(DeviceReplyKind::kDone) ||
      h.out != static_cast<int32_t>(out) || h.payload_bytes != want) {
    return Status::Error("device reply: kind %d, output %d in %" PRIu64
                         " bytes; expected the token's end with output %d (%zu bytes)",
                         h.kind, h.out, h.payload_bytes, static_cast<int>(out), want);
  }
  reply->kind = DeviceReplyKind::kDone;
  reply->out = want ? reinterpret_cast<const float*>(payload) : nullptr;
  return Status::Ok();
}

}  // namespace pi
