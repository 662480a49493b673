#include "common/transport/hello_message.h"

#include <algorithm>
#include <cinttypes>
#include <cstring>

namespace pi {

std::vector<uint8_t> WriteHello(uint64_t model_fingerprint, int max_batch,
                                const std::vector<std::vector<int32_t>>& owned) {
  HelloHeader h{kHelloMagic, kStepProtocolVersion, model_fingerprint,
                static_cast<int32_t>(owned.size()), max_batch};
  std::vector<uint8_t> out(sizeof h);
  memcpy(out.data(), &h, sizeof h);
  auto put = [&out](int32_t v) {
    const size_t at = out.size();
    out.resize(at + sizeof v);
    memcpy(out.data() + at, &v, sizeof v);
  };
  for (const std::vector<int32_t>& ids : owned) put(static_cast<int32_t>(ids.size()));
  for (const std::vector<int32_t>& ids : owned) {
    for (int32_t id : ids) put(id);
  }
  return out;
}

Status ParseHello(const uint8_t* data, size_t size, uint64_t model_fingerprint,
                  ShardLayout* layout) {
  HelloHeader h;
  if (size < sizeof h) return Status::Error("hello: %zu bytes, shorter than its header", size);
  memcpy(&h, data, sizeof h);
  if (h.magic != kHelloMagic) return Status::Error("hello: bad magic 0x%08x", h.magic);
  if (h.version != kStepProtocolVersion) {
    return Status::Error("hello: protocol version %u, this worker speaks %u", h.version,
                         kStepProtocolVersion);
  }
  if (h.model_fingerprint != model_fingerprint) {
    return Status::Error("hello: the coordinator's model (fingerprint %016" PRIx64
                         ") is not this worker's (%016" PRIx64 ")",
                         h.model_fingerprint, model_fingerprint);
  }
  const size_t words = (size - sizeof h) / sizeof(int32_t);
  if ((size - sizeof h) % sizeof(int32_t) != 0 || h.n_layer < 1 ||
      static_cast<size_t>(h.n_layer) > words || h.max_batch < 1 || h.max_batch > 4096) {
    return Status::Error("hello: %d layers, max batch %d in %zu bytes", h.n_layer, h.max_batch,
                         size);
  }
  const uint8_t* p = data + sizeof h;
  std::vector<int32_t> counts(h.n_layer);
  memcpy(counts.data(), p, sizeof(int32_t) * counts.size());
  size_t total = 0;
  for (int32_t c : counts) {
    if (c < 0) return Status::Error("hello: a negative neuron count (%d)", c);
    total += static_cast<size_t>(c);
  }
  if (total != words - counts.size()) {
    return Status::Error("hello: the counts add up to %zu ids, the message holds %zu", total,
                         words - counts.size());
  }
  p += sizeof(int32_t) * counts.size();
  layout->n_layer = h.n_layer;
  layout->max_batch = h.max_batch;
  layout->owned.assign(h.n_layer, {});
  for (int l = 0; l < h.n_layer; ++l) {
    if (counts[l] == 0) continue;  // (memcpy into an empty vector's null data is undefined)
    layout->owned[l].resize(counts[l]);
    memcpy(layout->owned[l].data(), p, sizeof(int32_t) * counts[l]);
    p += sizeof(int32_t) * counts[l];
  }
  return Status::Ok();
}

size_t WriteHelloReply(StepStatus status, int64_t resident_bytes, const char* backend,
                       const std::string& message, uint8_t* out, size_t capacity) {
  HelloReply r{};
  r.magic = kHelloReplyMagic;
  r.status = static_cast<uint32_t>(status);
  r.resident_bytes = resident_bytes;
  strncpy(r.backend, backend, sizeof r.backend - 1);
  const size_t n = std::min(message.size(), capacity - sizeof r);
  r.message_bytes = n;
  memcpy(out, &r, sizeof r);
  memcpy(out + sizeof r, message.data(), n);
  return sizeof r + n;
}

Status ParseHelloReply(const uint8_t* data, size_t size, int64_t* resident_bytes,
                       std::string* backend) {
  HelloReply r;
  if (size < sizeof r)
    return Status::Error("hello reply: %zu bytes, shorter than its header", size);
  memcpy(&r, data, sizeof r);
  if (r.magic != kHelloReplyMagic || r.message_bytes != size - sizeof r) {
    return Status::Error("hello reply: bad magic or size");
  }
  const std::string message(reinterpret_cast<const char*>(data + sizeof r), r.message_bytes);
  if (r.status != static_cast<uint32_t>(StepStatus::kOk)) {
    return Status::Error("the worker refused the hello: %s", message.c_str());
  }
  r.backend[sizeof r.backend - 1] = '\0';
  *backend = r.backend;
  *resident_bytes = r.resident_bytes;
  return Status::Ok();
}

}  // namespace pi
