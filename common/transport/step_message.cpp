#include "common/transport/step_message.h"

#include <cmath>

#include <algorithm>
#include <cinttypes>
#include <cstring>

#include "common/compute/sparse_mode.h"

namespace pi {

// ---- every kind ----------------------------------------------------------------

Status ParseStepHeader(const uint8_t* data, size_t size, StepRequestHeader* h) {
  if (size < sizeof *h) {
    return Status::Invalid("step request: %zu bytes, shorter than its %zu-byte header", size,
                           sizeof *h);
  }
  memcpy(h, data, sizeof *h);
  if (h->magic != kStepRequestMagic) {
    return Status::Invalid("step request: bad magic 0x%08x", h->magic);
  }
  if (h->version != kStepProtocolVersion) {
    return Status::Invalid("step request: protocol version %u, this worker speaks %u", h->version,
                           kStepProtocolVersion);
  }
  return Status::Ok();
}

size_t WriteErrorReply(const uint8_t* request, size_t size, const Status& s, uint8_t* reply,
                       size_t capacity) {
  StepRequestHeader r{};
  if (size >= sizeof r) memcpy(&r, request, sizeof r);
  const size_t n =
      std::min({s.message().size(), kMaxErrorBytes, capacity - sizeof(StepReplyHeader)});
  StepReplyHeader h{};
  h.magic = kStepReplyMagic;
  // A failure never reads as OK on the other side.
  h.status = static_cast<uint32_t>(s.ok() ? Status::Code::kError : s.code());
  h.step_id = r.step_id;
  h.payload_bytes = n;
  memcpy(reply, &h, sizeof h);
  memcpy(reply + sizeof h, s.message().data(), n);
  return sizeof h + n;
}

size_t WriteReplyHeader(uint64_t step_id, StepReplyKind kind, int layer, int64_t fired,
                        int64_t worker_ns, uint32_t mask_words, DeviceOut out, size_t payload_bytes,
                        uint8_t* reply) {
  StepReplyHeader h{};
  h.magic = kStepReplyMagic;
  h.status = static_cast<uint32_t>(Status::Code::kOk);
  h.step_id = step_id;
  h.kind = static_cast<int32_t>(kind);
  h.layer = layer;
  h.fired = fired;
  h.worker_ns = worker_ns;
  h.mask_words = mask_words;
  h.out = static_cast<int32_t>(out);
  h.payload_bytes = payload_bytes;
  memcpy(reply, &h, sizeof h);
  return sizeof h + payload_bytes;
}

Status ParseReplyHeader(const uint8_t* data, size_t size, uint64_t step_id, StepReplyHeader* h,
                        const uint8_t** payload) {
  if (size < sizeof *h) {
    return Status::Invalid("step reply: %zu bytes, shorter than its header", size);
  }
  memcpy(h, data, sizeof *h);
  if (h->magic != kStepReplyMagic) {
    return Status::Invalid("step reply: bad magic 0x%08x", h->magic);
  }
  if (h->step_id != step_id) {
    return Status::Invalid("step reply for step %" PRIu64 " while waiting for %" PRIu64, h->step_id,
                           step_id);
  }
  if (h->payload_bytes != size - sizeof *h) {
    return Status::Invalid("step reply: payload of %" PRIu64 " bytes in a %zu-byte message",
                           h->payload_bytes, size);
  }
  *payload = data + sizeof *h;
  if (h->status != static_cast<uint32_t>(Status::Code::kOk)) {
    const Status::Code code = Status::CodeFromWire(h->status);
    const std::string message(reinterpret_cast<const char*>(*payload), h->payload_bytes);
    return Status::FromCode(code, "worker refused step " + std::to_string(step_id) + " (" +
                                      Status::CodeName(code) + "): " + message);
  }
  return Status::Ok();
}

// ---- kFfn: a shard's neurons ------------------------------------------------------

Status ShardLayout::Finish() {
  if (n_layer < 1 || n_embd < 1 || n_ff < 1 || max_batch < 1 ||
      owned.size() != static_cast<size_t>(n_layer)) {
    return Status::Invalid(
        "shard: bad sizes (%d layers, n_embd %d, n_ff %d, max batch %d, %zu lists)", n_layer,
        n_embd, n_ff, max_batch, owned.size());
  }
  PI_RETURN_IF_ERROR(CheckGateThresholds(gate_thresholds, n_layer, true, "shard"));
  is_owned.assign(n_layer, std::vector<uint8_t>(n_ff, 0));
  for (int l = 0; l < n_layer; ++l) {
    const std::vector<int32_t>& ids = owned[l];
    for (size_t i = 0; i < ids.size(); ++i) {
      if (ids[i] < 0 || ids[i] >= n_ff || (i > 0 && ids[i] <= ids[i - 1])) {
        return Status::Invalid(
            "shard: layer %d's neuron %zu (%d) is out of range [0, %d) or not "
            "strictly increasing",
            l, i, ids[i], n_ff);
      }
      is_owned[l][ids[i]] = 1;
    }
  }
  return Status::Ok();
}

size_t StepRequestBytes(int batch, int n_embd, int64_t n_ids, int64_t n_gates) {
  const size_t ids = n_ids < 0 ? 0 : static_cast<size_t>(batch) + static_cast<size_t>(n_ids);
  return sizeof(StepRequestHeader) + sizeof(float) * static_cast<size_t>(batch) * n_embd +
         sizeof(int32_t) * ids + sizeof(float) * static_cast<size_t>(n_gates);
}

size_t StepReplyBytes(int batch, int n_embd) {
  return sizeof(StepReplyHeader) + sizeof(float) * static_cast<size_t>(batch) * n_embd;
}

size_t StepReplyCapacity(const ShardLayout& shard) {
  return std::max(StepReplyBytes(shard.max_batch, shard.n_embd),
                  sizeof(StepReplyHeader) + kMaxErrorBytes);
}

int64_t StepIdCount(int batch, const int32_t* row_n) {
  if (!row_n) return -1;
  int64_t n = 0;
  for (int b = 0; b < batch; ++b) n += row_n[b];
  return n;
}

float* WriteStepRequest(uint64_t step_id, int layer, int batch, int n_embd, const float* x,
                        const int32_t* ids, const int32_t* row_n, uint8_t* out) {
  const int64_t n_ids = StepIdCount(batch, row_n);
  StepRequestHeader h{};
  h.magic = kStepRequestMagic;
  h.version = kStepProtocolVersion;
  h.step_id = step_id;
  h.kind = static_cast<int32_t>(StepKind::kFfn);
  h.layer = layer;
  h.batch = batch;
  h.n_embd = n_embd;
  h.n_ids = n_ids < 0 ? -1 : static_cast<int32_t>(n_ids);
  memcpy(out, &h, sizeof h);
  const size_t x_bytes = sizeof(float) * static_cast<size_t>(batch) * n_embd;
  memcpy(out + sizeof h, x, x_bytes);
  uint8_t* end = out + sizeof h + x_bytes;
  if (n_ids >= 0) {
    memcpy(end, row_n, sizeof(int32_t) * batch);
    if (n_ids > 0) memcpy(end + sizeof(int32_t) * batch, ids, sizeof(int32_t) * n_ids);
    end += sizeof(int32_t) * (batch + n_ids);
  }
  return reinterpret_cast<float*>(end);
}

namespace {

// The rows' candidate lists of a request whose sizes were checked: each
// row's count within the shard, the counts adding up to the header's, every
// id owned and each row's strictly increasing.
Status CheckIds(const StepRequestHeader& h, const ShardLayout& shard, const int32_t* row_n,
                const int32_t* ids) {
  const std::vector<int32_t>& owned = shard.owned[h.layer];
  int64_t total = 0;
  for (int b = 0; b < h.batch; ++b) {
    if (row_n[b] < 0 || row_n[b] > static_cast<int64_t>(owned.size())) {
      return Status::Invalid("step request %" PRIu64 ": row %d has %d ids, the shard owns %zu",
                             h.step_id, b, row_n[b], owned.size());
    }
    total += row_n[b];
  }
  if (total != h.n_ids) {
    return Status::Invalid("step request %" PRIu64 ": the rows' id counts add up to %" PRId64
                           ", the header says %d",
                           h.step_id, total, h.n_ids);
  }
  const uint8_t* mine = shard.is_owned[h.layer].data();
  int64_t at = 0;
  for (int b = 0; b < h.batch; ++b) {
    for (int32_t i = 0; i < row_n[b]; ++i, ++at) {
      const int32_t id = ids[at];
      if (id < 0 || id >= shard.n_ff || !mine[id] || (i > 0 && id <= ids[at - 1])) {
        return Status::Invalid("step request %" PRIu64 ": row %d's id %d at position %d is %s",
                               h.step_id, b, id, i,
                               id < 0 || id >= shard.n_ff ? "out of range"
                               : !mine[id]                ? "not in this worker's shard"
                                           : "not strictly increasing (unsorted or repeated)");
      }
    }
  }
  return Status::Ok();
}

}  // namespace

Status ParseStepRequest(const uint8_t* data, size_t size, const ShardLayout& shard,
                        StepRequest* out) {
  StepRequestHeader h;
  PI_RETURN_IF_ERROR(ParseStepHeader(data, size, &h));
  if (h.kind != static_cast<int32_t>(StepKind::kFfn)) {
    return Status::Invalid("step request %" PRIu64 ": kind %d, this worker takes FFN steps (%d)",
                           h.step_id, h.kind, static_cast<int>(StepKind::kFfn));
  }
  if (h.layer < 0 || h.layer >= shard.n_layer) {
    return Status::Invalid("step request %" PRIu64 ": layer %d is out of range [0, %d)", h.step_id,
                           h.layer, shard.n_layer);
  }
  if (h.batch < 1 || h.batch > shard.max_batch) {
    return Status::Invalid("step request %" PRIu64 ": batch %d is out of range [1, %d]", h.step_id,
                           h.batch, shard.max_batch);
  }
  if (h.n_embd != shard.n_embd) {
    return Status::Invalid("step request %" PRIu64 ": n_embd %d, the model's is %d", h.step_id,
                           h.n_embd, shard.n_embd);
  }
  const std::vector<int32_t>& owned = shard.owned[h.layer];
  if (shard.whole_layers && h.n_ids != -1) {
    return Status::Invalid("step request %" PRIu64
                           ": this worker computes whole layers (n_ids -1), got %d ids",
                           h.step_id, h.n_ids);
  }
  if (h.n_ids < -1 || h.n_ids > static_cast<int64_t>(owned.size()) * h.batch) {
    return Status::Invalid("step request %" PRIu64
                           ": %d ids, the shard owns %zu in layer %d (x %d rows)",
                           h.step_id, h.n_ids, owned.size(), h.layer, h.batch);
  }
  // Gate dots: one per candidate of every row (ids, or all owned ones).
  const int64_t n_gates = !shard.gate_dots ? 0
                          : h.n_ids < 0    ? static_cast<int64_t>(owned.size()) * h.batch
                                           : h.n_ids;
  const size_t want = StepRequestBytes(h.batch, h.n_embd, h.n_ids, n_gates);
  if (size != want) {
    return Status::Invalid("step request %" PRIu64
                           ": %zu bytes, its header says %zu (batch %d x "
                           "n_embd %d f32, %d ids, %" PRId64 " gate dots)",
                           h.step_id, size, want, h.batch, h.n_embd, h.n_ids, n_gates);
  }
  out->step_id = h.step_id;
  out->layer = h.layer;
  out->batch = h.batch;
  out->x = reinterpret_cast<const float*>(data + sizeof h);
  out->ids = nullptr;
  out->row_n = nullptr;
  out->n_ids = static_cast<int64_t>(owned.size());
  const uint8_t* gates = data + size - sizeof(float) * static_cast<size_t>(n_gates);
  out->gate_dots = shard.gate_dots ? reinterpret_cast<const float*>(gates) : nullptr;
  if (h.n_ids < 0) return Status::Ok();
  const int32_t* row_n = reinterpret_cast<const int32_t*>(
      data + sizeof h + sizeof(float) * static_cast<size_t>(h.batch) * h.n_embd);
  const int32_t* ids = row_n + h.batch;
  PI_RETURN_IF_ERROR(CheckIds(h, shard, row_n, ids));
  out->ids = ids;
  out->row_n = row_n;
  out->n_ids = h.n_ids;
  return Status::Ok();
}

Status ParseStepReply(const uint8_t* data, size_t size, uint64_t step_id, int batch, int n_embd,
                      const float** y, int64_t* fired, int64_t* worker_ns) {
  StepReplyHeader h;
  const uint8_t* payload = nullptr;
  PI_RETURN_IF_ERROR(ParseReplyHeader(data, size, step_id, &h, &payload));
  if (h.kind != static_cast<int32_t>(StepReplyKind::kSum) ||
      size != StepReplyBytes(batch, n_embd)) {
    return Status::Invalid(
        "step reply: kind %d in %zu bytes, expected a sum of %zu (batch %d x "
        "n_embd %d f32)",
        h.kind, size, StepReplyBytes(batch, n_embd), batch, n_embd);
  }
  *y = reinterpret_cast<const float*>(payload);
  *fired = h.fired;
  *worker_ns = h.worker_ns;
  return Status::Ok();
}

}  // namespace pi
