// CUDA kernels for the dense blocks of a decode step other than the weight
// products (matvec.h): the norms, RoPE with the KV cache write, attention
// over the KV cache in VRAM, a vector add, and the cold-candidate mask of the
// predictor. Each touches O(n_embd) or O(context) bytes; they exist so the
// residual stream can stay on the GPU across a whole layer.
//
// The token's position is read from device memory (`pos`), not passed by
// value, so a CUDA graph recorded once serves every position — and so is the
// first cache row of its sequence (`row0`: sequences, -np, have caches of
// n_ctx rows each, one after another), so it serves every sequence too.
//
// Plain C++ header: callable from host code that is not compiled by nvcc.
// Pointers are device pointers; `stream` is a cudaStream_t.
#pragma once

#include <cstdint>
#include <string>

#include "kernels/dtype.h"

namespace pi {
namespace cuda {

// out = RMSNorm(in) * w, or with `layer_norm` LayerNorm(in) * w + b (b may
// be null), sums in double as the CPU's ops.h. `copy`, when set, receives
// `in` unchanged (falcon's parallel residual keeps the layer input). With
// q8/q8_d set (n a multiple of 32), out's Q8_0 copy is written too, as
// matvec.h's EnqueueQuantizeQ8 would: one launch instead of two.
bool EnqueueNorm(const float* in, const float* w, const float* b, int64_t n, float eps,
                 bool layer_norm, float* out, float* copy, void* stream, std::string* error,
                 int8_t* q8 = nullptr, float* q8_d = nullptr, int32_t* q8_s = nullptr);

// The RoPE-and-cache step of one token at position *pos:
//   q [n_head][head_dim], k [n_kv][head_dim]: rotated in place by the angles
//     of row *pos of `angles` ([n_ctx][rope_dims], ops.h's RopeAngles),
//     llama.cpp's normal layout (pairs 2i, 2i+1) or NeoX (i, i + rope_dims/2);
//   k and v [n_kv][head_dim] stored at row *row0 + *pos of the layer's
//     caches, which are [n_kv][n_ctx][head_dim] in k_type / v_type (F32 or
//     F16; n_ctx: the rows per KV head, every sequence's).
struct RopeCacheArgs {
  float* q = nullptr;
  float* k = nullptr;
  const float* v = nullptr;
  const float* angles = nullptr;
  const int32_t* pos = nullptr;
  const int32_t* row0 = nullptr;  // null: 0
  int n_head = 0, n_kv = 0, head_dim = 0, rope_dims = 0, n_ctx = 0;
  bool neox = false;
  void* k_cache = nullptr;
  void* v_cache = nullptr;
  DType k_type = DType::kF16, v_type = DType::kF16;
};
bool EnqueueRopeAndCache(const RopeCacheArgs& a, void* stream, std::string* error);

// Whether attention runs for this head size and cache row types (head_dim a
// multiple of 32 up to 256; F32 or F16 rows).
bool AttentionSupports(int head_dim, DType k_type, DType v_type);

// Causal attention of one token at position *pos over cache rows
// *row0 + 0..*pos:
// out[h] = softmax(K q_h / sqrt(head_dim)) V for every query head h, query
// head h reading KV head h / (n_head / n_kv). Split-KV (flash-decoding):
// `n_splits` blocks per head each take a share of the positions with an
// online softmax, then a second kernel merges them. `scratch` holds
// AttentionScratchFloats floats.
struct AttentionArgs {
  const float* q = nullptr;
  const void* k_cache = nullptr;  // the layer's [n_kv][n_ctx][head_dim]
  const void* v_cache = nullptr;
  DType k_type = DType::kF16, v_type = DType::kF16;
  const int32_t* pos = nullptr;
  const int32_t* row0 = nullptr;  // null: 0
  int n_head = 0, n_kv = 0, head_dim = 0, n_ctx = 0, n_splits = 1;
  float* scratch = nullptr;
  float* out = nullptr;  // [n_head][head_dim]
};
int64_t AttentionScratchFloats(int n_head, int head_dim, int n_splits);
bool EnqueueAttention(const AttentionArgs& a, void* stream, std::string* error);

// y[i] += x[i].
bool EnqueueAdd(float* y, const float* x, int64_t n, void* stream, std::string* error);

// --sparse teal's thresholded input: out[i] = |x[i]| > *threshold ? x[i] : 0
// (out may be x). `threshold` is a device pointer, read when the kernel
// runs (a captured graph sees its current value).
bool EnqueueThresholdMask(const float* x, int64_t n, const float* threshold, float* out,
                          void* stream, std::string* error);

// The CPU's share of a predictor step: bit i of mask (words of 32, bit i %
// 32 of word i / 32) = scores[i] >= threshold and neuron i is not hot (bit i
// of hot). ceil(n / 32) words are written.
bool EnqueueColdMask(const float* scores, const uint32_t* hot, int64_t n, float threshold,
                     uint32_t* mask, void* stream, std::string* error);

}  // namespace cuda
}  // namespace pi
