// Engine: the single-process forward pass of a llama-family model — the
// reference the multi-process system must match and the quick-start path.
//
//   tokens ─▶ embed ─▶ [AttentionBlock ─▶ FfnBlock] × n_layer ─▶ norm ─▶ output ─▶ logits
//
// (falcon's parallel residual: AttentionBlock and FfnBlock both read the
// layer input and both add into the residual stream.)
//
// Prompts are evaluated in batches of up to n_batch tokens (each weight read
// once per batch); decode is a batch of one. All buffers (KV cache included)
// are allocated in Create: Eval allocates nothing unless all_logits asks for
// more rows than any earlier call.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/base/status.h"
#include "common/base/thread_pool.h"
#include "common/compute/attention_block.h"
#include "common/compute/ffn_observer.h"
#include "common/model/kv_cache.h"
#include "common/model/llama_model.h"
#include "common/model/weight_repack.h"
#include "common/shard/device_backend.h"
#include "common/shard/shard.h"
#include "coordinator/engine/saved_seq.h"
#include "coordinator/route/ffn_block.h"

namespace pi {

struct EngineOptions {
  int n_threads = 1;
  int n_ctx = 0;     // 0: the model's context_length, capped at 4096
  int n_batch = 64;  // prompt tokens per forward batch
  // KV cache rows (kv_cache.h): f16 as llama.cpp (half of f32's bytes; the
  // demo's perplexity moves in the 6th digit), f32 to be exact, or q8_0.
  DType cache_type_k = DType::kF16;
  DType cache_type_v = DType::kF16;
  SparseMode sparse = SparseMode::kOff;  // which FFN neurons a decode step computes
  // SparseMode::kPredictor's score threshold (--sparse-threshold); unset: the
  // LLAMA_SPARSE_PRED_THRESHOLD environment variable, else the file's
  // powerinfer.sparse_threshold (common/compute/predictor.h).
  std::optional<float> sparse_threshold;
  // SparseMode::kCats: per layer, the |act(gate x)| a neuron must exceed to
  // be computed (gate_thresholds.h makes them from a stats file's quantiles).
  std::vector<float> gate_thresholds;
  // SparseMode::kTeal, on top of gate_thresholds: per layer, the |x| an
  // entry of each thresholded input must exceed to be read (indexed by
  // ProjectionInput: attention input, attention output, FFN input). The
  // layers need their transposed copies (weight_transpose.h).
  std::vector<float> input_thresholds[kProjectionInputs];
  // The hot/cold FFN split (coordinator/route/ffn_block.h): when set, single-token steps
  // compute each layer's hot neurons — the shard's owned() — on `hot_shard`
  // (HostHotShard in this process, or a gpu_worker process),
  // a whole layer per step, while the CPU computes the cold rest (all of it,
  // or with --sparse predictor the predicted part); the hot neurons are
  // computed here while the shard is lost. Exclusive with device; not owned;
  // must outlive the engine.
  Shard* hot_shard = nullptr;
  // A GPU holding a prefix of the layers (attention, KV cache, predictor,
  // hot neurons) and maybe the head (common/shard/device_backend.h), already
  // Load()ed for this model, cache types and at least this context; must outlive the
  // engine. Tokens then run one at a time: the device's layers there (their
  // cold neurons here, meanwhile), the rest here. Exclusive with hot_shard.
  // A device that fails (a gpu_worker process lost) is recovered and its KV
  // cache refilled by replaying the sequence's tokens: the same answer.
  DeviceBackend* device = nullptr;
  // Sequences evaluated together by EvalBatch (continuous batching), each
  // with a KV cache of n_ctx positions; sequence 0 is also Eval's. A device
  // must hold at least as many (DevicePlan::n_seq).
  int n_seq = 1;
  // Cold neurons on worker processes (common/shard/shard.h; RemoteShards):
  // disjoint sets, none hot; not owned; must outlive the engine. Sparse
  // single-token steps send each shard its share; a shard that fails is
  // replaced by this process's own computation (shard_failures()).
  std::vector<Shard*> cold_shards;
};

// What of the model an engine with these options multiplies on this host's
// dense kernels, for RepackModelWeights: attention and the head but the
// layers and head a device holds; the FFN only when every step computes it
// here, densely (sparse steps and hot/cold splits read FFN rows one by one,
// from the file's layout).
RepackScope HostRepackScope(const EngineOptions& o);

class Engine {
 public:
  // `model` must outlive the engine.
  // Fails, naming -c and -b, when the KV cache and buffers would not fit in
  // the memory available (common/base/memory_limits.h).
  static Status Create(const LlamaModel* model, const EngineOptions& options,
                       std::unique_ptr<Engine>* out);
  // The context an engine gets for a requested -c: the request, or with 0 the
  // model's trained context capped at 4096.
  static int ContextSize(const LlamaConfig& config, int requested) {
    return requested > 0 ? requested : std::min(config.n_ctx_train, 4096);
  }
  // The bytes Create allocates for these sizes (an estimate from above; -1
  // when it overflows).
  static int64_t WorkingBytes(const LlamaConfig& config, int n_ctx, int n_batch, int n_threads,
                              DType cache_type_k, DType cache_type_v);

  // Evaluates `n` tokens at positions n_past() .. n_past() + n - 1. Fails,
  // changing nothing, when a token id is out of range or the context would
  // overflow. Afterwards logits() holds the last token's logits, or with
  // all_logits one row per evaluated token. Logits that are NaN or infinite
  // are an error naming where the first non-finite value appeared (the
  // embedding, a host layer's attention or FFN, the device's layers, the
  // head); the context is then spoiled and the engine must be recreated.
  Status Eval(const int32_t* tokens, int n, bool all_logits = false);

  const float* logits() const { return logits_.data(); }

  // Several sequences in one step (EngineOptions::n_seq). With a device
  // (loaded for at least n_seq sequences) the rows run one at a time, as Eval
  // runs tokens with one; a device lost for good fails the step midway, the
  // rows before it evaluated.
  // Each row is a sequence's next token, at its next position (rows of one
  // sequence in order); rows that ask for logits get them, in row order, at
  // batch_logits(0), batch_logits(1), ... Every weight row is read once for
  // all the rows (projections, head, dense FFN), and a run of consecutive
  // rows of one sequence is evaluated as Eval evaluates the same tokens —
  // one row: a decode step (sparse where Eval's would be), several: a
  // prompt batch — so each sequence's logits equal, bit for bit, those of
  // evaluating it alone in the same runs. At most max_batch_rows() rows and
  // n_seq asking for logits. Fails, changing nothing, on a bad sequence,
  // token or a full context.
  // A row with `hidden` keeps its final-normed hidden state (what the head
  // reads: the rows an embedding pools) at batch_hidden(i), i the row's
  // index; on the host path only (with a device, an error before anything
  // changes).
  struct BatchRow {
    int seq = 0;
    int32_t token = 0;
    bool logits = false;
    bool hidden = false;
  };
  Status EvalBatch(const BatchRow* rows, int n);
  const float* batch_logits(int k) const {
    return logits_.data() + static_cast<size_t>(k) * n_vocab();
  }
  const float* batch_hidden(int i) const {
    return hidden_.data() + static_cast<size_t>(i) * model_->config.n_embd;
  }
  int n_seq() const { return static_cast<int>(extra_caches_.size()) + 1; }
  int max_batch_rows() const { return max_rows_; }
  int n_batch() const { return n_batch_; }  // where Eval cuts a prompt (-b)
  int seq_n_past(int seq) const { return seq == 0 ? n_past_ : extra_n_past_[seq - 1]; }
  // Forgets sequence `seq` (0: as Reset).
  void ResetSeq(int seq) {
    if (seq == 0) {
      Reset();
    } else {
      extra_n_past_[seq - 1] = 0;
    }
  }
  // Keeps the first n positions of sequence `seq` (n <= seq_n_past(seq)) and
  // forgets the rest: the next tokens go to position n on, overwriting what
  // was there (a prompt cache's reused prefix, prompt_cache.h).
  void KeepSeq(int seq, int n) {
    if (n <= 0) return ResetSeq(seq);
    if (n < SeqPast(seq)) SeqPast(seq) = n;
  }
  // Sequence `dst` takes the first n positions of sequence `src` (n <=
  // seq_n_past(src)) as they are stored, and goes on from position n:
  // another sequence's prompt shared, the same bits as evaluating it again
  // in the same runs. With a device, its layers' positions are copied there.
  Status CopySeq(int src, int dst, int n);
  // The first n positions of sequence `seq` kept apart from the engine (a
  // prompt store's entry: prompt_store.h; with a device, its layers' part
  // kept there), and the first n of a saved one's positions back into a
  // sequence, which then holds n. LoadSeq fails, changing nothing, when the
  // saved sequence is not this engine's kind (a device's part, or none) or
  // its device part was lost with a device since recovered (kNotFound).
  Status SaveSeq(int seq, int n, SavedSeq* out);
  Status LoadSeq(int seq, const SavedSeq& saved, int n);
  // A saved sequence's device part as bytes (its device_bytes, in the
  // device's KeptLayout), and back: `saved`, its tokens, dense flags and
  // host part set, gains a device part written from `bytes` (a slot file's,
  // slot_file.h). Without a device there is no part: 0 bytes.
  Status ReadSavedDevicePart(const SavedSeq& saved, std::vector<uint8_t>* bytes);
  Status WriteSavedDevicePart(const std::vector<uint8_t>& bytes, SavedSeq* saved);
  // The device's plan and KeptLayout (null and "" without one).
  const DevicePlan* device_plan() const { return device_ ? &device_->plan() : nullptr; }
  std::string device_kept_layout() const { return device_ ? device_->KeptLayout() : ""; }
  // FFN neurons whose up and down rows the last Eval computed, over all
  // layers (n_layer * n_ff * tokens when dense; in sparse decode steps the
  // ones that fired), and the gate rows it read (sparse steps also read the
  // gate rows of candidates that did not fire).
  int64_t last_ffn_neurons() const { return last_ffn_neurons_; }
  int64_t last_ffn_gate_rows() const { return last_ffn_gate_rows_; }
  // Of last_ffn_neurons(), those computed where the placement put them in
  // VRAM (the hot neurons of a split: the GPU's share of the fired neurons).
  int64_t last_ffn_hot_fired() const { return last_ffn_hot_fired_; }
  // Of last_ffn_neurons(), those of `layer`; complete only when
  // ffn_layers_counted() (a device counts its hot neurons over its layers
  // together).
  int64_t last_ffn_neurons(int layer) const { return last_layer_neurons_[layer]; }
  bool ffn_layers_counted() const { return !device_ || device_->plan().n_layers == 0; }
  // With a device (EngineOptions::device), where the last Eval's device
  // steps spent their time here: waiting on the device (its layers and head,
  // the transfers included) and computing its layers' cold parts on this
  // host's threads, and how many cold parts there were (hand-offs). The rest
  // of a token (embedding, host layers, head here, sampling) is neither.
  double last_device_wait_seconds() const { return last_device_seconds_; }
  double last_cold_seconds() const { return last_cold_seconds_; }
  int64_t last_cold_layers() const { return last_cold_layers_; }
  // Where the CPU's sparse FFN time went (every sparse step's, or the cold
  // parts' on the device path), phase by phase, summed since the engine began.
  const NeuronFfnTimes& ffn_neuron_times() const { return ffn_.neuron_times(); }
  int n_vocab() const { return model_->config.n_vocab; }
  int n_past() const { return n_past_; }
  int n_ctx() const { return n_ctx_; }
  int n_threads() const { return pool_->size(); }
  const LlamaModel& model() const { return *model_; }
  int64_t kv_cache_bytes() const { return cache_.bytes(); }
  DType cache_type_k() const { return cache_.k_type(); }
  DType cache_type_v() const { return cache_.v_type(); }
  // A sequence's KV cache bytes per position here (its host layers'; a
  // device holds its own layers').
  int64_t host_kv_bytes_per_position() const { return cache_.PrefixBytes(1, FirstHostLayer()); }
  // Cold shard failures (their neurons ran here until they recovered), the
  // recoveries, and the last failure's message ("cpu worker 1234: killed by
  // signal 9 ...").
  int64_t shard_failures() const { return ffn_.shard_failures(); }
  int64_t shard_recoveries() const { return ffn_.shard_recoveries(); }
  const std::string& shard_error() const { return ffn_.shard_error(); }

  // The predictor threshold in use (SparseMode::kPredictor; else 0).
  float predictor_threshold() const { return predictor_threshold_; }

  // FFN neurons computed in `layer` since the engine was created, on the hot
  // side (where the placement put them in VRAM: a gpu worker, the hot
  // backend) or the cold one (the CPU's: this process and cpu workers); a
  // device's hot neurons are counted over its layers together (layer -1).
  // Safe to read while another thread runs Eval.
  int64_t ffn_computed(int layer, bool hot) const {
    return computed_[2 * (layer + 1) + (hot ? 1 : 0)].load(std::memory_order_relaxed);
  }

  // Device failures (a gpu_worker lost mid-token), the recoveries (a fresh
  // device refilled by replaying the context's tokens, the token run again),
  // and the last failure's message.
  // Layers run on a device (EngineOptions::device): no hidden states here.
  bool has_device() const { return device_ != nullptr; }
  int64_t device_failures() const { return device_failures_; }
  int64_t device_recoveries() const { return device_recoveries_; }
  const std::string& device_error() const { return device_error_; }

  // Sets (or with nullptr clears) the observer told of every layer's FFN
  // input and activations during Eval. Not owned; must outlive its use. Unset costs a
  // pointer test per layer.
  void SetFfnObserver(FfnObserver* observer) {
    observer_ = observer;
    attention_.set_observer(observer);
    ffn_.KeepGateActivations(observer != nullptr);
  }
  // --sparse teal: the share of the thresholded inputs' entries read since
  // the last ResetInputCounts (1 when none was thresholded).
  double input_kept_share() const {
    const int64_t seen = attention_.inputs_seen() + ffn_.inputs_seen();
    return seen == 0 ? 1.0
                     : static_cast<double>(attention_.inputs_kept() + ffn_.inputs_kept()) / seen;
  }
  void ResetInputCounts() {
    attention_.ResetInputCounts();
    ffn_.ResetInputCounts();
  }

  // Forgets the context (the KV cache is overwritten as positions are reused).
  void Reset() {
    n_past_ = 0;
    nonfinite_part_ = nullptr;
  }

 private:
  Engine() = default;
  void ForwardBatch(const int32_t* tokens, int n, float* logits_out, bool all_logits);
  // One token of sequence seq at its next position through the device's
  // layers, then the host's; logits_out null: only the KV caches matter.
  // Advances the sequence (and records the token) only when it succeeds.
  // `dense`: a prompt's token (one of a run of several), which runs dense
  // as a prompt batch does without a device (--sparse cats' thresholds off).
  Status ForwardDeviceToken(int seq, int32_t token, bool dense, float* logits_out);
  // ForwardDeviceToken, and when the device fails, Recover() and the token
  // again once.
  Status DeviceToken(int seq, int32_t token, bool dense, float* logits_out);
  // EvalBatch's rows (validated) with a device: one at a time.
  Status DeviceBatch(const BatchRow* rows, int n);
  // The device's layers for the embedding row in h_ at `pos` of sequence
  // seq, their cold parts computed here; then h (h_out) or the logits come
  // back, or nothing.
  Status RunDeviceLayers(int seq, int pos, bool dense, float* h_out, float* logits_out);
  void NoteDeviceFailure(const Status& s);
  // The first layer whose KV cache is this host's (the device holds those before it).
  int FirstHostLayer() const { return device_ ? device_->plan().n_layers : 0; }
  KvCache* SeqCache(int seq) { return seq == 0 ? &cache_ : &extra_caches_[seq - 1]; }
  int32_t* SeqTokens(int seq) { return tokens_.data() + static_cast<size_t>(seq) * n_ctx_; }
  int& SeqPast(int seq) { return seq == 0 ? n_past_ : extra_n_past_[seq - 1]; }
  // logits_out[k] = output(norm(h_ row rows[k])) for k < n.
  void HostHeadRows(const int* rows, int n, float* logits_out);
  // Adds the FFN's last step to the counters above.
  void CountFfn(int il);
  // Zeroes the last_* counters at the start of an Eval or EvalBatch.
  void ResetStepCounters();
  void CountComputed(int layer, bool hot, int64_t n) {
    computed_[2 * (layer + 1) + (hot ? 1 : 0)].fetch_add(n, std::memory_order_relaxed);
    if (layer >= 0) last_layer_neurons_[layer] += n;
  }
  // Device_->Recover(), then every sequence's tokens replayed through it.
  Status RecoverDevice();
  // The host's layers [first, n_layer) for the first n rows of h_: row i at
  // position row_pos_[i] of *row_caches_[i], in runs of run_length_[i] rows
  // of one sequence; the FFN observer told of each call. The one layer loop
  // of every path: a prompt batch (Eval), a step of several sequences
  // (EvalBatch), the layers after a device's (a row at a time).
  void ForwardRows(int first, int n);
  // logits_out = output(norm(h_)) for `rows` rows from h_ row `first`.
  void HostHead(int first, int rows, float* logits_out);
  // Records (layer, part) as the first place non-finite values appeared when
  // the first `batch` rows of h_ hold any and nothing was recorded yet.
  // Allocates nothing: it runs on every decode step.
  void NoteNonFinite(int batch, int layer, const char* part);
  // The error for non-finite values among `n` logits, if any.
  Status CheckLogits(const float* logits, size_t n) const;

  const LlamaModel* model_ = nullptr;
  int n_ctx_ = 0;
  int n_batch_ = 0;
  int64_t last_ffn_neurons_ = 0;
  int64_t last_ffn_gate_rows_ = 0;
  int64_t last_ffn_hot_fired_ = 0;
  std::vector<int64_t> last_layer_neurons_;  // [n_layer] the last Eval's, by layer
  double last_device_seconds_ = 0, last_cold_seconds_ = 0;
  int64_t last_cold_layers_ = 0;
  float predictor_threshold_ = 0.0f;
  int n_past_ = 0;
  // Where NaN/inf first appeared: a part ("attention", "FFN", ...) and its
  // layer; null when none has.
  const char* nonfinite_part_ = nullptr;
  int nonfinite_layer_ = -1;
  std::unique_ptr<ThreadPool> pool_;
  KvCache cache_;                      // sequence 0's
  std::vector<KvCache> extra_caches_;  // sequences 1 .. n_seq - 1
  std::vector<int> extra_n_past_;
  int max_rows_ = 0;  // rows an EvalBatch may carry (n_batch + n_seq)
  std::vector<int> row_pos_, logit_rows_, single_rows_;
  // Each row's prompt run length (ParallelMatMul's run_length): a prompt
  // batch's rows take the matrix-matrix kernels as one run.
  std::vector<int32_t> run_length_;
  std::vector<KvCache*> row_caches_;
  AttentionBlock attention_;
  FfnBlock ffn_;
  FfnObserver* observer_ = nullptr;
  DeviceBackend* device_ = nullptr;
  bool device_lost_ = false;     // failed and not yet brought back
  uint64_t next_saved_key_ = 0;  // SaveSeq's keys on the device
  int64_t device_failures_ = 0, device_recoveries_ = 0;
  std::string device_error_;
  std::vector<int32_t> tokens_;       // [n_seq][n_ctx] the sequences' tokens (a device's replay)
  std::vector<uint8_t> token_dense_;  // [n_seq][n_ctx] 1: the device ran it dense (the replay's)
  // [n_layer + 1][cold, hot]: ffn_computed()'s counts, layer -1 first.
  std::unique_ptr<std::atomic<int64_t>[]> computed_;
  std::vector<float> h_;        // [n_batch, n_embd] residual stream
  std::vector<float> x_;        // [n_batch, n_embd] final-normed
  std::vector<float> hidden_;   // [max_rows, n_embd] EvalBatch's kept rows (on first use)
  std::vector<float> inp_;      // [n_batch, n_embd] layer input (parallel residual only)
  std::vector<float> ffn_out_;  // [n_batch, n_embd] the FFN's sum (post-norms only)
  std::vector<uint8_t> q8_;     // prepared output-layer input
  std::vector<float> logits_;   // [rows, n_vocab]
};

}  // namespace pi
