// Activation preparation and run-time dispatch to the scalar, AVX2 or AVX-512
// kernels (kernels/cpu/isa.h picks the level).
#include "kernels/cpu/matmul.h"

#include <cstring>
#include <vector>

#include "kernels/cpu/fp16.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/kquant.h"
#include "kernels/cpu/matmul_impl.h"
#include "kernels/cpu/quant.h"

namespace pi {

namespace cpu_internal {

namespace {
size_t RoundUp64(size_t n) {
  return (n + 63) & ~static_cast<size_t>(63);
}
}  // namespace

QActLayout GetQActLayout(int64_t cols) {
  QActLayout l;
  l.nb = cols > 0 ? cols / kQK : 0;
  l.ng = (l.nb + 3) / 4;
  const size_t ng = static_cast<size_t>(l.ng);
  l.qs_off = RoundUp64(static_cast<size_t>(l.nb) * sizeof(BlockQ8_0));
  l.dx_off = l.qs_off + ng * 128;
  l.s4_off = l.dx_off + RoundUp64(ng * 4 * sizeof(float));
  l.b16_off = l.s4_off + ng * 32 * sizeof(int32_t);
  l.total = l.b16_off + RoundUp64(ng * 8 * sizeof(int16_t));
  return l;
}

// The float matrix-matrix kernels read a dozen activation rows at the same
// k at once; rows a multiple of 4 KiB apart (n_embd 4096: 16 KiB) all fall
// in one L1 set and evict each other (measured 10-20 % slower). Such a
// batch is copied, once per call, to rows 64 bytes further apart: the same
// values, so the same results.
const uint8_t* UnaliasedRows(const uint8_t* x, size_t stride, int64_t batch, int64_t cols,
                             size_t* out_stride) {
  *out_stride = stride;
  if (batch < 2 || stride % 4096 != 0) return x;
  thread_local std::vector<float> rows;  // grows to the largest prompt batch, once
  const size_t padded = stride + 64;
  rows.resize(static_cast<size_t>(batch) * padded / sizeof(float) + 16);
  uint8_t* base = reinterpret_cast<uint8_t*>(rows.data());
  base += (64 - reinterpret_cast<uintptr_t>(base) % 64) % 64;
  for (int64_t b = 0; b < batch; ++b) {
    std::memcpy(base + b * padded, x + b * stride, static_cast<size_t>(cols) * 4);
  }
  *out_stride = padded;
  return base;
}

}  // namespace cpu_internal

using cpu_internal::QActLayout;

namespace {

// Quantized weights read the activation quantized (the Q8_0 layout).
bool IsQuant(DType t) {
  return t == DType::kQ8_0 || t == DType::kQ4_0 || IsBlockDequantDType(t);
}

}  // namespace

size_t PreparedActivationBytes(DType wtype, int64_t cols) {
  if (IsQuant(wtype)) return cpu_internal::GetQActLayout(cols).total;
  // Float weights read the f32 activation as is: [batch, cols] f32 rows are
  // already a valid batch of prepared activations.
  return cols > 0 ? static_cast<size_t>(cols) * sizeof(float) : 0;
}

void PrepareActivation(DType wtype, const float* x, int64_t cols, void* prepared) {
  if (!IsQuant(wtype)) {
    if (cols > 0) std::memcpy(prepared, x, static_cast<size_t>(cols) * sizeof(float));
    return;
  }
  const QActLayout l = cpu_internal::GetQActLayout(cols);
  uint8_t* base = static_cast<uint8_t*>(prepared);
  if (ActiveCpuIsa() != CpuIsa::kScalar) return cpu_internal::PrepareQ8Avx2(x, l, base);
  BlockQ8_0* blocks = reinterpret_cast<BlockQ8_0*>(base);
  QuantizeRowQ8_0(x, blocks, l.nb * kQK);

  int8_t* qs = reinterpret_cast<int8_t*>(base + l.qs_off);
  float* dx = reinterpret_cast<float*>(base + l.dx_off);
  int32_t* s4 = reinterpret_cast<int32_t*>(base + l.s4_off);
  int16_t* b16 = reinterpret_cast<int16_t*>(base + l.b16_off);
  // Padding (blocks nb..4*ng) is zero: q = 0, d = 0 contribute nothing.
  std::memset(base + l.nb * sizeof(BlockQ8_0), 0, l.qs_off - l.nb * sizeof(BlockQ8_0));
  std::memset(qs, 0, static_cast<size_t>(l.ng) * 128);
  std::memset(dx, 0, l.s4_off - l.dx_off);
  std::memset(s4, 0, l.total - l.s4_off);
  for (int64_t i = 0; i < l.nb; ++i) {
    std::memcpy(qs + i * kQK, blocks[i].qs, kQK);
    dx[i] = F16ToF32(blocks[i].d);
    for (int k = 0; k < kQK / 4; ++k) {
      const int8_t* q = blocks[i].qs + 4 * k;
      s4[i * 8 + k] = -(q[0] + q[1] + q[2] + q[3]);
    }
    for (int h = 0; h < 2; ++h) {  // the 16-sums from the (negated) 4-sums
      const int32_t* s = s4 + i * 8 + 4 * h;
      b16[i * 2 + h] = static_cast<int16_t>(-(s[0] + s[1] + s[2] + s[3]));
    }
  }
}

namespace {

cpu_internal::MatMulArgs MakeMatMulArgs(DType wtype, const void* w, int64_t cols,
                                        const void* x_prepared, int64_t batch, float* y,
                                        int64_t ldy, int64_t r0, int64_t r1) {
  cpu_internal::MatMulArgs a;
  a.wtype = wtype;
  a.w = static_cast<const uint8_t*>(w);
  a.cols = cols;
  a.row_bytes = static_cast<size_t>(RowBytes(wtype, cols));
  a.x = static_cast<const uint8_t*>(x_prepared);
  a.x_stride = PreparedActivationBytes(wtype, cols);
  a.layout = cpu_internal::GetQActLayout(cols);
  a.batch = batch;
  a.y = y;
  a.ldy = ldy;
  a.r0 = r0;
  a.r1 = r1;
  a.ids = nullptr;
  return a;
}

cpu_internal::MatMulArgs WithUnaliasedRows(const cpu_internal::MatMulArgs& a) {
  const bool is_float = a.wtype == DType::kF32 || a.wtype == DType::kF16 || a.wtype == DType::kBF16;
  if (!is_float) return a;
  cpu_internal::MatMulArgs copy = a;
  copy.x = cpu_internal::UnaliasedRows(a.x, a.x_stride, a.batch, a.cols, &copy.x_stride);
  return copy;
}

// `gemm`: the matrix-matrix kernels where the level has them for the type.
void RunMatMul(const cpu_internal::MatMulArgs& a, bool gemm = false) {
  if (!IsComputeDType(a.wtype) || a.r0 >= a.r1 || a.batch <= 0 || a.cols <= 0) return;
  const CpuIsa isa = ActiveCpuIsa();
  if (gemm && isa == CpuIsa::kAvx512 && cpu_internal::HasGemmAvx512(a.wtype)) {
    cpu_internal::GemmRowsAvx512(WithUnaliasedRows(a));
    return;
  }
  if (gemm && isa == CpuIsa::kAvx2 && cpu_internal::HasGemmAvx2(a.wtype)) {
    cpu_internal::GemmRowsAvx2(a);
    return;
  }
  if (IsBlockDequantDType(a.wtype)) {
    // The block formats have one SIMD driver (AVX2), which the AVX-512 level
    // runs too, with its own row dots where AVX2's are arithmetic-bound (the K formats).
    if (isa != CpuIsa::kScalar && cpu_internal::HasBlockKernelsAvx2(a.wtype)) {
      cpu_internal::MatMulRowsBlocksAvx2(a, isa == CpuIsa::kAvx512);
    } else {
      cpu_internal::MatMulRowsRef(a);
    }
    return;
  }
  switch (isa) {
    case CpuIsa::kAvx512:
      cpu_internal::MatMulRowsAvx512(a);
      return;
    case CpuIsa::kAvx2:
      cpu_internal::MatMulRowsAvx2(a);
      return;
    case CpuIsa::kScalar:
      break;
  }
  cpu_internal::MatMulRowsRef(a);
}

}  // namespace

void MatVecRows(DType wtype, const void* w, int64_t cols, const void* x_prepared, float* y,
                int64_t r0, int64_t r1) {
  RunMatMul(MakeMatMulArgs(wtype, w, cols, x_prepared, 1, y, 0, r0, r1));
}

void MatMulRows(DType wtype, const void* w, int64_t cols, const void* x_prepared, int64_t batch,
                float* y, int64_t ldy, int64_t r0, int64_t r1) {
  RunMatMul(MakeMatMulArgs(wtype, w, cols, x_prepared, batch, y, ldy, r0, r1));
}

void GemmRows(DType wtype, const void* w, int64_t cols, const void* x_prepared, int64_t batch,
              float* y, int64_t ldy, int64_t r0, int64_t r1) {
  RunMatMul(MakeMatMulArgs(wtype, w, cols, x_prepared, batch, y, ldy, r0, r1), /*gemm=*/true);
}

void MatVecRowsIndexed(DType wtype, const void* w, int64_t cols, const void* x_prepared,
                       const int32_t* rows, int64_t n, float* y) {
  cpu_internal::MatMulArgs a = MakeMatMulArgs(wtype, w, cols, x_prepared, 1, y, 0, 0, n);
  a.ids = rows;
  RunMatMul(a);
}

namespace {

// row_bytes: the stride between rows (a column slice's rows are longer
// than its cols).
void RunAxpy(DType wtype, const void* w, int64_t cols, size_t row_bytes, const float* a, float* y,
             int64_t r0, int64_t r1, const int32_t* ids) {
  if (!IsComputeDType(wtype) || r0 >= r1 || cols <= 0) return;
  cpu_internal::AxpyArgs args;
  args.wtype = wtype;
  args.w = static_cast<const uint8_t*>(w);
  args.cols = cols;
  args.row_bytes = row_bytes;
  args.a = a;
  args.y = y;
  args.r0 = r0;
  args.r1 = r1;
  args.ids = ids;
  const CpuIsa isa = ActiveCpuIsa();
  if (IsBlockDequantDType(wtype)) {
    if (isa != CpuIsa::kScalar && cpu_internal::HasBlockKernelsAvx2(wtype)) {
      cpu_internal::AxpyRowsBlocksAvx2(args);
    } else {
      cpu_internal::AxpyRowsRef(args);
    }
    return;
  }
  switch (isa) {
    case CpuIsa::kAvx512:
      cpu_internal::AxpyRowsAvx512(args);
      return;
    case CpuIsa::kAvx2:
      cpu_internal::AxpyRowsAvx2(args);
      return;
    case CpuIsa::kScalar:
      break;
  }
  cpu_internal::AxpyRowsRef(args);
}

}  // namespace

void AxpyRows(DType wtype, const void* w, int64_t cols, const float* a, float* y, int64_t r0,
              int64_t r1) {
  RunAxpy(wtype, w, cols, static_cast<size_t>(RowBytes(wtype, cols)), a, y, r0, r1, nullptr);
}

void AxpyRowsIndexed(DType wtype, const void* w, int64_t cols, const int32_t* rows, const float* a,
                     int64_t n, float* y) {
  RunAxpy(wtype, w, cols, static_cast<size_t>(RowBytes(wtype, cols)), a, y, 0, n, rows);
}

void AxpyRowsIndexedColumns(DType wtype, const void* w, int64_t row_cols, int64_t c0, int64_t c1,
                            const int32_t* rows, const float* a, int64_t n, float* y) {
  const uint8_t* first = static_cast<const uint8_t*>(w) + RowBytes(wtype, c0);
  RunAxpy(wtype, first, c1 - c0, static_cast<size_t>(RowBytes(wtype, row_cols)), a, y, 0, n, rows);
}

}  // namespace pi
