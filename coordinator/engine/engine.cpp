#include "coordinator/engine/engine.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iterator>
#include <string>

#include "common/base/memory_limits.h"
#include "common/base/progress.h"
#include "common/compute/parallel_matmul.h"
#include "common/compute/predictor.h"
#include "common/model/weight_transpose.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/quant.h"

namespace pi {

int64_t Engine::WorkingBytes(const LlamaConfig& c, int n_ctx, int n_batch, int n_threads,
                             DType cache_type_k, DType cache_type_v) {
  const int64_t kv =
      KvCache::BytesFor(c.n_layer, n_ctx, c.n_head_kv, c.head_dim, cache_type_k, cache_type_v);
  if (kv < 0) return -1;
  // Per batch row, the f32 activations of the residual stream, attention and
  // the FFN with their Q8_0 copies (an estimate from above); per thread, the
  // attention scores of an item's queries (at least 16) over the context;
  // the logits.
  const int64_t per_row = 4 * (24 * int64_t{c.n_embd} + 2 * int64_t{c.q_dim()} +
                               2 * int64_t{c.kv_dim()} + 3 * int64_t{c.n_ff});
  const int64_t queries = std::max<int64_t>(16, c.n_head / std::max(c.n_head_kv, 1));
  const int64_t scratch =
      per_row * n_batch + 4 * int64_t{n_threads} * queries * n_ctx + 4 * int64_t{c.n_vocab};
  return kv > INT64_MAX - scratch ? -1 : kv + scratch;
}

// What --sparse teal adds: thresholds for each input of each layer, the
// transposed copies, and shards (and a device) that take the host's gate
// dots or the thresholds themselves.
static Status CheckTealOptions(const LlamaModel& model, const EngineOptions& o) {
  const LlamaConfig& c = model.config;
  PI_RETURN_IF_ERROR(CheckInputThresholds(o.input_thresholds, c.n_layer, "--sparse teal"));
  for (int l = 0; l < c.n_layer; ++l) {
    if (!HasTransposedCopies(model.layers[l])) {
      return Status::Invalid(
          "--sparse teal: layer %d has no transposed copies (weight_transpose.h)", l);
    }
  }
  // The shards decide their neurons by the dots the host computes from the
  // thresholded input: each must take them.
  std::vector<Shard*> shards = o.cold_shards;
  if (o.hot_shard) shards.push_back(o.hot_shard);
  for (const Shard* s : shards) {
    if (!s->takes_gate_dots()) {
      return Status::Invalid("--sparse teal: %s: opened without its gate dots", s->name());
    }
  }
  return Status::Ok();
}

// What --sparse cats needs: a threshold per layer and each passing neuron's
// down row (ffn_down_t).
static Status CheckCatsOptions(const LlamaModel& model, const EngineOptions& o) {
  const LlamaConfig& c = model.config;
  if (o.sparse == SparseMode::kTeal) PI_RETURN_IF_ERROR(CheckTealOptions(model, o));
  PI_RETURN_IF_ERROR(CheckGateThresholds(o.gate_thresholds, c.n_layer, false, "--sparse cats"));
  return CheckCatsSupport(model);
}

Status Engine::Create(const LlamaModel* model, const EngineOptions& options,
                      std::unique_ptr<Engine>* out) {
  const LlamaConfig& c = model->config;
  if (options.n_threads < 1 || options.n_threads > 512) {
    return Status::Error("invalid thread count %d", options.n_threads);
  }
  if (options.n_ctx < 0 || options.n_batch < 1) {
    return Status::Error("invalid context %d or batch %d", options.n_ctx, options.n_batch);
  }
  float threshold = 0.0f;
  if (options.sparse == SparseMode::kPredictor) {
    PI_RETURN_IF_ERROR(CheckPredictorPresent(*model));
    PI_RETURN_IF_ERROR(ResolvePredictorThreshold(c, options.sparse_threshold, &threshold));
  }
  if (UsesGateThresholds(options.sparse)) PI_RETURN_IF_ERROR(CheckCatsOptions(*model, options));
  const int n_ctx = ContextSize(c, options.n_ctx);
  const int n_batch = std::min(options.n_batch, n_ctx);
  if (options.n_seq < 1 || options.n_seq > 256) {
    return Status::Error("invalid sequence count %d (-np: 1 to 256)", options.n_seq);
  }
  const int max_rows = n_batch + options.n_seq - 1;
  const int64_t one_cache = KvCache::BytesFor(c.n_layer, n_ctx, c.n_head_kv, c.head_dim,
                                              options.cache_type_k, options.cache_type_v);
  const int64_t working = WorkingBytes(c, n_ctx, max_rows, options.n_threads, options.cache_type_k,
                                       options.cache_type_v);
  const std::string caches =
      options.n_seq == 1 ? std::string("the KV cache and buffers for a context of ")
                         : "the KV caches and buffers for " + std::to_string(options.n_seq) +
                               " sequences (-np), each with a context of ";
  PI_RETURN_IF_ERROR(CheckMemory(
      caches + std::to_string(n_ctx) + " tokens (-c) and batches of " + std::to_string(n_batch) +
          " (-b)",
      working < 0 || one_cache < 0
          ? -1
          : working + (options.n_seq - 1) * one_cache + int64_t{4} * options.n_seq * c.n_vocab));
  std::unique_ptr<Engine> e(new Engine());
  e->predictor_threshold_ = threshold;
  e->model_ = model;
  e->n_ctx_ = n_ctx;
  e->n_batch_ = n_batch;
  e->max_rows_ = max_rows;
  e->pool_ = std::make_unique<ThreadPool>(options.n_threads);
  PI_RETURN_IF_ERROR(e->cache_.Init(c.n_layer, e->n_ctx_, c.n_head_kv, c.head_dim,
                                    options.cache_type_k, options.cache_type_v));
  e->extra_caches_.resize(options.n_seq - 1);
  for (KvCache& cache : e->extra_caches_) {
    PI_RETURN_IF_ERROR(cache.Init(c.n_layer, e->n_ctx_, c.n_head_kv, c.head_dim,
                                  options.cache_type_k, options.cache_type_v));
  }
  e->extra_n_past_.assign(options.n_seq - 1, 0);
  e->row_pos_.assign(max_rows, 0);
  e->row_caches_.assign(max_rows, nullptr);
  e->logit_rows_.assign(options.n_seq, 0);
  e->single_rows_.assign(max_rows, 0);
  e->run_length_.assign(std::max(max_rows, n_batch), 0);
  e->attention_.Init(c, max_rows, e->n_ctx_, options.n_threads, options.cache_type_k);
  e->ffn_.Init(*model, max_rows, options.sparse);
  if (options.sparse == SparseMode::kPredictor) e->ffn_.InitPredictor(threshold);
  if (UsesGateThresholds(options.sparse)) e->ffn_.InitGateThresholds(options.gate_thresholds);
  if (options.sparse == SparseMode::kTeal) {
    const auto& t = options.input_thresholds;
    e->attention_.SetInputThresholds(t[static_cast<int>(ProjectionInput::kAttention)],
                                     t[static_cast<int>(ProjectionInput::kAttentionOutput)]);
    e->ffn_.InitInputThresholds(t[static_cast<int>(ProjectionInput::kFfn)]);
  }
  if (options.hot_shard) {
    if (options.device) return Status::Invalid("a hot shard and a device backend at once");
    PI_RETURN_IF_ERROR(e->ffn_.InitHotShard(options.hot_shard->owned(), options.hot_shard));
  }
  if (options.device) {
    const DevicePlan& p = options.device->plan();
    if (p.n_ctx < e->n_ctx_ || p.cache_type_k != options.cache_type_k ||
        p.cache_type_v != options.cache_type_v) {
      return Status::Error(
          "the %s device was loaded for a context of %d with -ctk %s -ctv %s, the engine has "
          "%d with %s, %s",
          options.device->name(), p.n_ctx, DTypeName(p.cache_type_k), DTypeName(p.cache_type_v),
          e->n_ctx_, DTypeName(options.cache_type_k), DTypeName(options.cache_type_v));
    }
    if (p.n_seq < options.n_seq) {
      return Status::Error("the %s device was loaded for %d sequences, the engine has %d (-np)",
                           options.device->name(), p.n_seq, options.n_seq);
    }
    if (options.sparse == SparseMode::kPredictor &&
        (p.mode != SparseMode::kPredictor || p.threshold != threshold)) {
      return Status::Error("the %s device was loaded without the predictor at threshold %g",
                           options.device->name(), threshold);
    }
    // The device's hot neurons pass the thresholds the host's cold ones do,
    // and (teal) its products read the inputs the host's would.
    const bool cats = UsesGateThresholds(options.sparse);
    if (cats && (p.mode != options.sparse || p.gate_thresholds != options.gate_thresholds)) {
      return Status::Error("the %s device was loaded without these --sparse %s gate thresholds",
                           options.device->name(), SparseModeName(options.sparse));
    }
    if (!cats && UsesGateThresholds(p.mode)) {
      return Status::Error("the %s device was loaded for --sparse %s, the engine runs %s",
                           options.device->name(), SparseModeName(p.mode),
                           SparseModeName(options.sparse));
    }
    if (options.sparse == SparseMode::kTeal &&
        !std::equal(std::begin(p.input_thresholds), std::end(p.input_thresholds),
                    std::begin(options.input_thresholds))) {
      return Status::Error("the %s device was loaded without these --sparse teal input thresholds",
                           options.device->name());
    }
    bool any_hot = false;
    for (const std::vector<int32_t>& h : p.hot) any_hot = any_hot || !h.empty();
    if (any_hot) PI_RETURN_IF_ERROR(e->ffn_.InitColdPart(p.hot));
    e->device_ = options.device;
  }
  PI_RETURN_IF_ERROR(e->ffn_.InitColdShards(options.cold_shards));
  e->h_.assign(static_cast<size_t>(max_rows) * c.n_embd, 0.0f);
  e->x_.assign(static_cast<size_t>(max_rows) * c.n_embd, 0.0f);
  if (c.parallel_residual) e->inp_.assign(static_cast<size_t>(max_rows) * c.n_embd, 0.0f);
  if (c.post_norms) e->ffn_out_.assign(static_cast<size_t>(max_rows) * c.n_embd, 0.0f);
  e->q8_.assign(max_rows * PreparedActivationBytes(DType::kQ8_0, c.n_embd), 0);
  e->logits_.assign(static_cast<size_t>(options.n_seq) * c.n_vocab, 0.0f);
  e->tokens_.assign(static_cast<size_t>(options.n_seq) * e->n_ctx_, 0);
  e->token_dense_.assign(e->tokens_.size(), 0);
  e->last_layer_neurons_.assign(c.n_layer, 0);
  e->computed_.reset(new std::atomic<int64_t>[2 * (c.n_layer + 1)]);
  for (int i = 0; i < 2 * (c.n_layer + 1); ++i) e->computed_[i].store(0);
  *out = std::move(e);
  return Status::Ok();
}

Status Engine::CopySeq(int src, int dst, int n) {
  if (src < 0 || src >= n_seq() || dst < 0 || dst >= n_seq() || src == dst) {
    return Status::Invalid("copying sequence %d to %d of %d", src, dst, n_seq());
  }
  if (n < 0 || n > SeqPast(src)) {
    return Status::Invalid("copying %d positions of sequence %d, which holds %d", n, src,
                           SeqPast(src));
  }
  // The device's layers first: when it fails, nothing here has changed.
  if (device_) PI_RETURN_IF_ERROR(device_->CopySeq(src, dst, n));
  SeqCache(dst)->CopyPrefix(*SeqCache(src), n, FirstHostLayer());
  std::copy(SeqTokens(src), SeqTokens(src) + n, SeqTokens(dst));
  const size_t from = static_cast<size_t>(src) * n_ctx_, to = static_cast<size_t>(dst) * n_ctx_;
  std::copy(token_dense_.begin() + from, token_dense_.begin() + from + n,
            token_dense_.begin() + to);
  SeqPast(dst) = n;
  return Status::Ok();
}

Status Engine::SaveSeq(int seq, int n, SavedSeq* out) {
  if (seq < 0 || seq >= n_seq() || n < 0 || n > seq_n_past(seq)) {
    return Status::Invalid("saving %d positions of sequence %d", n, seq);
  }
  SavedSeq saved;
  if (device_) {
    const uint64_t key = ++next_saved_key_;
    PI_RETURN_IF_ERROR(device_->SaveSeq(seq, n, key));
    saved.device = device_;
    saved.key = key;
    saved.device_bytes = SavedSeqBytes(model_->config, device_->plan(), n);
    saved.device_epoch = device_recoveries_;
  }
  const KvCache& cache = *SeqCache(seq);
  saved.host_kv.resize(static_cast<size_t>(cache.PrefixBytes(n, FirstHostLayer())));
  cache.SavePrefix(n, saved.host_kv.data(), FirstHostLayer());
  saved.tokens.assign(SeqTokens(seq), SeqTokens(seq) + n);
  const size_t at = static_cast<size_t>(seq) * n_ctx_;
  saved.dense.assign(token_dense_.begin() + at, token_dense_.begin() + at + n);
  *out = std::move(saved);
  return Status::Ok();
}

Status Engine::LoadSeq(int seq, const SavedSeq& saved, int n) {
  const int n_saved = saved.n();
  if (seq < 0 || seq >= n_seq() || n < 0 || n > n_saved || n_saved > n_ctx_ ||
      static_cast<int64_t>(saved.host_kv.size()) !=
          SeqCache(seq)->PrefixBytes(n_saved, FirstHostLayer()) ||
      saved.dense.size() != saved.tokens.size()) {
    return Status::Invalid("loading %d of %d positions (%zu bytes) into sequence %d", n, n_saved,
                           saved.host_kv.size(), seq);
  }
  if (saved.device != device_) {
    return Status::Invalid("loading a sequence saved %s into an engine %s",
                           saved.device ? "with a device" : "without one",
                           device_ ? "with a device" : "without one");
  }
  if (device_) {
    if (saved.device_epoch != device_recoveries_) {
      return Status::NotFound("a sequence kept by the %s device before it was restarted",
                              device_->name());
    }
    PI_RETURN_IF_ERROR(device_->LoadSeq(saved.key, seq, n));
  }
  SeqCache(seq)->LoadPrefix(n_saved, n, saved.host_kv.data(), FirstHostLayer());
  std::copy(saved.tokens.begin(), saved.tokens.begin() + n, SeqTokens(seq));
  std::copy(saved.dense.begin(), saved.dense.begin() + n,
            token_dense_.begin() + static_cast<size_t>(seq) * n_ctx_);
  SeqPast(seq) = n;
  return Status::Ok();
}

Status Engine::ReadSavedDevicePart(const SavedSeq& saved, std::vector<uint8_t>* bytes) {
  bytes->clear();
  if (saved.device != device_) {
    return Status::Invalid("reading the device part of a sequence saved %s",
                           saved.device ? "with another device" : "without one");
  }
  if (!device_) return Status::Ok();
  if (saved.device_epoch != device_recoveries_) {
    return Status::NotFound("a sequence kept by the %s device before it was restarted",
                            device_->name());
  }
  bytes->resize(static_cast<size_t>(saved.device_bytes));
  return device_->ReadKept(saved.key, saved.n(), 0, saved.device_bytes, bytes->data());
}

Status Engine::WriteSavedDevicePart(const std::vector<uint8_t>& bytes, SavedSeq* saved) {
  if (saved->device) return Status::Invalid("the saved sequence has its device part");
  const int n = saved->n();
  const int64_t want = device_ ? SavedSeqBytes(model_->config, device_->plan(), n) : 0;
  if (static_cast<int64_t>(bytes.size()) != want || n > n_ctx_) {
    return Status::Invalid("%zu bytes for the device part of %d positions, which takes %lld",
                           bytes.size(), n, static_cast<long long>(want));
  }
  if (!device_) return Status::Ok();
  const uint64_t key = ++next_saved_key_;
  // Set first, so that what a failed write left on the device is dropped
  // with `saved`.
  saved->device = device_;
  saved->key = key;
  saved->device_bytes = want;
  saved->device_epoch = device_recoveries_;
  return device_->WriteKept(key, n, 0, bytes.data(), want);
}

Status Engine::Eval(const int32_t* tokens, int n, bool all_logits) {
  const int n_vocab = model_->config.n_vocab;
  if (n <= 0) return Status::Error("nothing to evaluate (0 tokens)");
  if (n_past_ + n > n_ctx_) {
    return Status::Error(
        "context overflow: %d tokens already in context + %d new > context size "
        "%d (raise -c)",
        n_past_, n, n_ctx_);
  }
  for (int i = 0; i < n; ++i) {
    if (tokens[i] < 0 || tokens[i] >= n_vocab) {
      return Status::Error("token id %d at index %d is out of range [0, %d)", tokens[i], i,
                           n_vocab);
    }
  }
  const size_t rows = all_logits ? static_cast<size_t>(n) : 1;
  if (logits_.size() < rows * n_vocab) {
    PI_RETURN_IF_ERROR(CheckMemory("the logits of " + std::to_string(rows) + " tokens",
                                   static_cast<int64_t>(rows * n_vocab * sizeof(float))));
    logits_.resize(rows * n_vocab);
  }
  ResetStepCounters();
  if (device_) {
    // A device lost earlier (its restart failed then): try again now.
    if (device_lost_) PI_RETURN_IF_ERROR(RecoverDevice());
    // Token by token: the device's graphs take one position at a time. A
    // token runs dense where the host would batch it with others (its
    // n_batch chunk has more than one).
    for (int i = 0; i < n; ++i) {
      float* out = all_logits ? logits_.data() + static_cast<size_t>(i) * n_vocab
                              : (i == n - 1 ? logits_.data() : nullptr);
      const int chunk = std::min(n_batch_, n - i / n_batch_ * n_batch_);
      PI_RETURN_IF_ERROR(DeviceToken(0, tokens[i], chunk > 1, out));
    }
    return CheckLogits(logits_.data(), rows * n_vocab);
  }
  for (int i = 0; i < n; i += n_batch_) {
    const int b = std::min(n_batch_, n - i);
    const bool last = i + b == n;
    float* out = all_logits ? logits_.data() + static_cast<size_t>(i) * n_vocab
                            : (last ? logits_.data() : nullptr);
    ForwardBatch(tokens + i, b, out, all_logits);
  }
  return CheckLogits(logits_.data(), rows * n_vocab);
}

namespace {

// True when all n values are finite: a float is NaN or infinite exactly when
// its exponent bits are all ones. Branch-free so it vectorizes; it reads a
// few KiB per layer against the megabytes of weights a layer reads.
bool AllFinite(const float* x, size_t n) {
  uint32_t bad = 0;
  for (size_t i = 0; i < n; ++i) {
    uint32_t bits;
    memcpy(&bits, x + i, sizeof bits);
    bad |= static_cast<uint32_t>((bits & 0x7f800000u) == 0x7f800000u);
  }
  return bad == 0;
}

}  // namespace

void Engine::NoteNonFinite(int batch, int layer, const char* part) {
  if (nonfinite_part_ != nullptr) return;
  if (!AllFinite(h_.data(), static_cast<size_t>(batch) * model_->config.n_embd)) {
    nonfinite_part_ = part;
    nonfinite_layer_ = layer;
  }
}

Status Engine::CheckLogits(const float* logits, size_t n) const {
  if (AllFinite(logits, n)) return Status::Ok();
  std::string where = "in the output head";
  if (nonfinite_part_ != nullptr) {
    where = nonfinite_layer_ < 0
                ? std::string("in ") + nonfinite_part_
                : "in layer " + std::to_string(nonfinite_layer_) + "'s " + nonfinite_part_;
  }
  return Status::Error(
      "the logits hold NaN or infinite values (the model's numbers overflowed or its weights are "
      "corrupt: --check-tensors validates them at load); they first appeared %s",
      where.c_str());
}

void Engine::ForwardBatch(const int32_t* tokens, int batch, float* logits_out, bool all_logits) {
  const LlamaModel& m = *model_;
  const int64_t d = m.config.n_embd;
  for (int b = 0; b < batch; ++b) {
    EmbedToken(m, tokens[b], h_.data() + b * d);
    tokens_[n_past_ + b] = tokens[b];
    row_pos_[b] = n_past_ + b;
    row_caches_[b] = &cache_;
  }
  NoteNonFinite(batch, -1, "the token embedding rows");
  std::fill(run_length_.begin(), run_length_.begin() + batch, batch);
  ForwardRows(0, batch);
  n_past_ += batch;
  if (!logits_out) return;  // an inner prompt batch: only the KV cache matters

  // Logits for every row, or only the batch's last token.
  const int first = all_logits ? 0 : batch - 1;
  HostHead(first, batch - first, logits_out);
}

void Engine::HostHead(int first, int rows, float* logits_out) {
  const LlamaModel& m = *model_;
  const LlamaConfig& c = m.config;
  const int64_t d = c.n_embd;
  for (int b = 0; b < rows; ++b) {
    NormalizeRow(c, m.output_norm, m.output_norm_b, h_.data() + (first + b) * d, x_.data() + b * d);
  }
  PreparedInput in =
      PrepareInput(x_.data(), d, rows, q8_.data(), pool_.get(), ReadsQ8(m.output.type));
  const MatMulJob job[1] = {{&m.output, logits_out, c.n_vocab}};
  ParallelMatMul(pool_.get(), in, job, 1);
  SoftCapLogits(c, logits_out, static_cast<int64_t>(rows) * c.n_vocab);
}

void Engine::ForwardRows(int first, int n) {
  const LlamaModel& m = *model_;
  const LlamaConfig& c = m.config;
  const int64_t d = c.n_embd;
  for (int il = first; il < c.n_layer; ++il) {
    // Sequential residual: the FFN reads h after attention. Parallel (falcon):
    // attention and FFN both read the layer input, kept in inp_.
    const float* ffn_in = h_.data();
    if (c.parallel_residual) {
      std::copy(h_.begin(), h_.begin() + n * d, inp_.begin());
      ffn_in = inp_.data();
    }
    // With a post-norm (gemma) the FFN sums into ffn_out_, normed before it
    // joins h; else straight into h.
    const LlamaLayer& layer = m.layers[il];
    float* ffn_out = h_.data();
    if (layer.ffn_post_norm.present()) {
      std::fill(ffn_out_.begin(), ffn_out_.begin() + n * d, 0.0f);
      ffn_out = ffn_out_.data();
    }
    attention_.ForwardRows(m.layers[il], il, row_pos_.data(), row_caches_.data(), n, h_.data(),
                           pool_.get(), run_length_.data());
    NoteNonFinite(n, il, "attention");
    // A run of one sequence's rows (run_length_), as Eval runs it: one row a
    // decode step, several a prompt batch. Where a single row would take the
    // dense step too, all rows go together (each weight row read once; the
    // rows' results do not depend on it); else the single rows' sparse steps
    // go together (the neurons they share read once, each row's sum its own)
    // — except for an observer, which sees every call's activations.
    const bool together = !ffn_.SparseStep(il);
    int n_single = 0;
    for (int a = 0; a < n;) {
      const int b = together ? n : a + run_length_[a];
      if (b - a == 1 && !together && !observer_) {
        single_rows_[n_single++] = a;
      } else {
        if (observer_) observer_->OnFfnInput(il, b - a, ffn_in + a * d);
        ffn_.Forward(il, b - a, ffn_in + a * d, ffn_out + a * d, pool_.get(),
                     run_length_.data() + a);
        CountFfn(il);
        if (observer_) {
          observer_->OnProjectionInput(il, ProjectionInput::kFfn, b - a, ffn_.normed_input(),
                                       static_cast<int>(d));
        }
        if (observer_) {
          if (const float* g = ffn_.gate_activations()) observer_->OnGate(il, b - a, g);
          observer_->OnFfn(il, b - a, ffn_.activations());
        }
      }
      a = b;
    }
    if (n_single > 0) {
      ffn_.ForwardSparseRows(il, n_single, single_rows_.data(), ffn_in, ffn_out, pool_.get());
      CountFfn(il);
    }
    if (ffn_out != h_.data()) {
      for (int b = 0; b < n; ++b) AddResidual(c, layer.ffn_post_norm, ffn_out + b * d, &h_[b * d]);
    }
    NoteNonFinite(n, il, "FFN");
  }
}

Status Engine::EvalBatch(const BatchRow* rows, int n) {
  const LlamaModel& m = *model_;
  const LlamaConfig& c = m.config;
  if (n < 1 || n > max_rows_) {
    return Status::Error("a batch of %d rows: expected 1 to %d (-b + -np - 1)", n, max_rows_);
  }
  // Validated before anything changes; positions assigned in row order.
  int n_logits = 0, n_hidden = 0;
  for (int i = 0; i < n; ++i) {
    const BatchRow& r = rows[i];
    if (r.seq < 0 || r.seq >= n_seq()) {
      return Status::Error("row %d: sequence %d is out of range [0, %d)", i, r.seq, n_seq());
    }
    if (r.token < 0 || r.token >= c.n_vocab) {
      return Status::Error("row %d: token id %d is out of range [0, %d)", i, r.token, c.n_vocab);
    }
    if (r.logits && n_logits == n_seq()) {
      return Status::Error("more than %d rows ask for logits", n_seq());
    }
    n_logits += r.logits;
    if (r.hidden && device_) {
      return Status::Error(
          "row %d: hidden states (embeddings) are computed on the host path only, and this "
          "engine runs layers on a device",
          i);
    }
    n_hidden += r.hidden;
  }
  if (n_hidden > 0 && hidden_.empty()) {
    const size_t floats = static_cast<size_t>(max_rows_) * c.n_embd;
    PI_RETURN_IF_ERROR(
        CheckMemory("the hidden states of a batch", static_cast<int64_t>(floats * sizeof(float))));
    hidden_.assign(floats, 0.0f);
  }
  int count[256] = {};  // n_seq <= 256 (Create)
  for (int i = 0; i < n; ++i) {
    const int s = rows[i].seq;
    row_pos_[i] = SeqPast(s) + count[s]++;
    if (row_pos_[i] >= n_ctx_) {
      return Status::Error(
          "context overflow: sequence %d has %d tokens, + %d new > context size "
          "%d (raise -c)",
          s, SeqPast(s), count[s], n_ctx_);
    }
    row_caches_[i] = SeqCache(s);
  }
  ResetStepCounters();
  if (device_) return DeviceBatch(rows, n);
  const int64_t d = c.n_embd;
  for (int i = 0; i < n; ++i) {
    EmbedToken(m, rows[i].token, h_.data() + i * d);
    SeqTokens(rows[i].seq)[row_pos_[i]] = rows[i].token;
  }
  NoteNonFinite(n, -1, "the token embedding rows");
  for (int a = 0; a < n;) {  // each run of one sequence's rows: its length
    int b = a + 1;
    while (b < n && rows[b].seq == rows[a].seq) ++b;
    std::fill(run_length_.begin() + a, run_length_.begin() + b, b - a);
    a = b;
  }
  ForwardRows(0, n);
  for (int s = 0; s < n_seq(); ++s) SeqPast(s) += count[s];
  for (int i = 0; n_hidden > 0 && i < n; ++i) {
    if (!rows[i].hidden) continue;
    float* out = hidden_.data() + static_cast<size_t>(i) * d;
    NormalizeRow(c, m.output_norm, m.output_norm_b, h_.data() + i * d, out);
    if (!AllFinite(out, static_cast<size_t>(d))) {
      return Status::Error(
          "row %d's hidden state holds NaN or infinite values (the model's numbers overflowed or "
          "its weights are corrupt: --check-tensors validates them at load)",
          i);
    }
  }
  int k = 0;
  for (int i = 0; i < n; ++i) {
    if (rows[i].logits) logit_rows_[k++] = i;
  }
  if (k == 0) return Status::Ok();
  HostHeadRows(logit_rows_.data(), k, logits_.data());
  return CheckLogits(logits_.data(), static_cast<size_t>(k) * c.n_vocab);
}

void Engine::CountFfn(int il) {
  last_ffn_neurons_ += ffn_.last_computed_neurons();
  last_ffn_gate_rows_ += ffn_.last_gate_rows();
  last_ffn_hot_fired_ += ffn_.last_hot_fired();
  CountComputed(il, true, ffn_.last_hot_fired());
  CountComputed(il, false, ffn_.last_computed_neurons() - ffn_.last_hot_fired());
}

void Engine::HostHeadRows(const int* rows, int n, float* logits_out) {
  const LlamaModel& m = *model_;
  const LlamaConfig& c = m.config;
  const int64_t d = c.n_embd;
  for (int k = 0; k < n; ++k) {
    NormalizeRow(c, m.output_norm, m.output_norm_b, h_.data() + rows[k] * d, x_.data() + k * d);
  }
  PreparedInput in = PrepareInput(x_.data(), d, n, q8_.data(), pool_.get(), ReadsQ8(m.output.type));
  const MatMulJob job[1] = {{&m.output, logits_out, c.n_vocab}};
  ParallelMatMul(pool_.get(), in, job, 1);
  SoftCapLogits(c, logits_out, static_cast<int64_t>(n) * c.n_vocab);
}

Status Engine::RunDeviceLayers(int seq, int pos, bool dense, float* h_out, float* logits_out) {
  const DevicePlan& plan = device_->plan();
  double t = NowSeconds();
  device_->BeginToken(h_.data(), seq, pos, dense);
  ffn_.SetDense(dense);
  for (int il = 0; il < plan.n_layers; ++il) {
    ColdStep cold;
    PI_RETURN_IF_ERROR(device_->RunLayer(il, &cold));
    if (!cold.x) {  // every neuron on the device: it read every gate row
      last_ffn_gate_rows_ += static_cast<int64_t>(plan.hot[il].size());
      continue;
    }
    const double cold_start = NowSeconds();
    last_device_seconds_ += cold_start - t;
    // The predictor's picks only in predictor mode (the device may
    // compute them for another engine sharing it).
    const uint32_t* mask = ffn_.mode() == SparseMode::kPredictor ? cold.mask : nullptr;
    ffn_.ForwardCold(il, cold.x, mask, cold.y, pool_.get());
    t = NowSeconds();
    last_cold_seconds_ += t - cold_start;
    ++last_cold_layers_;
    last_ffn_neurons_ += ffn_.last_cold_fired();
    last_ffn_gate_rows_ += ffn_.last_gate_rows();
    CountComputed(il, false, ffn_.last_cold_fired());
  }
  ffn_.SetDense(false);
  int64_t hot_fired = 0;
  PI_RETURN_IF_ERROR(device_->FinishToken(h_out, logits_out, &hot_fired));
  last_device_seconds_ += NowSeconds() - t;
  last_ffn_neurons_ += hot_fired;
  last_ffn_hot_fired_ += hot_fired;
  CountComputed(-1, true, hot_fired);
  return Status::Ok();
}

Status Engine::DeviceToken(int seq, int32_t token, bool dense, float* logits_out) {
  // Only the gate thresholds change with it: the other modes' single-token
  // steps are exact, or (the predictor) keep predicting a prompt's cold
  // neurons rather than read all their rows token by token.
  dense = dense && UsesGateThresholds(ffn_.mode());
  // A device lost earlier (its restart failed then): try again now.
  if (device_lost_) PI_RETURN_IF_ERROR(RecoverDevice());
  Status s = ForwardDeviceToken(seq, token, dense, logits_out);
  if (s.ok()) return s;
  // A device in another process took its KV caches with it: a fresh one,
  // refilled from the sequences' tokens, then this token again.
  NoteDeviceFailure(s);
  PI_RETURN_IF_ERROR(RecoverDevice());
  s = ForwardDeviceToken(seq, token, dense, logits_out);
  if (!s.ok()) {
    NoteDeviceFailure(s);
    device_lost_ = true;
  }
  return s;
}

Status Engine::DeviceBatch(const BatchRow* rows, int n) {
  // Row by row, as Eval runs tokens with a device: each through the
  // device's layers with its sequence's KV cache there, then the host's;
  // dense where the host would run its sequence's run of rows together.
  const int n_vocab = model_->config.n_vocab;
  int k = 0;
  for (int i = 0; i < n; ++i) {
    float* out = rows[i].logits ? logits_.data() + static_cast<size_t>(k++) * n_vocab : nullptr;
    const bool dense =
        (i > 0 && rows[i - 1].seq == rows[i].seq) || (i + 1 < n && rows[i + 1].seq == rows[i].seq);
    PI_RETURN_IF_ERROR(DeviceToken(rows[i].seq, rows[i].token, dense, out));
  }
  return CheckLogits(logits_.data(), static_cast<size_t>(k) * n_vocab);
}

Status Engine::ForwardDeviceToken(int seq, int32_t token, bool dense, float* logits_out) {
  const LlamaModel& m = *model_;
  const LlamaConfig& c = m.config;
  const DevicePlan& plan = device_->plan();
  const int pos = SeqPast(seq);
  EmbedToken(m, token, h_.data());
  const bool host_layers = plan.n_layers < c.n_layer;
  if (plan.n_layers > 0) {
    // h comes back when the host has layers or the head left to run.
    const bool h_back = host_layers || !plan.output;
    PI_RETURN_IF_ERROR(RunDeviceLayers(seq, pos, dense, h_back ? h_.data() : nullptr,
                                       h_back ? nullptr : logits_out));
    // The device's layers are checked as one: h crosses to the host only here.
    if (h_back) NoteNonFinite(1, -1, "the device's layers (checked together)");
  }
  if (host_layers) {
    row_pos_[0] = pos;
    row_caches_[0] = SeqCache(seq);
    run_length_[0] = 1;
    ffn_.SetDense(dense);
    attention_.SetDense(dense);
    ForwardRows(plan.n_layers, 1);
    attention_.SetDense(false);
    ffn_.SetDense(false);
  }
  if (logits_out) {
    if (plan.output && (host_layers || plan.n_layers == 0)) {
      const double t = NowSeconds();
      PI_RETURN_IF_ERROR(device_->Head(h_.data(), logits_out));
      last_device_seconds_ += NowSeconds() - t;
    } else if (!plan.output) {
      HostHead(0, 1, logits_out);
    }
  }
  // Only a finished token counts: a failed one runs again whole.
  SeqTokens(seq)[pos] = token;
  token_dense_[static_cast<size_t>(seq) * n_ctx_ + pos] = dense;
  ++SeqPast(seq);
  return Status::Ok();
}

void Engine::NoteDeviceFailure(const Status& s) {
  ++device_failures_;
  device_error_ = s.message();
}

Status Engine::RecoverDevice() {
  const Status s = device_->Recover();
  if (!s.ok()) {
    device_lost_ = true;
    return Status::Error("%s; bringing it back failed: %s", device_error_.c_str(),
                         s.message().c_str());
  }
  device_lost_ = false;
  ++device_recoveries_;
  // The replay is not this Eval's work: its counts are put back.
  const int64_t neurons = last_ffn_neurons_, gate_rows = last_ffn_gate_rows_,
                hot_fired = last_ffn_hot_fired_, cold_layers = last_cold_layers_;
  const double device_seconds = last_device_seconds_, cold_seconds = last_cold_seconds_;
  const LlamaModel& m = *model_;
  Status replayed = Status::Ok();
  int replayed_tokens = 0;
  for (int seq = 0; seq < n_seq() && device_->plan().n_layers > 0; ++seq) {
    const int32_t* tokens = SeqTokens(seq);
    for (int pos = 0; pos < SeqPast(seq) && replayed.ok(); ++pos, ++replayed_tokens) {
      EmbedToken(m, tokens[pos], h_.data());
      replayed = RunDeviceLayers(seq, pos, token_dense_[static_cast<size_t>(seq) * n_ctx_ + pos],
                                 nullptr, nullptr);
    }
  }
  last_ffn_neurons_ = neurons;
  last_ffn_gate_rows_ = gate_rows;
  last_ffn_hot_fired_ = hot_fired;
  last_device_seconds_ = device_seconds;
  last_cold_seconds_ = cold_seconds;
  last_cold_layers_ = cold_layers;
  if (!replayed.ok()) {
    NoteDeviceFailure(replayed);
    device_lost_ = true;
    return Status::Error("replaying %d tokens into the restarted device: %s", replayed_tokens,
                         replayed.message().c_str());
  }
  return Status::Ok();
}

void Engine::ResetStepCounters() {
  last_ffn_neurons_ = 0;
  last_ffn_gate_rows_ = 0;
  last_ffn_hot_fired_ = 0;
  std::fill(last_layer_neurons_.begin(), last_layer_neurons_.end(), 0);
  last_device_seconds_ = 0;
  last_cold_seconds_ = 0;
  last_cold_layers_ = 0;
}

RepackScope HostRepackScope(const EngineOptions& o) {
  RepackScope scope;
  scope.ffn = o.sparse == SparseMode::kOff && !o.hot_shard && !o.device && o.cold_shards.empty();
  if (o.device) {  // its layers and maybe the head are computed there
    scope.first_layer = o.device->plan().n_layers;
    scope.head = !o.device->plan().output;
  }
  return scope;
}

}  // namespace pi
