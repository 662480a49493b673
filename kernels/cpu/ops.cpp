#include "kernels/cpu/ops.h"

#include <cmath>

namespace pi {

void RmsNorm(const float* x, const float* w, int64_t n, float eps, float* out) {
  // Accumulate the sum of squares in double: n is up to ~16K and the result
  // scales every element, so its rounding matters more than its cost.
  double ss = 0.0;
  for (int64_t i = 0; i < n; ++i) ss += static_cast<double>(x[i]) * x[i];
  const float scale = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(n) + eps));
  for (int64_t i = 0; i < n; ++i) out[i] = x[i] * scale * w[i];
}

void RopeNormal(float* v, int n_heads, int head_dim, int rope_dims, int pos, float theta) {
  for (int i = 0; i < rope_dims; i += 2) {
    // Computed in double: pos * freq reaches ~1e4 rad, where f32 loses digits.
    const double freq = std::pow(static_cast<double>(theta), -static_cast<double>(i) / rope_dims);
    const double angle = pos * freq;
    const float c = static_cast<float>(std::cos(angle));
    const float s = static_cast<float>(std::sin(angle));
    for (int h = 0; h < n_heads; ++h) {
      float* p = v + static_cast<int64_t>(h) * head_dim + i;
      const float x0 = p[0], x1 = p[1];
      p[0] = x0 * c - x1 * s;
      p[1] = x0 * s + x1 * c;
    }
  }
}

void Softmax(float* x, int64_t n) {
  float max = x[0];
  for (int64_t i = 1; i < n; ++i) max = x[i] > max ? x[i] : max;
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - max);
    sum += x[i];
  }
  const float inv = static_cast<float>(1.0 / sum);
  for (int64_t i = 0; i < n; ++i) x[i] *= inv;
}

void GatedSilu(float* gate, const float* up, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    gate[i] = g / (1.0f + std::exp(-g)) * up[i];
  }
}

void GatedRelu(float* gate, const float* up, int64_t n) {
  for (int64_t i = 0; i < n; ++i) gate[i] = gate[i] > 0.0f ? gate[i] * up[i] : 0.0f;
}

void GatedDRelu(float* gate, const float* up, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    gate[i] = (gate[i] > 0.0f && up[i] > 0.0f) ? gate[i] * up[i] : 0.0f;
  }
}

void AttentionHead(const float* q, const float* k, const float* v, int64_t kv_stride, int n_pos,
                   int head_dim, float scale, float* scores, float* out) {
  for (int t = 0; t < n_pos; ++t) {
    const float* kt = k + t * kv_stride;
    float dot = 0.0f;
    for (int i = 0; i < head_dim; ++i) dot += q[i] * kt[i];
    scores[t] = dot * scale;
  }
  Softmax(scores, n_pos);
  for (int i = 0; i < head_dim; ++i) out[i] = 0.0f;
  for (int t = 0; t < n_pos; ++t) {
    const float* vt = v + t * kv_stride;
    const float p = scores[t];
    for (int i = 0; i < head_dim; ++i) out[i] += p * vt[i];
  }
}

}  // namespace pi
