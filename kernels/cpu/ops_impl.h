// Internal to kernels/cpu/ops.cpp: the SIMD variants it dispatches to
// (compiled with their own -m flags; declarations only, see matmul_impl.h).
#pragma once

#include <cstdint>

namespace pi {
namespace cpu_internal {

// Softmax (ops.h) with an 8-wide exp; needs AVX2 + FMA.
void SoftmaxAvx2(float* x, int64_t n);
// F32ToF16Row (ops.h) with F16C.
void F32ToF16RowAvx2(const float* x, uint16_t* y, int64_t n);

}  // namespace cpu_internal
}  // namespace pi
