// CUDA kernels for the hot part of one FFN layer: the neurons a placement put
// in VRAM, their gate, up and down_t rows gathered into compact matrices
// (row j = hot neuron j) and stored exactly as in the GGUF (F32, F16, BF16,
// Q8_0 or Q4_0; dequantized in the kernels, x stays f32):
//
//   act_j = relu(gate_j . x) * (up_j . x)          kRelu
//   act_j = relu(gate_j . x) * relu(up_j . x)      kDRelu
//   y     = sum_j act_j * down_t[j]                 (y overwritten)
//   fired = #{ j : act_j != 0 }
//
// A neuron whose gate is silent costs one gate row: its up and down_t rows
// are never read. y is deterministic: each output column is summed in a fixed
// order (fixed row chunks, reduced in order), with no float atomics.
//
// Plain C++ header: callable from host code that is not compiled by nvcc.
#pragma once

#include <cstdint>
#include <string>

#include "kernels/dtype.h"

namespace pi {
namespace cuda {

// How a hot neuron's activation comes from its gate and up dot products.
enum class HotActivation {
  kRelu,    // relu(gate . x) * up . x
  kDRelu,   // relu(gate . x) * relu(up . x)
  kReluUp,  // relu(up . x): ungated (falcon); the gate rows are not read
};

// One layer's hot rows in device memory: `rows` rows of `cols` (= n_embd)
// weights each, row j of all three being hot neuron j.
struct HotLayer {
  DType gate_type = DType::kF32;
  DType up_type = DType::kF32;
  DType down_type = DType::kF32;
  const void* gate = nullptr;
  const void* up = nullptr;
  const void* down_t = nullptr;
  int64_t rows = 0;
  int64_t cols = 0;
};

// Whether the kernels read weights of type `t`.
bool HotFfnSupportsType(DType t);
// Whether they take rows of `cols` weights: a positive multiple of 32 (every
// thread reads 8 weights at a time with 16-byte loads; every llama has it).
bool HotFfnSupportsCols(int64_t cols);
// Whether they take `rows` hot rows in one layer (up to about a million: the
// down kernel keeps a chunk's activations in shared memory).
bool HotFfnSupportsRows(int64_t rows);

// Floats of device scratch EnqueueHotFfn needs for a layer of this shape
// (the activations and the per-chunk partial sums).
int64_t HotFfnScratchFloats(int64_t rows, int64_t cols);

// Enqueues the layer's hot FFN on `stream` (a cudaStream_t; nullptr is the
// default stream) and returns at once: y[0..cols) = the hot partial sum for
// x, *fired = the number of neurons with act != 0. x, y, fired and scratch
// (HotFfnScratchFloats(layer.rows, layer.cols) floats) are device pointers
// that must stay valid until the stream reaches this work; x, scratch and
// the three row sets must be 16-byte aligned (cudaMalloc gives 256). Returns
// false with *error set on an unsupported type or shape, a misaligned
// pointer or a launch error.
bool EnqueueHotFfn(const HotLayer& layer, HotActivation act, const float* x, float* y,
                   int32_t* fired, float* scratch, void* stream, std::string* error);

}  // namespace cuda
}  // namespace pi
