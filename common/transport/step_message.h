// The worker step protocol as bytes: what the coordinator sends a worker
// for one stage of one layer of a step, and what comes back. The same bytes
// ride a shared-memory slot (written once by the sender, read in place by
// the receiver) or a gRPC stream message, so both transports share one
// codec and one validator.
//
//   request = StepRequestHeader | x [batch, n_embd] f32
//             | row_n [batch] i32 | ids [n_ids] i32       (n_ids >= 0 only)
//   reply   = StepReplyHeader   | y [batch, n_embd] f32   (status kOk)
//                               | message, UTF-8          (any other status)
//
// A batch is one decode token of each of several sequences (continuous
// batching): every row has its own candidates — row b's are the row_n[b]
// ids after the earlier rows' — so each row's sum is the one it would get
// alone, and the worker reads a neuron's rows once for every row needing it. A worker validates
// every field before it reads a payload byte (ParseStepRequest): a bad message is an error reply,
// never a crash or an out-of-bounds read.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "common/base/status.h"

namespace pi {

inline constexpr uint32_t kStepProtocolVersion = 3;
inline constexpr uint32_t kStepRequestMagic = 0x54535049;  // bytes "IPST"
inline constexpr uint32_t kStepReplyMagic = 0x52535049;    // bytes "IPSR"

// What a layer's message asks for. Only the FFN stage exists so far; the
// attention stage arrives with dense blocks on workers.
enum class StepStage : int32_t { kFfn = 0 };

struct StepRequestHeader {
  uint32_t magic;
  uint32_t version;
  uint64_t step_id;  // echoed in the reply: a late reply is never taken for the current step
  int32_t layer;
  int32_t stage;  // StepStage
  int32_t batch;  // B rows of x and y
  int32_t n_embd;
  // The candidate neurons over all rows (each row's sorted, unique and all
  // owned by the worker in `layer`); -1: every neuron it owns there, for
  // every row (the oracle form: the gate decides).
  int32_t n_ids;
  uint32_t reserved;
};
static_assert(sizeof(StepRequestHeader) == 40, "wire layout");

enum class StepStatus : uint32_t { kOk = 0, kInvalidRequest = 1, kInternal = 2 };

struct StepReplyHeader {
  uint32_t magic;
  uint32_t status;  // StepStatus
  uint64_t step_id;
  int64_t fired;      // neurons that fired, over the batch
  int64_t worker_ns;  // the worker's time for the step
  uint64_t payload_bytes;
};
static_assert(sizeof(StepReplyHeader) == 40, "wire layout");

// The neurons a worker owns: per layer, sorted unique ids below n_ff.
struct ShardLayout {
  int n_layer = 0;
  int n_embd = 0;
  int n_ff = 0;
  int max_batch = 0;  // the largest batch a request may carry
  // Steps compute every owned neuron of the layer (n_ids must be -1; the
  // gate decides): a gpu_worker's hot neurons, as the in-process split.
  bool whole_layers = false;
  std::vector<std::vector<int32_t>> owned;     // [n_layer] sorted ids
  std::vector<std::vector<uint8_t>> is_owned;  // [n_layer][n_ff], filled by Finish()

  // Fills is_owned and checks the lists (sorted, unique, < n_ff).
  Status Finish();
};

// A validated request: pointers into the message bytes.
struct StepRequest {
  uint64_t step_id = 0;
  int layer = 0;
  int batch = 0;
  const float* x = nullptr;  // [batch, n_embd]
  // Row b's candidates: row_n[b] ids, after the earlier rows' in ids. Null
  // (both): every owned neuron of the layer, for every row.
  const int32_t* ids = nullptr;
  const int32_t* row_n = nullptr;
  int64_t n_ids = 0;  // over all rows; with ids null, the layer's owned count
};

// Bytes of a request / reply with these sizes (n_ids over all rows; < 0:
// every owned neuron).
size_t StepRequestBytes(int batch, int n_embd, int64_t n_ids);
size_t StepReplyBytes(int batch, int n_embd);

// The ids a request carries: the sum of row_n[0..batch), or -1 when row_n is
// null (every owned neuron).
int64_t StepIdCount(int batch, const int32_t* row_n);

// Writes a request into `out` (StepRequestBytes long): row b's candidates
// are the row_n[b] ids after the earlier rows' in `ids`; row_n null: every
// neuron the worker owns in `layer`, for every row (ids unused).
void WriteStepRequest(uint64_t step_id, int layer, int batch, int n_embd, const float* x,
                      const int32_t* ids, const int32_t* row_n, uint8_t* out);

// Checks everything the worker is about to read: the size matches the
// header, magic and version, the stage, layer, batch and n_embd against the
// shard, and the ids (sorted, unique, owned in that layer). `data` must be
// 4-byte aligned (shm slots and receive buffers are). The error names the
// field.
Status ParseStepRequest(const uint8_t* data, size_t size, const ShardLayout& shard,
                        StepRequest* out);

// A reply header for a success (payload: y) or an error (payload: message).
StepReplyHeader OkReply(uint64_t step_id, int64_t fired, int64_t worker_ns, size_t y_bytes);
StepReplyHeader ErrorReply(uint64_t step_id, StepStatus status, size_t message_bytes);

// Checks a reply against the step it answers: magic, step id, and the
// payload size (y for kOk); on an error status, returns it with the
// worker's message.
Status ParseStepReply(const uint8_t* data, size_t size, uint64_t step_id, int batch, int n_embd,
                      const float** y, int64_t* fired, int64_t* worker_ns);

}  // namespace pi
