#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "kernels/cuda/sparse_ffn.h"

namespace pi {
namespace cuda {
namespace {

constexpr int kWarp = 32;
constexpr int kDotThreads = 128;   // threads per block of the gate/up kernel, one block per row
constexpr int kVec = 8;            // weights per thread per load step (16-byte f16 loads)
constexpr int kDownThreads = 128;  // column groups per block of the down kernel (kVec columns each)
constexpr int kDownSlices = 4;     // row slices per block: threads that share a column group
// Dynamic shared memory a block may use without opting in.
constexpr size_t kMaxSharedBytes = 48 * 1024;
constexpr int kReduceCols = 32;   // columns per block of the reduce kernel
constexpr int kReduceSlices = 8;  // chunk slices per block: threads that share a column
// The down kernel cuts the hot rows into chunks of about this many rows (at
// most kMaxChunks), one block row each, so a layer with few output columns
// still spreads over the whole GPU. The chunking depends on the row count
// only, and the chunks are added in order: y is the same on every run.
constexpr int64_t kRowsPerChunk = 16;
constexpr int64_t kMaxChunks = 128;

// Block structs as in kernels/cpu/quant.h (ggml's block_q8_0, block_q4_0),
// repeated here because device code reads them; the static_asserts pin the
// layout. The gathered rows are the file's bytes, so these are the blocks.
// Their quants are only 2-byte aligned (the f16 scale comes first), so they
// are read 16 bits at a time.
struct BlockQ8_0 {
  __half d;
  int8_t qs[32];
};
struct BlockQ4_0 {
  __half d;
  uint8_t qs[16];  // byte i: weight i (low nibble) and weight i + 16 (high), minus 8
};
static_assert(sizeof(BlockQ8_0) == 34, "ggml block_q8_0");
static_assert(sizeof(BlockQ4_0) == 18, "ggml block_q4_0");

int64_t NumChunks(int64_t rows) {
  return std::min(kMaxChunks, std::max<int64_t>(1, rows / kRowsPerChunk));
}

// ---- weight loads: 8 weights (kVec) per call, as floats --------------------
// Group g of a row is the g-th run of 8 weights in the row's own order for
// the float types and Q8_0. For Q4_0 it is 4 bytes of a block: weights
// i..i+3 (low nibbles) and i+16..i+19 (high nibbles) — GroupCol says which.

__device__ void Halves8(const uint4& raw, float* w) {
  const __half2* h = reinterpret_cast<const __half2*>(&raw);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 f = __half22float2(h[i]);
    w[2 * i] = f.x;
    w[2 * i + 1] = f.y;
  }
}

__device__ void BFloats8(const uint4& raw, float* w) {
  const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&raw);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 f = __bfloat1622float2(h[i]);
    w[2 * i] = f.x;
    w[2 * i + 1] = f.y;
  }
}

struct F32Row {
  __device__ static void Load(const void* row, int64_t g, float* w) {
    const float4* p = static_cast<const float4*>(row) + 2 * g;
    const float4 a = p[0], b = p[1];
    w[0] = a.x, w[1] = a.y, w[2] = a.z, w[3] = a.w;
    w[4] = b.x, w[5] = b.y, w[6] = b.z, w[7] = b.w;
  }
};
struct F16Row {
  __device__ static void Load(const void* row, int64_t g, float* w) {
    Halves8(static_cast<const uint4*>(row)[g], w);
  }
};
struct BF16Row {
  __device__ static void Load(const void* row, int64_t g, float* w) {
    BFloats8(static_cast<const uint4*>(row)[g], w);
  }
};
struct Q8_0Row {
  // Group g: block g / 4, quants 8 (g % 4) .. 8 (g % 4) + 7, times the scale.
  __device__ static void Load(const void* row, int64_t g, float* w) {
    const BlockQ8_0& b = static_cast<const BlockQ8_0*>(row)[g / 4];
    const uint16_t* q = reinterpret_cast<const uint16_t*>(b.qs + 8 * (g % 4));
    const float d = __half2float(b.d);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const uint16_t v = q[i];  // little-endian: the lower address is the low byte
      w[2 * i] = d * static_cast<float>(static_cast<int8_t>(v & 0xFF));
      w[2 * i + 1] = d * static_cast<float>(static_cast<int8_t>(v >> 8));
    }
  }
};
struct Q4_0Row {
  // Group g: block g / 4, bytes 4 (g % 4) .. + 3: w[0..3] from their low
  // nibbles (weights 4 (g % 4) + 0..3), w[4..7] from their high nibbles
  // (weights 16 + 4 (g % 4) + 0..3).
  __device__ static void Load(const void* row, int64_t g, float* w) {
    const BlockQ4_0& b = static_cast<const BlockQ4_0*>(row)[g / 4];
    const uint16_t* q = reinterpret_cast<const uint16_t*>(b.qs + 4 * (g % 4));
    const float d = __half2float(b.d);
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const uint16_t v = q[i];
      const int b0 = v & 0xFF, b1 = v >> 8;
      w[2 * i] = d * static_cast<float>((b0 & 0x0F) - 8);
      w[2 * i + 1] = d * static_cast<float>((b1 & 0x0F) - 8);
      w[4 + 2 * i] = d * static_cast<float>((b0 >> 4) - 8);
      w[4 + 2 * i + 1] = d * static_cast<float>((b1 >> 4) - 8);
    }
  }
};

// Column of w[v] of group g.
template <typename Row>
__device__ int64_t GroupCol(int64_t g, int v) {
  return g * kVec + v;
}
template <>
__device__ int64_t GroupCol<Q4_0Row>(int64_t g, int v) {
  return (g / 4) * 32 + (v < 4 ? 0 : 16) + (g % 4) * 4 + (v % 4);
}

// The 8 elements of x that group g's weights multiply, in the same order,
// as two 16-byte loads (x is 16-byte aligned, and so are both halves).
__device__ void LoadX(const float* __restrict__ x, int64_t c0, int64_t c1, float* xv) {
  const float4 a = *reinterpret_cast<const float4*>(x + c0);
  const float4 b = *reinterpret_cast<const float4*>(x + c1);
  xv[0] = a.x, xv[1] = a.y, xv[2] = a.z, xv[3] = a.w;
  xv[4] = b.x, xv[5] = b.y, xv[6] = b.z, xv[7] = b.w;
}
template <typename Row>
__device__ void GroupX(const float* __restrict__ x, int64_t g, float* xv) {
  LoadX(x, g * kVec, g * kVec + 4, xv);
}
template <>
__device__ void GroupX<Q4_0Row>(const float* __restrict__ x, int64_t g, float* xv) {
  const int64_t c0 = (g / 4) * 32 + (g % 4) * 4;
  LoadX(x, c0, c0 + 16, xv);
}

// ---- (a) + (c): gate and up dot products, activation, fired count ----------

// Butterfly reduction: every lane ends with the same bits (a + b == b + a).
__device__ float WarpSum(float v) {
  for (int off = kWarp / 2; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
  return v;
}

// dot(row, x) over `cols` weights, by the whole block (kDotThreads threads):
// thread t takes groups t, t + kDotThreads, ..., 8 weights and two 16-byte
// x loads each; the warps' sums are added in warp order through `s_warp`.
// Every thread returns the same bits, so a branch on the result is uniform.
template <typename Row>
__device__ float RowDotT(const void* row, const float* __restrict__ x, int64_t cols,
                         float* s_warp) {
  float acc = 0.0f;
  const int64_t groups = cols / kVec;
#pragma unroll 4
  for (int64_t g = threadIdx.x; g < groups; g += kDotThreads) {
    float w[kVec], xv[kVec];
    Row::Load(row, g, w);
    GroupX<Row>(x, g, xv);
#pragma unroll
    for (int v = 0; v < kVec; ++v) acc += w[v] * xv[v];
  }
  acc = WarpSum(acc);
  if (threadIdx.x % kWarp == 0) s_warp[threadIdx.x / kWarp] = acc;
  __syncthreads();
  float sum = s_warp[0];
  for (int w = 1; w < kDotThreads / kWarp; ++w) sum += s_warp[w];
  __syncthreads();  // s_warp is reused by the next dot
  return sum;
}

// The type is the same for the whole block, so the switch does not diverge.
__device__ float RowDot(DType t, const void* row, const float* __restrict__ x, int64_t cols,
                        float* s_warp) {
  switch (t) {
    case DType::kF32:
      return RowDotT<F32Row>(row, x, cols, s_warp);
    case DType::kF16:
      return RowDotT<F16Row>(row, x, cols, s_warp);
    case DType::kBF16:
      return RowDotT<BF16Row>(row, x, cols, s_warp);
    case DType::kQ8_0:
      return RowDotT<Q8_0Row>(row, x, cols, s_warp);
    case DType::kQ4_0:
      return RowDotT<Q4_0Row>(row, x, cols, s_warp);
    default:
      return 0.0f;  // rejected on the host before any launch
  }
}

// One block per hot row (a whole block, not a warp: a row is then read with
// 4x the loads in flight, which is what a short quantized row needs): the
// gate dot product, and the up dot product only when the gate fired; act[j]
// and the fired count. Integer atomics are exact: the count is deterministic.
__global__ void HotGateUpKernel(HotLayer l, int64_t gate_row_bytes, int64_t up_row_bytes,
                                HotActivation form, const float* __restrict__ x,
                                float* __restrict__ act, int32_t* fired) {
  __shared__ float s_warp[kDotThreads / kWarp];
  const int64_t j = blockIdx.x;
  const void* gate = static_cast<const char*>(l.gate) + j * gate_row_bytes;
  const void* up = static_cast<const char*>(l.up) + j * up_row_bytes;
  float a = 0.0f;
  switch (form) {
    case HotActivation::kRelu: {
      const float g = RowDot(l.gate_type, gate, x, l.cols, s_warp);
      if (g > 0.0f) a = g * RowDot(l.up_type, up, x, l.cols, s_warp);
      break;
    }
    case HotActivation::kDRelu: {
      const float g = RowDot(l.gate_type, gate, x, l.cols, s_warp);
      if (g > 0.0f) {
        const float u = RowDot(l.up_type, up, x, l.cols, s_warp);
        if (u > 0.0f) a = g * u;
      }
      break;
    }
    case HotActivation::kReluUp: {
      const float u = RowDot(l.up_type, up, x, l.cols, s_warp);
      if (u > 0.0f) a = u;
      break;
    }
  }
  if (threadIdx.x == 0) {
    act[j] = a;
    if (a != 0.0f) atomicAdd(fired, 1);
  }
}

// ---- (b): y = sum_j act_j * down_t[j], deterministic -----------------------

// Block (x, k) sums rows chunk k of act_j * down_t[j] into partial[k][...].
// Thread (x, y) owns the 8 columns of group blockIdx.x * kDownThreads + x
// and takes the chunk's rows y, y + kDownSlices, y + 2 kDownSlices, ... in
// order; the slices' sums are then added in slice order. Silent rows (act ==
// 0) are skipped: the branch is uniform (a warp is on one row), and their
// down_t row is never read. The chunk's activations are read once, into
// shared memory, so the weight loads wait on nothing; four rows at a time
// keep four loads in flight, and a silent row adds 0, leaving the sum as it
// would be row by row.
template <typename Row>
__global__ void HotDownKernel(const void* down_t, int64_t row_bytes, int64_t rows, int64_t cols,
                              int64_t n_chunks, const float* __restrict__ act,
                              float* __restrict__ partial) {
  extern __shared__ float smem[];
  float* s_part = smem;                                     // [slice][v][x]
  float* s_act = smem + kDownSlices * kVec * kDownThreads;  // the chunk's activations
  const int x = threadIdx.x, y = threadIdx.y;
  const int64_t k = blockIdx.y;
  const int64_t j0 = rows * k / n_chunks, j1 = rows * (k + 1) / n_chunks;
  const int n = static_cast<int>(j1 - j0);
  for (int i = y * kDownThreads + x; i < n; i += kDownSlices * kDownThreads) s_act[i] = act[j0 + i];
  __syncthreads();

  const int64_t g = static_cast<int64_t>(blockIdx.x) * kDownThreads + x;
  const bool live = g < cols / kVec;
  const char* base = static_cast<const char*>(down_t) + j0 * row_bytes;
  float acc[kVec] = {};
  if (live) {
    // Rows i, i + S, i + 2S, i + 3S (S = kDownSlices) at a time: four
    // loads in flight.
    int i = y;
    for (; i + 3 * kDownSlices < n; i += 4 * kDownSlices) {
      float a[4], w[4][kVec];
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        a[r] = s_act[i + r * kDownSlices];
#pragma unroll
        for (int v = 0; v < kVec; ++v) w[r][v] = 0.0f;
        if (a[r] != 0.0f) Row::Load(base + (i + r * kDownSlices) * row_bytes, g, w[r]);
      }
#pragma unroll
      for (int r = 0; r < 4; ++r) {
#pragma unroll
        for (int v = 0; v < kVec; ++v) acc[v] += a[r] * w[r][v];
      }
    }
    for (; i < n; i += kDownSlices) {
      const float a = s_act[i];
      if (a == 0.0f) continue;
      float w[kVec];
      Row::Load(base + i * row_bytes, g, w);
#pragma unroll
      for (int v = 0; v < kVec; ++v) acc[v] += a * w[v];
    }
  }
#pragma unroll
  for (int v = 0; v < kVec; ++v) s_part[(y * kVec + v) * kDownThreads + x] = acc[v];
  __syncthreads();
  if (y != 0 || !live) return;
  float* out = partial + k * cols;
#pragma unroll
  for (int v = 0; v < kVec; ++v) {
    float sum = s_part[v * kDownThreads + x];
    for (int sl = 1; sl < kDownSlices; ++sl) sum += s_part[(sl * kVec + v) * kDownThreads + x];
    out[GroupCol<Row>(g, v)] = sum;
  }
}

// y[c] = the chunks' partial sums, in a fixed order: thread (x, y) of a
// block adds chunks y, y + kReduceSlices, ... of column blockIdx.x *
// kReduceCols + x in order, then the slices are added in slice order.
__global__ void ReduceChunksKernel(const float* __restrict__ partial, int64_t n_chunks,
                                   int64_t cols, float* __restrict__ y) {
  __shared__ float s_sum[kReduceSlices][kReduceCols];
  const int x = threadIdx.x, sl = threadIdx.y;
  const int64_t c = static_cast<int64_t>(blockIdx.x) * kReduceCols + x;
  float s = 0.0f;
  if (c < cols) {
#pragma unroll 4
    for (int64_t k = sl; k < n_chunks; k += kReduceSlices) s += partial[k * cols + c];
  }
  s_sum[sl][x] = s;
  __syncthreads();
  if (sl != 0 || c >= cols) return;
  float total = s_sum[0][x];
  for (int i = 1; i < kReduceSlices; ++i) total += s_sum[i][x];
  y[c] = total;
}

// Shared memory of a down block: the slices' partials and the activations
// of the longest chunk.
size_t DownSharedBytes(int64_t rows, int64_t n_chunks) {
  const int64_t longest = (rows + n_chunks - 1) / n_chunks;
  return sizeof(float) * (static_cast<size_t>(kDownSlices) * kVec * kDownThreads + longest);
}

template <typename Row>
void LaunchDown(const HotLayer& l, int64_t n_chunks, const float* act, float* partial,
                cudaStream_t s) {
  const int64_t groups = l.cols / kVec;
  const dim3 grid(static_cast<unsigned>((groups + kDownThreads - 1) / kDownThreads),
                  static_cast<unsigned>(n_chunks));
  const dim3 block(kDownThreads, kDownSlices);
  HotDownKernel<Row><<<grid, block, DownSharedBytes(l.rows, n_chunks), s>>>(
      l.down_t, RowBytes(l.down_type, l.cols), l.rows, l.cols, n_chunks, act, partial);
}

bool Check(cudaError_t e, const char* what, std::string* error) {
  if (e == cudaSuccess) return true;
  if (error) *error = std::string("cuda::EnqueueHotFfn: ") + what + ": " + cudaGetErrorString(e);
  return false;
}

bool Fail(const std::string& message, std::string* error) {
  if (error) *error = "cuda::EnqueueHotFfn: " + message;
  return false;
}

bool Aligned16(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % 16 == 0;
}

}  // namespace

bool HotFfnSupportsType(DType t) {
  return t == DType::kF32 || t == DType::kF16 || t == DType::kBF16 || t == DType::kQ8_0 ||
         t == DType::kQ4_0;
}

bool HotFfnSupportsCols(int64_t cols) {
  return cols > 0 && cols % 32 == 0;
}

bool HotFfnSupportsRows(int64_t rows) {
  return rows >= 0 && rows <= INT32_MAX &&
         DownSharedBytes(rows, NumChunks(rows)) <= kMaxSharedBytes;
}

int64_t HotFfnScratchFloats(int64_t rows, int64_t cols) {
  // The activations, rounded up to 16 bytes, then the partial sums.
  return (std::max<int64_t>(rows, 0) + 3) / 4 * 4 + NumChunks(rows) * cols;
}

bool EnqueueHotFfn(const HotLayer& l, HotActivation act, const float* x, float* y, int32_t* fired,
                   float* scratch, void* stream, std::string* error) {
  for (DType t : {l.gate_type, l.up_type, l.down_type}) {
    if (!HotFfnSupportsType(t)) return Fail(std::string("unsupported type ") + DTypeName(t), error);
  }
  if (!HotFfnSupportsCols(l.cols)) {
    return Fail("row length " + std::to_string(l.cols) + " is not a positive multiple of 32",
                error);
  }
  if (act != HotActivation::kRelu && act != HotActivation::kDRelu &&
      act != HotActivation::kReluUp) {
    return Fail("unknown activation form", error);
  }
  const bool gated = act != HotActivation::kReluUp;
  if (!HotFfnSupportsRows(l.rows)) {
    return Fail(std::to_string(l.rows) + " hot rows: more than the kernels take", error);
  }
  if (l.rows > 0 && ((gated && !l.gate) || !l.up || !l.down_t)) {
    return Fail("no hot rows given", error);
  }
  // 16-byte vector loads of x and of float rows (whose row bytes are then
  // multiples of 16, as cols is of 32); quantized rows need 2.
  if (!Aligned16(x) || !Aligned16(scratch) || !Aligned16(l.gate) || !Aligned16(l.up) ||
      !Aligned16(l.down_t)) {
    return Fail("x, scratch and the row sets must be 16-byte aligned", error);
  }
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  if (!Check(cudaMemsetAsync(fired, 0, sizeof(int32_t), s), "clearing the fired count", error)) {
    return false;
  }
  if (l.rows == 0) {
    return Check(cudaMemsetAsync(y, 0, sizeof(float) * l.cols, s), "clearing y", error);
  }
  const int64_t n_chunks = NumChunks(l.rows);

  float* act_j = scratch;
  // The partial sums start 16-byte aligned after the activations.
  float* partial = scratch + (l.rows + 3) / 4 * 4;
  HotGateUpKernel<<<static_cast<unsigned>(l.rows), kDotThreads, 0, s>>>(
      l, RowBytes(l.gate_type, l.cols), RowBytes(l.up_type, l.cols), act, x, act_j, fired);
  if (!Check(cudaGetLastError(), "gate/up kernel launch", error)) return false;

  switch (l.down_type) {
    case DType::kF32:
      LaunchDown<F32Row>(l, n_chunks, act_j, partial, s);
      break;
    case DType::kF16:
      LaunchDown<F16Row>(l, n_chunks, act_j, partial, s);
      break;
    case DType::kBF16:
      LaunchDown<BF16Row>(l, n_chunks, act_j, partial, s);
      break;
    case DType::kQ8_0:
      LaunchDown<Q8_0Row>(l, n_chunks, act_j, partial, s);
      break;
    case DType::kQ4_0:
      LaunchDown<Q4_0Row>(l, n_chunks, act_j, partial, s);
      break;
    default:
      return Fail(std::string("unsupported type ") + DTypeName(l.down_type), error);
  }
  if (!Check(cudaGetLastError(), "down kernel launch", error)) return false;
  const unsigned reduce_blocks = static_cast<unsigned>((l.cols + kReduceCols - 1) / kReduceCols);
  ReduceChunksKernel<<<reduce_blocks, dim3(kReduceCols, kReduceSlices), 0, s>>>(partial, n_chunks,
                                                                                l.cols, y);
  return Check(cudaGetLastError(), "reduce kernel launch", error);
}

}  // namespace cuda
}  // namespace pi
