#include "coordinator/route/ffn_block.h"

#include <algorithm>
#include <cstring>
#include <utility>

namespace pi {

void FfnBlock::Init(const LlamaModel& model, int max_batch, SparseMode mode) {
  model_ = &model;
  c_ = model.config;
  mode_ = mode;
  all_ids_.resize(c_.n_ff);
  for (int32_t i = 0; i < c_.n_ff; ++i) all_ids_[i] = i;
  sparse_rows_ = std::min(max_batch, NeuronFfn::kMaxRows);
  neurons_.Init(c_, sparse_rows_);
  const size_t rows = static_cast<size_t>(sparse_rows_);
  row_ids_.assign(rows * c_.n_ff, 0);
  cand_.assign(rows, nullptr);
  cand_n_.assign(rows, 0);
  fallback_ids_.assign(rows, nullptr);
  fallback_n_.assign(rows, 0);
  fired_rows_.assign(rows, 0);
  const size_t b = static_cast<size_t>(max_batch);
  y_.assign(b * c_.n_embd, 0.0f);
  y_hot_.assign(b * c_.n_embd, 0.0f);
  x_.assign(b * c_.n_embd, 0.0f);
  act_.assign(c_.n_ff, 0.0f);
  activations_ = act_.data();
  dense_.Init(c_, max_batch);
}

void FfnBlock::InitInputThresholds(std::vector<float> thresholds) {
  input_thresholds_ = std::move(thresholds);
  columns_.Init(c_.n_embd, c_.n_ff);
  given_gate_.assign(static_cast<size_t>(sparse_rows_) * c_.n_ff, 0.0f);
}

const float* FfnBlock::TealGateDots(const LlamaLayer& layer, int il, int n, const float* x,
                                    ThreadPool* pool) {
  if (input_thresholds_.empty() || !layer.ffn_gate_t.present() || dense_steps_) return nullptr;
  const int64_t d = c_.n_embd, ff = c_.n_ff;
  for (int b = 0; b < n; ++b) {
    columns_.Keep(x + b * d, d, input_thresholds_[il]);
    const ColumnSparseJob gate[1] = {{&layer.ffn_gate_t, given_gate_.data() + b * ff}};
    columns_.Run(gate, 1, pool);
  }
  return given_gate_.data();
}

void FfnBlock::InitPredictor(float threshold) {
  predictor_.Init(c_.n_embd, c_.n_ff, MaxPredictorRank(*model_));
  predictor_.PrepareLayers(*model_);
  threshold_ = threshold;
}

Status FfnBlock::InitColdPart(const std::vector<std::vector<int32_t>>& hot_ids) {
  PI_RETURN_IF_ERROR(ValidateHotNeurons(*model_, hot_ids, !gate_thresholds_.empty()));
  cold_ids_.assign(c_.n_layer, {});
  is_hot_.assign(c_.n_layer, std::vector<uint8_t>(c_.n_ff, 0));
  for (int l = 0; l < c_.n_layer; ++l) {
    for (int32_t id : hot_ids[l]) is_hot_[l][id] = 1;
    for (int32_t i = 0; i < c_.n_ff; ++i) {
      if (!is_hot_[l][i]) cold_ids_[l].push_back(i);
    }
  }
  return Status::Ok();
}

Status FfnBlock::InitColdShards(const std::vector<Shard*>& shards) {
  PI_RETURN_IF_ERROR(
      router_.Init(*model_, shards, is_hot_, sparse_rows_, &events_, gate_thresholds_));
  if (!router_.empty()) sparse_rows_ = router_.max_rows();
  return Status::Ok();
}

Status FfnBlock::InitHotShard(const std::vector<std::vector<int32_t>>& hot_ids, Shard* shard) {
  PI_RETURN_IF_ERROR(InitColdPart(hot_ids));
  if (shard->owned() != hot_ids) {
    return Status::Error("the hot shard %s does not own exactly the hot neurons", shard->name());
  }
  hot_shard_ = shard;
  hot_health_ = ShardHealth();
  sparse_rows_ = std::min(sparse_rows_, std::max(1, shard->max_batch()));
  return Status::Ok();
}

bool FfnBlock::SparseStepApplies(const LlamaLayer& layer, int batch) const {
  if (batch != 1 || dense_steps_) return false;
  // InitHotShard / InitColdShards checked support.
  if (hot_shard_ || !router_.empty()) return true;
  if (mode_ == SparseMode::kOff || !layer.ffn_down_t.present()) return false;
  if (UsesGateThresholds(mode_)) return true;
  if (!FfnIsReluFamily(c_.activation)) return false;
  return mode_ == SparseMode::kOracle || (layer.fc1.present() && layer.fc2.present());
}

void FfnBlock::Forward(int il, int batch, const float* in, float* h, ThreadPool* pool,
                       const int32_t* run_length) {
  const LlamaLayer& layer = model_->layers[il];
  if (SparseStepApplies(layer, batch)) {
    const int row = 0;
    ForwardSparseRows(il, 1, &row, in, h, pool);
  } else {
    const int64_t d = c_.n_embd;
    for (int b = 0; b < batch; ++b) {
      NormalizeRow(c_, layer.ffn_norm, layer.ffn_norm_b, in + b * d, x_.data() + b * d);
    }
    DenseNormed(layer, batch, x_.data(), h, pool, run_length);
  }
}

void FfnBlock::ForwardSparseRows(int il, int n, const int* idx, const float* in, float* h,
                                 ThreadPool* pool) {
  // Groups as large as the scratch and every shard's steps allow.
  const int group = sparse_rows_;
  if (n > group) {
    int64_t hot = 0, cold = 0, gates = 0;
    for (int b0 = 0; b0 < n; b0 += group) {
      ForwardSparseRows(il, std::min(group, n - b0), idx + b0, in, h, pool);
      hot += last_hot_;
      cold += last_cold_;
      gates += last_gate_rows_;
    }
    last_hot_ = hot;
    last_cold_ = cold;
    last_gate_rows_ = gates;
    return;
  }
  const LlamaLayer& layer = model_->layers[il];
  const int64_t d = c_.n_embd;
  // Each row's sum is formed in y_ (a copy of its h row) exactly as it would
  // be in h alone, then copied back.
  for (int b = 0; b < n; ++b) {
    NormalizeRow(c_, layer.ffn_norm, layer.ffn_norm_b, in + idx[b] * d, x_.data() + b * d);
    std::memcpy(y_.data() + b * d, h + idx[b] * d, sizeof(float) * d);
  }
  // --sparse teal: each row's gate dots from the columns of its kept
  // entries, for every neuron — the shards read theirs instead of their
  // gate rows, so a split decides each neuron as one process does.
  step_gate_dots_ = TealGateDots(layer, il, n, x_.data(), pool);
  bool hot_started = false;
  if (hot_shard_) {
    hot_health_.TryRecover(hot_shard_, &events_);
    if (!hot_health_.down()) {
      ShardStep step{il, n, x_.data(), nullptr, nullptr};
      step.gate_dots = step_gate_dots_;
      hot_shard_->Start(step);
      hot_started = true;
    }
  }
  SelectCandidates(il, n, idx, in, pool);
  ComputeRows(il, n, cand_.data(), cand_n_.data(), x_.data(), y_.data(), pool);
  if (hot_shard_) {
    FinishHotShard(il, n, hot_started, y_.data(), pool);
  }
  for (int b = 0; b < n; ++b) std::memcpy(h + idx[b] * d, y_.data() + b * d, sizeof(float) * d);
}

void FfnBlock::SelectCandidates(int il, int n, const int* idx, const float* in, ThreadPool* pool) {
  // The CPU's candidates: the predictor's ids (read from `in` before h
  // changes: PowerInfer's input is the un-normed residual), else all
  // neurons; less the hot ones when the hot shard has them.
  const LlamaLayer& layer = model_->layers[il];
  const bool split = hot_shard_ != nullptr;
  const bool predicted =
      mode_ == SparseMode::kPredictor && layer.fc1.present() && layer.fc2.present();
  for (int b = 0; b < n; ++b) {
    if (predicted) {
      int32_t* ids = row_ids_.data() + static_cast<int64_t>(b) * c_.n_ff;
      int64_t m = predictor_.Predict(layer, in + idx[b] * c_.n_embd, threshold_, ids, pool);
      if (split) {
        const uint8_t* hot = is_hot_[il].data();
        int64_t kept = 0;
        for (int64_t k = 0; k < m; ++k) {
          if (!hot[ids[k]]) ids[kept++] = ids[k];
        }
        m = kept;
      }
      cand_[b] = ids;
      cand_n_[b] = m;
    } else if (split) {
      cand_[b] = cold_ids_[il].data();
      cand_n_[b] = static_cast<int64_t>(cold_ids_[il].size());
    } else {
      cand_[b] = all_ids_.data();
      cand_n_[b] = c_.n_ff;
    }
  }
}

void FfnBlock::FinishHotShard(int il, int n, bool started, float* y, ThreadPool* pool) {
  const int64_t d = c_.n_embd;
  if (started) {
    const float* ys = nullptr;
    int64_t fired = 0;
    const Status s = hot_shard_->Wait(&ys, &fired);
    if (s.ok()) {
      for (int64_t i = 0; i < n * d; ++i) y[i] += ys[i];
      last_hot_ = fired;
      return;
    }
    hot_health_.Failed(*hot_shard_, s, &events_);
  }
  // Lost: the hot neurons run here, summed apart and added as the shard's
  // sums would be.
  const LlamaLayer& layer = model_->layers[il];
  NeuronRows rows{&layer.ffn_gate, &layer.ffn_up, &layer.ffn_down_t};
  if (!gate_thresholds_.empty()) rows.threshold = gate_thresholds_[il];
  rows.gate_dots = step_gate_dots_;
  std::memset(y_hot_.data(), 0, sizeof(float) * n * d);
  const std::vector<int32_t>& hot = hot_shard_->owned()[il];
  for (int b = 0; b < n; ++b) {
    fallback_ids_[b] = hot.data();
    fallback_n_[b] = static_cast<int64_t>(hot.size());
  }
  neurons_.AccumulateRows(rows, n, fallback_ids_.data(), fallback_n_.data(), x_.data(),
                          y_hot_.data(), pool, fired_rows_.data());
  last_hot_ = 0;
  for (int b = 0; b < n; ++b) last_hot_ += fired_rows_[b];
  for (int64_t i = 0; i < n * d; ++i) y[i] += y_hot_[i];
}

void FfnBlock::ForwardCold(int il, const float* x, const uint32_t* mask, float* y,
                           ThreadPool* pool) {
  const LlamaLayer& layer = model_->layers[il];
  // --sparse teal: the cold neurons' gate dots from the thresholded input,
  // as one process computes them (the device decides its hot ones alike).
  step_gate_dots_ = TealGateDots(layer, il, 1, x, pool);
  if (!layer.ffn_down_t.present() ||
      (!FfnIsReluFamily(c_.activation) && !UsesGateThresholds(mode_))) {
    DenseNormed(layer, 1, x, y, pool);  // nothing is hot: InitColdPart needs a sparse model
    return;
  }
  const int32_t* ids = all_ids_.data();
  int64_t n = c_.n_ff;
  if (mask) {
    n = 0;
    for (int64_t w = 0; w < (c_.n_ff + 31) / 32; ++w) {
      for (uint32_t bits = mask[w]; bits != 0; bits &= bits - 1) {
        row_ids_[n++] = static_cast<int32_t>(w * 32 + __builtin_ctz(bits));
      }
    }
    ids = row_ids_.data();
  } else if (!cold_ids_.empty()) {
    ids = cold_ids_[il].data();
    n = static_cast<int64_t>(cold_ids_[il].size());
  }
  if (dense_steps_) {  // a prompt's token: every cold neuron, here, as a prompt batch runs
    LocalRows(il, 1, &ids, &n, x, y, pool);
    return;
  }
  ComputeRows(il, 1, &ids, &n, x, y, pool);
}

void FfnBlock::ComputeRows(int il, int n, const int32_t* const* ids, const int64_t* n_ids,
                           const float* x, float* y, ThreadPool* pool) {
  if (router_.empty()) {
    LocalRows(il, n, ids, n_ids, x, y, pool);
    return;
  }
  const int32_t* const* local = nullptr;
  const int64_t* local_n = nullptr;
  const int64_t routed = router_.Start(il, n, ids, n_ids, x, step_gate_dots_, &local, &local_n);
  LocalRows(il, n, local, local_n, x, y, pool);
  last_gate_rows_ += routed;
  last_cold_ += router_.Finish(il, n, x, y, &neurons_, pool);
}

void FfnBlock::LocalRows(int il, int n, const int32_t* const* ids, const int64_t* n_ids,
                         const float* x, float* y, ThreadPool* pool) {
  const LlamaLayer& layer = model_->layers[il];
  // A single row's activations as a dense step would show them, for the
  // observer: zero except the computed neurons that passed the gate.
  float* act = n == 1 ? act_.data() : nullptr;
  if (act) {
    std::memset(act, 0, sizeof(float) * c_.n_ff);
    activations_ = act;
  }
  NeuronRows rows{&layer.ffn_gate, &layer.ffn_up, &layer.ffn_down_t};
  if (!gate_thresholds_.empty() && !dense_steps_) rows.threshold = gate_thresholds_[il];
  rows.gate_dots = step_gate_dots_;  // --sparse teal's, from ForwardSparseRows
  neurons_.AccumulateRows(rows, n, ids, n_ids, x, y, pool, fired_rows_.data(), act);
  last_cold_ = 0;
  last_hot_ = 0;
  // With a split, the hot side reads every hot gate row too.
  const int64_t n_hot =
      cold_ids_.empty() ? 0 : c_.n_ff - static_cast<int64_t>(cold_ids_[il].size());
  last_gate_rows_ = 0;
  for (int b = 0; b < n; ++b) {
    last_cold_ += fired_rows_[b];
    last_gate_rows_ += n_ids[b] + n_hot;
  }
}

void FfnBlock::DenseNormed(const LlamaLayer& layer, int batch, const float* x, float* h,
                           ThreadPool* pool, const int32_t* run_length) {
  dense_.Forward(layer, batch, x, h, pool, run_length);
  activations_ = dense_.activations();
  last_hot_ = 0;
  last_cold_ = static_cast<int64_t>(batch) * c_.n_ff;
  last_gate_rows_ = last_cold_;
}

}  // namespace pi
