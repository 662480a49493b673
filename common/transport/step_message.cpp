#include "common/transport/step_message.h"

#include <cinttypes>
#include <cstring>

namespace pi {

Status ShardLayout::Finish() {
  if (n_layer < 1 || n_embd < 1 || n_ff < 1 || max_batch < 1 ||
      owned.size() != static_cast<size_t>(n_layer)) {
    return Status::Error(
        "shard: bad sizes (%d layers, n_embd %d, n_ff %d, max batch %d, %zu lists)", n_layer,
        n_embd, n_ff, max_batch, owned.size());
  }
  is_owned.assign(n_layer, std::vector<uint8_t>(n_ff, 0));
  for (int l = 0; l < n_layer; ++l) {
    const std::vector<int32_t>& ids = owned[l];
    for (size_t i = 0; i < ids.size(); ++i) {
      if (ids[i] < 0 || ids[i] >= n_ff || (i > 0 && ids[i] <= ids[i - 1])) {
        return Status::Error(
            "shard: layer %d's neuron %zu (%d) is out of range [0, %d) or not "
            "strictly increasing",
            l, i, ids[i], n_ff);
      }
      is_owned[l][ids[i]] = 1;
    }
  }
  return Status::Ok();
}

size_t StepRequestBytes(int batch, int n_embd, int64_t n_ids) {
  const size_t ids = n_ids < 0 ? 0 : static_cast<size_t>(batch) + static_cast<size_t>(n_ids);
  return sizeof(StepRequestHeader) + sizeof(float) * static_cast<size_t>(batch) * n_embd +
         sizeof(int32_t) * ids;
}

int64_t StepIdCount(int batch, const int32_t* row_n) {
  if (!row_n) return -1;
  int64_t n = 0;
  for (int b = 0; b < batch; ++b) n += row_n[b];
  return n;
}

size_t StepReplyBytes(int batch, int n_embd) {
  return sizeof(StepReplyHeader) + sizeof(float) * static_cast<size_t>(batch) * n_embd;
}

void WriteStepRequest(uint64_t step_id, int layer, int batch, int n_embd, const float* x,
                      const int32_t* ids, const int32_t* row_n, uint8_t* out) {
  const int64_t n_ids = StepIdCount(batch, row_n);
  StepRequestHeader h{};
  h.magic = kStepRequestMagic;
  h.version = kStepProtocolVersion;
  h.step_id = step_id;
  h.layer = layer;
  h.stage = static_cast<int32_t>(StepStage::kFfn);
  h.batch = batch;
  h.n_embd = n_embd;
  h.n_ids = n_ids < 0 ? -1 : static_cast<int32_t>(n_ids);
  memcpy(out, &h, sizeof h);
  const size_t x_bytes = sizeof(float) * static_cast<size_t>(batch) * n_embd;
  memcpy(out + sizeof h, x, x_bytes);
  if (n_ids < 0) return;
  memcpy(out + sizeof h + x_bytes, row_n, sizeof(int32_t) * batch);
  if (n_ids > 0)
    memcpy(out + sizeof h + x_bytes + sizeof(int32_t) * batch, ids, sizeof(int32_t) * n_ids);
}

Status ParseStepRequest(const uint8_t* data, size_t size, const ShardLayout& shard,
                        StepRequest* out) {
  StepRequestHeader h;
  if (size < sizeof h) {
    return Status::Error("step request: %zu bytes, shorter than its %zu-byte header", size,
                         sizeof h);
  }
  memcpy(&h, data, sizeof h);
  if (h.magic != kStepRequestMagic) return Status::Error("step request: bad magic 0x%08x", h.magic);
  if (h.version != kStepProtocolVersion) {
    return Status::Error("step request: protocol version %u, this worker speaks %u", h.version,
                         kStepProtocolVersion);
  }
  if (h.stage != static_cast<int32_t>(StepStage::kFfn)) {
    return Status::Error("step request %" PRIu64 ": unknown stage %d", h.step_id, h.stage);
  }
  if (h.layer < 0 || h.layer >= shard.n_layer) {
    return Status::Error("step request %" PRIu64 ": layer %d is out of range [0, %d)", h.step_id,
                         h.layer, shard.n_layer);
  }
  if (h.batch < 1 || h.batch > shard.max_batch) {
    return Status::Error("step request %" PRIu64 ": batch %d is out of range [1, %d]", h.step_id,
                         h.batch, shard.max_batch);
  }
  if (h.n_embd != shard.n_embd) {
    return Status::Error("step request %" PRIu64 ": n_embd %d, the model's is %d", h.step_id,
                         h.n_embd, shard.n_embd);
  }
  const std::vector<int32_t>& owned = shard.owned[h.layer];
  if (shard.whole_layers && h.n_ids != -1) {
    return Status::Error("step request %" PRIu64
                         ": this worker computes whole layers (n_ids -1), got %d ids",
                         h.step_id, h.n_ids);
  }
  if (h.n_ids < -1 || h.n_ids > static_cast<int64_t>(owned.size()) * h.batch) {
    return Status::Error("step request %" PRIu64
                         ": %d ids, the shard owns %zu in layer %d (x %d rows)",
                         h.step_id, h.n_ids, owned.size(), h.layer, h.batch);
  }
  const size_t want = StepRequestBytes(h.batch, h.n_embd, h.n_ids);
  if (size != want) {
    return Status::Error("step request %" PRIu64
                         ": %zu bytes, its header says %zu (batch %d x "
                         "n_embd %d f32, %d ids)",
                         h.step_id, size, want, h.batch, h.n_embd, h.n_ids);
  }
  out->step_id = h.step_id;
  out->layer = h.layer;
  out->batch = h.batch;
  out->x = reinterpret_cast<const float*>(data + sizeof h);
  out->ids = nullptr;
  out->row_n = nullptr;
  out->n_ids = static_cast<int64_t>(owned.size());
  if (h.n_ids < 0) return Status::Ok();
  const int32_t* row_n = reinterpret_cast<const int32_t*>(
      data + sizeof h + sizeof(float) * static_cast<size_t>(h.batch) * h.n_embd);
  const int32_t* ids = row_n + h.batch;
  int64_t total = 0;
  for (int b = 0; b < h.batch; ++b) {
    if (row_n[b] < 0 || row_n[b] > static_cast<int64_t>(owned.size())) {
      return Status::Error("step request %" PRIu64 ": row %d has %d ids, the shard owns %zu",
                           h.step_id, b, row_n[b], owned.size());
    }
    total += row_n[b];
  }
  if (total != h.n_ids) {
    return Status::Error("step request %" PRIu64 ": the rows' id counts add up to %" PRId64
                         ", the header says %d",
                         h.step_id, total, h.n_ids);
  }
  const uint8_t* mine = shard.is_owned[h.layer].data();
  int64_t at = 0;
  for (int b = 0; b < h.batch; ++b) {
    for (int32_t i = 0; i < row_n[b]; ++i, ++at) {
      const int32_t id = ids[at];
      if (id < 0 || id >= shard.n_ff || !mine[id] || (i > 0 && id <= ids[at - 1])) {
        return Status::Error("step request %" PRIu64 ": row %d's id %d at position %d is %s",
                             h.step_id, b, id, i,
                             id < 0 || id >= shard.n_ff ? "out of range"
                             : !mine[id]                ? "not in this worker's shard"
                                         : "not strictly increasing (unsorted or repeated)");
      }
    }
  }
  out->ids = ids;
  out->row_n = row_n;
  out->n_ids = h.n_ids;
  return Status::Ok();
}

StepReplyHeader OkReply(uint64_t step_id, int64_t fired, int64_t worker_ns, size_t y_bytes) {
  return StepReplyHeader{
      kStepReplyMagic, static_cast<uint32_t>(StepStatus::kOk), step_id, fired, worker_ns, y_bytes};
}

StepReplyHeader ErrorReply(uint64_t step_id, StepStatus status, size_t message_bytes) {
  return StepReplyHeader{kStepReplyMagic, static_cast<uint32_t>(status), step_id, 0, 0,
                         message_bytes};
}

Status ParseStepReply(const uint8_t* data, size_t size, uint64_t step_id, int batch, int n_embd,
                      const float** y, int64_t* fired, int64_t* worker_ns) {
  StepReplyHeader h;
  if (size < sizeof h) return Status::Error("step reply: %zu bytes, shorter than its header", size);
  memcpy(&h, data, sizeof h);
  if (h.magic != kStepReplyMagic) return Status::Error("step reply: bad magic 0x%08x", h.magic);
  if (h.step_id != step_id) {
    return Status::Error("step reply for step %" PRIu64 " while waiting for %" PRIu64, h.step_id,
                         step_id);
  }
  if (h.payload_bytes != size - sizeof h) {
    return Status::Error("step reply: payload of %" PRIu64 " bytes in a %zu-byte message",
                         h.payload_bytes, size);
  }
  if (h.status != static_cast<uint32_t>(StepStatus::kOk)) {
    const std::string message(reinterpret_cast<const char*>(data + sizeof h), h.payload_bytes);
    return Status::Error("worker refused step %" PRIu64 " (status %u): %s", step_id, h.status,
                         message.c_str());
  }
  if (size != StepReplyBytes(batch, n_embd)) {
    return Status::Error("step reply: %zu bytes, expected %zu (batch %d x n_embd %d f32)", size,
                         StepReplyBytes(batch, n_embd), batch, n_embd);
  }
  *y = reinterpret_cast<const float*>(data + sizeof h);
  *fired = h.fired;
  *worker_ns = h.worker_ns;
  return Status::Ok();
}

}  // namespace pi
