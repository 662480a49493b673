// The tiles and entry points the AVX2 and AVX-512 mat-vec files build the
// same way from their own bodies: a tile gathers its rows (dense or by id)
// and batch columns, runs the level's body with a prefetcher and stores the
// sums; the tile sets tell the shared driver (matmul_impl.h) which tile covers
// what; MatMulRowsTiled / AxpyRowsTiled pick them by weight type.
//
// Included by matmul_avx2.cpp and matmul_avx512.cpp after what each defines,
// in its anonymous namespace, for its vector width:
//   FloatTileBody<T, R, B>(a, wr, xs, pf, out)   float rows x batch columns
//   QGroup<kQ4, R, B>(blk, xb, layout, g, acc)   a group of 4 Q4_0 / Q8_0 blocks
//   Vec, VecZero(), VecSum(v)                    the accumulator vector
//   AxpyFloat<T, K>, AxpyQuant<kQ4, K>           K rows of the transposed product
//   kTileRows, kMaxBatch (<= kMaxTileBatch), kVecRowsQ4, kLeadBytes, kQ4Bytes, kQ8Bytes,
//   kPanelBytes, kShortRowCols (0: no short-row tiles)
// Everything keeps the includer's internal linkage (matmul_impl.h says why).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "kernels/cpu/matmul_impl.h"
#include "kernels/cpu/row_stream_inline.h"

namespace pi {
namespace cpu_internal {
namespace {

template <DType T>
constexpr bool kQuant = T == DType::kQ8_0 || T == DType::kQ4_0;
// Rows of a batch-1 tile: Q4_0 needs more arithmetic per byte than it reads
// and goes kVecRowsQ4 rows at a time; Q8_0 one row, one linear stream; floats
// kTileRows, which keeps enough FMA chains in flight.
template <DType T>
constexpr int kVecRows = T == DType::kQ4_0   ? kVecRowsQ4
                         : T == DType::kQ8_0 ? 1
                                             : kTileRows;

// R quantized rows (wr[i]) x B prepared activations (xb[j]) into out, 4
// blocks (128 weights) at a time.
template <bool kQ4, int R, int B, class P>
PI_INLINE void QuantTileBody(const MatMulArgs& a, const uint8_t* const* wr,
                             const uint8_t* const* xb, P* pf, float (&out)[R][B]) {
  constexpr int kBytes = kQ4 ? kQ4Bytes : kQ8Bytes;
  const QActLayout& l = a.layout;
  Vec acc[R][B];
  for (int i = 0; i < R; ++i)
    for (int j = 0; j < B; ++j) acc[i][j] = VecZero();
  const int64_t full = l.nb / 4;
  const uint8_t* blk[R];
  for (int64_t g = 0; g < full; ++g) {
    pf->Step(4 * kBytes);
    for (int i = 0; i < R; ++i) blk[i] = wr[i] + g * 4 * kBytes;
    QGroup<kQ4, R, B>(blk, xb, l, g, acc);
  }
  const int rest = static_cast<int>(l.nb - full * 4);
  if (rest > 0) {
    // Last partial group: copy the remaining blocks into zeroed 4-block
    // buffers so the group code never reads past the row; the padded blocks
    // have d = 0 and meet zero activations.
    uint8_t tail[R][4 * kBytes];
    for (int i = 0; i < R; ++i) {
      std::memset(tail[i], 0, sizeof(tail[i]));
      std::memcpy(tail[i], wr[i] + full * 4 * kBytes, static_cast<size_t>(rest) * kBytes);
      blk[i] = tail[i];
    }
    QGroup<kQ4, R, B>(blk, xb, l, full, acc);
  }
  for (int i = 0; i < R; ++i)
    for (int j = 0; j < B; ++j) out[i][j] = VecSum(acc[i][j]);
}

// R rows (wr[i]) x B batch columns from x0 (x_stride apart) into out.
template <DType T, int R, int B, class P>
PI_INLINE void TileBody(const MatMulArgs& a, const uint8_t* const* wr, const uint8_t* x0, P* pf,
                        float (&out)[R][B]) {
  if constexpr (kQuant<T>) {
    const uint8_t* xb[B];
    for (int j = 0; j < B; ++j) xb[j] = x0 + j * a.x_stride;
    QuantTileBody<T == DType::kQ4_0, R, B>(a, wr, xb, pf, out);
  } else {
    const float* xs[B];
    for (int j = 0; j < B; ++j) xs[j] = reinterpret_cast<const float*>(x0 + j * a.x_stride);
    FloatTileBody<T, R, B>(a, wr, xs, pf, out);
  }
}

// R rows [r, r+R) x B batch columns [b0, b0+B).
template <DType T, int R, int B>
void Tile(const MatMulArgs& a, int64_t r, int64_t b0) {
  const uint8_t* wr[R];
  for (int i = 0; i < R; ++i) wr[i] = a.w + (r + i) * a.row_bytes;
  Prefetcher<R> pf(wr, a.row_bytes, kLeadBytes);
  float out[R][B];
  TileBody<T, R, B>(a, wr, a.x + b0 * a.x_stride, &pf, out);
  for (int i = 0; i < R; ++i)
    for (int j = 0; j < B; ++j) a.y[(b0 + j) * a.ldy + r + i] = out[i][j];
}

// Indexed: rows ids[k..k+R), batch 1.
template <DType T, int R>
void TileIds(const MatMulArgs& a, int64_t k) {
  const uint8_t* wr[R];
  for (int i = 0; i < R; ++i) wr[i] = a.w + static_cast<size_t>(a.ids[k + i]) * a.row_bytes;
  IdPrefetcher<R> pf(a, k, kLeadBytes);
  float out[R][1];
  TileBody<T, R, 1>(a, wr, a.x, &pf, out);
  for (int i = 0; i < R; ++i) a.y[a.ids[k + i]] = out[i][0];
}

// Null past the level's kMaxBatch (never instantiated: AVX2 has too few
// registers for wider tiles).
template <DType T, int R, int B>
constexpr TileFn TileOrNull() {
  if constexpr (B <= kMaxBatch) return Tile<T, R, B>;
  return nullptr;
}

template <DType T>
constexpr TileSet kTiles = {
    kVecRows<T>,
    Tile<T, kVecRows<T>, 1>,
    {TileOrNull<T, kTileRows, 1>(), TileOrNull<T, kTileRows, 2>(), TileOrNull<T, kTileRows, 3>(),
     TileOrNull<T, kTileRows, 4>()},
    {TileOrNull<T, 1, 1>(), TileOrNull<T, 1, 2>(), TileOrNull<T, 1, 3>(), TileOrNull<T, 1, 4>()},
    kTileRows,
    kMaxBatch,
    kPanelBytes,
    kShortRowCols};

template <DType T>
constexpr IdTileSet kIdTiles = {kVecRows<T>,   TileIds<T, kVecRows<T>>,
                                TileIds<T, 1>, kShortRowCols > 0 ? TileIds<T, kTileRows> : nullptr,
                                kTileRows,     kShortRowCols};

template <DType T, int K>
void Axpy(const AxpyArgs& a, const AxpyGroup& g, const AxpyGroup& next) {
  if constexpr (kQuant<T>) {
    AxpyQuant<T == DType::kQ4_0, K>(a, g, next);
  } else {
    AxpyFloat<T, K>(a, g, next);
  }
}

template <DType T>
constexpr AxpyFn kAxpy[kAxpyRows] = {Axpy<T, 1>, Axpy<T, 2>, Axpy<T, 3>, Axpy<T, 4>,
                                     Axpy<T, 5>, Axpy<T, 6>, Axpy<T, 7>, Axpy<T, 8>};

// f(std::integral_constant<DType, t>) for the weight types these kernels
// take (matmul.cpp sends them no other).
template <class F>
void WithTiledType(DType t, F&& f) {
  switch (t) {
    case DType::kF32:
      return f(std::integral_constant<DType, DType::kF32>());
    case DType::kF16:
      return f(std::integral_constant<DType, DType::kF16>());
    case DType::kBF16:
      return f(std::integral_constant<DType, DType::kBF16>());
    case DType::kQ8_0:
      return f(std::integral_constant<DType, DType::kQ8_0>());
    case DType::kQ4_0:
      return f(std::integral_constant<DType, DType::kQ4_0>());
    default:
      return;
  }
}

void MatMulRowsTiled(const MatMulArgs& a) {
  WithTiledType(a.wtype, [&a](auto t) {
    if (a.ids) {
      DriveIdTiles(a, kIdTiles<decltype(t)::value>);
    } else {
      DriveTiles(a, kTiles<decltype(t)::value>);
    }
  });
}

void AxpyRowsTiled(const AxpyArgs& a) {
  WithTiledType(a.wtype, [&a](auto t) { DriveAxpy(a, kAxpy<decltype(t)::value>); });
}

}  // namespace
}  // namespace cpu_internal
}  // namespace pi
