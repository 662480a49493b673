// The worker step protocol as bytes: every message the coordinator sends a
// worker during a session, and what comes back. The same bytes ride a
// shared-memory slot (written once by the sender, read in place by the
// receiver) or a gRPC stream frame, so every transport shares one codec and
// one validator. A step is one of these kinds:
//
//   kFfn     a layer's FFN neurons of a shard (cpu_worker, a gpu_worker's hot
//            neurons): x and each row's candidates in; the partial sum out
//   kBegin   a token into a device's layers (a gpu_worker holding whole
//            layers: device_message.h): its sequence, position and h in;
//            the first layer with a cold part (kCold) or the token's end
//            (kDone) out
//   kResume  a layer's cold sum back into the device; kCold or kDone out
//   kHead    the head alone for an h computed elsewhere; kDone (logits) out
//   kSeqCopy, kSeqSave, kSeqLoad, kSeqDrop
//            a device's sequence KV caches copied, kept under a key, loaded
//            back, forgotten (DeviceBackend::CopySeq ...); kDone (nothing) out
//   kSeqRead, kSeqWrite
//            a range of a kept sequence's bytes out (kDone with the bytes)
//            or in (DeviceBackend::ReadKept, WriteKept; kDone, nothing)
//
//   request = StepRequestHeader | payload            (the kind's: below)
//   reply   = StepReplyHeader   | payload            (status ok)
//                               | message, UTF-8     (any other status)
//
// kFfn's payload: x [batch, n_embd] f32 | row_n [batch] i32 | ids [n_ids] i32
// | gates f32 (row_n and ids only when n_ids >= 0; gates only in a session
// whose hello asked for them, --sparse teal's: each row's candidates' gate
// dots in their order, computed by the coordinator from the thresholded
// input — n_ids of them, or with n_ids -1 batch x the layer's owned count). A batch is one decode
// token of each of several sequences (continuous batching): every row has its own candidates — row
// b's are the row_n[b] ids after the earlier rows' — so each row's sum is the one it would get
// alone, and the worker reads a neuron's rows once for every row needing it. Its reply (kSum): y
// [batch, n_embd] f32.
//
// A worker validates every field before it reads a payload byte: a bad
// message is an error reply (status Status::Code::kInvalid, the message
// naming the field), never a crash or an out-of-bounds read. An error reply
// carries the worker's Status code, so the coordinator sees a CUDA fault as
// kInternal and a refused message as kInvalid.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "common/base/status.h"

namespace pi {

inline constexpr uint32_t kStepProtocolVersion = 7;
inline constexpr uint32_t kStepRequestMagic = 0x54535049;  // bytes "IPST"
inline constexpr uint32_t kStepReplyMagic = 0x52535049;    // bytes "IPSR"
inline constexpr size_t kMaxErrorBytes = 512;              // an error reply's message, at most

enum class StepKind : int32_t {
  kFfn = 0,
  kBegin = 1,
  kResume = 2,
  kHead = 3,
  kSeqCopy = 4,
  kSeqSave = 5,
  kSeqLoad = 6,
  kSeqDrop = 7,
  kSeqRead = 8,
  kSeqWrite = 9,
};
enum class StepReplyKind : int32_t { kSum = 0, kCold = 1, kDone = 2 };
// What comes back when a device's token ends (kBegin, kResume: `out`).
enum class DeviceOut : int32_t { kNothing = 0, kH = 1, kLogits = 2 };

struct StepRequestHeader {
  uint32_t magic;
  uint32_t version;
  uint64_t step_id;  // echoed in the reply: a late reply is never taken for the current step
  int32_t kind;      // StepKind
  int32_t layer;     // kFfn: the layer; kResume: the layer whose cold sum this is;
                     // kSeqCopy: the sequence copied to
  int32_t batch;     // rows of the payload (the device's kinds: 1)
  int32_t n_embd;
  // kFfn: the candidate neurons over all rows (each row's sorted, unique and
  // all owned by the worker in `layer`); -1: every neuron it owns there, for
  // every row (the oracle form: the gate decides). kBegin: 1 for a token
  // that runs dense (a prompt's), else 0. Other kinds: 0.
  int32_t n_ids;
  int32_t seq;  // kBegin: the token's sequence (its KV cache); kSeq*: the sequence
  int32_t pos;  // kBegin: the token's position in it; kSeq*: how many positions
  int32_t out;  // kBegin, kResume: DeviceOut, used when the token's layers end
};
static_assert(sizeof(StepRequestHeader) == 48, "wire layout");

struct StepReplyHeader {
  uint32_t magic;
  uint32_t status;  // Status::Code: 0 ok, else the worker's error code
  uint64_t step_id;
  int32_t kind;       // StepReplyKind
  int32_t layer;      // kCold: the layer whose cold part x is
  int64_t fired;      // kSum: neurons that fired over the batch; kDone: the device's over the token
  int64_t worker_ns;  // the worker's time for the step
  uint32_t mask_words;  // kCold: predicted cold neurons' bit mask words after x (0: none)
  int32_t out;          // kDone: DeviceOut, what the payload is
  uint64_t payload_bytes;
};
static_assert(sizeof(StepReplyHeader) == 56, "wire layout");

// ---- every kind ----------------------------------------------------------------

// Checks a request's header against its size: magic and version, and that
// it is at least a header; the kind's own parser checks the rest.
Status ParseStepHeader(const uint8_t* data, size_t size, StepRequestHeader* h);

// Writes an error reply for `s` (its code and message, cut to
// kMaxErrorBytes and `capacity`) to the request `request` of `size` bytes
// (its step id, when it has one); returns the reply's size.
size_t WriteErrorReply(const uint8_t* request, size_t size, const Status& s, uint8_t* reply,
                       size_t capacity);
// A success reply's header (the payload written after it); returns the
// reply's size.
size_t WriteReplyHeader(uint64_t step_id, StepReplyKind kind, int layer, int64_t fired,
                        int64_t worker_ns, uint32_t mask_words, DeviceOut out, size_t payload_bytes,
                        uint8_t* reply);

// Checks a reply against the step it answers: magic, step id, the payload
// size against the message; *payload points after the header. An error
// reply comes back as a Status with the worker's code and message.
Status ParseReplyHeader(const uint8_t* data, size_t size, uint64_t step_id, StepReplyHeader* h,
                        const uint8_t** payload);

// ---- kFfn: a shard's neurons ------------------------------------------------------

// The neurons a worker owns: per layer, sorted unique ids below n_ff.
struct ShardLayout {
  int n_layer = 0;
  int n_embd = 0;
  int n_ff = 0;
  int max_batch = 0;  // the largest batch a request may carry
  // Steps compute every owned neuron of the layer (n_ids must be -1; the
  // gate decides): a gpu_worker's hot neurons, as the in-process split.
  bool whole_layers = false;
  std::vector<std::vector<int32_t>> owned;  // [n_layer] sorted ids
  // [n_layer] with --sparse cats: the |act(gate x)| a neuron must pass in
  // each layer (NeuronRows::threshold); empty: 0 everywhere (ReLU firing).
  std::vector<float> gate_thresholds;
  // --sparse teal: every request carries its candidates' gate dots, read
  // instead of the shard's gate rows (kHelloGateDots).
  bool gate_dots = false;
  std::vector<std::vector<uint8_t>> is_owned;  // [n_layer][n_ff], filled by Finish()

  // Fills is_owned and checks the lists (sorted, unique, < n_ff).
  Status Finish();
};

// A validated kFfn request: pointers into the message bytes.
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
  // ShardLayout::gate_dots: the candidates' gate dots, row after row in the
  // order of their ids (ids null: of the owned neurons); else null.
  const float* gate_dots = nullptr;
};

// Bytes of a kFfn request / reply with these sizes (n_ids over all rows;
// < 0: every owned neuron; n_gates: the gate dots it carries, 0 without).
size_t StepRequestBytes(int batch, int n_embd, int64_t n_ids, int64_t n_gates = 0);
size_t StepReplyBytes(int batch, int n_embd);
// The most a shard's reply takes: a full-batch sum, or an error message.
size_t StepReplyCapacity(const ShardLayout& shard);

// The ids a request carries: the sum of row_n[0..batch), or -1 when row_n is
// null (every owned neuron).
int64_t StepIdCount(int batch, const int32_t* row_n);

// Writes a kFfn request into `out` (StepRequestBytes long): row b's
// candidates are the row_n[b] ids after the earlier rows' in `ids`; row_n
// null: every neuron the worker owns in `layer`, for every row (ids unused).
// Returns where the gate dots go (a session with ShardLayout::gate_dots:
// the caller writes them), just past the ids.
float* WriteStepRequest(uint64_t step_id, int layer, int batch, int n_embd, const float* x,
                        const int32_t* ids, const int32_t* row_n, uint8_t* out);

// Checks everything the worker is about to read: the header, the kind, the
// layer, batch and n_embd against the shard, the size against the header,
// and the ids (sorted, unique, owned in that layer). `data` must be 4-byte
// aligned (shm slots and receive buffers are). The error names the field.
Status ParseStepRequest(const uint8_t* data, size_t size, const ShardLayout& shard,
                        StepRequest* out);

// Checks a kSum reply to the step `step_id` of `batch` rows: *y points at
// its sums.
Status ParseStepReply(const uint8_t* data, size_t size, uint64_t step_id, int batch, int n_embd,
                      const float** y, int64_t* fired, int64_t* worker_ns);

}  // namespace pi
