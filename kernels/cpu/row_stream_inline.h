// The row streams the AVX2 and AVX-512 mat-vec kernels share: software
// prefetch of a tile's rows (dense, or by id for the sparse products), the
// f16 scales of Q4_0/Q8_0 blocks, and where a prepared activation's groups
// are. Included only by matmul_avx2.cpp and matmul_avx512.cpp (both compiled
// with F16C); everything has internal linkage, so each file keeps its own
// copy (matmul_impl.h says why).
#pragma once

#include <immintrin.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "kernels/cpu/matmul_impl.h"

#define PI_INLINE inline __attribute__((always_inline))

namespace pi {
namespace cpu_internal {
namespace {

PI_INLINE int64_t Min64(int64_t a, int64_t b) {
  return a < b ? a : b;
}

// Software prefetch. The hardware prefetchers keep too few DRAM requests in
// flight on their own (measured: Q4_0 matvec at a third of a Zen 5 core's
// stream rate without this). Each row of a tile prefetches a fixed distance
// ahead of its reads; past the row's end the distance carries into the same
// row of the next tile (rows r+R...), which is what runs next. The lines go
// into L2 (T1), not L1: L2 keeps more misses in flight and holds lines far
// enough ahead to cover DRAM latency, where L1 (32-48 KiB, shared with the
// activation) lets a lead of more than a few KiB be evicted before use, and
// a few KiB do not cover it on every core (a Zen 4 core, prefetching into L1
// 8-16 KiB ahead as first tuned on Zen 5, ran the F32/F16/Q8_0/Q4_0
// mat-vecs and rows by id 1.3-1.6x slower: bench-kernels MatVec and
// SparseMatVec; no loss on the Zen 4 at two threads). The kernels' own loads
// then hit L2.
// Addresses are integers: past the last tile they leave the matrix, which a
// prefetch tolerates but pointer arithmetic does not.
template <int R>
struct Prefetcher {
  uintptr_t next[R];  // next address to prefetch in each row's stream
  uintptr_t end[R];   // end of the row that next[i] is in
  uintptr_t skip;     // from the end of a row to the same row of the next tile
  uintptr_t row;      // row bytes

  // `lead_bytes`: the total distance ahead, over all R rows.
  PI_INLINE Prefetcher(const uint8_t* const* rows, size_t row_bytes, size_t lead_bytes) {
    const size_t lead = lead_bytes / R;
    const size_t rows_ahead = row_bytes ? lead / row_bytes : 0;  // whole tiles ahead
    skip = (R - 1) * row_bytes;
    row = row_bytes;
    for (int i = 0; i < R; ++i) {
      const uintptr_t base = reinterpret_cast<uintptr_t>(rows[i]) + rows_ahead * R * row_bytes;
      next[i] = base + (row_bytes ? lead % row_bytes : 0);
      end[i] = base + row_bytes;
    }
  }
  // Called once per step of the tile, with the bytes each row advances.
  PI_INLINE void Step(size_t bytes) {
    for (int i = 0; i < R; ++i) {
      for (size_t k = 0; k < bytes; k += 64) {
        _mm_prefetch(reinterpret_cast<const char*>(next[i] + k), _MM_HINT_T1);
      }
      next[i] += bytes;
      if (next[i] >= end[i]) {
        next[i] += skip;
        end[i] += skip + row;
      }
    }
  }
};

// Prefetch for the indexed (sparse) products: the same per-lane lead as
// Prefetcher, but the rows come from the id list. Lane i of the tile at k
// reads row ids[k + i], then (next tile) ids[k + i + R], ...; the lane's
// stream walks those rows `lead / R` bytes ahead of the reads. A new row is
// prefetched from its first line, and nothing past the list's end.
template <int R>
struct IdPrefetcher {
  uintptr_t next[R];  // next address to prefetch in each lane's stream
  uintptr_t end[R];   // end of the row that next[i] is in
  int64_t idx[R];     // position in ids of that row; >= stop: lane done
  uintptr_t w;
  const int32_t* ids;
  int64_t stop;
  uintptr_t row;

  PI_INLINE IdPrefetcher(const MatMulArgs& a, int64_t k, size_t lead_bytes) {
    const size_t lead = lead_bytes / R;
    const size_t rows_ahead = a.row_bytes ? lead / a.row_bytes : 0;
    w = reinterpret_cast<uintptr_t>(a.w);
    ids = a.ids;
    stop = a.row_bytes ? a.r1 : 0;  // zero-byte rows: nothing to prefetch
    row = a.row_bytes;
    for (int i = 0; i < R; ++i) {
      idx[i] = k + i + static_cast<int64_t>(rows_ahead) * R;
      const uintptr_t base = RowAt(idx[i]);
      next[i] = base + (a.row_bytes ? lead % a.row_bytes : 0);
      end[i] = base + row;
    }
  }
  PI_INLINE uintptr_t RowAt(int64_t j) const {
    return j < stop ? w + static_cast<uintptr_t>(ids[j]) * row : 0;
  }
  PI_INLINE void Step(size_t bytes) {
    for (int i = 0; i < R; ++i) {
      if (idx[i] >= stop) continue;
      for (size_t k = 0; k < bytes && next[i] + k < end[i]; k += 64) {
        _mm_prefetch(reinterpret_cast<const char*>(next[i] + k), _MM_HINT_T1);
      }
      next[i] += bytes;
      if (next[i] >= end[i]) {
        idx[i] += R;
        const uintptr_t base = RowAt(idx[i]);
        next[i] = base & ~uintptr_t{63};
        end[i] = base + row;
      }
    }
  }
};

PI_INLINE uint64_t LoadU16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

// The f16 scales (the first 2 bytes of a block) of 4 blocks `stride` apart.
PI_INLINE __m128 LoadScales4(const uint8_t* p, int stride) {
  const uint64_t v = LoadU16(p) | LoadU16(p + stride) << 16 | LoadU16(p + 2 * stride) << 32 |
                     LoadU16(p + 3 * stride) << 48;
  return _mm_cvtph_ps(_mm_cvtsi64_si128(static_cast<long long>(v)));
}

// Where group g (4 blocks) of one prepared activation lives.
PI_INLINE const int8_t* ActQs(const uint8_t* xb, const QActLayout& l, int64_t g) {
  return reinterpret_cast<const int8_t*>(xb + l.qs_off) + g * 128;
}
PI_INLINE const float* ActDx(const uint8_t* xb, const QActLayout& l, int64_t g) {
  return reinterpret_cast<const float*>(xb + l.dx_off) + g * 4;
}
PI_INLINE const int32_t* ActS4(const uint8_t* xb, const QActLayout& l, int64_t g) {
  return reinterpret_cast<const int32_t*>(xb + l.s4_off) + g * 32;
}

}  // namespace
}  // namespace cpu_internal
}  // namespace pi
