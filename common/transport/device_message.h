// The device protocol as bytes: how a coordinator runs a token through a
// gpu_worker that holds whole layers (attention, KV cache, predictor, hot
// neurons, maybe the head: common/shard/device_backend.h). One message per
// layer with a cold part, plus one per token:
//
//   coordinator                               gpu_worker (DeviceShard)
//   kBegin (seq, pos, h = embedding row) ──▶  BeginToken; RunLayer until a
//                                             layer with a cold part:
//                                        ◀──  kCold (layer, x [, mask])
//   (computes the cold part: y)
//   kResume (layer, y)                   ──▶  adds y; RunLayer onwards ...
//                                        ◀──  kDone (h, logits or nothing,
//                                             as the last message's `out` asked)
//   kHead (h)                            ──▶  the head alone
//                                        ◀──  kDone (logits)
//
// Layers without a cold part cross nothing: the worker runs on. Both sides
// know which layers have one from the plan in the hello.
//
//   request = DeviceRequestHeader | payload f32 [batch, n_embd]   (h or y)
//   reply   = DeviceReplyHeader   | x f32 [n_embd] | mask u32 [mask_words]   (kCold)
//                                 | h f32 [n_embd] or logits f32 [n_vocab] or nothing (kDone)
//                                 | message, UTF-8   (a status other than kOk)
//
// The batch field is there for batched decoding; the device takes one row.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "common/base/status.h"
#include "common/shard/device_backend.h"
#include "common/transport/step_message.h"

namespace pi {

inline constexpr uint32_t kDeviceRequestMagic = 0x51445049;  // bytes "IPDQ"
inline constexpr uint32_t kDeviceReplyMagic = 0x52445049;    // bytes "IPDR"

enum class DeviceOp : int32_t { kBegin = 1, kResume = 2, kHead = 3 };
// What comes back when a token's layers are done.
enum class DeviceOut : int32_t { kNothing = 0, kH = 1, kLogits = 2 };
enum class DeviceReplyKind : int32_t { kCold = 1, kDone = 2 };

struct DeviceRequestHeader {
  uint32_t magic;
  uint32_t version;  // kStepProtocolVersion
  uint64_t step_id;  // echoed in the reply
  int32_t op;        // DeviceOp
  int32_t pos;       // kBegin: the token's position in the KV cache
  int32_t layer;     // kResume: the layer whose cold sum the payload is
  int32_t batch;     // rows of the payload: 1
  int32_t n_embd;
  int32_t out;  // kBegin, kResume: DeviceOut, used when the token's layers end
  int32_t seq;  // kBegin: the token's sequence (its KV cache)
  uint32_t reserved;
};
static_assert(sizeof(DeviceRequestHeader) == 48, "wire layout");

struct DeviceReplyHeader {
  uint32_t magic;
  uint32_t status;  // StepStatus
  uint64_t step_id;
  int32_t kind;         // DeviceReplyKind
  int32_t layer;        // kCold: the layer whose cold part x is
  int64_t hot_fired;    // kDone after layers: the device's neurons that fired over the token
  int64_t worker_ns;    // the worker's time for the message
  uint32_t mask_words;  // kCold: predicted cold neurons' bit mask words after x (0: none)
  int32_t out;          // kDone: DeviceOut, what the payload is
  uint64_t payload_bytes;
};
static_assert(sizeof(DeviceReplyHeader) == 56, "wire layout");

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

inline constexpr size_t kMaxDeviceErrorBytes = 512;

// Bytes of a request; the largest reply.
size_t DeviceRequestBytes(int n_embd);
size_t DeviceReplyCapacity(const DeviceLayout& layout);

// Writes a request's header (the payload follows it: DeviceRequestPayload).
void WriteDeviceRequest(uint64_t step_id, DeviceOp op, int seq, int pos, int layer, int n_embd,
                        DeviceOut out, uint8_t* message);
inline float* DeviceRequestPayload(uint8_t* message) {
  return reinterpret_cast<float*>(message + sizeof(DeviceRequestHeader));
}

// A validated request: pointers into the message.
struct DeviceRequest {
  uint64_t step_id = 0;
  DeviceOp op = DeviceOp::kBegin;
  DeviceOut out = DeviceOut::kNothing;
  int seq = 0, pos = 0, layer = 0;
  const float* payload = nullptr;  // [n_embd]
};

// Checks the size, magic, version, op, batch, n_embd, the sequence and
// position (kBegin, inside the context), the layer (kResume, on the device), and the output
// asked for (logits only with the head) against `layout`; the error names
// the field. Whether the message fits the session's state (a kResume for
// the layer that waits for its cold sum) is the shard's to check.
Status ParseDeviceRequest(const uint8_t* data, size_t size, const DeviceLayout& layout,
                          DeviceRequest* out);

// A reply's header for kCold / kDone (the payload written after it), or an
// error reply with its message; returns the reply's size.
size_t WriteDeviceReply(uint64_t step_id, DeviceReplyKind kind, int layer, int64_t hot_fired,
                        int64_t worker_ns, uint32_t mask_words, DeviceOut out, size_t payload_bytes,
                        uint8_t* message);
size_t WriteDeviceError(uint64_t step_id, StepStatus status, const std::string& why,
                        uint8_t* message, size_t capacity);

// A checked reply: pointers into the message.
struct DeviceReply {
  DeviceReplyKind kind = DeviceReplyKind::kDone;
  int layer = 0;
  const float* x = nullptr;        // kCold
  const uint32_t* mask = nullptr;  // kCold, when the plan predicts
  const float* out = nullptr;      // kDone: h or logits (null: nothing)
  int64_t hot_fired = 0, worker_ns = 0;
};

// Checks a reply against the request it answers: magic, step id, sizes
// (x and the mask for kCold; for kDone the payload `out` asked for); an
// error status comes back as an error with the worker's message.
Status ParseDeviceReply(const uint8_t* data, size_t size, uint64_t step_id, DeviceOut out,
                        const DeviceLayout& layout, DeviceReply* reply);

}  // namespace pi
