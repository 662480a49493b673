#include "common/transport/hello_message.h"

#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstring>

#include "common/compute/sparse_mode.h"

namespace pi {

namespace {

void Put(std::vector<uint8_t>* out, const void* data, size_t n) {
  if (n == 0) return;  // (data may be null: memcpy from null is undefined)
  const size_t at = out->size();
  out->resize(at + n);
  memcpy(out->data() + at, data, n);
}

std::vector<uint8_t> WriteHelloOfKind(uint32_t magic, uint64_t model_fingerprint, int max_batch,
                                      const void* prefix, size_t prefix_bytes,
                                      const std::vector<std::vector<int32_t>>& owned,
                                      const std::vector<float>& thresholds, int32_t flags) {
  const HelloHeader h{magic,
                      kStepProtocolVersion,
                      model_fingerprint,
                      static_cast<int32_t>(owned.size()),
                      max_batch,
                      static_cast<int32_t>(thresholds.size()),
                      flags};
  std::vector<uint8_t> out;
  Put(&out, &h, sizeof h);
  Put(&out, prefix, prefix_bytes);
  for (const std::vector<int32_t>& ids : owned) {
    const int32_t n = static_cast<int32_t>(ids.size());
    Put(&out, &n, sizeof n);
  }
  Put(&out, thresholds.data(), sizeof(float) * thresholds.size());
  for (const std::vector<int32_t>& ids : owned) Put(&out, ids.data(), sizeof(int32_t) * ids.size());
  return out;
}

// Checks the header (magic, version, fingerprint; flags among `flags_ok`),
// copies the `prefix_bytes` after it into `prefix`, and reads the id lists
// and thresholds behind them.
Status ParseHelloOfKind(const uint8_t* data, size_t size, uint32_t magic, int32_t flags_ok,
                        uint64_t model_fingerprint, void* prefix, size_t prefix_bytes,
                        HelloHeader* header, std::vector<std::vector<int32_t>>* owned,
                        std::vector<float>* thresholds) {
  HelloHeader h;
  if (size < sizeof h + prefix_bytes) {
    return Status::Error("hello: %zu bytes, shorter than its header", size);
  }
  memcpy(&h, data, sizeof h);
  const int thresholds_per_layer = (h.flags & kHelloInputThresholds) ? 1 + kProjectionInputs : 1;
  if (h.magic != magic) {
    return Status::Error("hello: magic 0x%08x, expected 0x%08x%s", h.magic, magic,
                         h.magic == kHelloMagic         ? " (an FFN shard's hello)"
                         : h.magic == kDeviceHelloMagic ? " (a device's hello)"
                                                        : "");
  }
  if (h.version != kStepProtocolVersion) {
    return Status::Error("hello: protocol version %u, this worker speaks %u", h.version,
                         kStepProtocolVersion);
  }
  if (h.model_fingerprint != model_fingerprint) {
    return Status::Error("hello: the coordinator's model (fingerprint %016" PRIx64
                         ") is not this worker's (%016" PRIx64 ")",
                         h.model_fingerprint, model_fingerprint);
  }
  if (prefix_bytes > 0) memcpy(prefix, data + sizeof h, prefix_bytes);
  const size_t body = size - sizeof h - prefix_bytes;
  const size_t words = body / sizeof(int32_t);
  if (body % sizeof(int32_t) != 0 || h.n_layer < 1 || static_cast<size_t>(h.n_layer) > words ||
      h.max_batch < 1 || h.max_batch > 4096 ||
      (h.n_thresholds != 0 && h.n_thresholds != int64_t{h.n_layer} * thresholds_per_layer) ||
      (h.flags & ~flags_ok) != 0 || static_cast<size_t>(h.n_layer) + h.n_thresholds > words) {
    return Status::Error("hello: %d layers, max batch %d, %d %s thresholds, flags %d in %zu bytes",
                         h.n_layer, h.max_batch, h.n_thresholds,
                         thresholds_per_layer > 1 ? "gate and input" : "gate", h.flags, size);
  }
  const size_t fixed = static_cast<size_t>(h.n_layer) + static_cast<size_t>(h.n_thresholds);
  const uint8_t* p = data + sizeof h + prefix_bytes;
  std::vector<int32_t> counts(h.n_layer);
  memcpy(counts.data(), p, sizeof(int32_t) * counts.size());
  size_t total = 0;
  for (int32_t c : counts) {
    if (c < 0) return Status::Error("hello: a negative neuron count (%d)", c);
    total += static_cast<size_t>(c);
  }
  if (total != words - fixed) {
    return Status::Error("hello: the counts add up to %zu ids, the message holds %zu", total,
                         words - fixed);
  }
  p += sizeof(int32_t) * counts.size();
  thresholds->assign(h.n_thresholds, 0.0f);
  if (h.n_thresholds > 0) memcpy(thresholds->data(), p, sizeof(float) * h.n_thresholds);
  p += sizeof(float) * h.n_thresholds;
  owned->assign(h.n_layer, {});
  for (int l = 0; l < h.n_layer; ++l) {
    if (counts[l] == 0) continue;  // (memcpy into an empty vector's null data is undefined)
    (*owned)[l].resize(counts[l]);
    memcpy((*owned)[l].data(), p, sizeof(int32_t) * counts[l]);
    p += sizeof(int32_t) * counts[l];
  }
  *header = h;
  return Status::Ok();
}

}  // namespace

uint32_t HelloMagic(const uint8_t* data, size_t size) {
  uint32_t magic = 0;
  if (size >= sizeof magic) memcpy(&magic, data, sizeof magic);
  return magic;
}

std::vector<uint8_t> WriteHello(uint64_t model_fingerprint, int max_batch,
                                const std::vector<std::vector<int32_t>>& owned,
                                const std::vector<float>& gate_thresholds, bool gate_dots) {
  return WriteHelloOfKind(kHelloMagic, model_fingerprint, max_batch, nullptr, 0, owned,
                          gate_thresholds, gate_dots ? kHelloGateDots : 0);
}

Status ParseHello(const uint8_t* data, size_t size, uint64_t model_fingerprint,
                  ShardLayout* layout) {
  HelloHeader h;
  PI_RETURN_IF_ERROR(ParseHelloOfKind(data, size, kHelloMagic, kHelloGateDots, model_fingerprint,
                                      nullptr, 0, &h, &layout->owned, &layout->gate_thresholds));
  layout->gate_dots = (h.flags & kHelloGateDots) != 0;
  layout->n_layer = h.n_layer;
  layout->max_batch = h.max_batch;
  return Status::Ok();
}

std::vector<uint8_t> WriteDeviceHello(uint64_t model_fingerprint, const DevicePlan& plan) {
  const DeviceHelloPlan p{plan.n_layers,
                          plan.output ? 1 : 0,
                          plan.n_ctx,
                          static_cast<int32_t>(plan.cache_type_k),
                          static_cast<int32_t>(plan.cache_type_v),
                          static_cast<int32_t>(plan.mode),
                          plan.threshold,
                          plan.n_seq,
                          plan.first_layer,
                          0};
  std::vector<float> thresholds = plan.gate_thresholds;
  const bool teal = !plan.input_thresholds[0].empty();
  for (const std::vector<float>& t : plan.input_thresholds) {
    thresholds.insert(thresholds.end(), t.begin(), t.end());
  }
  return WriteHelloOfKind(kDeviceHelloMagic, model_fingerprint, 1, &p, sizeof p, plan.hot,
                          thresholds, teal ? kHelloInputThresholds : 0);
}

Status ParseDeviceHello(const uint8_t* data, size_t size, uint64_t model_fingerprint,
                        DevicePlan* plan) {
  HelloHeader h;
  DeviceHelloPlan p;
  std::vector<std::vector<int32_t>> hot;
  std::vector<float> thresholds;
  PI_RETURN_IF_ERROR(ParseHelloOfKind(data, size, kDeviceHelloMagic, kHelloInputThresholds,
                                      model_fingerprint, &p, sizeof p, &h, &hot, &thresholds));
  auto cache_type_ok = [](int32_t t) {
    return t == static_cast<int32_t>(DType::kF32) || t == static_cast<int32_t>(DType::kF16) ||
           t == static_cast<int32_t>(DType::kQ8_0);
  };
  if (h.max_batch != 1) {
    return Status::Error("device hello: max batch %d (the device takes one token at a time)",
                         h.max_batch);
  }
  if (p.n_layers < 0 || p.n_layers > h.n_layer || p.first_layer < 0 || p.first_layer > p.n_layers ||
      p.reserved != 0 || (p.output != 0 && p.output != 1) || p.n_ctx < 1 || p.n_ctx > (1 << 24) ||
      !cache_type_ok(p.cache_type_k) || !cache_type_ok(p.cache_type_v) || p.mode < 0 ||
      p.mode > static_cast<int32_t>(SparseMode::kTeal) || !std::isfinite(p.threshold) ||
      p.n_seq < 1 || p.n_seq > 256) {
    return Status::Error(
        "device hello: a plan of layers [%d, %d) of %d, output %d, context %d, cache types "
        "%d/%d, mode %d, threshold %g, %d sequences is not one a coordinator sends",
        p.first_layer, p.n_layers, h.n_layer, p.output, p.n_ctx, p.cache_type_k, p.cache_type_v,
        p.mode, p.threshold, p.n_seq);
  }
  const bool cats = UsesGateThresholds(static_cast<SparseMode>(p.mode));
  const bool teal = p.mode == static_cast<int32_t>(SparseMode::kTeal);
  const size_t n_layer = static_cast<size_t>(h.n_layer);
  const size_t expected = !cats ? 0 : teal ? (1 + kProjectionInputs) * n_layer : n_layer;
  if (thresholds.size() != expected) {
    return Status::Error(
        "device hello: %zu thresholds with mode %d (cats takes one per layer, teal four)",
        thresholds.size(), p.mode);
  }
  if (teal) {
    for (int k = 0; k < kProjectionInputs; ++k) {
      const auto from = thresholds.begin() + static_cast<std::ptrdiff_t>((1 + k) * n_layer);
      plan->input_thresholds[k].assign(from, from + static_cast<std::ptrdiff_t>(n_layer));
    }
    PI_RETURN_IF_ERROR(CheckInputThresholds(plan->input_thresholds, h.n_layer, "device hello"));
    thresholds.resize(n_layer);
  } else {
    for (std::vector<float>& t : plan->input_thresholds) t.clear();
  }
  PI_RETURN_IF_ERROR(CheckGateThresholds(thresholds, h.n_layer, true, "device hello"));
  plan->first_layer = p.first_layer;
  plan->n_layers = p.n_layers;
  plan->output = p.output == 1;
  plan->n_ctx = p.n_ctx;
  plan->n_seq = p.n_seq;
  plan->cache_type_k = static_cast<DType>(p.cache_type_k);
  plan->cache_type_v = static_cast<DType>(p.cache_type_v);
  plan->mode = static_cast<SparseMode>(p.mode);
  plan->threshold = p.threshold;
  plan->hot = std::move(hot);
  plan->gate_thresholds = std::move(thresholds);
  return Status::Ok();
}

size_t WriteHelloReply(const Status& loaded, int64_t resident_bytes, const char* backend,
                       uint8_t* out, size_t capacity) {
  HelloReply r{};
  r.magic = kHelloReplyMagic;
  r.status = static_cast<uint32_t>(loaded.code());
  r.resident_bytes = loaded.ok() ? resident_bytes : 0;
  strncpy(r.backend, backend, sizeof r.backend - 1);
  const std::string& message = loaded.message();
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
  if (r.status != static_cast<uint32_t>(Status::Code::kOk)) {
    return Status::FromCode(Status::CodeFromWire(r.status),
                            "the worker refused the hello: " + message);
  }
  r.backend[sizeof r.backend - 1] = '\0';
  *backend = r.backend;
  *resident_bytes = r.resident_bytes;
  return Status::Ok();
}

}  // namespace pi
