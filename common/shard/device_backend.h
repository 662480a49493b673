// DeviceBackend: the part of the model a GPU holds, and the one decode step
// it runs with the residual stream resident in its memory. Where
// a hot Shard (common/shard/shard.h) takes only the hot FFN rows, this takes what a
// placement gives the device (common/plan/placement.h):
//
//   layers [first_layer, n_layers): attention (norms, QKV, RoPE, the KV
//     cache, O), the predictor, and the layer's hot FFN neurons — a prefix
//     of the model's layers for one GPU; with several GPUs each holds a
//     range, chained in layer order (coordinator/route/device_chain.h);
//   the output norm and head (holds_output);
//
// A token runs through it as follows (the engine, coordinator/engine/engine.h, is
// the caller):
//
//   BeginToken(h: embedding row, or the residual after layer first_layer - 1,
//              dense: a prompt's token)
//   for il in [first_layer, n_layers):
//     RunLayer(il, &cold)            device: attention, FFN norm, [predictor],
//     if cold.x:                     hot FFN; when the layer has cold neurons,
//       cold.y = CPU's FFN part        returns once x (and the cold mask) is in
//                                    host memory, and the hot part runs on
//   FinishToken(h or logits)           meanwhile; cold.y is added on the device
//                                    before anything reads h again
//
// Layers whose neurons are all hot exchange nothing with the host: the
// backend may run several of them on one launch. Per token only the
// embedding row goes in, and per layer with a cold part one normed FFN
// input comes out and one partial sum goes back. Prompts run token by token.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/base/status.h"
#include "common/compute/sparse_mode.h"
#include "common/model/llama_model.h"
#include "kernels/dtype.h"

namespace pi {

struct DevicePlan {
  // Layers [first_layer, n_layers) run on the device. The backends run a
  // prefix (first_layer 0); gpu_worker/layer_range_device.h runs a range on
  // any of them.
  int first_layer = 0;
  int n_layers = 0;
  bool output = false;  // output norm and head on the device
  // Per model layer, the sorted ids of its neurons on the device (empty for
  // layers outside [first_layer, n_layers)). A layer of the range with fewer
  // than n_ff of them has a cold part, computed by the host.
  std::vector<std::vector<int32_t>> hot;
  int n_ctx = 0;  // KV cache positions, per sequence
  // Sequences with a KV cache each (continuous batching, -np): a token names
  // its sequence, and its position is one of that sequence's.
  int n_seq = 1;
  DType cache_type_k = DType::kF16, cache_type_v = DType::kF16;
  // kPredictor: the device evaluates each layer's predictor and hands the
  // host the cold neurons it predicts (scores >= threshold); otherwise the
  // host's candidates are all its cold neurons.
  SparseMode mode = SparseMode::kOff;
  float threshold = 0.0f;
  // kCats and kTeal: per model layer, the |act(gate x)| a hot neuron must
  // exceed to be computed (gate_thresholds.h), on tokens not begun dense;
  // else empty.
  std::vector<float> gate_thresholds;
  // kTeal: per ProjectionInput and model layer, the |x| an entry of that
  // input must exceed to be read — q, k and v, o and the gate read only the
  // entries that pass (up reads the whole FFN input), on tokens not begun
  // dense; else empty.
  std::vector<float> input_thresholds[kProjectionInputs];
};

// What a layer with a cold part hands the host: x and the candidates are
// readable, and y writable, until the next call on the backend.
struct ColdStep {
  const float* x = nullptr;        // [n_embd] the normed FFN input; null: no cold part
  const uint32_t* mask = nullptr;  // predictor mode: bit i = cold neuron i predicted
                                   // to fire ([ceil(n_ff / 32)] words); else null
  float* y = nullptr;              // [n_embd] zeroed: the host adds its partial sum here
};

// Bytes a device running `plan` keeps for n positions of a sequence
// (DeviceBackend::SaveSeq): the keys and values of its layers.
int64_t SavedSeqBytes(const LlamaConfig& c, const DevicePlan& plan, int n);

// "format[first_layer,n_layers)": a backend's KeptLayout, `format` naming
// how its kept bytes are laid out.
std::string KeptLayoutName(const char* format, const DevicePlan& plan);

// What every backend checks of a sequence operation's arguments (CopySeq,
// SaveSeq, LoadSeq): the sequence in [0, n_seq) and n positions in [0,
// n_ctx]; the error names `backend`.
Status CheckDeviceSeq(const DevicePlan& plan, int seq, int n, const char* backend);

// ReadKept and WriteKept on a device without layers, which keeps nothing:
// Ok for an empty range at 0, else an error naming `backend`.
Status NothingKept(int64_t offset, int64_t size, const char* backend);

// What every backend checks of a plan before loading it: a prefix of the
// layers (a range runs through gpu_worker/layer_range_device.h), one hot set
// per model layer and hot neurons only in the device's layers (valid ids),
// the thresholds its mode takes (and no others), and — when it holds
// anything — a context and 1 to 256 sequences. The error names `backend`.
Status CheckDevicePlan(const LlamaModel& model, const DevicePlan& plan, const char* backend);

class DeviceBackend {
 public:
  virtual ~DeviceBackend() = default;
  virtual const char* name() const = 0;

  // Copies the weights the plan gives the device and readies the step. The
  // model must outlive the backend.
  virtual Status Load(const LlamaModel& model, const DevicePlan& plan) = 0;
  virtual const DevicePlan& plan() const = 0;

  // Starts a token of sequence seq < n_seq: h [n_embd] (its embedding row,
  // or the residual stream after layer first_layer - 1) at position pos <
  // n_ctx of that sequence's KV cache. `dense`: a prompt's token, whose hot
  // neurons all run — the gate thresholds of kCats apply to decode steps
  // only, as on the host, where a prompt batch runs dense.
  virtual void BeginToken(const float* h, int seq, int pos, bool dense) = 0;
  // Runs layer il (the next one, in order, from first_layer up to n_layers -
  // 1). When the layer has a
  // cold part, returns with *cold filled in; otherwise cold->x is null.
  virtual Status RunLayer(int il, ColdStep* cold) = 0;
  // Ends the token after layer n_layers - 1: with `h_out` the residual
  // stream comes back to the host (more layers follow there); with `logits`
  // (holds_output only) the head's output; with neither, only the KV cache
  // matters. *hot_fired: the device's fired neurons over the token's
  // layers. Blocks until done.
  virtual Status FinishToken(float* h_out, float* logits, int64_t* hot_fired) = 0;
  // The head alone for a residual computed on the host (holds_output, when
  // n_layers < n_layer): logits = output(norm(h)). Blocks until done.
  virtual Status Head(const float* h, float* logits) = 0;

  // A sequence's KV cache over the device's layers, kept and shared where it
  // lives (the engine's CopySeq, SaveSeq and LoadSeq with a device: n
  // choices sharing a prompt, the prompt store, coordinator/engine/
  // prompt_store.h), so a kept prompt never crosses to the coordinator.
  // Called between tokens only. A device with no layers (the head alone)
  // keeps nothing and answers Ok.
  //   CopySeq  sequence dst takes the first n positions of src, as stored;
  //   SaveSeq  the first n positions of seq kept under `key` (new: a key in
  //            use is an error) in the device's host memory — SavedSeqBytes(n)
  //            of them;
  //   LoadSeq  the first n of what `key` keeps (n <= its positions) into
  //            sequence seq; an unknown key is a kNotFound error, nothing
  //            changed;
  //   DropSeq  forgets what `key` keeps (an unknown key: nothing).
  // A device recovered (Recover()) keeps nothing of what its lost
  // predecessor kept.
  virtual Status CopySeq(int src, int dst, int n) = 0;
  virtual Status SaveSeq(int seq, int n, uint64_t key) = 0;
  virtual Status LoadSeq(uint64_t key, int seq, int n) = 0;
  virtual Status DropSeq(uint64_t key) = 0;

  // What SaveSeq keeps, out of the device and back, a range of bytes at a
  // time (a slot file's device part: coordinator/engine/slot_file.h):
  //   ReadKept   bytes [offset, offset + size) of the SavedSeqBytes(n) that
  //              `key` keeps (n: exactly its positions);
  //   WriteKept  the same range of a new entry of n positions under `key`,
  //              written in order: offset 0 makes it (a key in use is an
  //              error), each later range starts where the last ended, and
  //              LoadSeq takes it once all its bytes are there.
  // The bytes are in the layout KeptLayout() names: a device whose layout
  // is equal takes another's bytes. A device with no layers keeps nothing
  // (0 bytes).
  virtual Status ReadKept(uint64_t key, int n, int64_t offset, int64_t size, uint8_t* out) = 0;
  virtual Status WriteKept(uint64_t key, int n, int64_t offset, const uint8_t* data,
                           int64_t size) = 0;
  // The backend's layout of kept bytes and the layers they hold,
  // "cuda[0,12)" (KeptLayoutName); a chain's joins its members'.
  virtual std::string KeptLayout() const = 0;

  // Errors: a device in this process returns its fault (a CUDA error,
  // kInternal) from RunLayer, FinishToken or Head, and from every call after;
  // one in another process (coordinator/workers/device_worker.h) returns the
  // worker's loss — killed, stopped past its deadline — as an error from
  // RunLayer, FinishToken or Head. Its KV cache is then gone: Recover()
  // brings up a fresh device with the same plan (and an empty cache), which
  // the engine refills by replaying the sequence's tokens.
  virtual Status Recover() { return Status::Error("the %s device cannot be recovered", name()); }

  // Bytes of weights and KV cache in device memory, and every allocation.
  virtual int64_t resident_bytes() const = 0;
  virtual int64_t device_bytes() const = 0;
};

}  // namespace pi
