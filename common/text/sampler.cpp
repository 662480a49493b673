#include "common/text/sampler.h"

#include <algorithm>
#include <chrono>
#include <cmath>

namespace pi {

Status CheckSamplerParams(const SamplerParams& sp) {
  if (sp.top_k < 0) return Status::Error("top-k out of range: must be >= 0, got %d", sp.top_k);
  if (!(sp.top_p > 0.0f && sp.top_p <= 1.0f)) {
    return Status::Error("top-p out of range: must be in (0, 1], got %g", sp.top_p);
  }
  if (!(sp.min_p >= 0.0f && sp.min_p <= 1.0f)) {
    return Status::Error("min-p out of range: must be in [0, 1], got %g", sp.min_p);
  }
  // A penalty far from 1 divides or multiplies logits out of float's range
  // (then the least likely token could win).
  if (!(sp.repeat_penalty >= 1e-3f && sp.repeat_penalty <= 1e3f)) {
    return Status::Error("repeat-penalty out of range: must be in [0.001, 1000], got %g",
                         sp.repeat_penalty);
  }
  if (sp.repeat_last_n < -1) {
    return Status::Error("repeat-last-n out of range: must be -1 or more, got %d",
                         sp.repeat_last_n);
  }
  if (!std::isfinite(sp.temp))
    return Status::Error("temp out of range: must be finite, got %g", sp.temp);
  return Status::Ok();
}

int RepeatLastNForContext(int repeat_last_n, int n_ctx) {
  if (repeat_last_n < 0) return n_ctx;
  return std::min(repeat_last_n, n_ctx);
}

Sampler::Sampler(const SamplerParams& params, int n_vocab)
    : params_(params), n_vocab_(n_vocab), seed_(params.seed) {
  if (seed_ == 0xFFFFFFFFu) {
    seed_ = static_cast<uint32_t>(std::random_device{}() ^
                                  std::chrono::steady_clock::now().time_since_epoch().count());
  }
  rng_.seed(seed_);
  cand_.resize(n_vocab);
  probs_.resize(n_vocab);
  history_.assign(params_.repeat_last_n > 0 ? params_.repeat_last_n : 0, 0);
}

void Sampler::Reset() {
  rng_.seed(seed_);
  history_len_ = 0;
  history_pos_ = 0;
}

void Sampler::Accept(int32_t token) {
  if (history_.empty()) return;
  history_[history_pos_] = token;
  history_pos_ = (history_pos_ + 1) % static_cast<int>(history_.size());
  if (history_len_ < static_cast<int>(history_.size())) ++history_len_;
}

int32_t Sampler::Sample(const float* logits) {
  int n = n_vocab_;
  for (int i = 0; i < n; ++i) cand_[i] = {i, logits[i]};

  if (params_.repeat_penalty != 1.0f) {
    // Each distinct recent token is penalized once, as llama.cpp does.
    for (int i = 0; i < history_len_; ++i) {
      const int32_t t = history_[i];
      if (t < 0 || t >= n) continue;
      bool seen_before = false;
      for (int j = 0; j < i && !seen_before; ++j) seen_before = history_[j] == t;
      if (seen_before) continue;
      float& l = cand_[t].logit;
      l = l > 0.0f ? l / params_.repeat_penalty : l * params_.repeat_penalty;
    }
  }

  auto by_logit = [](const Candidate& a, const Candidate& b) {
    return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
  };
  if (params_.temp <= 0.0f) {
    return std::min_element(cand_.begin(), cand_.begin() + n, by_logit)->id;
  }

  if (params_.top_k > 0 && params_.top_k < n) {
    std::partial_sort(cand_.begin(), cand_.begin() + params_.top_k, cand_.begin() + n, by_logit);
    n = params_.top_k;
  } else {
    std::sort(cand_.begin(), cand_.begin() + n, by_logit);
  }

  // Softmax of the (sorted) survivors, untempered.
  auto softmax = [&](int count, float temp) {
    const float max = cand_[0].logit;
    double sum = 0.0;
    for (int i = 0; i < count; ++i) {
      probs_[i] = std::exp((cand_[i].logit - max) / temp);
      sum += probs_[i];
    }
    for (int i = 0; i < count; ++i) probs_[i] = static_cast<float>(probs_[i] / sum);
  };

  if (params_.top_p < 1.0f) {
    softmax(n, 1.0f);
    double cum = 0.0;
    int keep = n;
    for (int i = 0; i < n; ++i) {
      cum += probs_[i];
      if (cum >= params_.top_p) {
        keep = i + 1;
        break;
      }
    }
    n = keep;
  }

  if (params_.min_p > 0.0f) {
    // p_i >= min_p * p_max  <=>  logit_i >= logit_max + log(min_p).
    const float cut = cand_[0].logit + std::log(params_.min_p);
    int keep = 1;
    while (keep < n && cand_[keep].logit >= cut) ++keep;
    n = keep;
  }

  softmax(n, params_.temp);
  // A uniform in [0, 1) from 24 high bits of one mt19937 draw.
  const float u = static_cast<float>(rng_() >> 8) * (1.0f / 16777216.0f);
  float cum = 0.0f;
  for (int i = 0; i < n; ++i) {
    cum += probs_[i];
    if (u < cum) return cand_[i].id;
  }
  return cand_[n - 1].id;
}

}  // namespace pi
