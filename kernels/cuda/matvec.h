// CUDA matrix-vector products over weights in VRAM, the decode path's main
// cost (every weight byte is read once per token, so these kernels are
// bandwidth-bound and must keep many bytes in flight):
//
//   y[r] = epilogue(W[r, :] . x)       W: a PackedMatrix (packed_matrix.h)
//
// One warp per row, four rows per block; every lane reads 16 bytes of
// weights at a time (8 f16/bf16, 4 f32, one Q4_0 block, half a Q8_0 block).
// Float weights multiply x as f32. Quantized weights multiply x's Q8_0 copy
// (EnqueueQuantizeQ8, ggml's rounding, as the CPU kernels do) with integer
// dot products (dp4a), one float multiply per block: the same arithmetic as
// the CPU's Q8_0/Q4_0 x Q8_0 dot, summed in another order.
//
// Plain C++ header: callable from host code that is not compiled by nvcc.
// Device pointers are plain pointers; `stream` is a cudaStream_t.
#pragma once

#include <cstdint>
#include <string>

#include "kernels/cuda/packed_matrix.h"
#include "kernels/dtype.h"

namespace pi {
namespace cuda {

// True when a CUDA device is usable; otherwise *why says what is missing.
bool DeviceAvailable(std::string* why);

// The current device's free and total memory in bytes (false on a driver error).
bool DeviceMemory(int64_t* free_bytes, int64_t* total_bytes, std::string* why);

// A packed matrix in device memory (PackedMatrixBytes(type, rows, cols) bytes
// from `data`, 256-byte aligned).
struct DeviceMatrix {
  DType type = DType::kF32;
  int64_t rows = 0;
  int64_t cols = 0;
  const void* data = nullptr;
};

// x on the device for a product: the f32 values, and for quantized weights
// its Q8_0 copy (quants [cols] int8, 16-byte aligned; per 32 values one
// float scale, the f16-rounded d of ggml's block, and the int sum of the
// quants, which applies Q4_0's -8 offset once per block).
struct DeviceVector {
  const float* x = nullptr;
  const int8_t* q = nullptr;
  const float* d = nullptr;
  const int32_t* s = nullptr;
  int64_t n = 0;
};

// Whether x of `cols` values can be quantized (a multiple of 32).
bool QuantizeQ8Supports(int64_t cols);
// q, d = x's Q8_0 copy (ggml's quantize_row_q8_0_ref: d = max|x| / 127,
// q = round(x / d)), sums = each block's sum of q; `n` a multiple of 32.
bool EnqueueQuantizeQ8(const float* x, int64_t n, int8_t* q, float* d, int32_t* sums, void* stream,
                       std::string* error);

// How the dot product of row r becomes y[r].
enum class Epilogue {
  kStore,       // y[r] = dot
  kAccumulate,  // y[r] += dot           (a residual add)
  kRelu,        // y[r] = max(dot, 0)    (the predictor's hidden layer)
  // The FFN's up projection against the gate's output g[r] (`gate`): rows
  // whose gate did not fire are not read. Counts act != 0 into *fired.
  kReluGateUp,   // y[r] = g > 0 ? g * dot : 0
  kDReluGateUp,  // y[r] = g > 0 && dot > 0 ? g * dot : 0
  kReluFired,    // y[r] = max(dot, 0), counted (ungated: falcon's relu(up))
  // --sparse cats (a gate threshold t = *threshold, read when the kernel
  // runs): the gate's activation a = act(dot) (act_form), kept when |a| > t
  // — counted when `fired` is set (ungated: it is the whole activation) —
  // then the up projection for the rows it kept.
  kActThreshold,  // y[r] = |a| > t ? a : 0
  kGateUp,        // y[r] = g != 0 ? g * dot : 0;  with drelu: g != 0 && dot > 0
};

// The activation kActThreshold applies.
enum class ActForm { kRelu, kSilu, kGelu };

struct MatVecOut {
  float* y = nullptr;  // [rows]
  Epilogue epilogue = Epilogue::kStore;
  const float* gate = nullptr;  // kReluGateUp, kDReluGateUp, kGateUp: [rows]
  int32_t* fired = nullptr;     // kRelu*GateUp, kReluFired, kGateUp, kActThreshold: nonzero acts
  ActForm act_form = ActForm::kRelu;  // kActThreshold
  const float* threshold = nullptr;   // kActThreshold: a device pointer to t
  bool drelu = false;                 // kGateUp: relu(up) too (bamboo's form)
};

// Whether a matrix of this type and row length can be multiplied (packed
// types; any cols for the float types, a multiple of 32 for the quantized).
bool MatVecSupports(DType type, int64_t cols);

// Enqueues out = epilogue(w . x) on `stream`. x.q, x.d and x.s must be set for
// quantized weights. Returns false with *error on an unsupported shape or a
// launch error.
bool EnqueueMatVec(const DeviceMatrix& w, const DeviceVector& x, const MatVecOut& out, void* stream,
                   std::string* error);

// Thin wrappers so host code and tests need no CUDA headers.
bool Malloc(void** ptr, size_t bytes, std::string* error);
bool Free(void* ptr);
bool CopyToDevice(void* dst, const void* src, size_t bytes, std::string* error);
bool CopyToHost(void* dst, const void* src, size_t bytes, std::string* error);
bool Synchronize(std::string* error);

}  // namespace cuda
}  // namespace pi
