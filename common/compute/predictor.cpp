#include "common/compute/predictor.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "common/compute/parallel_matmul.h"
#include "kernels/cpu/matmul.h"

namespace pi {

Status ResolvePredictorThreshold(const LlamaConfig& config, const std::optional<float>& flag,
                                 float* threshold, std::string* source) {
  std::string from = "powerinfer.sparse_threshold";
  float t = config.sparse_threshold;
  if (flag.has_value()) {
    t = *flag;
    from = "--sparse-threshold";
  } else if (const char* env = std::getenv(kPredictorThresholdEnv)) {
    char* end = nullptr;
    errno = 0;
    const float v = std::strtof(env, &end);
    if (end == env || *end != '\0' || errno != 0 || !std::isfinite(v)) {
      return Status::Error("%s='%s' is not a number", kPredictorThresholdEnv, env);
    }
    t = v;
    from = kPredictorThresholdEnv;
  }
  // A file's NaN or infinity is refused as the same value from the flag or
  // the environment is: NaN would predict nothing, silently.
  if (!std::isfinite(t)) {
    return Status::Error("%s = %g is not a finite number; pass --sparse-threshold", from.c_str(),
                         static_cast<double>(t));
  }
  *threshold = t;
  if (source) *source = from;
  return Status::Ok();
}

Status CheckPredictorPresent(const LlamaModel& model) {
  for (size_t i = 0; i < model.layers.size(); ++i) {
    const LlamaLayer& l = model.layers[i];
    if (!l.fc1.present() || !l.fc2.present()) {
      return Status::Error(
          "--sparse predictor: layer %zu has no activation predictor (blk.%zu.fc1.weight / "
          "blk.%zu.fc2.weight); train one with pi-train-predictor",
          i, i, i);
    }
  }
  return Status::Ok();
}

int64_t MaxPredictorRank(const LlamaModel& model) {
  int64_t r = 0;
  for (const LlamaLayer& l : model.layers) {
    if (l.fc1.present()) r = std::max(r, l.fc1.rows);
  }
  return r;
}

void Predictor::Init(int64_t n_embd, int64_t n_ff, int64_t max_rank) {
  n_ff_ = n_ff;
  hidden_.assign(std::max<int64_t>(max_rank, 1), 0.0f);
  scores_.assign(n_ff, 0.0f);
  q8_.assign(PreparedActivationBytes(DType::kQ8_0, std::max<int64_t>({n_embd, max_rank, 1})), 0);
}

void Predictor::PrepareLayers(const LlamaModel& model) {
  transposed_.clear();
  for (const LlamaLayer& l : model.layers) {
    const Tensor& fc2 = l.fc2;
    if (!fc2.present() || fc2.cols >= kTransposeMaxRank) continue;
    int64_t elem;
    switch (fc2.type) {
      case DType::kF32:
        elem = 4;
        break;
      case DType::kF16:
      case DType::kBF16:
        elem = 2;
        break;
      default:
        continue;  // quantized blocks run along the rank: no exact transpose
    }
    TransposedFc2 t;
    t.source = fc2.data;
    t.rows.resize(static_cast<size_t>(fc2.rows * fc2.cols * elem));
    for (int64_t i = 0; i < fc2.rows; ++i) {    // neuron
      for (int64_t j = 0; j < fc2.cols; ++j) {  // hidden unit
        std::memcpy(t.rows.data() + (j * fc2.rows + i) * elem, fc2.row(i) + j * elem, elem);
      }
    }
    transposed_.push_back(std::move(t));
  }
}

const Predictor::TransposedFc2* Predictor::FindTransposed(const Tensor& fc2) const {
  for (const TransposedFc2& t : transposed_) {
    if (t.source == fc2.data) return &t;
  }
  return nullptr;
}

void Predictor::Scores(const LlamaLayer& layer, const float* h, float* scores, ThreadPool* pool) {
  const Tensor& fc1 = layer.fc1;
  const Tensor& fc2 = layer.fc2;
  PreparedInput in = PrepareInput(h, fc1.cols, 1, q8_.data(), pool, ReadsQ8(fc1.type));
  const MatMulJob j1[1] = {{&fc1, hidden_.data(), fc1.rows}};
  ParallelMatMul(pool, in, j1, 1);
  for (int64_t k = 0; k < fc1.rows; ++k) hidden_[k] = std::max(hidden_[k], 0.0f);
  if (const TransposedFc2* t = FindTransposed(fc2)) {
    std::memset(scores, 0, sizeof(float) * fc2.rows);
    AxpyRows(fc2.type, t->rows.data(), fc2.rows, hidden_.data(), scores, 0, fc2.cols);
    return;
  }
  PreparedInput mid =
      PrepareInput(hidden_.data(), fc2.cols, 1, q8_.data(), pool, ReadsQ8(fc2.type));
  const MatMulJob j2[1] = {{&fc2, scores, fc2.rows}};
  ParallelMatMul(pool, mid, j2, 1);
}

int64_t Predictor::Predict(const LlamaLayer& layer, const float* h, float threshold, int32_t* ids,
                           ThreadPool* pool) {
  Scores(layer, h, scores_.data(), pool);
  int64_t n = 0;
  // Branch-free: about a quarter of the neurons pass, in no pattern a
  // branch predictor could learn. ids has n_ff slots, so the speculative
  // store at ids[n] stays in bounds.
  for (int64_t i = 0; i < n_ff_; ++i) {
    ids[n] = static_cast<int32_t>(i);
    n += scores_[i] >= threshold;
  }
  return n;
}

}  // namespace pi
