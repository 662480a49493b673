// CUDA kernels for the hot part of one FFN layer: the neurons a placement
// put in VRAM, their gate, up and down_t rows gathered into compact packed
// matrices (row j = hot neuron j; packed_matrix.h):
//
//   act_j = relu(gate_j . x) * (up_j . x)          kRelu
//   act_j = relu(gate_j . x) * relu(up_j . x)      kDRelu
//   act_j = relu(up_j . x)                          kReluUp (ungated: falcon)
//   y     = sum_j act_j * down_t[j]                 (y overwritten, or added to)
//   *fired += #{ j : act_j != 0 }
//
// With a gate threshold t (--sparse cats), any form: a_j = act(gate_j . x)
// (ungated: act(up_j . x)), and neuron j is computed only when |a_j| > t:
//
//   act_j = |a_j| > t ? a_j * (up_j . x) : 0       kRelu, kSilu, kGelu
//   act_j = |a_j| > t ? a_j * relu(up_j . x) : 0   kDRelu
//   act_j = |a_j| > t ? a_j : 0                     kReluUp, kGeluUp
//
// SiLU and GELU forms (not sparse by themselves) take only that form.
// Three steps: the gate products (matvec.h), the up products only for rows
// whose gate fired (the same kernel, told to skip the others), then down_t
// over the rows that fired. A neuron whose gate is silent costs one gate row.
// y is deterministic: each output column is summed in a fixed order (fixed
// row chunks, reduced in order), with no float atomics.
//
// Plain C++ header: callable from host code that is not compiled by nvcc.
#pragma once

#include <cstdint>
#include <string>

#include "kernels/cuda/matvec.h"
#include "kernels/dtype.h"

namespace pi {
namespace cuda {

// How a hot neuron's activation comes from its gate and up dot products.
enum class HotActivation {
  kRelu,    // relu(gate . x) * up . x
  kDRelu,   // relu(gate . x) * relu(up . x)
  kReluUp,  // relu(up . x): ungated (falcon); the gate rows are not read
  kSilu,    // silu(gate . x) * up . x          (a threshold only)
  kGelu,    // gelu(gate . x) * up . x          (tanh form; a threshold only)
  kGeluUp,  // gelu(up . x): ungated             (a threshold only)
};

// One layer's hot rows in device memory: all three `rows` x n_embd (gate
// absent, data null, for kReluUp).
struct HotLayer {
  DeviceMatrix gate, up, down_t;
  int64_t rows() const { return up.rows; }
  int64_t cols() const { return up.cols; }
};

// Whether the kernels read weights of type `t` (the packed types).
bool HotFfnSupportsType(DType t);
// Whether they take rows of `cols` weights: a positive multiple of 32.
bool HotFfnSupportsCols(int64_t cols);
// Whether they take `rows` hot rows in one layer (up to about a million: the
// down kernel keeps a chunk's activations in shared memory).
bool HotFfnSupportsRows(int64_t rows);

// Floats of device scratch EnqueueHotFfn needs for a layer of this shape
// (the gate products, the activations and the per-chunk partial sums).
int64_t HotFfnScratchFloats(int64_t rows, int64_t cols);

// Enqueues the layer's hot FFN on `stream` and returns at once: y[0..cols)
// = (accumulate ? y + : ) the hot partial sum for x, and *fired incremented
// by the neurons with act != 0 (the caller clears it). x must carry its
// Q8_0 copy when a matrix is quantized. y, fired and scratch
// (HotFfnScratchFloats floats, 16-byte aligned) are device pointers, as is
// `threshold` (the gate threshold t, read when the kernels run: a captured
// graph sees its current value), or null for none.
// `gate_x`: what the gate products read instead of x (--sparse teal's
// thresholded input, with its own Q8_0 copy when the gate is quantized; up
// reads x), or null.
// Returns false with *error set on an unsupported type or shape, a
// misaligned pointer, a SiLU or GELU form without a threshold or a launch
// error.
bool EnqueueHotFfn(const HotLayer& layer, HotActivation act, const float* threshold,
                   const DeviceVector& x, float* y, bool accumulate, int32_t* fired, float* scratch,
                   void* stream, std::string* error, const DeviceVector* gate_x = nullptr);

}  // namespace cuda
}  // namespace pi
