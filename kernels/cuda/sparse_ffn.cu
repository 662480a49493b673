#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "kernels/cuda/sparse_ffn.h"

namespace pi {
namespace cuda {
namespace {

constexpr int kVec = 8;            // weights per thread per load step (one group)
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
// (32 chunks of 64 rows, for fewer partial sums to write and reread, were
// slower on an H200: 20.6 against 16.6 us for a 7B layer with 17 % of its
// rows fired. The kernel is latency-bound: a thread loads a few bytes per
// fired row.)
constexpr int64_t kRowsPerChunk = 16;
constexpr int64_t kMaxChunks = 128;

int64_t NumChunks(int64_t rows) {
  return std::min(kMaxChunks, std::max<int64_t>(1, rows / kRowsPerChunk));
}

// ---- down_t rows: 8 weights (a group) per load, as floats ------------------
// Group g of a row is the g-th run of 8 weights in the row's own order, for
// the float types and Q8_0. For Q4_0 it is 4 bytes of a block's 16: weights
// i..i+3 (low nibbles) and i+16..i+19 (high nibbles) — GroupCol says which.

struct DownRows {
  const uint8_t* data;   // float rows, or the packed quants
  const __half* scales;  // packed quantized: [rows][cols / 32]
  int64_t row_bytes;     // float: bytes per row; packed: quant bytes per row
  int64_t blocks;        // packed: blocks per row
};

__device__ void Halves8(const uint4& raw, float* w) {
  const __half2* h = reinterpret_cast<const __half2*>(&raw);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 f = __half22float2(h[i]);
    w[2 * i] = f.x;
    w[2 * i + 1] = f.y;
  }
}

struct F32Row {
  __device__ static void Load(const DownRows& m, int64_t r, int64_t g, float* w) {
    const float4* p = reinterpret_cast<const float4*>(m.data + r * m.row_bytes) + 2 * g;
    const float4 a = p[0], b = p[1];
    w[0] = a.x, w[1] = a.y, w[2] = a.z, w[3] = a.w;
    w[4] = b.x, w[5] = b.y, w[6] = b.z, w[7] = b.w;
  }
};
struct F16Row {
  __device__ static void Load(const DownRows& m, int64_t r, int64_t g, float* w) {
    Halves8(reinterpret_cast<const uint4*>(m.data + r * m.row_bytes)[g], w);
  }
};
struct BF16Row {
  __device__ static void Load(const DownRows& m, int64_t r, int64_t g, float* w) {
    const uint4 raw = reinterpret_cast<const uint4*>(m.data + r * m.row_bytes)[g];
    const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&raw);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float2 f = __bfloat1622float2(h[i]);
      w[2 * i] = f.x;
      w[2 * i + 1] = f.y;
    }
  }
};
struct Q8_0Row {
  // Group g: quants 8g .. 8g + 7 of the row (block g / 4), one 8-byte load.
  __device__ static void Load(const DownRows& m, int64_t r, int64_t g, float* w) {
    const uint2 v = reinterpret_cast<const uint2*>(m.data + r * m.row_bytes)[g];
    const float d = __half2float(m.scales[r * m.blocks + g / 4]);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      w[i] = d * static_cast<float>(static_cast<int8_t>(v.x >> (8 * i)));
      w[4 + i] = d * static_cast<float>(static_cast<int8_t>(v.y >> (8 * i)));
    }
  }
};
struct Q4_0Row {
  // Group g: bytes 4g .. 4g + 3 of the row's quants (block g / 4, bytes
  // 4 (g % 4) ..), one 4-byte load: w[0..3] from the low nibbles (weights
  // 4 (g % 4) + 0..3 of the block), w[4..7] from the high (16 + those).
  __device__ static void Load(const DownRows& m, int64_t r, int64_t g, float* w) {
    const uint32_t v = reinterpret_cast<const uint32_t*>(m.data + r * m.row_bytes)[g];
    const float d = __half2float(m.scales[r * m.blocks + g / 4]);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int b = (v >> (8 * i)) & 0xFF;
      w[i] = d * static_cast<float>((b & 0x0F) - 8);
      w[4 + i] = d * static_cast<float>((b >> 4) - 8);
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

// ---- y = sum_j act_j * down_t[j], deterministic -----------------------------

// Block (x, k) sums rows chunk k of act_j * down_t[j] into partial[k][...].
// Thread (x, y) owns the 8 columns of group blockIdx.x * kDownThreads + x
// and takes the chunk's rows y, y + kDownSlices, y + 2 kDownSlices, ... in
// order; the slices' sums are then added in slice order. Silent rows (act ==
// 0) are skipped: their down_t row is never read. The chunk's activations
// are read once, into shared memory, so the weight loads wait on nothing;
// four rows at a time keep four loads in flight, and a silent row adds 0,
// leaving the sum as it would be row by row.
template <typename Row>
__global__ void HotDownKernel(DownRows m, int64_t rows, int64_t cols, int64_t n_chunks,
                              const float* __restrict__ act, float* __restrict__ partial) {
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
  float acc[kVec] = {};
  if (live) {
    int i = y;
    for (; i + 3 * kDownSlices < n; i += 4 * kDownSlices) {
      float a[4], w[4][kVec];
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        a[r] = s_act[i + r * kDownSlices];
#pragma unroll
        for (int v = 0; v < kVec; ++v) w[r][v] = 0.0f;
        if (a[r] != 0.0f) Row::Load(m, j0 + i + r * kDownSlices, g, w[r]);
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
      Row::Load(m, j0 + i, g, w);
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

// y[c] (=|+=) the chunks' partial sums, in a fixed order: thread (x, y) of a
// block adds chunks y, y + kReduceSlices, ... of column blockIdx.x *
// kReduceCols + x in order, then the slices are added in slice order.
__global__ void ReduceChunksKernel(const float* __restrict__ partial, int64_t n_chunks,
                                   int64_t cols, bool accumulate, float* __restrict__ y) {
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
  y[c] = accumulate ? y[c] + total : total;
}

// Shared memory of a down block: the slices' partials and the activations
// of the longest chunk.
size_t DownSharedBytes(int64_t rows, int64_t n_chunks) {
  const int64_t longest = (rows + n_chunks - 1) / n_chunks;
  return sizeof(float) * (static_cast<size_t>(kDownSlices) * kVec * kDownThreads + longest);
}

template <typename Row>
void LaunchDown(const DeviceMatrix& down, int64_t n_chunks, const float* act, float* partial,
                cudaStream_t s) {
  DownRows m;
  m.data = static_cast<const uint8_t*>(down.data);
  m.blocks = down.cols / 32;
  if (down.type == DType::kQ8_0 || down.type == DType::kQ4_0) {
    m.row_bytes = m.blocks * PackedQuantBytes(down.type);
    m.scales = reinterpret_cast<const __half*>(m.data +
                                               PackedScalesOffset(down.type, down.rows, down.cols));
  } else {
    m.row_bytes = RowBytes(down.type, down.cols);
    m.scales = nullptr;
  }
  const int64_t groups = down.cols / kVec;
  const dim3 grid(static_cast<unsigned>((groups + kDownThreads - 1) / kDownThreads),
                  static_cast<unsigned>(n_chunks));
  const dim3 block(kDownThreads, kDownSlices);
  HotDownKernel<Row><<<grid, block, DownSharedBytes(down.rows, n_chunks), s>>>(
      m, down.rows, down.cols, n_chunks, act, partial);
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

int64_t Round4(int64_t n) {
  return (std::max<int64_t>(n, 0) + 3) / 4 * 4;
}

}  // namespace

bool HotFfnSupportsType(DType t) {
  return PackedTypeSupported(t);
}

bool HotFfnSupportsCols(int64_t cols) {
  return cols > 0 && cols % 32 == 0;
}

bool HotFfnSupportsRows(int64_t rows) {
  return rows >= 0 && rows <= INT32_MAX &&
         DownSharedBytes(rows, NumChunks(rows)) <= kMaxSharedBytes;
}

int64_t HotFfnScratchFloats(int64_t rows, int64_t cols) {
  // The gate products and the activations, each rounded up to 16 bytes,
  // then the partial sums.
  return 2 * Round4(rows) + NumChunks(rows) * cols;
}

bool EnqueueHotFfn(const HotLayer& l, HotActivation act, const float* threshold,
                   const DeviceVector& x, float* y, bool accumulate, int32_t* fired, float* scratch,
                   void* stream, std::string* error, const DeviceVector* gate_x) {
  const bool gated = act != HotActivation::kReluUp && act != HotActivation::kGeluUp;
  const bool relu_form =
      act == HotActivation::kRelu || act == HotActivation::kDRelu || act == HotActivation::kReluUp;
  if (!relu_form && act != HotActivation::kSilu && act != HotActivation::kGelu &&
      act != HotActivation::kGeluUp) {
    return Fail("unknown activation form", error);
  }
  if (!relu_form && !threshold) {
    return Fail("a SiLU or GELU FFN's hot neurons need a gate threshold (--sparse cats)", error);
  }
  const int64_t rows = l.rows(), cols = l.cols();
  for (const DeviceMatrix* m : {&l.gate, &l.up, &l.down_t}) {
    if (m == &l.gate && !gated) continue;
    if (!HotFfnSupportsType(m->type)) {
      return Fail(std::string("unsupported type ") + DTypeName(m->type), error);
    }
    if (m->rows != rows || m->cols != cols || (rows > 0 && !m->data)) {
      return Fail("the gate, up and down_t row sets differ in shape or are missing", error);
    }
  }
  if (!HotFfnSupportsCols(cols)) {
    return Fail("row length " + std::to_string(cols) + " is not a positive multiple of 32", error);
  }
  if (!HotFfnSupportsRows(rows)) {
    return Fail(std::to_string(rows) + " hot rows: more than the kernels take", error);
  }
  const DeviceVector& gx = gate_x ? *gate_x : x;
  if (!Aligned16(x.x) || !Aligned16(scratch) || (x.q && !Aligned16(x.q)) || !Aligned16(gx.x) ||
      (gx.q && !Aligned16(gx.q)) || gx.n != x.n) {
    return Fail("x (and the gate's x, of its length) and scratch must be 16-byte aligned", error);
  }
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  if (rows == 0) {
    if (accumulate) return true;
    return Check(cudaMemsetAsync(y, 0, sizeof(float) * cols, s), "clearing y", error);
  }
  float* g = scratch;
  float* act_j = scratch + Round4(rows);
  float* partial = act_j + Round4(rows);
  MatVecOut out;
  out.threshold = threshold;
  out.act_form = act == HotActivation::kSilu                                    ? ActForm::kSilu
                 : act == HotActivation::kGelu || act == HotActivation::kGeluUp ? ActForm::kGelu
                                                                                : ActForm::kRelu;
  if (gated) {
    out.y = g;
    out.epilogue = threshold ? Epilogue::kActThreshold : Epilogue::kStore;
    if (!EnqueueMatVec(l.gate, gx, out, stream, error)) return false;
    out.gate = g;
    if (threshold) {
      out.epilogue = Epilogue::kGateUp;
      out.drelu = act == HotActivation::kDRelu;
    } else {
      out.epilogue = act == HotActivation::kRelu ? Epilogue::kReluGateUp : Epilogue::kDReluGateUp;
    }
  } else {
    out.epilogue = threshold ? Epilogue::kActThreshold : Epilogue::kReluFired;
  }
  out.y = act_j;
  out.fired = fired;
  if (!EnqueueMatVec(l.up, x, out, stream, error)) return false;

  const int64_t n_chunks = NumChunks(rows);
  switch (l.down_t.type) {
    case DType::kF32:
      LaunchDown<F32Row>(l.down_t, n_chunks, act_j, partial, s);
      break;
    case DType::kF16:
      LaunchDown<F16Row>(l.down_t, n_chunks, act_j, partial, s);
      break;
    case DType::kBF16:
      LaunchDown<BF16Row>(l.down_t, n_chunks, act_j, partial, s);
      break;
    case DType::kQ8_0:
      LaunchDown<Q8_0Row>(l.down_t, n_chunks, act_j, partial, s);
      break;
    case DType::kQ4_0:
      LaunchDown<Q4_0Row>(l.down_t, n_chunks, act_j, partial, s);
      break;
    default:
      return Fail(std::string("unsupported type ") + DTypeName(l.down_t.type), error);
  }
  if (!Check(cudaGetLastError(), "down kernel launch", error)) return false;
  const unsigned reduce_blocks = static_cast<unsigned>((cols + kReduceCols - 1) / kReduceCols);
  ReduceChunksKernel<<<reduce_blocks, dim3(kReduceCols, kReduceSlices), 0, s>>>(
      partial, n_chunks, cols, accumulate, y);
  return Check(cudaGetLastError(), "reduce kernel launch", error);
}

}  // namespace cuda
}  // namespace pi
