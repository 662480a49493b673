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
  // OpenAI's range for both.
  if (!(sp.frequency_penalty >= -2.0f && sp.frequency_penalty <= 2.0f)) {
    return Status::Error("frequency-penalty out of range: must be in [-2, 2], got %g",
                         sp.frequency_penalty);
  }
  if (!(sp.presence_penalty >= -2.0f && sp.presence_penalty <= 2.0f)) {
    return Status::Error("presence-penalty out of range: must be in [-2, 2], got %g",
                         sp.presence_penalty);
  }
  return Status::Ok();
}

Status CheckLogitBias(const SamplerParams& sp, int n_vocab) {
  if (sp.logit_bias.size() > kMaxLogitBiases) {
    return Status::Error("logit-bias: %zu tokens, at most %zu", sp.logit_bias.size(),
                         kMaxLogitBiases);
  }
  for (const auto& [id, bias] : sp.logit_bias) {
    if (id < 0 || id >= n_vocab) {
      return Status::Error("logit-bias: token %d is outside the vocabulary (0..%d)", id,
                           n_vocab - 1);
    }
    if (!(bias >= -100.0f && bias <= 100.0f) && bias != -INFINITY) {
      return Status::Error("logit-bias: token %d's bias must be in [-100, 100] (or -inf), got %g",
                           id, bias);
    }
  }
  return Status::Ok();
}

int RepeatLastNForContext(int repeat_last_n, int n_ctx) {
  if (repeat_last_n < 0) return n_ctx;
  return std::min(repeat_last_n, n_ctx);
}

Sampler::Sampler(const SamplerParams& params, int n_vocab)
    : params_(params), n_vocab_(n_vocab), seed_(params.seed) {
  if (seed_ == kRandomSeed) {
    seed_ = static_cast<uint32_t>(std::random_device{}() ^
                                  std::chrono::steady_clock::now().time_since_epoch().count());
  }
  rng_.seed(seed_);
  cand_.resize(n_vocab);
  probs_.resize(n_vocab);
  history_.assign(params_.repeat_last_n > 0 ? params_.repeat_last_n : 0, 0);
  sorted_.assign(history_.size(), 0);
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

// Each distinct token of the window is penalized once, as llama.cpp does:
// the repetition penalty scales its logit, then it loses frequency_penalty
// per occurrence and presence_penalty once.
void Sampler::ApplyPenalties(int n) {
  const bool repeat = params_.repeat_penalty != 1.0f;
  const bool counted = params_.frequency_penalty != 0.0f || params_.presence_penalty != 0.0f;
  if ((!repeat && !counted) || history_len_ == 0) return;
  std::copy(history_.begin(), history_.begin() + history_len_, sorted_.begin());
  std::sort(sorted_.begin(), sorted_.begin() + history_len_);
  for (int i = 0; i < history_len_;) {
    const int32_t t = sorted_[i];
    int count = 0;
    for (; i < history_len_ && sorted_[i] == t; ++i) ++count;
    if (t < 0 || t >= n) continue;
    float& l = cand_[t].logit;
    if (repeat) l = l > 0.0f ? l / params_.repeat_penalty : l * params_.repeat_penalty;
    l -= static_cast<float>(count) * params_.frequency_penalty + params_.presence_penalty;
  }
}

int32_t Sampler::Sample(const float* logits, const uint64_t* allowed) {
  int n = n_vocab_;
  for (int i = 0; i < n; ++i) cand_[i] = {i, logits[i]};
  if (allowed != nullptr) {
    // A word at a time: a grammar's mask is mostly whole words of ones
    // (inside a string) or of zeros (between values).
    for (int base = 0; base < n; base += 64) {
      const uint64_t bits = allowed[base >> 6];
      if (bits == ~0ull) continue;
      const int end = std::min(base + 64, n);
      for (int i = base; i < end; ++i) {
        if (!((bits >> (i - base)) & 1)) cand_[i].logit = -INFINITY;
      }
    }
  }

  for (const auto& [id, bias] : params_.logit_bias) {
    if (id >= 0 && id < n) cand_[id].logit += bias;
  }
  ApplyPenalties(n);

  auto by_logit = [](const Candidate& a, const Candidate& b) {
    return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
  };
  last_greedy_ = params_.temp <= 0.0f;
  if (last_greedy_) {
    last_n_ = n;
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
  last_n_ = n;
  // A uniform in [0, 1) from 24 high bits of one mt19937 draw.
  const float u = static_cast<float>(rng_() >> 8) * (1.0f / 16777216.0f);
  float cum = 0.0f;
  for (int i = 0; i < n; ++i) {
    cum += probs_[i];
    if (u < cum) return cand_[i].id;
  }
  // Rounding left u past the sum: the last candidate with a chance (a
  // masked token has none).
  while (n > 1 && probs_[n - 1] == 0.0f) --n;
  return cand_[n - 1].id;
}

int Sampler::LastDistribution(int32_t chosen, int k, std::pair<int32_t, float>* out,
                              float* chosen_p) const {
  if (!last_greedy_) {
    *chosen_p = 0.0f;
    for (int i = 0; i < last_n_; ++i) {
      if (cand_[i].id == chosen) *chosen_p = probs_[i];
    }
    const int m = std::min({k, last_n_, kMaxTopTokens});
    for (int i = 0; i < m; ++i) out[i] = {cand_[i].id, probs_[i]};
    return m;
  }
  // Greedy: the k highest logits, the first (the chosen token) certain.
  *chosen_p = 1.0f;
  int32_t top[kMaxTopTokens];
  const int kept = TopIndexes(
      last_n_, std::min(k, kMaxTopTokens), [this](int32_t i) { return cand_[i].logit; }, top);
  for (int i = 0; i < kept; ++i) {
    out[i] = {cand_[top[i]].id, cand_[top[i]].id == chosen ? 1.0f : 0.0f};
  }
  return kept;
}

}  // namespace pi
