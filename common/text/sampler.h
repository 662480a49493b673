// Sampler: picks the next token from logits, llama.cpp-style, with its
// default values: the logit biases, then the penalties over the last
// `repeat_last_n` tokens (repetition, frequency, presence), then top-k,
// top-p, min-p (all on the untempered distribution), then temperature and a
// draw. temp <= 0 is greedy (argmax). The same seed gives
// the same tokens: the draw uses mt19937's standardized output directly, not
// a std:: distribution (those differ between standard libraries).
// Buffers are sized at construction; Sample allocates nothing.
#pragma once

#include <cstdint>
#include <random>
#include <utility>
#include <vector>

#include "common/base/status.h"

namespace pi {

// SamplerParams::seed's "draw a random seed" (-1 as a request spells it).
inline constexpr uint32_t kRandomSeed = 0xFFFFFFFFu;

struct SamplerParams {
  float temp = 0.8f;
  int top_k = 40;               // 0 = off
  float top_p = 0.95f;          // 1 = off
  float min_p = 0.05f;          // 0 = off
  float repeat_penalty = 1.0f;  // 1 = off
  int repeat_last_n = 64;
  // OpenAI's penalties over the same window: a token's logit loses
  // frequency_penalty per time it occurs there and presence_penalty once if
  // it does (llama.cpp's penalty_freq and penalty_present). 0 = off.
  float frequency_penalty = 0.0f;
  float presence_penalty = 0.0f;
  uint32_t seed = kRandomSeed;
  // Added to these tokens' logits before anything else (OpenAI's
  // logit_bias; -infinity bans a token). Ids are checked against the
  // vocabulary by whoever builds the params (CheckLogitBias).
  std::vector<std::pair<int32_t, float>> logit_bias;
};

// At most this many logit biases in one request: each is applied per token.
inline constexpr size_t kMaxLogitBiases = 4096;

// An error naming the first parameter out of range (by llama.cpp's flag
// name: "top-k out of range: ..."); temp may be any finite value.
Status CheckSamplerParams(const SamplerParams& params);
// The same for the logit biases against a vocabulary of n_vocab: each id in
// it, each bias in [-100, 100] or -infinity, at most kMaxLogitBiases.
Status CheckLogitBias(const SamplerParams& params, int n_vocab);

// repeat_last_n for a context of n_ctx: -1 means the whole context, and
// more than the context is capped at it.
int RepeatLastNForContext(int repeat_last_n, int n_ctx);

// The most alternatives a token's log-probabilities list (OpenAI's
// top_logprobs, llama-server's n_probs).
inline constexpr int kMaxTopTokens = 20;

// The indexes of the k largest of value(0..n) in one pass, largest first
// (ties: the lower index first), into out[0..k); returns how many (k or n,
// the fewer). A value enters only when it beats the list's last.
template <class Value>
int TopIndexes(int n, int k, const Value& value, int32_t* out) {
  int kept = 0;
  for (int32_t i = 0; i < n && k > 0; ++i) {
    const float v = value(i);
    if (kept == k && !(v > value(out[kept - 1]))) continue;
    int at = kept < k ? kept++ : kept - 1;
    while (at > 0 && v > value(out[at - 1])) {
      out[at] = out[at - 1];
      --at;
    }
    out[at] = i;
  }
  return kept;
}

class Sampler {
 public:
  Sampler(const SamplerParams& params, int n_vocab);

  // Chooses a token from logits [n_vocab] (not modified). With `allowed`
  // (n_vocab bits, a grammar's mask: grammar_matcher.h), only a token whose
  // bit is set can be chosen: the others are out before anything else, as
  // if their logits were -infinity. At least one bit must be set.
  int32_t Sample(const float* logits, const uint64_t* allowed = nullptr);
  // The distribution the last Sample drew from, most likely first: the
  // tokens its filters left with their tempered probabilities (greedy: the
  // chosen token 1, the next by logit 0), at most k (at most
  // kMaxTopTokens) of them into out[0..);
  // returns how many, and *chosen_p the probability of `chosen` (the token
  // it returned). llama-server's post_sampling_probs. Allocates nothing.
  int LastDistribution(int32_t chosen, int k, std::pair<int32_t, float>* out,
                       float* chosen_p) const;
  // Records a token of the context (prompt or generated) for the penalty.
  void Accept(int32_t token);
  void Reset();

  uint32_t seed() const { return seed_; }
  const SamplerParams& params() const { return params_; }

 private:
  struct Candidate {
    int32_t id;
    float logit;
  };
  void ApplyPenalties(int n);

  SamplerParams params_;
  int n_vocab_;
  uint32_t seed_;
  std::mt19937 rng_;
  std::vector<Candidate> cand_;
  std::vector<float> probs_;
  std::vector<int32_t> history_;  // ring buffer of the last repeat_last_n tokens
  std::vector<int32_t> sorted_;   // the window sorted, to count each token once
  int history_len_ = 0;
  int history_pos_ = 0;
  int last_n_ = 0;            // the last Sample's survivors (cand_, probs_), or
  bool last_greedy_ = false;  // greedy: cand_ holds every token, unsorted
};

}  // namespace pi
