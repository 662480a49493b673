// The row walk every SIMD level shares (matmul_impl.h): which tile covers
// which rows, and which rows a transposed product adds in which group.
// Compiled without -m flags — it only calls the level's kernels.
#include <algorithm>

#include "kernels/cpu/matmul_impl.h"

namespace pi {
namespace cpu_internal {

void DriveTiles(const MatMulArgs& a, const TileSet& t) {
  if (a.batch == 1) {
    int64_t r = a.r0;
    if (a.cols <= t.short_row_cols) {
      for (; r + t.tile_rows <= a.r1; r += t.tile_rows) t.full[0](a, r, 0);
    }
    for (; r + t.vec_rows <= a.r1; r += t.vec_rows) t.vec(a, r, 0);
    for (; r < a.r1; ++r) t.single[0](a, r, 0);
    return;
  }
  // Batched: row panels small enough to stay in L2 while every chunk of
  // max_batch batch columns passes over them, so DRAM sees each row once.
  const int64_t panel_rows = t.panel_bytes / static_cast<int64_t>(a.row_bytes ? a.row_bytes : 1);
  const int64_t panel =
      panel_rows < t.tile_rows ? t.tile_rows : panel_rows / t.tile_rows * t.tile_rows;
  for (int64_t p0 = a.r0; p0 < a.r1; p0 += panel) {
    const int64_t p1 = std::min(a.r1, p0 + panel);
    for (int64_t b0 = 0; b0 < a.batch; b0 += t.max_batch) {
      const int nb = static_cast<int>(std::min<int64_t>(t.max_batch, a.batch - b0));
      int64_t r = p0;
      for (; r + t.tile_rows <= p1; r += t.tile_rows) t.full[nb - 1](a, r, b0);
      for (; r < p1; ++r) t.single[nb - 1](a, r, b0);
    }
  }
}

void DriveIdTiles(const MatMulArgs& a, const IdTileSet& t) {
  int64_t k = a.r0;
  if (a.cols <= t.short_row_cols) {
    for (; k + t.tile_rows <= a.r1; k += t.tile_rows) t.short_rows(a, k);
  }
  for (; k + t.vec_rows <= a.r1; k += t.vec_rows) t.vec(a, k);
  for (; k < a.r1; ++k) t.single(a, k);
}

void DriveAxpy(const AxpyArgs& a, const AxpyFn (&fns)[kAxpyRows]) {
  AxpyGroup groups[2];
  int cur = 0;
  groups[0].n = 0;
  groups[1].n = 0;
  int64_t r = a.r0;
  // Fills *g with the next nonzero rows; false when none are left.
  auto fill = [&](AxpyGroup* g) {
    g->n = 0;
    for (; r < a.r1 && g->n < kAxpyRows; ++r) {
      if (a.a[r] == 0.0f) continue;  // exact: the row is not even read
      const size_t row = a.ids ? static_cast<size_t>(a.ids[r]) : static_cast<size_t>(r);
      g->w[g->n] = a.w + row * a.row_bytes;
      g->a[g->n] = a.a[r];
      ++g->n;
    }
    return g->n > 0;
  };
  if (!fill(&groups[cur])) return;
  for (;;) {
    fill(&groups[cur ^ 1]);
    fns[groups[cur].n - 1](a, groups[cur], groups[cur ^ 1]);
    if (groups[cur ^ 1].n == 0) return;
    cur ^= 1;
  }
}

}  // namespace cpu_internal
}  // namespace pi
