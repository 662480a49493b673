#include "kernels/cpu/ops.h"

#include <cmath>

#include "kernels/cpu/fp16.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/ops_impl.h"

namespace pi {

void RmsNorm(const float* x, const float* w, int64_t n, float eps, float* out) {
  // Accumulate the sum of squares in double: n is up to ~16K and the result
  // scales every element, so its rounding matters more than its cost.
  double ss = 0.0;
  for (int64_t i = 0; i < n; ++i) ss += static_cast<double>(x[i]) * x[i];
  const float scale = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(n) + eps));
  for (int64_t i = 0; i < n; ++i) out[i] = x[i] * scale * w[i];
}

void LayerNorm(const float* x, const float* w, const float* b, int64_t n, float eps, float* out) {
  // Mean and variance in double, as in RmsNorm.
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += x[i];
  const double mean = sum / static_cast<double>(n);
  double ss = 0.0;
  for (int64_t i = 0; i < n; ++i) ss += (x[i] - mean) * (x[i] - mean);
  const float scale = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(n) + eps));
  const float m = static_cast<float>(mean);
  for (int64_t i = 0; i < n; ++i) {
    const float y = (x[i] - m) * scale * w[i];
    out[i] = b ? y + b[i] : y;
  }
}

void RopeAngles(int rope_dims, int pos, float theta, float* cs, float freq_scale,
                const float* freq_factors) {
  for (int i = 0; i < rope_dims / 2; ++i) {
    // Computed in double: pos * freq reaches ~1e4 rad, where f32 loses digits.
    double freq = std::pow(static_cast<double>(theta), -2.0 * i / rope_dims);
    if (freq_factors) freq /= freq_factors[i];
    const double angle = pos * static_cast<double>(freq_scale) * freq;
    cs[2 * i] = static_cast<float>(std::cos(angle));
    cs[2 * i + 1] = static_cast<float>(std::sin(angle));
  }
}

void RopeNeox(float* v, int n_heads, int head_dim, int rope_dims, const float* cs) {
  const int half = rope_dims / 2;
  for (int h = 0; h < n_heads; ++h) {
    float* p = v + static_cast<int64_t>(h) * head_dim;
    for (int i = 0; i < half; ++i) {
      const float c = cs[2 * i], s = cs[2 * i + 1];
      const float x0 = p[i], x1 = p[i + half];
      p[i] = x0 * c - x1 * s;
      p[i + half] = x0 * s + x1 * c;
    }
  }
}

void RopeNormal(float* v, int n_heads, int head_dim, int rope_dims, const float* cs) {
  for (int h = 0; h < n_heads; ++h) {
    float* p = v + static_cast<int64_t>(h) * head_dim;
    for (int i = 0; i < rope_dims / 2; ++i) {
      const float c = cs[2 * i], s = cs[2 * i + 1];
      const float x0 = p[2 * i], x1 = p[2 * i + 1];
      p[2 * i] = x0 * c - x1 * s;
      p[2 * i + 1] = x0 * s + x1 * c;
    }
  }
}

void F32ToF16Row(const float* x, uint16_t* y, int64_t n) {
  if (ActiveCpuIsa() != CpuIsa::kScalar) {
    cpu_internal::F32ToF16RowAvx2(x, y, n);
    return;
  }
  for (int64_t i = 0; i < n; ++i) y[i] = F32ToF16(x[i]);
}

void Softmax(float* x, int64_t n) {
  if (ActiveCpuIsa() != CpuIsa::kScalar) {  // AVX2 and AVX-512 machines
    cpu_internal::SoftmaxAvx2(x, n);
    return;
  }
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
    gate[i] = SiluOf(gate[i]) * up[i];
  }
}

void GatedGelu(float* gate, const float* up, int64_t n) {
  for (int64_t i = 0; i < n; ++i) gate[i] = GeluOf(gate[i]) * up[i];
}

void GatedRelu(float* gate, const float* up, int64_t n) {
  for (int64_t i = 0; i < n; ++i) gate[i] = gate[i] > 0.0f ? gate[i] * up[i] : 0.0f;
}

void GatedDRelu(float* gate, const float* up, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    gate[i] = (gate[i] > 0.0f && up[i] > 0.0f) ? gate[i] * up[i] : 0.0f;
  }
}

void Relu(float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

void Gelu(float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] = GeluOf(x[i]);
}

}  // namespace pi
