#include "common/predictor_training.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "kernels/cpu/matmul.h"
#include "kernels/cpu/quant.h"

namespace pi {
namespace {

// Softplus, stable for large |x|: log(1 + e^x).
inline double Softplus(double x) {
  return x > 0 ? x + std::log1p(std::exp(-x)) : std::log1p(std::exp(x));
}

// Trains one layer. All work on one thread; the f32 kernels of
// kernels/cpu/matmul.h do the products (MatMulRows for the forward pass,
// AxpyRows for the transposed ones).
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
        out_(out) {}

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
    x_.resize(static_cast<size_t>(B) * d_), xt_.resize(static_cast<size_t>(B) * d_);
    z_.resize(static_cast<size_t>(B) * R), r_.resize(static_cast<size_t>(B) * R);
    s_.resize(static_cast<size_t>(B) * ff_), gt_.resize(static_cast<size_t>(B) * ff_);
    dr_.resize(static_cast<size_t>(B) * R), dzt_.resize(static_cast<size_t>(B) * R);

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
        train_loss += Step(order.data() + k, nb, ++step);
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
  // Forward for nb tokens whose (scaled) inputs are in x_: z_, r_, s_.
  void Forward(int nb) {
    const int R = out_->rank;
    MatMulRows(DType::kF32, w1_.data(), d_, x_.data(), nb, z_.data(), R, 0, R);
    for (int64_t i = 0; i < static_cast<int64_t>(nb) * R; ++i) r_[i] = std::max(z_[i], 0.0f);
    MatMulRows(DType::kF32, w2_.data(), R, r_.data(), nb, s_.data(), ff_, 0, ff_);
  }

  void Gather(const int64_t* idx, int nb) {
    const float inv = 1.0f / out_->in_scale;
    for (int b = 0; b < nb; ++b) {
      float* x = x_.data() + static_cast<size_t>(b) * d_;
      data_.Input(layer_, idx[b], x);
      for (int j = 0; j < d_; ++j) x[j] *= inv;
    }
  }

  // Sum over the batch of the weighted BCE; gradient d loss / d s into gt_
  // (transposed: [ff][nb]) when `grad`.
  double Loss(const int64_t* idx, int nb, bool grad) {
    double loss = 0;
    const float pw = p_.pos_weight;
    for (int b = 0; b < nb; ++b) {
      for (int i = 0; i < ff_; ++i) {
        const float s = s_[static_cast<size_t>(b) * ff_ + i];
        const bool y = data_.fired(layer_, idx[b], i);
        loss += y ? pw * Softplus(-s) : Softplus(s);
        if (grad) {
          const float sig = 1.0f / (1.0f + std::exp(-s));
          gt_[static_cast<size_t>(i) * nb + b] = (y ? pw * (sig - 1.0f) : sig) / nb;
        }
      }
    }
    return loss;
  }

  double Step(const int64_t* idx, int nb, int step) {
    const int R = out_->rank;
    Gather(idx, nb);
    Forward(nb);
    const double loss = Loss(idx, nb, true);
    // dW2[i][:] = sum_b g[b][i] r[b][:]
    std::fill(g2_.begin(), g2_.end(), 0.0f);
    for (int i = 0; i < ff_; ++i) {
      AxpyRows(DType::kF32, r_.data(), R, gt_.data() + static_cast<size_t>(i) * nb,
               g2_.data() + static_cast<size_t>(i) * R, 0, nb);
    }
    // dr[b][:] = sum_i g[b][i] W2[i][:]; needs g by token: transpose back into s_.
    for (int i = 0; i < ff_; ++i) {
      for (int b = 0; b < nb; ++b) {
        s_[static_cast<size_t>(b) * ff_ + i] = gt_[static_cast<size_t>(i) * nb + b];
      }
    }
    std::fill(dr_.begin(), dr_.end(), 0.0f);
    for (int b = 0; b < nb; ++b) {
      AxpyRows(DType::kF32, w2_.data(), R, s_.data() + static_cast<size_t>(b) * ff_,
               dr_.data() + static_cast<size_t>(b) * R, 0, ff_);
    }
    // dz = dr * (z > 0), transposed [R][nb]; dW1[j][:] = sum_b dz[b][j] x[b][:]
    for (int b = 0; b < nb; ++b) {
      for (int j = 0; j < R; ++j) {
        const size_t bj = static_cast<size_t>(b) * R + j;
        dzt_[static_cast<size_t>(j) * nb + b] = z_[bj] > 0.0f ? dr_[bj] : 0.0f;
      }
    }
    std::fill(g1_.begin(), g1_.end(), 0.0f);
    for (int j = 0; j < R; ++j) {
      AxpyRows(DType::kF32, x_.data(), d_, dzt_.data() + static_cast<size_t>(j) * nb,
               g1_.data() + static_cast<size_t>(j) * d_, 0, nb);
    }
    Adam(&w1_, g1_, &m1_, &v1_, step);
    Adam(&w2_, g2_, &m2_, &v2_, step);
    return loss;
  }

  void Adam(std::vector<float>* w, const std::vector<float>& g, std::vector<float>* m,
            std::vector<float>* v, int step) {
    constexpr float b1 = 0.9f, b2 = 0.999f, eps = 1e-8f;
    const float c1 = 1.0f / (1.0f - std::pow(b1, static_cast<float>(step)));
    const float c2 = 1.0f / (1.0f - std::pow(b2, static_cast<float>(step)));
    const float lr = p_.lr;
    float* wp = w->data();
    float* mp = m->data();
    float* vp = v->data();
    const float* gp = g.data();
    const size_t n = w->size();
    for (size_t i = 0; i < n; ++i) {
      mp[i] = b1 * mp[i] + (1 - b1) * gp[i];
      vp[i] = b2 * vp[i] + (1 - b2) * gp[i] * gp[i];
      wp[i] -= lr * (mp[i] * c1) / (std::sqrt(vp[i] * c2) + eps);
    }
  }

  // Mean held-out loss per (token, neuron).
  double Evaluate() {
    double loss = 0;
    std::vector<int64_t> idx(p_.batch);
    for (int64_t t = n_train_; t < n_total_; t += p_.batch) {
      const int nb = static_cast<int>(std::min<int64_t>(p_.batch, n_total_ - t));
      for (int b = 0; b < nb; ++b) idx[b] = t + b;
      Gather(idx.data(), nb);
      Forward(nb);
      loss += Loss(idx.data(), nb, false);
    }
    return loss / (static_cast<double>(std::max<int64_t>(1, n_total_ - n_train_)) * ff_);
  }

  const PredictorSamples& data_;
  int layer_, d_, ff_;
  int64_t n_train_, n_total_;
  PredictorTrainParams p_;
  LayerPredictor* out_;
  std::vector<float> w1_, w2_, g1_, g2_, m1_, v1_, m2_, v2_;
  std::vector<float> x_, xt_, z_, r_, s_, gt_, dr_, dzt_;
};

}  // namespace

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

// scores [n][ff] of tokens [t0, t0 + n) in double precision from final weights.
void PredictorScores(const PredictorSamples& data, int layer, int64_t t0, int64_t n, int d, int ff,
                     const std::vector<float>& w1, const std::vector<float>& w2, int rank,
                     std::vector<float>* scores) {
  scores->assign(static_cast<size_t>(n) * ff, 0.0f);
  std::vector<double> hid(rank);
  std::vector<float> h(d);
  for (int64_t t = 0; t < n; ++t) {
    data.Input(layer, t0 + t, h.data());
    for (int j = 0; j < rank; ++j) {
      double acc = 0;
      const float* row = w1.data() + static_cast<size_t>(j) * d;
      for (int c = 0; c < d; ++c) acc += static_cast<double>(row[c]) * h[c];
      hid[j] = std::max(acc, 0.0);
    }
    for (int i = 0; i < ff; ++i) {
      double acc = 0;
      const float* row = w2.data() + static_cast<size_t>(i) * rank;
      for (int j = 0; j < rank; ++j) acc += row[j] * hid[j];
      (*scores)[static_cast<size_t>(t) * ff + i] = static_cast<float>(acc);
    }
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
