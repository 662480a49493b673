#include "common/ffn_block.h"

#include <algorithm>
#include <cstring>

#include "common/parallel_matmul.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/ops.h"

namespace pi {

const char* SparseModeName(SparseMode m) {
  switch (m) {
    case SparseMode::kOff:
      return "off";
    case SparseMode::kOracle:
      return "oracle";
    case SparseMode::kPredictor:
      return "predictor";
  }
  return "?";
}

bool ParseSparseMode(const std::string& s, SparseMode* out) {
  if (s == "off") {
    *out = SparseMode::kOff;
  } else if (s == "oracle") {
    *out = SparseMode::kOracle;
  } else if (s == "predictor") {
    *out = SparseMode::kPredictor;
  } else {
    return false;
  }
  return true;
}

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
  gate_.assign(b * c_.n_ff, 0.0f);
  up_.assign(b * c_.n_ff, 0.0f);
  out_.assign(b * c_.n_embd, 0.0f);
  partial_.assign(static_cast<size_t>(kDownChunks) * b * c_.n_embd, 0.0f);
  const int64_t widest = std::max(c_.n_embd, c_.n_ff);
  q8_.assign(b * PreparedActivationBytes(DType::kQ8_0, widest), 0);
}

void FfnBlock::InitPredictor(float threshold) {
  predictor_.Init(c_.n_embd, c_.n_ff, MaxPredictorRank(*model_));
  predictor_.PrepareLayers(*model_);
  threshold_ = threshold;
}

Status FfnBlock::InitColdPart(const std::vector<std::vector<int32_t>>& hot_ids) {
  PI_RETURN_IF_ERROR(ValidateHotNeurons(*model_, hot_ids));
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
  if (shards.empty()) return Status::Ok();
  if (shards.size() > 1024) return Status::Error("%zu shards: at most 1024", shards.size());
  std::string why;
  if (!SupportsSparseFfn(*model_, &why)) {
    return Status::Error("cold neurons on workers need a sparse-capable model: %s", why.c_str());
  }
  owner_.assign(c_.n_layer, std::vector<int16_t>(c_.n_ff, -1));
  for (size_t k = 0; k < shards.size(); ++k) {
    const std::vector<std::vector<int32_t>>& owned = shards[k]->owned();
    if (owned.size() != static_cast<size_t>(c_.n_layer)) {
      return Status::Error("shard %s lists %zu layers, the model has %d", shards[k]->name(),
                           owned.size(), c_.n_layer);
    }
    for (int l = 0; l < c_.n_layer; ++l) {
      for (int32_t id : owned[l]) {
        if (id < 0 || id >= c_.n_ff || owner_[l][id] >= 0 || (!is_hot_.empty() && is_hot_[l][id])) {
          return Status::Error("shard %s: layer %d neuron %d is out of range, hot, or owned twice",
                               shards[k]->name(), l, id);
        }
        owner_[l][id] = static_cast<int16_t>(k);
      }
    }
  }
  shards_ = shards;
  health_.assign(shards.size(), ShardHealth());
  // Rows per sparse step: as many as every shard's messages carry.
  for (Shard* shard : shards)
    sparse_rows_ = std::min(sparse_rows_, std::max(1, shard->max_batch()));
  const size_t rows = static_cast<size_t>(sparse_rows_);
  shard_ids_.assign(shards.size(), std::vector<int32_t>(rows * c_.n_ff));
  shard_row_n_.assign(shards.size(), std::vector<int32_t>(rows, 0));
  shard_n_.assign(shards.size(), 0);
  local_ids_.assign(rows * c_.n_ff, 0);
  local_rows_.assign(rows, nullptr);
  local_n_.assign(rows, 0);
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
  if (batch != 1) return false;
  // InitHotShard / InitColdShards checked support.
  if (hot_shard_ || !shards_.empty()) return true;
  if (mode_ == SparseMode::kOff || !layer.ffn_down_t.present() || !FfnIsReluFamily(c_.activation)) {
    return false;
  }
  return mode_ == SparseMode::kOracle || (layer.fc1.present() && layer.fc2.present());
}

void FfnBlock::Forward(int il, int batch, const float* in, float* h, ThreadPool* pool,
                       const int32_t* run_length) {
  const LlamaLayer& layer = model_->layers[il];
  if (SparseStepApplies(layer, batch)) {
    const int row = 0;
    ForwardSparseRows(il, 1, &row, in, h, pool);
  } else {
    ForwardDense(layer, batch, in, h, pool, run_length);
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
  bool hot_started = false;
  if (hot_shard_) {
    if (hot_health_.down) TryRecover(hot_shard_, &hot_health_);
    if (!hot_health_.down) {
      hot_shard_->Start({il, n, x_.data(), nullptr, nullptr});
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
    ShardFailed(hot_shard_, &hot_health_, s);
  }
  // Lost: the hot neurons run here, summed apart and added as the shard's
  // sums would be.
  const LlamaLayer& layer = model_->layers[il];
  const NeuronRows rows{&layer.ffn_gate, &layer.ffn_up, &layer.ffn_down_t};
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
  if (!layer.ffn_down_t.present() || !FfnIsReluFamily(c_.activation)) {
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
  ComputeRows(il, 1, &ids, &n, x, y, pool);
}

void FfnBlock::ComputeRows(int il, int n, const int32_t* const* ids, const int64_t* n_ids,
                           const float* x, float* y, ThreadPool* pool) {
  if (shards_.empty()) {
    LocalRows(il, n, ids, n_ids, x, y, pool);
  } else {
    RouteRows(il, n, ids, n_ids, x, y, pool);
  }
}

namespace {

// The wait before the next Recover() after a failure: 250 ms, doubling to 5 s.
int NextBackoffMs(int backoff_ms) {
  return std::min(5000, std::max(250, 2 * backoff_ms));
}

}  // namespace

void FfnBlock::RecoverShards() {
  for (size_t k = 0; k < shards_.size(); ++k) {
    if (health_[k].down) TryRecover(shards_[k], &health_[k]);
  }
}

void FfnBlock::TryRecover(Shard* shard, ShardHealth* health) {
  const auto now = std::chrono::steady_clock::now();
  if (now < health->retry_at) return;
  if (shard->Recover().ok()) {
    health->down = false;
    health->recovered_at = std::chrono::steady_clock::now();
    ++shard_recoveries_;
  } else {
    health->backoff_ms = NextBackoffMs(health->backoff_ms);
    health->retry_at = now + std::chrono::milliseconds(health->backoff_ms);
  }
}

void FfnBlock::ShardFailed(Shard* shard, ShardHealth* health, const Status& s) {
  const auto now = std::chrono::steady_clock::now();
  health->down = true;
  ++shard_failures_;
  // The message names the shard, once.
  const std::string name = shard->name();
  shard_error_ = s.message().rfind(name, 0) == 0 ? s.message() : name + ": " + s.message();
  // Recovery is tried at the next step, unless the shard fails again within
  // a minute of coming back: then it waits longer each time (a crash loop
  // must not cost a restart per step).
  const auto recovered = health->recovered_at;
  const bool relapse = recovered != std::chrono::steady_clock::time_point() &&
                       now - recovered < std::chrono::minutes(1);
  health->backoff_ms = relapse ? NextBackoffMs(health->backoff_ms) : 0;
  health->retry_at = now + std::chrono::milliseconds(health->backoff_ms);
}

void FfnBlock::RouteRows(int il, int n, const int32_t* const* ids, const int64_t* n_ids,
                         const float* x, float* y, ThreadPool* pool) {
  RecoverShards();
  const int16_t* owner = owner_[il].data();
  const size_t n_shards = shards_.size();
  const int64_t ff = c_.n_ff, d = c_.n_embd;
  for (size_t k = 0; k < n_shards; ++k) shard_n_[k] = 0;
  int64_t routed = 0;
  for (int b = 0; b < n; ++b) {
    for (size_t k = 0; k < n_shards; ++k) shard_row_n_[k][b] = 0;
    int32_t* local = local_ids_.data() + b * ff;
    int64_t m = 0;
    for (int64_t j = 0; j < n_ids[b]; ++j) {  // ids are sorted: so is every share
      const int32_t id = ids[b][j];
      const int16_t o = owner[id];
      if (o >= 0 && !health_[o].down) {
        shard_ids_[o][shard_n_[o]++] = id;
        ++shard_row_n_[o][b];
      } else {
        local[m++] = id;
      }
    }
    local_rows_[b] = local;
    local_n_[b] = m;
    routed += n_ids[b] - m;
  }
  for (size_t k = 0; k < n_shards; ++k) {
    if (!health_[k].down) {
      shards_[k]->Start({il, n, x, shard_ids_[k].data(), shard_row_n_[k].data()});
    }
  }
  LocalRows(il, n, local_rows_.data(), local_n_.data(), x, y, pool);
  last_gate_rows_ += routed;
  const LlamaLayer& layer = model_->layers[il];
  const NeuronRows rows{&layer.ffn_gate, &layer.ffn_up, &layer.ffn_down_t};
  for (size_t k = 0; k < n_shards; ++k) {  // in shard order: sums do not depend on timing
    if (health_[k].down) continue;
    const float* ys = nullptr;
    int64_t fired = 0;
    const Status s = shards_[k]->Wait(&ys, &fired);
    if (s.ok()) {
      for (int64_t i = 0; i < n * d; ++i) y[i] += ys[i];
      last_cold_ += fired;
      continue;
    }
    // The shard is gone or late: its neurons run here until it recovers.
    ShardFailed(shards_[k], &health_[k], s);
    const int32_t* share = shard_ids_[k].data();
    for (int b = 0; b < n; ++b) {
      fallback_ids_[b] = share;
      fallback_n_[b] = shard_row_n_[k][b];
      share += shard_row_n_[k][b];
    }
    neurons_.AccumulateRows(rows, n, fallback_ids_.data(), fallback_n_.data(), x, y, pool,
                            fired_rows_.data());
    for (int b = 0; b < n; ++b) last_cold_ += fired_rows_[b];
  }
}

void FfnBlock::LocalRows(int il, int n, const int32_t* const* ids, const int64_t* n_ids,
                         const float* x, float* y, ThreadPool* pool) {
  const LlamaLayer& layer = model_->layers[il];
  // A single row's activations as a dense step would show them, for the
  // observer: zero except the computed neurons that passed the gate.
  float* act = n == 1 ? gate_.data() : nullptr;
  if (act) std::memset(act, 0, sizeof(float) * c_.n_ff);
  const NeuronRows rows{&layer.ffn_gate, &layer.ffn_up, &layer.ffn_down_t};
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

void FfnBlock::ForwardDense(const LlamaLayer& layer, int batch, const float* in, float* h,
                            ThreadPool* pool, const int32_t* run_length) {
  const int64_t d = c_.n_embd;
  for (int b = 0; b < batch; ++b) {
    NormalizeRow(c_, layer.ffn_norm, layer.ffn_norm_b, in + b * d, x_.data() + b * d);
  }
  DenseNormed(layer, batch, x_.data(), h, pool, run_length);
}

void FfnBlock::DenseNormed(const LlamaLayer& layer, int batch, const float* x, float* h,
                           ThreadPool* pool, const int32_t* run_length) {
  const int64_t d = c_.n_embd, ff = c_.n_ff;
  last_hot_ = 0;
  last_cold_ = batch * ff;
  last_gate_rows_ = batch * ff;
  PreparedInput xin = PrepareInput(x, d, batch, q8_.data(), pool,
                                   ReadsQ8(layer.ffn_gate.type) || ReadsQ8(layer.ffn_up.type));
  xin.run_length = run_length;
  // Ungated (falcon): up goes straight into gate_, the activations' buffer.
  const bool gated = FfnIsGated(c_.activation);
  const MatMulJob gate_up[2] = {{gated ? &layer.ffn_gate : &layer.ffn_up, gate_.data(), ff},
                                {&layer.ffn_up, up_.data(), ff}};
  ParallelMatMul(pool, xin, gate_up, gated ? 2 : 1);

  const int64_t n = batch * ff;
  switch (c_.activation) {
    case FfnActivation::kSilu:
      GatedSilu(gate_.data(), up_.data(), n);
      break;
    case FfnActivation::kRelu:
      GatedRelu(gate_.data(), up_.data(), n);
      break;
    case FfnActivation::kDRelu:
      GatedDRelu(gate_.data(), up_.data(), n);
      break;
    case FfnActivation::kReluUp:
      Relu(gate_.data(), n);
      break;
    case FfnActivation::kGeluUp:
      Gelu(gate_.data(), n);
      break;
  }

  if (layer.ffn_down.present()) {
    PreparedInput act =
        PrepareInput(gate_.data(), ff, batch, q8_.data(), pool, ReadsQ8(layer.ffn_down.type));
    act.run_length = run_length;
    const MatMulJob down[1] = {{&layer.ffn_down, out_.data(), d}};
    ParallelMatMul(pool, act, down, 1);
    for (int64_t i = 0; i < batch * d; ++i) h[i] += out_[i];
    return;
  }

  // ffn_down_t: neurons are split into kDownChunks fixed ranges, each summed
  // into its own partial vectors, then reduced over disjoint column ranges
  // of h in chunk order. The split does not depend on the thread count, so
  // results are bit-identical for any -t.
  const Tensor& wt = layer.ffn_down_t;
  const bool small = wt.nbytes() < ThreadPool::kMinParallelBytes;
  pool->ParallelFor(
      kDownChunks,
      [&](int64_t k, int) {
        int64_t r0, r1;
        ThreadPool::Split(ff, k, kDownChunks, 16, &r0, &r1);
        float* part = partial_.data() + k * batch * d;
        std::memset(part, 0, sizeof(float) * batch * d);
        for (int b = 0; b < batch && r0 < r1; ++b) {
          AxpyRows(wt.type, wt.data, d, gate_.data() + b * ff, part + b * d, r0, r1);
        }
      },
      small);
  ReduceDownPartials(batch, h, small, pool);
}

void FfnBlock::ReduceDownPartials(int batch, float* h, bool small, ThreadPool* pool) {
  const int64_t d = c_.n_embd;
  const int64_t col_chunks = small ? 1 : 4;
  pool->ParallelFor(
      col_chunks,
      [&](int64_t chunk, int) {
        int64_t c0, c1;
        ThreadPool::Split(d, chunk, col_chunks, 16, &c0, &c1);
        for (int b = 0; b < batch; ++b) {
          for (int k = 0; k < kDownChunks; ++k) {
            const float* part = partial_.data() + (static_cast<int64_t>(k) * batch + b) * d;
            for (int64_t c = c0; c < c1; ++c) h[b * d + c] += part[c];
          }
        }
      },
      small);
}

}  // namespace pi
