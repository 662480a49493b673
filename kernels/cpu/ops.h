// Small per-token operations of the llama forward pass: norms, RoPE,
// softmax, activations, one attention head. They touch O(d) or O(ctx * d)
// bytes against the matrices' O(d^2), so plain loops (auto-vectorized) are
// enough; they allocate nothing.
#pragma once

#include <cmath>
#include <cstdint>

namespace pi {

// out[i] = x[i] / sqrt(mean(x^2) + eps) * w[i]. out may alias x.
void RmsNorm(const float* x, const float* w, int64_t n, float eps, float* out);

// out[i] = (x[i] - mean(x)) / sqrt(var(x) + eps) * w[i] + b[i] (ggml_norm,
// then the weight and bias; falcon). b may be null (no bias). out may alias x.
void LayerNorm(const float* x, const float* w, const float* b, int64_t n, float eps, float* out);

// RoPE's rotation for position `pos`: cs[2i] = cos, cs[2i + 1] = sin of
// pos * freq_scale * theta^(-2i / rope_dims) / freq_factors[i] for pair
// i < rope_dims / 2 — llama.cpp's angle with linear scaling (freq_scale = 1 /
// rope.scaling.factor) and per-pair factors (rope_freqs.weight, Llama 3.1;
// null: all 1). Computed once per position and shared by every layer's
// queries and keys (the angles are the same in all of them).
void RopeAngles(int rope_dims, int pos, float theta, float* cs, float freq_scale = 1.0f,
                const float* freq_factors = nullptr);

// Rotates `n_heads` heads of `head_dim` in place by RopeAngles' `cs`,
// llama.cpp's "normal" RoPE (the layout of llama-architecture GGUFs): pair i
// is (v[2i], v[2i+1]) for 2i < rope_dims.
void RopeNormal(float* v, int n_heads, int head_dim, int rope_dims, const float* cs);
// Same, NeoX style (llama.cpp's rope type for falcon): pair i is
// (v[i], v[i + rope_dims/2]) for i < rope_dims/2.
void RopeNeox(float* v, int n_heads, int head_dim, int rope_dims, const float* cs);

// y[i] = x[i] as IEEE binary16 (round to nearest even; F32ToF16 of
// kernels/cpu/fp16.h, vectorized where the CPU has F16C).
void F32ToF16Row(const float* x, uint16_t* y, int64_t n);

// In-place softmax over n values (max-subtracted).
void Softmax(float* x, int64_t n);

// One value's activation, as the loops below compute it (the sparse FFN's
// per-neuron path uses these, so a neuron's value has the same bits there).
inline float SiluOf(float g) {
  return g / (1.0f + std::exp(-g));
}
inline float GeluOf(float v) {
  const float k = 0.7978845608028654f;  // sqrt(2 / pi)
  return 0.5f * v * (1.0f + std::tanh(k * v * (1.0f + 0.044715f * v * v)));
}

// Gated FFN activations, written into `gate`:
//   silu:  gate[i] = silu(gate[i]) * up[i]
//   relu:  gate[i] = relu(gate[i]) * up[i]
//   drelu: gate[i] = relu(gate[i]) * relu(up[i])
//   gelu:  gate[i] = gelu(gate[i]) * up[i]          (GeGLU, GeluOf's tanh form)
void GatedSilu(float* gate, const float* up, int64_t n);
void GatedGelu(float* gate, const float* up, int64_t n);
void GatedRelu(float* gate, const float* up, int64_t n);
void GatedDRelu(float* gate, const float* up, int64_t n);
// Ungated FFN activations (falcon), in place:
//   relu: x[i] = max(x[i], 0)
//   gelu: x[i] = 0.5 x (1 + tanh(sqrt(2/pi) x (1 + 0.044715 x^2)))   (ggml_gelu's form)
void Relu(float* x, int64_t n);
void Gelu(float* x, int64_t n);

}  // namespace pi
