#include "gpu_worker/host_device_backend.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "common/compute/parallel_matmul.h"
#include "common/model/weight_transpose.h"
#include "kernels/cpu/matmul.h"

namespace pi {

Status HostDeviceBackend::Load(const LlamaModel& model, const DevicePlan& plan) {
  const LlamaConfig& c = model.config;
  misuse_ = Status::Ok();
  PI_RETURN_IF_ERROR(CheckDevicePlan(model, plan, "host device backend"));
  for (int il = 0; il < plan.n_layers && plan.mode == SparseMode::kTeal; ++il) {
    if (!HasTransposedCopies(model.layers[il])) {
      return Status::Invalid(
          "host device backend: --sparse teal: layer %d has no transposed copies "
          "(weight_transpose.h)",
          il);
    }
  }
  bool any_hot = false;
  for (const std::vector<int32_t>& h : plan.hot) any_hot = any_hot || !h.empty();
  model_ = &model;
  plan_ = plan;
  kept_.Clear();
  pool_ = std::make_unique<ThreadPool>(n_threads_);
  // The head alone (no layers here) keeps no KV cache.
  caches_.resize(plan.n_layers > 0 ? plan.n_seq : 0);
  const int kv_layers = plan.n_layers;
  int64_t cache_bytes = 0;
  for (KvCache& cache : caches_) {
    PI_RETURN_IF_ERROR(cache.Init(kv_layers, plan.n_ctx, c.n_head_kv, c.head_dim, plan.cache_type_k,
                                  plan.cache_type_v));
    cache_bytes += cache.bytes();
  }
  attention_.Init(c, 1, plan.n_ctx, n_threads_, plan.cache_type_k);
  if (plan.mode == SparseMode::kTeal) {
    const auto& t = plan.input_thresholds;
    attention_.SetInputThresholds(t[static_cast<int>(ProjectionInput::kAttention)],
                                  t[static_cast<int>(ProjectionInput::kAttentionOutput)]);
    gate_columns_.Init(c.n_embd, c.n_ff);
    gate_dots_.assign(c.n_ff, 0.0f);
  }
  if (any_hot) PI_RETURN_IF_ERROR(hot_.Load(model, plan.hot, plan.gate_thresholds));
  if (plan.mode == SparseMode::kPredictor) {
    predictor_.Init(c.n_embd, c.n_ff, MaxPredictorRank(model));
    predictor_.PrepareLayers(model);
  }
  is_hot_.assign(c.n_layer, std::vector<uint8_t>(c.n_ff, 0));
  for (int il = 0; il < c.n_layer; ++il) {
    for (int32_t id : plan.hot[il]) is_hot_[il][id] = 1;
  }
  const size_t d = static_cast<size_t>(c.n_embd);
  h_.assign(d, 0.0f);
  inp_.assign(d, 0.0f);
  x_.assign(d, 0.0f);
  y_hot_.assign(d, 0.0f);
  y_cold_.assign(d, 0.0f);
  scores_.assign(c.n_ff, 0.0f);
  mask_.assign((c.n_ff + 31) / 32, 0);
  head_q8_.assign(PreparedActivationBytes(DType::kQ8_0, c.n_embd), 0);
  resident_bytes_ = hot_.resident_bytes() + cache_bytes;
  return Status::Ok();
}

Status HostDeviceBackend::Misuse(const char* what) {
  // A call out of contract is the caller's bug: it is this token's error and
  // every later call's, as a CUDA fault is on the CUDA backend.
  if (misuse_.ok()) misuse_ = Status::Internal("host device backend: %s", what);
  return misuse_;
}

void HostDeviceBackend::BeginToken(const float* h, int seq, int pos, bool dense) {
  next_layer_ = 0;
  if (!model_ || plan_.n_layers == 0) {
    Misuse("BeginToken: no device layers loaded");
  } else if (seq < 0 || seq >= plan_.n_seq) {
    Misuse("BeginToken: no such sequence");
  } else if (pos < 0 || pos >= plan_.n_ctx) {
    Misuse("BeginToken: position outside the KV cache");
  }
  if (!misuse_.ok()) return;
  std::memcpy(h_.data(), h, sizeof(float) * h_.size());
  seq_ = seq;
  pos_ = pos;
  dense_ = dense;
  pending_ = false;
  fired_ = 0;
}

void HostDeviceBackend::Merge() {
  if (!pending_) return;
  pending_ = false;
  const LlamaLayer& layer = model_->layers[pending_layer_];
  if (layer.ffn_post_norm.present()) {  // gemma: the FFN's whole sum is normed first
    for (size_t i = 0; i < h_.size(); ++i) y_cold_[i] += y_hot_[i];
    AddResidual(model_->config, layer.ffn_post_norm, y_cold_.data(), h_.data());
    return;
  }
  for (size_t i = 0; i < h_.size(); ++i) h_[i] += y_hot_[i];
  for (size_t i = 0; i < h_.size(); ++i) h_[i] += y_cold_[i];
}

Status HostDeviceBackend::RunLayer(int il, ColdStep* cold) {
  cold->x = nullptr;
  cold->mask = nullptr;
  cold->y = nullptr;
  if (!misuse_.ok()) return misuse_;
  if (il != next_layer_ || il >= plan_.n_layers) return Misuse("RunLayer: layers out of order");
  ++next_layer_;
  Merge();
  const LlamaConfig& c = model_->config;
  const LlamaLayer& layer = model_->layers[il];
  const float* src = h_.data();
  if (c.parallel_residual) {
    inp_ = h_;
    src = inp_.data();
  }
  attention_.SetDense(dense_);
  attention_.Forward(layer, il, pos_, 1, h_.data(), &caches_[seq_], pool_.get());
  const int64_t n_hot = static_cast<int64_t>(plan_.hot[il].size());
  const bool has_cold = n_hot < c.n_ff;
  const bool predict = plan_.mode == SparseMode::kPredictor && has_cold;
  if (predict) {
    predictor_.Scores(layer, src, scores_.data(), pool_.get());
    std::fill(mask_.begin(), mask_.end(), 0u);
    for (int i = 0; i < c.n_ff; ++i) {
      if (scores_[i] >= plan_.threshold && !is_hot_[il][i]) mask_[i / 32] |= 1u << (i % 32);
    }
  }
  NormalizeRow(c, layer.ffn_norm, layer.ffn_norm_b, src, x_.data());
  std::fill(y_hot_.begin(), y_hot_.end(), 0.0f);
  if (n_hot > 0) {
    ShardStep step;
    step.layer = il;
    step.x = x_.data();
    step.out = y_hot_.data();
    step.dense = dense_;
    step.gate_dots = TealGateDots(il);
    hot_.Start(step);
    const float* y = nullptr;
    int64_t fired = 0;
    PI_RETURN_IF_ERROR(hot_.Wait(&y, &fired));
    fired_ += fired;
  }
  pending_ = true;
  pending_layer_ = il;
  if (!has_cold) {
    std::fill(y_cold_.begin(), y_cold_.end(), 0.0f);
    Merge();
    return Status::Ok();
  }
  std::fill(y_cold_.begin(), y_cold_.end(), 0.0f);
  cold->x = x_.data();
  cold->mask = predict ? mask_.data() : nullptr;
  cold->y = y_cold_.data();
  return Status::Ok();
}

const float* HostDeviceBackend::TealGateDots(int il) {
  if (plan_.mode != SparseMode::kTeal || dense_) return nullptr;
  // Every neuron's dot from the columns of the kept entries, as one process
  // computes them (ffn_block.h), so the hot neurons pass as they do there.
  const LlamaLayer& layer = model_->layers[il];
  gate_columns_.Keep(x_.data(), model_->config.n_embd,
                     plan_.input_thresholds[static_cast<int>(ProjectionInput::kFfn)][il]);
  const ColumnSparseJob gate[1] = {{&layer.ffn_gate_t, gate_dots_.data()}};
  gate_columns_.Run(gate, 1, pool_.get());
  return gate_dots_.data();
}

Status HostDeviceBackend::FinishToken(float* h_out, float* logits, int64_t* hot_fired) {
  if (!misuse_.ok()) return misuse_;
  if (next_layer_ != plan_.n_layers) return Misuse("FinishToken: not every device layer ran");
  Merge();
  if (h_out) std::memcpy(h_out, h_.data(), sizeof(float) * h_.size());
  if (hot_fired) *hot_fired = fired_;
  return logits ? Head(h_.data(), logits) : Status::Ok();
}

Status HostDeviceBackend::Head(const float* h, float* logits) {
  if (!misuse_.ok()) return misuse_;
  if (!plan_.output) return Misuse("Head: the head is not on the device");
  const LlamaModel& m = *model_;
  const LlamaConfig& c = m.config;
  NormalizeRow(c, m.output_norm, m.output_norm_b, h, x_.data());
  const PreparedInput in =
      PrepareInput(x_.data(), c.n_embd, 1, head_q8_.data(), pool_.get(), ReadsQ8(m.output.type));
  const MatMulJob job[1] = {{&m.output, logits, c.n_vocab}};
  ParallelMatMul(pool_.get(), in, job, 1);
  SoftCapLogits(c, logits, c.n_vocab);
  return Status::Ok();
}

Status HostDeviceBackend::CopySeq(int src, int dst, int n) {
  PI_RETURN_IF_ERROR(CheckDeviceSeq(plan_, src, n, name()));
  PI_RETURN_IF_ERROR(CheckDeviceSeq(plan_, dst, n, name()));
  if (caches_.empty()) return Status::Ok();
  if (src != dst) caches_[dst].CopyPrefix(caches_[src], n);
  return Status::Ok();
}

Status HostDeviceBackend::SaveSeq(int seq, int n, uint64_t key) {
  PI_RETURN_IF_ERROR(CheckDeviceSeq(plan_, seq, n, name()));
  if (caches_.empty()) return Status::Ok();
  KeptKv::Entry* e = nullptr;
  PI_RETURN_IF_ERROR(kept_.Add(key, n, caches_[seq].PrefixBytes(n), &e));
  caches_[seq].SavePrefix(n, e->bytes.data());
  return Status::Ok();
}

Status HostDeviceBackend::LoadSeq(uint64_t key, int seq, int n) {
  PI_RETURN_IF_ERROR(CheckDeviceSeq(plan_, seq, n, name()));
  if (caches_.empty()) return Status::Ok();
  const KeptKv::Entry* e = nullptr;
  PI_RETURN_IF_ERROR(kept_.Find(key, n, &e));
  caches_[seq].LoadPrefix(e->n, n, e->bytes.data());
  return Status::Ok();
}

Status HostDeviceBackend::ReadKept(uint64_t key, int n, int64_t offset, int64_t size,
                                   uint8_t* out) {
  PI_RETURN_IF_ERROR(CheckDeviceSeq(plan_, 0, n, name()));
  if (caches_.empty()) return NothingKept(offset, size, name());
  return kept_.Read(key, n, offset, size, out);
}

Status HostDeviceBackend::WriteKept(uint64_t key, int n, int64_t offset, const uint8_t* data,
                                    int64_t size) {
  PI_RETURN_IF_ERROR(CheckDeviceSeq(plan_, 0, n, name()));
  if (caches_.empty()) return NothingKept(offset, size, name());
  return kept_.Write(key, n, caches_[0].PrefixBytes(n), offset, data, size);
}

}  // namespace pi
