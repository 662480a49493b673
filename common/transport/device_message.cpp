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
  return sizeof(StepRequestHeader) + sizeof(float) * static_cast<size_t>(n_embd);
}

size_t DeviceReplyCapacity(const DeviceLayout& l) {
  const size_t cold = sizeof(float) * static_cast<size_t>(l.n_embd) +
                      sizeof(uint32_t) * static_cast<size_t>(l.mask_words());
  const size_t done = sizeof(float) * static_cast<size_t>(std::max(l.n_embd, l.n_vocab));
  return sizeof(StepReplyHeader) + std::max({cold, done, kMaxErrorBytes});
}

void WriteDeviceRequest(uint64_t step_id, StepKind kind, int seq, int pos, bool dense, int layer,
                        int n_embd, DeviceOut out, uint8_t* message) {
  StepRequestHeader h{};
  h.magic = kStepRequestMagic;
  h.version = kStepProtocolVersion;
  h.step_id = step_id;
  h.kind = static_cast<int32_t>(kind);
  h.layer = layer;
  h.batch = 1;
  h.n_embd = n_embd;
  h.seq = seq;
  h.pos = pos;
  h.out = static_cast<int32_t>(out);
  h.n_ids = kind == StepKind::kBegin && dense ? 1 : 0;
  memcpy(message, &h, sizeof h);
}

void WriteDeviceSeqRequest(uint64_t step_id, StepKind kind, int seq, int n, int dst, uint64_t key,
                           int n_embd, uint8_t* message) {
  WriteDeviceRequest(step_id, kind, seq, n, false, kind == StepKind::kSeqCopy ? dst : 0, n_embd,
                     DeviceOut::kNothing, message);
  uint8_t* payload = message + sizeof(StepRequestHeader);
  memset(payload, 0, sizeof(float) * static_cast<size_t>(n_embd));
  if (n_embd >= 2) memcpy(payload, &key, sizeof key);  // (every model's is larger)
}

namespace {

constexpr size_t kKeptFieldBytes = 3 * sizeof(int64_t);  // key, offset, size

bool IsKeptKind(StepKind kind) {
  return kind == StepKind::kSeqRead || kind == StepKind::kSeqWrite;
}

bool IsSeqKind(StepKind kind) {
  return kind == StepKind::kSeqCopy || kind == StepKind::kSeqSave || kind == StepKind::kSeqLoad ||
         kind == StepKind::kSeqDrop || IsKeptKind(kind);
}

}  // namespace

int64_t DeviceKeptReadChunk(const DeviceLayout& l) {
  return static_cast<int64_t>(sizeof(float)) * std::max(l.n_embd, l.n_vocab);
}

int64_t DeviceKeptWriteChunk(int n_embd) {
  return static_cast<int64_t>(sizeof(float)) * n_embd - static_cast<int64_t>(kKeptFieldBytes);
}

void WriteDeviceKeptRequest(uint64_t step_id, StepKind kind, int n, uint64_t key, int64_t offset,
                            int64_t size, const uint8_t* data, int n_embd, uint8_t* message) {
  WriteDeviceSeqRequest(step_id, kind, 0, n, 0, key, n_embd, message);
  uint8_t* payload = message + sizeof(StepRequestHeader);
  memcpy(payload + sizeof key, &offset, sizeof offset);
  memcpy(payload + sizeof key + sizeof offset, &size, sizeof size);
  if (kind == StepKind::kSeqWrite && size > 0) {
    memcpy(payload + kKeptFieldBytes, data, static_cast<size_t>(size));
  }
}

Status ParseDeviceKeptReply(const uint8_t* data, size_t size, uint64_t step_id, int64_t want,
                            const uint8_t** bytes) {
  StepReplyHeader h;
  PI_RETURN_IF_ERROR(ParseReplyHeader(data, size, step_id, &h, bytes));
  if (h.kind != static_cast<int32_t>(StepReplyKind::kDone) ||
      h.out != static_cast<int32_t>(DeviceOut::kNothing) ||
      h.payload_bytes != static_cast<uint64_t>(want)) {
    return Status::Invalid("device reply: kind %d, output %d in %" PRIu64
                           " bytes; expected %lld kept bytes",
                           h.kind, h.out, h.payload_bytes, static_cast<long long>(want));
  }
  return Status::Ok();
}

namespace {

// The fields of a kSeq* request (its out and n_ids checked).
Status CheckSeqFields(const StepRequestHeader& h, const DeviceLayout& l) {
  const uint64_t id = h.step_id;
  const StepKind kind = static_cast<StepKind>(h.kind);
  if (h.out != static_cast<int32_t>(DeviceOut::kNothing)) {
    return Status::Invalid("device request %" PRIu64 ": output %d for a sequence's cache", id,
                           h.out);
  }
  if (l.n_embd < 2 || (IsKeptKind(kind) && DeviceKeptWriteChunk(l.n_embd) < 1)) {
    return Status::Invalid("device request %" PRIu64 ": no room for its fields in %d floats", id,
                           l.n_embd);
  }
  if (kind == StepKind::kSeqDrop) return Status::Ok();
  if (h.seq < 0 || h.seq >= l.n_seq) {
    return Status::Invalid("device request %" PRIu64 ": sequence %d is out of range [0, %d)", id,
                           h.seq, l.n_seq);
  }
  if (h.pos < 0 || h.pos > l.n_ctx) {
    return Status::Invalid("device request %" PRIu64 ": %d positions of a context of %d", id, h.pos,
                           l.n_ctx);
  }
  if (kind == StepKind::kSeqCopy && (h.layer < 0 || h.layer >= l.n_seq || h.layer == h.seq)) {
    return Status::Invalid("device request %" PRIu64 ": copying sequence %d to %d of %d", id, h.seq,
                           h.layer, l.n_seq);
  }
  if (kind != StepKind::kSeqCopy && h.layer != 0) {
    return Status::Invalid("device request %" PRIu64 ": layer %d (0 for a sequence's cache)", id,
                           h.layer);
  }
  return Status::Ok();
}

// The kind-specific fields of a device request whose header and size were
// checked.
Status CheckDeviceFields(const StepRequestHeader& h, const DeviceLayout& l) {
  const uint64_t id = h.step_id;
  const StepKind kind = static_cast<StepKind>(h.kind);
  if (kind != StepKind::kHead) {
    if (h.out < static_cast<int32_t>(DeviceOut::kNothing) ||
        h.out > static_cast<int32_t>(DeviceOut::kLogits)) {
      return Status::Invalid("device request %" PRIu64 ": unknown output %d", id, h.out);
    }
    if (h.out == static_cast<int32_t>(DeviceOut::kLogits) && !l.output) {
      return Status::Invalid(
          "device request %" PRIu64 ": logits asked of a device without the head", id);
    }
    if (l.n_layers == l.first_layer) {
      return Status::Invalid("device request %" PRIu64 ": no layers on this device (the head only)",
                             id);
    }
  } else if (!l.output) {
    return Status::Invalid("device request %" PRIu64 ": the head is not on this device", id);
  }
  if (h.n_ids != 0 && (kind != StepKind::kBegin || h.n_ids != 1)) {
    return Status::Invalid("device request %" PRIu64 ": n_ids %d (0, or 1 for a dense kBegin)", id,
                           h.n_ids);
  }
  if (IsSeqKind(kind)) return CheckSeqFields(h, l);
  if (kind == StepKind::kBegin && (h.seq < 0 || h.seq >= l.n_seq)) {
    return Status::Invalid("device request %" PRIu64 ": sequence %d is out of range [0, %d)", id,
                           h.seq, l.n_seq);
  }
  if (kind == StepKind::kBegin && (h.pos < 0 || h.pos >= l.n_ctx)) {
    return Status::Invalid("device request %" PRIu64 ": position %d is outside the context [0, %d)",
                           id, h.pos, l.n_ctx);
  }
  if (kind == StepKind::kResume && (h.layer < l.first_layer || h.layer >= l.n_layers)) {
    return Status::Invalid("device request %" PRIu64 ": layer %d is out of the device's [%d, %d)",
                           id, h.layer, l.first_layer, l.n_layers);
  }
  return Status::Ok();
}

}  // namespace

Status ParseDeviceRequest(const uint8_t* data, size_t size, const DeviceLayout& l,
                          DeviceRequest* out) {
  StepRequestHeader h;
  PI_RETURN_IF_ERROR(ParseStepHeader(data, size, &h));
  const uint64_t id = h.step_id;
  if (h.kind < static_cast<int32_t>(StepKind::kBegin) ||
      h.kind > static_cast<int32_t>(StepKind::kSeqWrite)) {
    return Status::Invalid("device request %" PRIu64 ": kind %d, not a device's (%d to %d)", id,
                           h.kind, static_cast<int>(StepKind::kBegin),
                           static_cast<int>(StepKind::kSeqWrite));
  }
  if (h.batch != 1) {
    return Status::Invalid("device request %" PRIu64 ": batch %d (the device takes 1 row)", id,
                           h.batch);
  }
  if (h.n_embd != l.n_embd) {
    return Status::Invalid("device request %" PRIu64 ": n_embd %d, the model's is %d", id, h.n_embd,
                           l.n_embd);
  }
  if (size != DeviceRequestBytes(l.n_embd)) {
    return Status::Invalid("device request %" PRIu64
                           ": %zu bytes, expected %zu (1 x n_embd %d f32)",
                           id, size, DeviceRequestBytes(l.n_embd), l.n_embd);
  }
  PI_RETURN_IF_ERROR(CheckDeviceFields(h, l));
  const StepKind kind = static_cast<StepKind>(h.kind);
  out->step_id = id;
  out->kind = kind;
  out->out = kind == StepKind::kHead ? DeviceOut::kLogits : static_cast<DeviceOut>(h.out);
  out->seq = h.seq;
  out->pos = h.pos;
  out->layer = h.layer;
  out->dense = h.n_ids == 1;
  out->payload = reinterpret_cast<const float*>(data + sizeof h);
  if (IsSeqKind(kind)) {
    out->n = h.pos;
    out->dst = h.layer;
    memcpy(&out->key, data + sizeof h, sizeof out->key);
  }
  if (IsKeptKind(kind)) {
    const uint8_t* fields = data + sizeof h + sizeof out->key;
    memcpy(&out->offset, fields, sizeof out->offset);
    memcpy(&out->size, fields + sizeof out->offset, sizeof out->size);
    const int64_t most =
        kind == StepKind::kSeqRead ? DeviceKeptReadChunk(l) : DeviceKeptWriteChunk(l.n_embd);
    if (out->offset < 0 || out->size < 0 || out->size > most ||
        out->offset > INT64_MAX - out->size) {
      return Status::Invalid("device request %" PRIu64 ": kept bytes [%" PRId64 ", +%" PRId64
                             ") (at most %" PRId64 " a message)",
                             id, out->offset, out->size, most);
    }
    out->bytes = data + sizeof h + kKeptFieldBytes;
  }
  return Status::Ok();
}

Status ParseDeviceReply(const uint8_t* data, size_t size, uint64_t step_id, DeviceOut out,
                        const DeviceLayout& l, DeviceReply* reply) {
  StepReplyHeader h;
  const uint8_t* payload = nullptr;
  PI_RETURN_IF_ERROR(ParseReplyHeader(data, size, step_id, &h, &payload));
  const size_t embd_bytes = sizeof(float) * static_cast<size_t>(l.n_embd);
  *reply = DeviceReply{};
  reply->hot_fired = h.fired;
  reply->worker_ns = h.worker_ns;
  if (h.kind == static_cast<int32_t>(StepReplyKind::kCold)) {
    if (h.layer < l.first_layer || h.layer >= l.n_layers || !l.cold[h.layer] ||
        (h.mask_words != 0 && h.mask_words != static_cast<uint32_t>(l.mask_words())) ||
        h.payload_bytes != embd_bytes + sizeof(uint32_t) * h.mask_words) {
      return Status::Invalid("device reply: a cold part of layer %d with %u mask words in %" PRIu64
                             " bytes",
                             h.layer, h.mask_words, h.payload_bytes);
    }
    reply->kind = StepReplyKind::kCold;
    reply->layer = h.layer;
    reply->x = reinterpret_cast<const float*>(payload);
    if (h.mask_words) reply->mask = reinterpret_cast<const uint32_t*>(payload + embd_bytes);
    return Status::Ok();
  }
  const size_t want = out == DeviceOut::kH        ? embd_bytes
                      : out == DeviceOut::kLogits ? sizeof(float) * static_cast<size_t>(l.n_vocab)
                                                  : 0;
  if (h.kind != static_cast<int32_t>(StepReplyKind::kDone) || h.out != static_cast<int32_t>(out) ||
      h.payload_bytes != want) {
    return Status::Invalid("device reply: kind %d, output %d in %" PRIu64
                           " bytes; expected the token's end with output %d (%zu bytes)",
                           h.kind, h.out, h.payload_bytes, static_cast<int>(out), want);
  }
  reply->kind = StepReplyKind::kDone;
  reply->out = want ? reinterpret_cast<const float*>(payload) : nullptr;
  return Status::Ok();
}

}  // namespace pi
