// CUDA matrix-vector products over weights already in device memory:
// y[r] = dot(W[r, :], x) for F32, F16, BF16, Q8_0 and Q4_0 weights (ggml block
// layouts, dequantized on the fly; x stays f32). One warp per row, so a
// kernel reads each weight byte once and coalesced — decode is bandwidth-bound.
// This is the dense building block the hot-neuron GPU backend grows from.
//
// Plain C++ header: callable from host code that is not compiled by nvcc.
#pragma once

#include <cstdint>
#include <string>

#include "kernels/dtype.h"

namespace pi {
namespace cuda {

// True when a CUDA device is usable; otherwise *why says what is missing.
bool DeviceAvailable(std::string* why);

// Launches on the default stream and synchronizes. Returns false with *error
// set on an unsupported type or a CUDA error.
bool MatVec(DType type, const void* d_w, int64_t rows, int64_t cols, const float* d_x, float* d_y,
            std::string* error);

// Thin wrappers so host code and tests need no CUDA headers.
bool Malloc(void** ptr, size_t bytes, std::string* error);
bool Free(void* ptr);
bool CopyToDevice(void* dst, const void* src, size_t bytes, std::string* error);
bool CopyToHost(void* dst, const void* src, size_t bytes, std::string* error);

// Times `iters` launches of MatVec (after a warmup) with CUDA events; returns
// milliseconds per launch, or a negative value on error.
double TimeMatVec(DType type, const void* d_w, int64_t rows, int64_t cols, const float* d_x,
                  float* d_y, int iters);

}  // namespace cuda
}  // namespace pi
