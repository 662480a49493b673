// The device's kinds of step (step_message.h): how a coordinator runs a
// token through a gpu_worker that holds whole layers (attention, KV cache,
// predictor, hot neurons, maybe the head: common/shard/device_backend.h).
// One message per layer with a cold part, plus one per token:
//
//   coordinator                               gpu_worker (DeviceShard)
//   kBegin (seq, pos, dense, h)          ──▶  BeginToken; RunLayer until a
//                                             layer with a cold part:
//                                        ◀──  kCold (layer, x [, mask])
//   (computes the cold part: y)
//   kResume (layer, y)                   ──▶  adds y; RunLayer onwards ...
//                                        ◀──  kDone (h, logits or nothing,
//                                             as the last message's `out` asked)
//   kHead (h)                            ──▶  the head alone
//                                        ◀──  kDone (logits)
//
//   kSeqCopy / kSeqSave / kSeqLoad / kSeqDrop (seq, n, dst, key)
//                                        ──▶  DeviceBackend::CopySeq ...
//                                        ◀──  kDone (nothing)
//   kSeqRead (n, key, offset, size)      ──▶  DeviceBackend::ReadKept
//                                        ◀──  kDone (the size bytes)
//   kSeqWrite (n, key, offset, size, bytes) ─▶ DeviceBackend::WriteKept
//                                        ◀──  kDone (nothing)
//
// Layers without a cold part cross nothing: the worker runs on. Both sides
// know which layers have one from the plan in the hello.
//
//   request payload = f32 [n_embd]   (h or y; batch 1: the device takes one row;
//                                     kSeq*: the key, u64, in its first 8 bytes;
//                                     kSeqRead, kSeqWrite: then offset and
//                                     size, i64, and a write's bytes)
//   reply payload   = x f32 [n_embd] | mask u32 [mask_words]       (kCold)
//                   | h f32 [n_embd] or logits f32 [n_vocab] or nothing (kDone)
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/base/status.h"
#include "common/shard/device_backend.h"
#include "common/transport/step_message.h"

namespace pi {

// The sizes a device session works with (from the model and the plan).
struct DeviceLayout {
  int n_layer = 0;                    // the model's
  int first_layer = 0, n_layers = 0;  // layers [first_layer, n_layers) on the device
  bool output = false;
  int n_embd = 0, n_ff = 0, n_vocab = 0, n_ctx = 0, n_seq = 1;
  std::vector<uint8_t> cold;  // [n_layers] 1: the layer is the device's and has a cold part

  int mask_words() const { return (n_ff + 31) / 32; }
};

// The layout of a session running `plan` on a model of config `c` (a layer
// has a cold part when some of its neurons are not on the device).
DeviceLayout DeviceLayoutFor(const LlamaConfig& c, const DevicePlan& plan);

// Bytes of a request; the largest reply.
size_t DeviceRequestBytes(int n_embd);
size_t DeviceReplyCapacity(const DeviceLayout& layout);

// Writes a request's header (kind kBegin, kResume or kHead; the payload
// follows it: DeviceRequestPayload). `dense` (kBegin): the token runs dense
// (DeviceBackend::BeginToken), carried in the header's n_ids.
void WriteDeviceRequest(uint64_t step_id, StepKind kind, int seq, int pos, bool dense, int layer,
                        int n_embd, DeviceOut out, uint8_t* message);
// Writes a whole request for a sequence's KV cache on the device (kind
// kSeqCopy, kSeqSave, kSeqLoad or kSeqDrop): the sequence (a copy's
// source), n positions, a copy's destination `dst` and the key.
void WriteDeviceSeqRequest(uint64_t step_id, StepKind kind, int seq, int n, int dst, uint64_t key,
                           int n_embd, uint8_t* message);
// The most bytes of a kept sequence one kSeqRead reply carries (the room
// of a token's logits or h), and one kSeqWrite request (its payload less
// the key and the range).
int64_t DeviceKeptReadChunk(const DeviceLayout& layout);
int64_t DeviceKeptWriteChunk(int n_embd);
// Writes a whole kSeqRead or kSeqWrite request: bytes [offset, offset +
// size) of the n positions kept under `key`; a write's `data` copied in
// (size <= DeviceKeptWriteChunk).
void WriteDeviceKeptRequest(uint64_t step_id, StepKind kind, int n, uint64_t key, int64_t offset,
                            int64_t size, const uint8_t* data, int n_embd, uint8_t* message);
// Checks a kSeqRead's reply (ParseReplyHeader): kDone with `size` bytes,
// *bytes pointing at them.
Status ParseDeviceKeptReply(const uint8_t* data, size_t size, uint64_t step_id, int64_t want,
                            const uint8_t** bytes);
inline float* DeviceRequestPayload(uint8_t* message) {
  return reinterpret_cast<float*>(message + sizeof(StepRequestHeader));
}

// A validated request: pointers into the message.
struct DeviceRequest {
  uint64_t step_id = 0;
  StepKind kind = StepKind::kBegin;
  DeviceOut out = DeviceOut::kNothing;
  int seq = 0, pos = 0, layer = 0;
  bool dense = false;              // kBegin
  const float* payload = nullptr;  // [n_embd]
  int n = 0, dst = 0;              // kSeq*: positions; kSeqCopy: the destination
  uint64_t key = 0;                // kSeqSave, kSeqLoad, kSeqDrop, kSeqRead, kSeqWrite
  int64_t offset = 0, size = 0;    // kSeqRead, kSeqWrite: the range of kept bytes
  const uint8_t* bytes = nullptr;  // kSeqWrite: its size bytes
};

// Checks the header, the kind (a device's), batch, n_embd, the size, the
// sequence and position (kBegin, inside the context), the layer (kResume,
// on the device), the sequences and positions of kSeq* (a copy's two
// sequences apart; a read's or write's range, at most a chunk), and the output asked for (logits
// only with the head; nothing for kSeq*) against `layout`; the error names the field. Whether the
// message fits the session's state (a kResume for the layer that waits for its cold sum) is the
// shard's to check.
Status ParseDeviceRequest(const uint8_t* data, size_t size, const DeviceLayout& layout,
                          DeviceRequest* out);

// A checked reply: pointers into the message.
struct DeviceReply {
  StepReplyKind kind = StepReplyKind::kDone;
  int layer = 0;
  const float* x = nullptr;        // kCold
  const uint32_t* mask = nullptr;  // kCold, when the plan predicts
  const float* out = nullptr;      // kDone: h or logits (null: nothing)
  int64_t hot_fired = 0, worker_ns = 0;
};

// Checks a reply against the request it answers (ParseReplyHeader), then
// its kind and sizes (x and the mask for kCold; for kDone the payload `out`
// asked for).
Status ParseDeviceReply(const uint8_t* data, size_t size, uint64_t step_id, DeviceOut out,
                        const DeviceLayout& layout, DeviceReply* reply);

}  // namespace pi
