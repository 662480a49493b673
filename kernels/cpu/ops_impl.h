// Internal to kernels/cpu/ops.cpp: the SIMD variants it dispatches to
// (compiled with their own -m flags; declarations only, see matmul_impl.h).
#pragma once

#include <cstdint>

namespace pi {
namespace cpu_internal {

// Softmax (ops.h) with an 8-wide exp; needs AVX2 + FMA.
void SoftmaxAvx2(float* x, int64_t n);

}  // namespace cpu_internal
}  // namespace pi
