#include "common/model/weight_repack.h"

#include <algorithm>
#include <cstdlib>
#include <vector>

#include "common/base/memory_limits.h"
#include "kernels/cpu/weight_panels.h"

namespace pi {

namespace {

std::vector<Tensor*> Candidates(LlamaModel* model, const RepackScope& scope) {
  std::vector<Tensor*> out;
  for (size_t il = static_cast<size_t>(std::max(scope.first_layer, 0)); il < model->layers.size();
       ++il) {
    LlamaLayer& l = model->layers[il];
    for (Tensor* t : {&l.wq, &l.wk, &l.wv, &l.wo}) out.push_back(t);
    if (scope.ffn) {
      for (Tensor* t : {&l.ffn_gate, &l.ffn_up, &l.ffn_down}) out.push_back(t);
    }
  }
  if (scope.head) out.push_back(&model->output);
  return out;
}

// The types whose repacking pays for one user too: decode at least as fast
// as from the file's layout. Q8_0 and Q6_K gain on batched decode (and Q8_0
// on prompts, +13 % pp512), but their decode mat-vecs over the panels stream
// slower than the file layout's (bench-kernels MatVec/q8_0/panels: 0.8-0.9x;
// MatVec/q6_K/panels: 0.9x at -t 2, a Q4_K_M tg32 -8 %), so they stay as
// they are until that is found.
bool RepackPays(DType t) {
  return t == DType::kQ4_0 || t == DType::kQ4_K || t == DType::kQ5_K || t == DType::kF16 ||
         t == DType::kBF16 || t == DType::kF32;
}

}  // namespace

Status RepackModelWeights(LlamaModel* model, const RepackScope& scope, ThreadPool* pool,
                          RepackStats* stats) {
  *stats = RepackStats();
  std::vector<Tensor*> todo;
  int64_t total = 0;
  for (Tensor* t : Candidates(model, scope)) {
    if (!t->present() || t->panels || !RepackPays(t->type) || !WeightPanelsFast(t->type) ||
        !CanRepackWeights(t->type, t->rows, t->cols)) {
      continue;
    }
    todo.push_back(t);
    total += static_cast<int64_t>(WeightPanelBytes(t->type, t->rows, t->cols));
  }
  const Status fits = CheckMemory("repacking the weights", total);
  if (!fits.ok()) {
    stats->skipped = fits.message() + "; the products read the file's layout";
    return Status::Ok();
  }
  for (Tensor* t : todo) {
    const size_t bytes = WeightPanelBytes(t->type, t->rows, t->cols);
    uint8_t* buf = static_cast<uint8_t*>(std::aligned_alloc(64, (bytes + 63) / 64 * 64));
    if (!buf) {
      return Status::Error("cannot allocate %.1f MiB to repack the weights (--no-repack: skip it)",
                           bytes / 1048576.0);
    }
    model->repacked.emplace_back(buf);
    // Whole panels per chunk, a few chunks per thread.
    const int64_t panels = t->rows / kWeightPanelRows;
    const int64_t chunks = std::min<int64_t>(panels, 4 * pool->size());
    pool->ParallelFor(chunks, [&](int64_t chunk, int) {
      const int64_t r0 = panels * chunk / chunks * kWeightPanelRows;
      const int64_t r1 = panels * (chunk + 1) / chunks * kWeightPanelRows;
      RepackWeights(t->type, t->data, t->cols, r0, r1, buf);
    });
    t->panels = buf;
    ++stats->matrices;
    stats->bytes += static_cast<int64_t>(bytes);
  }
  return Status::Ok();
}

}  // namespace pi
