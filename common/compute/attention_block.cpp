#include "common/compute/attention_block.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>

#include "common/compute/parallel_matmul.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/ops.h"

namespace pi {

namespace {

// rows[b] += bias for `batch` rows of bias.cols values; nothing without one.
void AddBias(const Tensor& bias, int batch, float* rows) {
  if (!bias.present()) return;
  const float* v = reinterpret_cast<const float*>(bias.data);
  for (int b = 0; b < batch; ++b) {
    float* r = rows + static_cast<int64_t>(b) * bias.cols;
    for (int64_t i = 0; i < bias.cols; ++i) r[i] += v[i];
  }
}

// Each of `heads` rows of w.cols values RMS-normed in place with weight w
// (shared by all heads); nothing without one.
void NormHeads(const Tensor& w, int heads, float eps, float* rows) {
  if (!w.present()) return;
  const float* wd = reinterpret_cast<const float*>(w.data);
  for (int h = 0; h < heads; ++h) {
    float* r = rows + static_cast<int64_t>(h) * w.cols;
    RmsNorm(r, wd, w.cols, eps, r);
  }
}

}  // namespace

void AttentionBlock::Init(const LlamaConfig& config, int max_batch, int n_ctx, int n_threads,
                          DType k_type) {
  c_ = config;
  n_ctx_ = n_ctx;
  k_type_ = k_type;
  // 16 queries an item at least (a group's heads together whatever its size).
  const int group = c_.n_head / std::max(c_.n_head_kv, 1);
  queries_per_item_ = std::max(16, group);
  q_k_.assign(static_cast<size_t>(n_threads) * queries_per_item_ *
                  PreparedActivationBytes(k_type, c_.head_dim),
              0);
  items_.clear();
  items_.reserve(static_cast<size_t>(max_batch) * std::max(c_.n_head, 1));
  const size_t b = static_cast<size_t>(max_batch);
  rope_cs_.assign(b * std::max(c_.rope_dims, 1), 0.0f);
  rope_cs_local_.assign(c_.rope_theta_swa > 0.0f ? rope_cs_.size() : 0, 0.0f);
  rope_pos_.clear();
  rope_pos_.reserve(b);
  pos_.assign(b, 0);
  caches_.assign(b, nullptr);
  x_.assign(b * c_.n_embd, 0.0f);
  q_.assign(b * c_.q_dim(), 0.0f);
  k_.assign(b * c_.kv_dim(), 0.0f);
  v_.assign(b * c_.kv_dim(), 0.0f);
  attn_.assign(b * c_.q_dim(), 0.0f);
  out_.assign(b * c_.n_embd, 0.0f);
  scores_.assign(static_cast<size_t>(n_threads) * queries_per_item_ * n_ctx, 0.0f);
  const int64_t widest = std::max(c_.n_embd, c_.q_dim());
  q8_.assign(b * PreparedActivationBytes(DType::kQ8_0, widest), 0);
}

void AttentionBlock::Forward(const LlamaLayer& layer, int layer_index, int n_past, int batch,
                             float* h, KvCache* cache, ThreadPool* pool,
                             const int32_t* run_length) {
  for (int b = 0; b < batch; ++b) {
    pos_[b] = n_past + b;
    caches_[b] = cache;
  }
  ForwardRows(layer, layer_index, pos_.data(), caches_.data(), batch, h, pool, run_length);
}

void AttentionBlock::SetInputThresholds(std::vector<float> in, std::vector<float> out) {
  in_thresholds_ = std::move(in);
  out_thresholds_ = std::move(out);
  columns_.Init(std::max(c_.n_embd, c_.q_dim()),
                std::max<int64_t>(c_.n_embd, c_.q_dim() + 2 * int64_t{c_.kv_dim()}));
}

bool AttentionBlock::SparseRows(const LlamaLayer& layer, int layer_index, int batch,
                                const int32_t* run_length) const {
  if (in_thresholds_.empty() || dense_rows_ || !layer.wq_t.present() || !layer.wo_t.present()) {
    return false;
  }
  if (layer_index >= static_cast<int>(in_thresholds_.size())) return false;
  // Decode rows only (runs of one row each): prompts stay dense, as TEAL's.
  for (int b = 0; b < batch; ++b) {
    if ((run_length ? run_length[b] : batch) != 1) return false;
  }
  return true;
}

void AttentionBlock::OutputProjection(const LlamaLayer& layer, int layer_index, int batch,
                                      bool sparse, ThreadPool* pool, const int32_t* run_length) {
  const int d = c_.n_embd, qd = c_.q_dim();
  if (observer_) {
    observer_->OnProjectionInput(layer_index, ProjectionInput::kAttentionOutput, batch,
                                 attn_.data(), qd);
  }
  if (sparse) {
    for (int b = 0; b < batch; ++b) {
      columns_.Keep(attn_.data() + int64_t{b} * qd, qd, out_thresholds_[layer_index]);
      const ColumnSparseJob o[1] = {{&layer.wo_t, out_.data() + int64_t{b} * d}};
      columns_.Run(o, 1, pool);
    }
    return;
  }
  PreparedInput ain =
      PrepareInput(attn_.data(), qd, batch, q8_.data(), pool, ReadsQ8(layer.wo.type));
  ain.run_length = run_length;
  const MatMulJob o[1] = {{&layer.wo, out_.data(), d}};
  ParallelMatMul(pool, ain, o, 1);
}

void AttentionBlock::Attend(int layer_index, const int* pos, KvCache* const* caches, int batch,
                            ThreadPool* pool, const int32_t* run_length) {
  const int qd = c_.q_dim(), hd = c_.head_dim;
  // Work items: a block of consecutive rows of one run and one KV head's
  // query heads. The block's queries (its rows times those heads) take their scores
  // from one MatMulRows over the head's cached keys, each key row read once
  // for all of them; a batch column of MatMulRows is the bits MatVecRows
  // gives it alone (kernels_test: BatchColumnsEqualLoneProducts), so every
  // score, and the answer, is what a query computed by itself gets.
  const int group = c_.n_head / c_.n_head_kv;
  const int rows_per_item = std::max(1, queries_per_item_ / group);
  // Too few items to keep the threads busy (a decode step's rows): a head
  // an item, the group's key reads no longer shared.
  int n_runs = 0;
  for (int b = 0; b < batch; b += run_length ? run_length[b] : batch) {
    const int run = run_length ? run_length[b] : batch;
    n_runs += (run + rows_per_item - 1) / rows_per_item;
  }
  const int per_item = n_runs * c_.n_head_kv < 2 * pool->size() ? 1 : group;
  items_.clear();
  for (int b = 0; b < batch;) {
    const int run = run_length ? run_length[b] : batch;
    for (int r = b; r < b + run; r += rows_per_item) {
      for (int head = 0; head < c_.n_head; head += per_item) {
        items_.push_back({r, std::min(rows_per_item, b + run - r), head, per_item});
      }
    }
    b += run;
  }
  const float scale = c_.QueryScale();
  const float cap = c_.attn_softcap;
  // A sliding layer's query at p reads keys (p - n_swa, p].
  const int window = c_.IsSlidingLayer(layer_index) ? c_.n_swa : 0;
  // Short contexts read little KV cache: then one chunk, on the caller.
  int max_pos = 0;
  for (int b = 0; b < batch; ++b) max_pos = std::max(max_pos, pos[b]);
  const int64_t n_items = static_cast<int64_t>(items_.size());
  const int64_t kv_bytes = static_cast<int64_t>(batch) * c_.n_head_kv * (max_pos + 1) *
                           (RowBytes(k_type_, hd) + RowBytes(caches[0]->v_type(), hd));
  const int64_t n_chunks =
      kv_bytes < ThreadPool::kMinParallelBytes ? 1 : std::min<int64_t>(n_items, 4 * pool->size());
  const size_t q_bytes = PreparedActivationBytes(k_type_, hd);
  pool->ParallelFor(n_chunks, [&](int64_t chunk, int slot) {
    int64_t i0, i1;
    ThreadPool::Split(n_items, chunk, n_chunks, 1, &i0, &i1);
    float* scores = scores_.data() + static_cast<int64_t>(slot) * queries_per_item_ * n_ctx_;
    uint8_t* queries = q_k_.data() + static_cast<size_t>(slot) * queries_per_item_ * q_bytes;
    for (int64_t i = i0; i < i1; ++i) {
      const AttentionItem& it = items_[i];
      const KvCache* cache = caches[it.row];
      const int kv_head = it.head0 / group, nh = it.heads;
      // The queries, row by row and head by head, as the keys read them.
      for (int r = 0; r < it.rows; ++r) {
        for (int g = 0; g < nh; ++g) {
          const float* qh = q_.data() + static_cast<int64_t>(it.row + r) * qd +
                            static_cast<int64_t>(it.head0 + g) * hd;
          PrepareActivation(k_type_, qh, hd, queries + (r * nh + g) * q_bytes);
        }
      }
      // Rows of a run have ascending positions: the first's window starts
      // lowest, the last reads the most keys.
      const int first_pos = pos[it.row] + 1, last_pos = pos[it.row + it.rows - 1] + 1;
      const int p_lo = window > 0 ? std::max(0, first_pos - window) : 0;
      MatMulRows(k_type_, cache->k(layer_index, kv_head), hd, queries, it.rows * nh, scores, n_ctx_,
                 p_lo, last_pos);
      for (int r = 0; r < it.rows; ++r) {
        const int n_pos = pos[it.row + r] + 1;
        const int p0 = window > 0 ? std::max(0, n_pos - window) : 0;
        for (int g = 0; g < nh; ++g) {
          // Its scores: softmax(K q * scale), then out = sum_p scores[p] V[p]
          // (an axpy over the head's cached values).
          float* s = scores + static_cast<int64_t>(r * nh + g) * n_ctx_;
          for (int p = p0; p < n_pos; ++p) s[p] *= scale;
          if (cap > 0.0f) {
            for (int p = p0; p < n_pos; ++p) s[p] = cap * std::tanh(s[p] / cap);
          }
          Softmax(s + p0, n_pos - p0);
          const int head = it.head0 + g;
          float* out = attn_.data() + static_cast<int64_t>(it.row + r) * qd + head * hd;
          std::memset(out, 0, sizeof(float) * hd);
          AxpyRows(cache->v_type(), cache->v(layer_index, kv_head), hd, s, out, p0, n_pos);
        }
      }
    }
  });
}

void AttentionBlock::ForwardRows(const LlamaLayer& layer, int layer_index, const int* pos,
                                 KvCache* const* caches, int batch, float* h, ThreadPool* pool,
                                 const int32_t* run_length) {
  const int d = c_.n_embd, qd = c_.q_dim(), kvd = c_.kv_dim(), hd = c_.head_dim;
  for (int b = 0; b < batch; ++b) {
    NormalizeRow(c_, layer.attn_norm, layer.attn_norm_b, h + static_cast<int64_t>(b) * d,
                 x_.data() + static_cast<int64_t>(b) * d);
  }
  if (observer_)
    observer_->OnProjectionInput(layer_index, ProjectionInput::kAttention, batch, x_.data(), d);
  const bool sparse = SparseRows(layer, layer_index, batch, run_length);
  if (sparse) {  // --sparse teal: each row reads the columns of its kept entries
    for (int b = 0; b < batch; ++b) {
      columns_.Keep(x_.data() + int64_t{b} * d, d, in_thresholds_[layer_index]);
      const ColumnSparseJob qkv[3] = {{&layer.wq_t, q_.data() + int64_t{b} * qd},
                                      {&layer.wk_t, k_.data() + int64_t{b} * kvd},
                                      {&layer.wv_t, v_.data() + int64_t{b} * kvd}};
      columns_.Run(qkv, 3, pool);
    }
  } else {
    PreparedInput in =
        PrepareInput(x_.data(), d, batch, q8_.data(), pool,
                     ReadsQ8(layer.wq.type) || ReadsQ8(layer.wk.type) || ReadsQ8(layer.wv.type));
    in.run_length = run_length;
    const MatMulJob qkv[3] = {
        {&layer.wq, q_.data(), qd}, {&layer.wk, k_.data(), kvd}, {&layer.wv, v_.data(), kvd}};
    ParallelMatMul(pool, in, qkv, 3);
  }
  AddBias(layer.bq, batch, q_.data());  // qwen2's, before the rotation
  AddBias(layer.bk, batch, k_.data());
  AddBias(layer.bv, batch, v_.data());
  NormHeads(layer.q_norm, batch * c_.n_head, c_.norm_eps, q_.data());  // qwen3's, before RoPE
  NormHeads(layer.k_norm, batch * c_.n_head_kv, c_.norm_eps, k_.data());

  // The batch's rotations: the same in every layer (gemma3's sliding layers
  // have their own), so computed by the first layer that sees these
  // positions (reserved: no allocation).
  if (static_cast<int>(rope_pos_.size()) != batch ||
      !std::equal(rope_pos_.begin(), rope_pos_.end(), pos)) {
    rope_pos_.assign(pos, pos + batch);
    for (int b = 0; b < batch; ++b) {
      RopeAnglesOf(c_, pos[b], rope_cs_.data() + b * c_.rope_dims);
      if (!rope_cs_local_.empty()) {
        RopeAngles(c_.rope_dims, pos[b], c_.rope_theta_swa,
                   rope_cs_local_.data() + b * c_.rope_dims);
      }
    }
  }
  const float* angles = c_.HasLocalRope(layer_index) ? rope_cs_local_.data() : rope_cs_.data();
  for (int b = 0; b < batch; ++b) {
    const float* cs = angles + b * c_.rope_dims;
    // llama: adjacent pairs; falcon: NeoX pairs (i, i + rope_dims / 2).
    const auto rope = c_.rope == RopeKind::kNeox ? RopeNeox : RopeNormal;
    rope(q_.data() + static_cast<int64_t>(b) * qd, c_.n_head, hd, c_.rope_dims, cs);
    rope(k_.data() + static_cast<int64_t>(b) * kvd, c_.n_head_kv, hd, c_.rope_dims, cs);
    caches[b]->Store(layer_index, pos[b], k_.data() + static_cast<int64_t>(b) * kvd,
                     v_.data() + static_cast<int64_t>(b) * kvd);
  }

  Attend(layer_index, pos, caches, batch, pool, run_length);
  OutputProjection(layer, layer_index, batch, sparse, pool, run_length);
  for (int b = 0; b < batch; ++b) {
    const int64_t row = static_cast<int64_t>(b) * d;
    AddResidual(c_, layer.attn_post_norm, out_.data() + row, h + row);
  }
}

}  // namespace pi
