// The messages that open and close a worker session, as bytes for the
// shared-memory channel: Hello (protocol version, the model's fingerprint,
// the shard the worker must own, the largest batch, --sparse cats' gate
// thresholds) and its reply (what the worker loaded, or why it refused), and
// Bye. Validated like step messages: every count is checked against the
// message size before it is read.
//
//   hello = HelloHeader | counts [n_layer] i32 | thresholds [n_thresholds] f32
//           | ids [sum of counts] i32
//   reply = HelloReply  | message, UTF-8
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "common/base/status.h"
#include "common/shard/device_backend.h"
#include "common/transport/step_message.h"

namespace pi {

inline constexpr uint32_t kHelloMagic = 0x45485049;        // bytes "IPHE"
inline constexpr uint32_t kHelloReplyMagic = 0x52485049;   // bytes "IPHR"
inline constexpr uint32_t kByeMagic = 0x59425049;          // bytes "IPBY"
inline constexpr uint32_t kDeviceHelloMagic = 0x44485049;  // bytes "IPHD"

struct HelloHeader {
  uint32_t magic;
  uint32_t version;  // kStepProtocolVersion
  uint64_t model_fingerprint;
  int32_t n_layer;
  int32_t max_batch;
  // 0, or n_layer: one gate threshold per layer (--sparse cats); with
  // kHelloInputThresholds, (1 + kProjectionInputs) * n_layer.
  int32_t n_thresholds;
  int32_t flags;  // a shard's kHelloGateDots, a device's kHelloInputThresholds, or 0
};
// The shard's kFfn requests carry each candidate's gate dot (--sparse teal:
// ShardLayout::gate_dots).
inline constexpr int32_t kHelloGateDots = 1;
// A device's thresholds go on with --sparse teal's input thresholds, each
// ProjectionInput's n_layer in turn (DevicePlan::input_thresholds).
inline constexpr int32_t kHelloInputThresholds = 2;
static_assert(sizeof(HelloHeader) == 32, "wire layout");

struct HelloReply {
  uint32_t magic;
  uint32_t status;  // Status::Code: 0 ok, or why the worker refused
  int64_t resident_bytes;
  char backend[16];  // NUL-terminated: "cpu"
  uint64_t message_bytes;
};
static_assert(sizeof(HelloReply) == 40, "wire layout");

// The device's hello (a gpu_worker running whole layers,
// gpu_worker/device_shard.h): the same header (magic kDeviceHelloMagic, max
// batch 1), the plan's scalars, then its hot ids per layer as a shard's
// and its thresholds (gate, then teal's inputs: kHelloInputThresholds):
//
//   device hello = HelloHeader | DeviceHelloPlan | counts [n_layer] i32 | ids
struct DeviceHelloPlan {
  int32_t n_layers;  // layers [first_layer, n_layers) on the device
  int32_t output;    // 1: the head too
  int32_t n_ctx;
  int32_t cache_type_k, cache_type_v;  // DType
  int32_t mode;                        // SparseMode
  float threshold;
  int32_t n_seq;        // sequences with a KV cache each (-np)
  int32_t first_layer;  // 0, or where this device's range of a chain starts (--gpus)
  int32_t reserved;     // 0
};
static_assert(sizeof(DeviceHelloPlan) == 40, "wire layout");

// The magic a hello starts with (kHelloMagic, kDeviceHelloMagic), or 0.
uint32_t HelloMagic(const uint8_t* data, size_t size);

// A hello for this shard (owned ids per layer; gate thresholds, one per
// layer, or none; whether its requests carry gate dots) as bytes.
std::vector<uint8_t> WriteHello(uint64_t model_fingerprint, int max_batch,
                                const std::vector<std::vector<int32_t>>& owned,
                                const std::vector<float>& gate_thresholds = {},
                                bool gate_dots = false);

// Parses a hello: checks magic, version, the fingerprint against the
// worker's model and the counts against the size; fills layout.owned,
// gate_thresholds, gate_dots, n_layer and max_batch (the caller sets n_embd and n_ff
// and calls Finish, which checks the thresholds' values).
Status ParseHello(const uint8_t* data, size_t size, uint64_t model_fingerprint,
                  ShardLayout* layout);

std::vector<uint8_t> WriteDeviceHello(uint64_t model_fingerprint, const DevicePlan& plan);
// Parses a device hello like ParseHello; checks the plan's scalars are
// values a plan can hold (the backend's Load checks it fits the model).
Status ParseDeviceHello(const uint8_t* data, size_t size, uint64_t model_fingerprint,
                        DevicePlan* plan);

// A reply: what the worker loaded, or `loaded`'s error (its code and
// message) when it refused.
size_t WriteHelloReply(const Status& loaded, int64_t resident_bytes, const char* backend,
                       uint8_t* out, size_t capacity);
Status ParseHelloReply(const uint8_t* data, size_t size, int64_t* resident_bytes,
                       std::string* backend);

}  // namespace pi
