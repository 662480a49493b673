#include "common/compute/neuron_ffn.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "common/base/progress.h"
#include "common/compute/gate_activation.h"
#include "common/compute/parallel_matmul.h"
#include "kernels/cpu/matmul.h"

namespace pi {

namespace {

// Rows of several inputs go over the union of their neurons in blocks of
// about this many weight bytes: a block stays in L2 while each row that
// needs its neurons reads them, so memory sees every weight row once.
constexpr int64_t kBlockBytes = 128 << 10;

int64_t BlockNeurons(int64_t row_bytes) {
  return std::clamp<int64_t>(kBlockBytes / std::max<int64_t>(row_bytes, 1), 8, 1024);
}

// Lists are cut only at multiples of kGrain of their own positions (or at
// their end), as Accumulate's chunks are: the kernels' multi-row id tiles
// then group the same rows in every cut, and a tile's sum may be ordered
// differently from a lone row's.
constexpr int64_t kGrain = 8;

// The position after list[from..) entries <= last_id, rounded down to a
// multiple of kGrain unless it is `end` (list[..end) is sorted).
int64_t GrainCut(const int32_t* list, int64_t end, int64_t from, int32_t last_id, int64_t stop) {
  int64_t e = std::upper_bound(list + from, list + end, last_id) - list;
  if (e == stop) return e;
  return std::max(from, e / kGrain * kGrain);
}

}  // namespace

void NeuronFfn::Init(const LlamaConfig& config, int max_rows) {
  c_ = config;
  max_rows_ = std::clamp(max_rows, 1, kMaxRows);
  gated_ = FfnIsGated(c_.activation);
  drelu_ = c_.activation == FfnActivation::kDRelu;
  const size_t r = static_cast<size_t>(max_rows_), ff = static_cast<size_t>(c_.n_ff);
  q8_.assign(r * PreparedActivationBytes(DType::kQ8_0, c_.n_embd), 0);
  gate_dots_.assign(r * ff, 0.0f);
  up_dots_.assign(r * ff, 0.0f);
  active_.assign(r * ff, 0);
  n_active_.assign(r, 0);
  act_.assign(r * ff, 0.0f);
  partial_.assign(r * kChunks * c_.n_embd, 0.0f);
  fired_.assign(r * kChunks, 0);
  union_.assign(ff, 0);
  marks_.assign(ff, 0);
  chunk_active_.assign(static_cast<size_t>((c_.n_ff + 63) / 64 + 1), 0);
  times_ = NeuronFfnTimes();
}

int64_t NeuronFfn::Union(int batch, const int32_t* const* lists, const int64_t* n, int32_t* out) {
  int64_t lo = c_.n_ff, hi = -1;
  for (int b = 0; b < batch; ++b) {
    for (int64_t j = 0; j < n[b]; ++j) marks_[lists[b][j]] = 1;
    if (n[b] > 0) {
      lo = std::min<int64_t>(lo, lists[b][0]);
      hi = std::max<int64_t>(hi, lists[b][n[b] - 1]);
    }
  }
  int64_t m = 0;
  for (int64_t i = lo; i <= hi; ++i) {
    if (marks_[i]) {
      out[m++] = static_cast<int32_t>(i);
      marks_[i] = 0;
    }
  }
  return m;
}

int64_t NeuronFfn::PassGate(float* dots, const int32_t* ids, int64_t n, float t,
                            int32_t* out) const {
  int64_t m = 0;
  for (int64_t j = 0; j < n; ++j) {
    const float a = ActivatedGate(c_.activation, dots[ids[j]]);
    dots[ids[j]] = a;
    if (std::fabs(a) > t) out[m++] = ids[j];
  }
  return m;
}

void NeuronFfn::UpDown(const NeuronRows& rows, int b, int k, int64_t p0, int64_t p1,
                       const void* x_up, float* act_out) {
  const int64_t d = c_.n_embd, ff = c_.n_ff;
  const int32_t* active = active_.data() + b * ff + p0;
  const int64_t mk = p1 - p0;
  const float* gate_dots = gate_dots_.data() + b * ff;
  // up_dots_ is indexed by row id; chunks hold disjoint ids, so no two
  // threads write one entry.
  float* up_dots = up_dots_.data() + b * ff;
  if (gated_) MatVecRowsIndexed(rows.up->type, rows.up->data, d, x_up, active, mk, up_dots);
  float* act = act_.data() + b * ff + p0;
  int64_t fired = 0;
  for (int64_t j = 0; j < mk; ++j) {
    const float g = gate_dots[active[j]];
    const float u = gated_ ? up_dots[active[j]] : 1.0f;
    act[j] = (drelu_ && u <= 0.0f) ? 0.0f : g * u;
    fired += act[j] != 0.0f;
    if (act_out) act_out[b * ff + active[j]] = act[j];  // ids are disjoint across chunks
  }
  float* part = partial_.data() + (static_cast<int64_t>(b) * kChunks + k) * d;
  AxpyRowsIndexed(rows.down_t->type, rows.down_t->data, d, active, act, mk, part);
  fired_[b * kChunks + k] += fired;
}

// Row b of the input prepared for weights of `t`'s type.
static const uint8_t* InputRow(const PreparedInput& in, const Tensor* t, int64_t d, int b) {
  return static_cast<const uint8_t*>(in.For(t->type)) + b * PreparedActivationBytes(t->type, d);
}

NeuronFfn::GateCut NeuronFfn::GateDots(const Tensor* first, float threshold, bool given, int batch,
                                       const int32_t* const* ids, const int64_t* n,
                                       const PreparedInput& in, ThreadPool* pool) {
  const int64_t d = c_.n_embd, ff = c_.n_ff;
  // Every row with the same candidates, a run of consecutive ids (the
  // oracle step's all neurons): the gate is a plain matrix product — for
  // quantized rows, whose batched tiles give each dot exactly as a lone
  // row's (integer sums; float tiles order their sums by tile shape).
  bool shared_range = ReadsQ8(first->type) && n[0] > 0 && ids[0][n[0] - 1] - ids[0][0] == n[0] - 1;
  for (int b = 1; b < batch; ++b) shared_range &= ids[b] == ids[0] && n[b] == n[0];
  const int32_t* all = ids[0];
  GateCut cut;
  cut.n_all = batch == 1 || shared_range ? n[0] : Union(batch, ids, n, union_.data());
  if (batch > 1 && !shared_range) all = union_.data();
  const int64_t n_all = cut.n_all;
  const bool small = n_all * first->row_bytes * batch < ThreadPool::kMinParallelBytes / 8;
  cut.chunks = small ? 1 : std::min<int64_t>(4 * pool->size(), (n_all + 63) / 64);
  const int64_t gate_chunks = cut.chunks;
  const int64_t gate_block = batch == 1 ? n_all : BlockNeurons(first->row_bytes);
  pool->ParallelFor(
      gate_chunks,
      [&](int64_t k, int) {
        int64_t k0, k1;
        ThreadPool::Split(n_all, k, gate_chunks, kGrain, &k0, &k1);
        if (batch == 1) chunk_active_[k] = 0;
        if (k0 >= k1) return;
        if (batch == 1) {
          if (!given) {
            MatVecRowsIndexed(first->type, first->data, d, InputRow(in, first, d, 0), ids[0] + k0,
                              k1 - k0, gate_dots_.data());
          }
          // This chunk's gate-passing candidates, in order, at active_[k0..):
          // the caller closes the gaps (one thread scanning every candidate
          // would be the step's serial tail on a many-core host).
          chunk_active_[k] =
              PassGate(gate_dots_.data(), ids[0] + k0, k1 - k0, threshold, active_.data() + k0);
          return;
        }
        if (given) return;   // the dots are there: SelectActive passes them
        if (shared_range) {  // the batched product: each weight row dots every row at once
          MatMulRows(first->type, first->data, d, InputRow(in, first, d, 0), batch,
                     gate_dots_.data(), ff, all[k0], all[k0] + (k1 - k0));
          return;
        }
        // Row b's share of this chunk: its candidates from all[k0] to
        // all[k1] (exclusive), cut on its own multiples of kGrain.
        int64_t at[kMaxRows], end[kMaxRows];
        for (int b = 0; b < batch; ++b) {
          at[b] = GrainCut(ids[b], n[b], 0, all[k0] - 1, n[b] + 1);
          end[b] = k1 == n_all ? n[b] : GrainCut(ids[b], n[b], at[b], all[k1] - 1, n[b] + 1);
        }
        for (int64_t s0 = k0; s0 < k1; s0 += gate_block) {
          const bool last_block = s0 + gate_block >= k1;
          const int32_t last = all[std::min(k1, s0 + gate_block) - 1];
          for (int b = 0; b < batch; ++b) {
            const int64_t e = last_block ? end[b] : GrainCut(ids[b], end[b], at[b], last, end[b]);
            if (e > at[b]) {
              MatVecRowsIndexed(first->type, first->data, d, InputRow(in, first, d, b),
                                ids[b] + at[b], e - at[b], gate_dots_.data() + b * ff);
              at[b] = e;
            }
          }
        }
      },
      small);
  return cut;
}

int64_t NeuronFfn::SelectActive(const NeuronRows& rows, int batch, const int32_t* const* ids,
                                const int64_t* n, GateCut cut) {
  const int64_t ff = c_.n_ff;
  int64_t tail_bytes = 0;
  for (int b = 0; b < batch; ++b) {
    float* gate_dots = gate_dots_.data() + b * ff;
    int32_t* active = active_.data() + b * ff;
    int64_t m = 0;
    if (batch == 1) {  // the chunks' lists, each at its first candidate's place, closed up
      for (int64_t k = 0; k < cut.chunks; ++k) {
        int64_t k0, k1;
        ThreadPool::Split(cut.n_all, k, cut.chunks, kGrain, &k0, &k1);
        std::memmove(active + m, active + k0, sizeof(int32_t) * chunk_active_[k]);
        m += chunk_active_[k];
      }
    } else {
      m = PassGate(gate_dots, ids[b], n[b], rows.threshold, active);
    }
    n_active_[b] = m;
    tail_bytes += m * ((gated_ ? rows.up->row_bytes : 0) + rows.down_t->row_bytes);
  }
  return tail_bytes;
}

void NeuronFfn::UpDownChunks(const NeuronRows& rows, int batch, const PreparedInput& in, bool small,
                             ThreadPool* pool, float* act_out) {
  const int64_t d = c_.n_embd, ff = c_.n_ff;
  int64_t n_union = 0;
  if (batch > 1) {
    const int32_t* lists[kMaxRows];
    for (int b = 0; b < batch; ++b) lists[b] = active_.data() + b * ff;
    n_union = Union(batch, lists, n_active_.data(), union_.data());
  }
  const int64_t block = BlockNeurons((gated_ ? rows.up->row_bytes : 0) + rows.down_t->row_bytes);
  pool->ParallelFor(
      kChunks,
      [&](int64_t k, int) {
        int64_t p0[kMaxRows], p1[kMaxRows];
        int32_t lo = static_cast<int32_t>(ff), hi = -1;
        for (int b = 0; b < batch; ++b) {
          ThreadPool::Split(n_active_[b], k, kChunks, kGrain, &p0[b], &p1[b]);
          std::memset(partial_.data() + (static_cast<int64_t>(b) * kChunks + k) * d, 0,
                      sizeof(float) * d);
          fired_[b * kChunks + k] = 0;
          const int32_t* active = active_.data() + b * ff;
          if (p0[b] < p1[b]) {
            lo = std::min(lo, active[p0[b]]);
            hi = std::max(hi, active[p1[b] - 1]);
          }
        }
        if (batch == 1) {
          if (p0[0] < p1[0])
            UpDown(rows, 0, static_cast<int>(k), p0[0], p1[0], InputRow(in, rows.up, d, 0),
                   act_out);
          return;
        }
        if (hi < lo) return;
        const int32_t* u = union_.data();
        const int64_t u0 = std::lower_bound(u, u + n_union, lo) - u;
        const int64_t u1 = std::upper_bound(u, u + n_union, hi) - u;
        for (int64_t s0 = u0; s0 < u1; s0 += block) {
          const int32_t last = u[std::min(u1, s0 + block) - 1];
          for (int b = 0; b < batch; ++b) {
            const int64_t e = GrainCut(active_.data() + b * ff, p1[b], p0[b], last, p1[b]);
            if (e > p0[b]) {
              UpDown(rows, b, static_cast<int>(k), p0[b], e, InputRow(in, rows.up, d, b), act_out);
              p0[b] = e;
            }
          }
        }
      },
      small);
}

void NeuronFfn::SumPartials(int batch, float* y, bool small, ThreadPool* pool) {
  const int64_t d = c_.n_embd;
  const int64_t sum_chunks =
      small ? 1 : std::max<int64_t>(1, std::min<int64_t>(pool->size(), d / 256));
  pool->ParallelFor(
      sum_chunks,
      [&](int64_t s, int) {
        int64_t c0, c1;
        ThreadPool::Split(d, s, sum_chunks, 16, &c0, &c1);
        for (int b = 0; b < batch; ++b) {
          if (n_active_[b] == 0) continue;  // nothing to add (not even a zero: -0 stays -0)
          float* yb = y + b * d;
          for (int k = 0; k < kChunks; ++k) {
            const float* part = partial_.data() + (static_cast<int64_t>(b) * kChunks + k) * d;
            for (int64_t c = c0; c < c1; ++c) yb[c] += part[c];
          }
        }
      },
      sum_chunks == 1);
}

void NeuronFfn::AccumulateRows(const NeuronRows& rows, int batch, const int32_t* const* ids,
                               const int64_t* n, const float* x, float* y, ThreadPool* pool,
                               int64_t* fired_out, float* act_out) {
  const int64_t d = c_.n_embd, ff = c_.n_ff;
  if (batch > max_rows_) {  // in groups the scratch holds
    for (int b0 = 0; b0 < batch; b0 += max_rows_) {
      const int nb = std::min(max_rows_, batch - b0);
      AccumulateRows(rows, nb, ids + b0, n + b0, x + b0 * d, y + b0 * d, pool, fired_out + b0,
                     act_out ? act_out + b0 * ff : nullptr);
    }
    return;
  }
  const double t_start = NowSeconds();
  // Quantized rows dot a Q8_0 copy of x; float rows read x itself.
  const PreparedInput in = PrepareInput(x, d, batch, q8_.data(), pool,
                                        ReadsQ8(rows.gate->type) || ReadsQ8(rows.up->type));
  const double t_prepared = NowSeconds();

  // 1. The deciding dot of every candidate: the bulk of the bytes when few
  // fire (every candidate's gate row), so it is cut as finely as the pool is
  // wide. Each dot lands in its own slot: the chunking changes nothing.
  // Rows picked by id stream at about a third of a dense matrix's speed, so
  // a second thread is worth it at an eighth of the pool's usual threshold
  // (demo at -t 2, predictor decode: +5 to +25 %, no loss with a core busy).
  // Several rows: the chunks cut the union of their candidates, and each
  // chunk goes block by block, every row dotting its own candidates there.
  // Ungated (falcon's relu(up x)): the up rows play the gate's role, one dot
  // per candidate, and the activation is that dot itself.
  if (rows.gate_dots) {
    std::memcpy(gate_dots_.data(), rows.gate_dots, sizeof(float) * batch * ff);
  }
  const GateCut cut = GateDots(gated_ ? rows.gate : rows.up, rows.threshold,
                               rows.gate_dots != nullptr, batch, ids, n, in, pool);
  const double t_gated = NowSeconds();

  // 2. Each row's fired (or, gated, gate-passing) neurons, then up and down
  // for them only, cut into a fixed number of chunks each summed into its
  // own partial vector and added in order: the result does not depend on
  // the thread count. Several rows: task k takes every row's chunk k, going
  // over the union of their active neurons block by block.
  const int64_t tail_bytes = SelectActive(rows, batch, ids, n, cut);
  const double t_selected = NowSeconds();
  const bool small_tail = tail_bytes < ThreadPool::kMinParallelBytes / 8;
  UpDownChunks(rows, batch, in, small_tail, pool, act_out);
  const double t_up_down = NowSeconds();
  for (int b = 0; b < batch; ++b) {
    fired_out[b] = 0;
    for (int k = 0; k < kChunks; ++k) fired_out[b] += fired_[b * kChunks + k];
  }
  // 3. The partial vectors added in chunk order, columns split among the
  // threads: every y element sees the same additions in the same order
  // however the columns are cut.
  SumPartials(batch, y, small_tail, pool);
  const double t_end = NowSeconds();
  times_.prepare += t_prepared - t_start;
  times_.gate += t_gated - t_prepared;
  times_.select += t_selected - t_gated;
  times_.up_down += t_up_down - t_selected;
  times_.sum += t_end - t_up_down;
  ++times_.calls;
}

}  // namespace pi
