// Sampler: picks the next token from logits, llama.cpp-style, with its
// default values: repetition penalty over the last `repeat_last_n` tokens,
// then top-k, top-p, min-p (all on the untempered distribution), then
// temperature and a draw. temp <= 0 is greedy (argmax). The same seed gives
// the same tokens: the draw uses mt19937's standardized output directly, not
// a std:: distribution (those differ between standard libraries).
// Buffers are sized at construction; Sample allocates nothing.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "common/base/status.h"

namespace pi {

struct SamplerParams {
  float temp = 0.8f;
  int top_k = 40;               // 0 = off
  float top_p = 0.95f;          // 1 = off
  float min_p = 0.05f;          // 0 = off
  float repeat_penalty = 1.0f;  // 1 = off
  int repeat_last_n = 64;
  uint32_t seed = 0xFFFFFFFFu;  // 0xFFFFFFFF (-1) = random
};

// An error naming the first parameter out of range (by llama.cpp's flag
// name: "top-k out of range: ..."); temp may be any finite value.
Status CheckSamplerParams(const SamplerParams& params);

// repeat_last_n for a context of n_ctx: -1 means the whole context, and
// more than the context is capped at it.
int RepeatLastNForContext(int repeat_last_n, int n_ctx);

class Sampler {
 public:
  Sampler(const SamplerParams& params, int n_vocab);

  // Chooses a token from logits [n_vocab] (not modified).
  int32_t Sample(const float* logits);
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

  SamplerParams params_;
  int n_vocab_;
  uint32_t seed_;
  std::mt19937 rng_;
  std::vector<Candidate> cand_;
  std::vector<float> probs_;
  std::vector<int32_t> history_;  // ring buffer of the last repeat_last_n tokens
  int history_len_ = 0;
  int history_pos_ = 0;
};

}  // namespace pi
