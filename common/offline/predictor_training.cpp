#include "common/offline/predictor_training.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "kernels/cpu/matmul.h"
#include "kernels/cpu/quant.h"

namespace pi {
namespace {

// dst[c * rows + r] = src[r * cols + c], in tiles that stay in L1.
void Transpose(const float* src, int64_t rows, int64_t cols, float* dst) {
  constexpr int64_t kTile = 32;
  for (int64_t r0 = 0; r0 < rows; r0 += kTile) {
    const int64_t r1 = std::min(rows, r0 + kTile);
    for (int64_t c0 = 0; c0 < cols; c0 += kTile) {
      const int64_t c1 = std::min(cols, c0 + kTile);
      for (int64_t r = r0; r < r1; ++r) {
        for (int64_t c = c0; c < c1; ++c) dst[c * rows + r] = src[r * cols + c];
      }
    }
  }
}

// Trains one layer on one thread: epochs of shuffled batches, Adam, early
// stopping on the held-out loss.
class LayerTrainer {
 public:
  LayerTrainer(const PredictorSamples& data, int layer, int d, int ff, int64_t n_train,
               int64_t n_total, const PredictorTrainParams& p, LayerPredictor* out)
      : data_(data),
        layer_(layer),
        d_(d),
        ff_(ff),
        n_train_(n_train),
        n_total_(n_total),
        p_(p),
        out_(out),
        batch_(d, ff, out->rank, p.batch) {}

  // Runs the epochs; `report(epoch, train_loss, val_loss, best)` after each.
  void Train(const EpochReport& report) {
    const int R = out_->rank, B = p_.batch;
    // Input scale: the RMS of h over the training tokens, so fc1 starts in range.
    double ss = 0;
    std::vector<float> h(d_);
    for (int64_t t = 0; t < n_train_; ++t) {
      data_.Input(layer_, t, h.data());
      for (int j = 0; j < d_; ++j) ss += static_cast<double>(h[j]) * h[j];
    }
    out_->in_scale = static_cast<float>(std::sqrt(ss / std::max<int64_t>(1, n_train_ * d_)));
    if (!(out_->in_scale > 0)) out_->in_scale = 1.0f;

    std::mt19937_64 rng(p_.seed * 1000003u + layer_);
    auto uniform = [&rng](float a) { return std::uniform_real_distribution<float>(-a, a)(rng); };
    w1_.resize(static_cast<size_t>(R) * d_);
    w2_.resize(static_cast<size_t>(ff_) * R);
    for (float& w : w1_) w = uniform(std::sqrt(6.0f / d_));
    for (float& w : w2_) w = uniform(std::sqrt(3.0f / R));
    g1_.assign(w1_.size(), 0), g2_.assign(w2_.size(), 0);
    m1_.assign(w1_.size(), 0), v1_.assign(w1_.size(), 0);
    m2_.assign(w2_.size(), 0), v2_.assign(w2_.size(), 0);

    std::vector<int64_t> order(n_train_);
    for (int64_t i = 0; i < n_train_; ++i) order[i] = i;
    double best = HUGE_VAL;
    std::vector<float> best_w1 = w1_, best_w2 = w2_;
    int since_best = 0, step = 0;
    for (int epoch = 1; epoch <= p_.epochs; ++epoch) {
      std::shuffle(order.begin(), order.end(), rng);
      double train_loss = 0;
      for (int64_t k = 0; k < n_train_; k += B) {
        const int nb = static_cast<int>(std::min<int64_t>(B, n_train_ - k));
        batch_.Load(data_, layer_, order.data() + k, nb, 1.0f / out_->in_scale);
        train_loss += batch_.Run(w1_.data(), w2_.data(), p_.pos_weight, g1_.data(), g2_.data());
        ++step;
        Adam(&w1_, g1_, &m1_, &v1_, step);
        Adam(&w2_, g2_, &m2_, &v2_, step);
      }
      train_loss /= static_cast<double>(n_train_) * ff_;
      const double val = Evaluate();
      const bool improved = val < best;
      if (improved) {
        best = val;
        best_w1 = w1_, best_w2 = w2_;
        since_best = 0;
      } else {
        ++since_best;
      }
      out_->epochs_run = epoch;
      report(epoch, train_loss, val, improved);
      if (since_best >= p_.patience) break;
    }
    out_->w1 = std::move(best_w1);
    out_->w2 = std::move(best_w2);
    out_->best_loss = best;
  }

 private:
  void Adam(std::vector<float>* w, const std::vector<float>& g, std::vector<float>* m,
            std::vector<float>* v, int step) {
    constexpr float b1 = 0.9f, b2 = 0.999f, eps = 1e-8f;
    // Bias corrections: m / (1 - b1^t) and v / (1 - b2^t).
    const float c1 = 1.0f / (1.0f - std::pow(b1, static_cast<float>(step)));
    const float c2 = 1.0f / (1.0f - std::pow(b2, static_cast<float>(step)));
    const float lr = p_.lr;
    float* __restrict wp = w->data();
    float* __restrict mp = m->data();
    float* __restrict vp = v->data();
    const float* __restrict gp = g.data();
    const size_t n = w->size();
    for (size_t i = 0; i < n; ++i) {
      const float mi = b1 * mp[i] + (1 - b1) * gp[i];
      const float vi = b2 * vp[i] + (1 - b2) * gp[i] * gp[i];
      mp[i] = mi, vp[i] = vi;
      wp[i] -= lr * (mi * c1) / (std::sqrt(vi * c2) + eps);
    }
  }

  // Mean held-out loss per (token, neuron).
  double Evaluate() {
    double loss = 0;
    std::vector<int64_t> idx(p_.batch);
    for (int64_t t = n_train_; t < n_total_; t += p_.batch) {
      const int nb = static_cast<int>(std::min<int64_t>(p_.batch, n_total_ - t));
      for (int b = 0; b < nb; ++b) idx[b] = t + b;
      batch_.Load(data_, layer_, idx.data(), nb, 1.0f / out_->in_scale);
      loss += batch_.Run(w1_.data(), w2_.data(), p_.pos_weight, nullptr, nullptr);
    }
    return loss / (static_cast<double>(std::max<int64_t>(1, n_total_ - n_train_)) * ff_);
  }

  const PredictorSamples& data_;
  int layer_, d_, ff_;
  int64_t n_train_, n_total_;
  PredictorTrainParams p_;
  LayerPredictor* out_;
  PredictorBatch batch_;
  std::vector<float> w1_, w2_, g1_, g2_, m1_, v1_, m2_, v2_;
};

}  // namespace

PredictorBatch::PredictorBatch(int d, int ff, int rank, int max_batch)
    : d_(d), ff_(ff), rank_(rank), masks_(max_batch) {
  const size_t B = static_cast<size_t>(max_batch);
  x_.resize(B * d), xt_.resize(B * d);
  z_.resize(B * rank), r_.resize(B * rank), rt_.resize(B * rank);
  s_.resize(B * ff), gt_.resize(B * ff);
  w2t_.resize(static_cast<size_t>(rank) * ff);
  dr_.resize(B * rank), dzt_.resize(B * rank);
}

void PredictorBatch::Load(const PredictorSamples& data, int layer, const int64_t* idx, int nb,
                          float in_mul) {
  nb_ = std::min(nb, static_cast<int>(masks_.size()));
  for (int b = 0; b < nb_; ++b) {
    float* x = x_.data() + static_cast<size_t>(b) * d_;
    data.Input(layer, idx[b], x);
    for (int j = 0; j < d_; ++j) x[j] *= in_mul;
    masks_[b] = data.fired_mask(layer, idx[b]);
  }
}

double PredictorBatch::Run(const float* w1, const float* w2, float pos_weight, float* g1,
                           float* g2) {
  const int nb = nb_, R = rank_;
  if (nb == 0) return 0;
  GemmRows(DType::kF32, w1, d_, x_.data(), nb, z_.data(), R, 0, R);
  for (size_t i = 0; i < static_cast<size_t>(nb) * R; ++i) r_[i] = std::max(z_[i], 0.0f);
  GemmRows(DType::kF32, w2, R, r_.data(), nb, s_.data(), ff_, 0, ff_);
  // Weighted BCE: y ? pw * softplus(-s) : softplus(s), with one exp and one
  // log per score: softplus(+-s) = max(+-s, 0) + log(1 + e^-|s|) (log1p
  // would be exact for tiny e^-|s| too, but costs several logs). Its
  // derivative over the batch size replaces the scores in s_.
  const bool grad = g1 != nullptr && g2 != nullptr;
  const float inv_nb = 1.0f / nb;
  double loss = 0;
  for (int b = 0; b < nb; ++b) {
    const uint64_t* fired = masks_[b];
    float* s = s_.data() + static_cast<size_t>(b) * ff_;
    double row = 0;
    for (int i = 0; i < ff_; ++i) {
      const bool y = (fired[i / 64] >> (i % 64)) & 1;
      const float e = std::exp(-std::fabs(s[i]));
      const float l1p = std::log(1.0f + e);
      row += y ? pos_weight * (std::max(-s[i], 0.0f) + l1p) : std::max(s[i], 0.0f) + l1p;
      if (grad) {
        const float sig = s[i] >= 0 ? 1.0f / (1.0f + e) : e / (1.0f + e);
        s[i] = (y ? pos_weight * (sig - 1.0f) : sig) * inv_nb;
      }
    }
    loss += row;
  }
  if (grad) Gradients(w2, g1, g2);
  return loss;
}

// With dL/ds by token in s_: g2 = g^T r, dr = g W2, dz = dr * [z > 0],
// g1 = dz^T x, each as GemmRows over the contiguous reduction dimension.
void PredictorBatch::Gradients(const float* w2, float* g1, float* g2) {
  const int nb = nb_, R = rank_;
  Transpose(s_.data(), nb, ff_, gt_.data());
  Transpose(r_.data(), nb, R, rt_.data());
  // g2[i][j] = sum_b gt[i][b] rt[j][b]: rt's rows are the weights, gt's the batch.
  GemmRows(DType::kF32, rt_.data(), nb, gt_.data(), ff_, g2, R, 0, R);
  // dr[b][j] = sum_i w2t[j][i] g[b][i].
  Transpose(w2, ff_, R, w2t_.data());
  GemmRows(DType::kF32, w2t_.data(), ff_, s_.data(), nb, dr_.data(), R, 0, R);
  for (int b = 0; b < nb; ++b) {
    for (int j = 0; j < R; ++j) {
      const size_t bj = static_cast<size_t>(b) * R + j;
      dzt_[static_cast<size_t>(j) * nb + b] = z_[bj] > 0.0f ? dr_[bj] : 0.0f;
    }
  }
  // g1[j][c] = sum_b dzt[j][b] xt[c][b].
  Transpose(x_.data(), nb, d_, xt_.data());
  GemmRows(DType::kF32, xt_.data(), nb, dzt_.data(), R, g1, d_, 0, d_);
}

void TrainLayerPredictor(const PredictorSamples& data, int layer, int64_t n_train, int64_t n_total,
                         const PredictorTrainParams& p, LayerPredictor* out,
                         const EpochReport& report) {
  LayerTrainer trainer(data, layer, data.n_embd(), data.n_ff(), n_train, n_total, p, out);
  trainer.Train(report);
}

// The weights as the file will hold them: 1/in_scale folded into w1, fc2
// scaled by `fc2_scale`, rounded through `type`.
void FinalPredictorWeights(const LayerPredictor& p, int d, int ff, DType type, float fc2_scale,
                           std::vector<float>* w1, std::vector<float>* w2) {
  *w1 = p.w1;
  *w2 = p.w2;
  for (float& w : *w1) w /= p.in_scale;
  for (float& w : *w2) w *= fc2_scale;
  std::vector<uint8_t> buf(RowBytes(type, std::max(d, p.rank)));
  for (int j = 0; j < p.rank; ++j) {
    QuantizeRow(type, w1->data() + static_cast<size_t>(j) * d, buf.data(), d);
    DequantizeRow(type, buf.data(), w1->data() + static_cast<size_t>(j) * d, d);
  }
  for (int i = 0; i < ff; ++i) {
    QuantizeRow(type, w2->data() + static_cast<size_t>(i) * p.rank, buf.data(), p.rank);
    DequantizeRow(type, buf.data(), w2->data() + static_cast<size_t>(i) * p.rank, p.rank);
  }
}

// Chunks of tokens, each two GemmRows: h [nb][d] -> hidden [nb][rank] -> scores.
void PredictorScores(const PredictorSamples& data, int layer, int64_t t0, int64_t n, int d, int ff,
                     const std::vector<float>& w1, const std::vector<float>& w2, int rank,
                     std::vector<float>* scores) {
  constexpr int64_t kChunk = 64;
  scores->assign(static_cast<size_t>(n) * ff, 0.0f);
  std::vector<float> h(static_cast<size_t>(kChunk) * d), hid(static_cast<size_t>(kChunk) * rank);
  for (int64_t t = 0; t < n; t += kChunk) {
    const int64_t nb = std::min(kChunk, n - t);
    for (int64_t b = 0; b < nb; ++b) data.Input(layer, t0 + t + b, h.data() + b * d);
    GemmRows(DType::kF32, w1.data(), d, h.data(), nb, hid.data(), rank, 0, rank);
    for (int64_t i = 0; i < nb * rank; ++i) hid[i] = std::max(hid[i], 0.0f);
    GemmRows(DType::kF32, w2.data(), rank, hid.data(), nb, scores->data() + t * ff, ff, 0, ff);
  }
}

PredictorQuality MeasurePredictor(const PredictorSamples& data, int layer, int64_t t0, int64_t n,
                                  int ff, const std::vector<float>& scores, float threshold) {
  int64_t tp = 0, fp = 0, fn = 0, pos = 0;
  for (int64_t t = 0; t < n; ++t) {
    for (int i = 0; i < ff; ++i) {
      const bool y = data.fired(layer, t0 + t, i);
      const bool p = scores[static_cast<size_t>(t) * ff + i] >= threshold;
      tp += y && p, fp += !y && p, fn += y && !p, pos += y;
    }
  }
  PredictorQuality q;
  const double total = static_cast<double>(n) * ff;
  q.recall = pos > 0 ? static_cast<double>(tp) / pos : 1.0;
  q.precision = tp + fp > 0 ? static_cast<double>(tp) / (tp + fp) : 1.0;
  q.predicted_sparsity = 1.0 - (tp + fp) / total;
  q.true_sparsity = 1.0 - pos / total;
  q.firing = pos;
  (void)fn;
  return q;
}

double PredictorQuality::RecallMargin() const {
  if (firing <= 0) return 1.0;
  return 1.96 * std::sqrt(recall * (1.0 - recall) / static_cast<double>(firing)) +
         1.0 / static_cast<double>(firing);
}

// The largest threshold at which at least `target` of the firing neurons
// score >= threshold (the score of the k-th weakest positive).
float ThresholdForRecall(const PredictorSamples& data, int layer, int64_t t0, int64_t n, int ff,
                         const std::vector<float>& scores, double target) {
  std::vector<float> pos;
  for (int64_t t = 0; t < n; ++t) {
    for (int i = 0; i < ff; ++i) {
      if (data.fired(layer, t0 + t, i)) pos.push_back(scores[static_cast<size_t>(t) * ff + i]);
    }
  }
  if (pos.empty()) return HUGE_VALF;
  // Keep ceil(target * P) positives: drop the P - ceil(target * P) lowest.
  const int64_t keep = static_cast<int64_t>(std::ceil(target * pos.size() - 1e-9));
  const int64_t drop = static_cast<int64_t>(pos.size()) - std::max<int64_t>(keep, 1);
  std::nth_element(pos.begin(), pos.begin() + drop, pos.end());
  return pos[drop];
}

}  // namespace pi
