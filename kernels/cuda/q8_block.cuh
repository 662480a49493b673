// One Q8_0 block of x, quantized by a warp: ggml's quantize_row_q8_0_ref as
// the CPU's quantizer computes it (d = max|x| / 127, q = roundf(x / d),
// halves away from zero), d rounded through f16 as the block stores it, and
// the block's quant sum (which applies Q4_0's -8 offset once per block).
// The warp's 32 lanes hold the block's 32 values, lane j value j; the kernels
// that quantize (matvec.cu's and the fused norm of layer_ops.cu) share it.
#pragma once

#include <cuda_fp16.h>

#include <cstdint>

namespace pi {
namespace cuda {

// Lane j's value v: writes its quant to *q; lane 0 writes the block's scale
// to *d and quant sum to *sum.
__device__ __forceinline__ void QuantizeQ8Block(float v, int8_t* q, float* d, int32_t* sum) {
  float amax = fabsf(v);
#pragma unroll
  for (int off = 16; off > 0; off >>= 1)
    amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, off));
  const float dd = amax / 127.0f;
  const float id = dd != 0.0f ? 1.0f / dd : 0.0f;
  // The clamp keeps NaN (from NaN or inf input) out of the conversion, as the
  // CPU's quantizer does.
  float t = v * id;
  t = t >= -127.5f ? t : -127.5f;
  t = t <= 127.5f ? t : 127.5f;
  const int qi = static_cast<int>(roundf(t));
  *q = static_cast<int8_t>(qi);
  int s = qi;
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) s += __shfl_xor_sync(0xffffffffu, s, off);
  if (threadIdx.x % 32 == 0) {
    *d = __half2float(__float2half_rn(dd));
    *sum = s;
  }
}

}  // namespace cuda
}  // namespace pi
