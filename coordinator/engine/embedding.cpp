#include "coordinator/engine/embedding.h"

#include <algorithm>
#include <cmath>

namespace pi {

const char* PoolingName(Pooling p) {
  switch (p) {
    case Pooling::kMean:
      return "mean";
    case Pooling::kLast:
      return "last";
    case Pooling::kCls:
      return "cls";
    case Pooling::kTokens:
      return "none";
    default:
      return "";
  }
}

Status ParsePooling(const std::string& name, Pooling* out) {
  for (Pooling p : {Pooling::kMean, Pooling::kLast, Pooling::kCls, Pooling::kTokens}) {
    if (name == PoolingName(p)) {
      *out = p;
      return Status::Ok();
    }
  }
  return Status::Error("unknown pooling '%s' (known: mean, last, cls, none)", name.c_str());
}

void EmbeddingPool::Start(Pooling pooling, int n_embd, int n_tokens) {
  pooling_ = pooling;
  n_tokens_ = n_tokens;
  n_embd_ = n_embd;
  const int rows = pooling == Pooling::kTokens ? n_tokens : 1;
  sum_.assign(static_cast<size_t>(n_embd) * rows, 0.0);
}

bool EmbeddingPool::Wants(int pos) const {
  switch (pooling_) {
    case Pooling::kLast:
      return pos == n_tokens_ - 1;
    case Pooling::kCls:
      return pos == 0;
    default:
      return true;
  }
}

void EmbeddingPool::Add(int pos, const float* hidden) {
  if (!Wants(pos)) return;
  double* at =
      sum_.data() + (pooling_ == Pooling::kTokens ? static_cast<size_t>(pos) * n_embd_ : 0);
  for (int i = 0; i < n_embd_; ++i) at[i] += hidden[i];
}

std::vector<float> EmbeddingPool::Finish() const {
  if (pooling_ == Pooling::kTokens) return std::vector<float>(sum_.begin(), sum_.end());
  // The mean's division cancels in the normalization: only the direction is kept.
  double norm = 0.0;
  for (double v : sum_) norm += v * v;
  norm = std::sqrt(norm);
  std::vector<float> out(sum_.size(), 0.0f);
  if (norm > 0.0) {
    for (size_t i = 0; i < sum_.size(); ++i) out[i] = static_cast<float>(sum_[i] / norm);
  }
  return out;
}

Status EmbedPrompts(Engine* engine, Pooling pooling,
                    const std::vector<std::vector<int32_t>>& prompts,
                    const std::function<bool()>& cancelled, std::vector<std::vector<float>>* out) {
  const int n_embd = engine->model().config.n_embd;
  std::vector<Engine::BatchRow> rows;
  rows.reserve(static_cast<size_t>(engine->n_batch()));
  EmbeddingPool pool;
  for (const std::vector<int32_t>& prompt : prompts) {
    engine->ResetSeq(0);
    const int n = static_cast<int>(prompt.size());
    pool.Start(pooling, n_embd, n);
    for (int start = 0; start < n; start += engine->n_batch()) {
      if (cancelled && cancelled()) return Status::Error("cancelled");
      const int end = std::min(n, start + engine->n_batch());
      rows.clear();
      for (int i = start; i < end; ++i) rows.push_back({0, prompt[i], false, pool.Wants(i)});
      PI_RETURN_IF_ERROR(engine->EvalBatch(rows.data(), end - start));
      for (int i = start; i < end; ++i) {
        if (pool.Wants(i)) pool.Add(i, engine->batch_hidden(i - start));
      }
    }
    out->push_back(pool.Finish());
  }
  return Status::Ok();
}

}  // namespace pi
