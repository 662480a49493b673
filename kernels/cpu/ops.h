// Small per-token operations of the llama forward pass: norms, RoPE,
// softmax, activations, one attention head. They touch O(d) or O(ctx * d)
// bytes against the matrices' O(d^2), so plain loops (auto-vectorized) are
// enough; they allocate nothing.
#pragma once

#include <cstdint>

namespace pi {

// out[i] = x[i] / sqrt(mean(x^2) + eps) * w[i]. out may alias x.
void RmsNorm(const float* x, const float* w, int64_t n, float eps, float* out);

// Rotates `n_heads` heads of `head_dim` in place, llama.cpp's "normal" RoPE
// (the layout of llama-architecture GGUFs): pairs (v[2i], v[2i+1]) for
// 2i < rope_dims turn by angle pos * theta^(-2i / rope_dims).
void RopeNormal(float* v, int n_heads, int head_dim, int rope_dims, int pos, float theta);

// In-place softmax over n values (max-subtracted).
void Softmax(float* x, int64_t n);

// Gated FFN activations, written into `gate`:
//   silu:  gate[i] = silu(gate[i]) * up[i]
//   relu:  gate[i] = relu(gate[i]) * up[i]
//   drelu: gate[i] = relu(gate[i]) * relu(up[i])
void GatedSilu(float* gate, const float* up, int64_t n);
void GatedRelu(float* gate, const float* up, int64_t n);
void GatedDRelu(float* gate, const float* up, int64_t n);

// One query head attending over positions [0, n_pos) of a KV cache:
//   out = sum_t softmax_t(q . k_t * scale) v_t
// k_t = k + t * kv_stride (head_dim floats), same for v. `scores` holds n_pos floats.
void AttentionHead(const float* q, const float* k, const float* v, int64_t kv_stride, int n_pos,
                   int head_dim, float scale, float* scores, float* out);

}  // namespace pi
