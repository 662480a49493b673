// Transposed copies of the matrices --sparse teal reads by input column:
// attention's q, k, v and o and the FFN's gate. A column-sparse product
// (column_sparse.h) adds x[j] times row j of the copy for each kept input j,
// reading only those rows. Made once at load, in memory of their own (the
// file's matrices stay, for prompts and dense steps): each row quantized
// along the outputs in the matrix's own type — the K-quants in Q4_0 (2 to
// 4 bits) or Q8_0 (5 and 6), whose axpy runs about three times faster —
// where they are whole blocks of it, else F16. A quantized matrix is
// rounded twice on the way (its own blocks, then the copy's), a float one
// copied exactly.
#pragma once

#include <cstdint>

#include "common/base/status.h"
#include "common/base/thread_pool.h"
#include "common/model/llama_model.h"

namespace pi {

// Adds wq_t, wk_t, wv_t, wo_t and ffn_gate_t to every layer (buffers owned
// by model->repacked); *bytes: their size. Fails, before allocating, when
// they do not fit in the memory available.
Status AddTransposedCopies(LlamaModel* model, ThreadPool* pool, int64_t* bytes);

// Whether the layer has the copies --sparse teal's products read (q and o
// stand for the attention's, the gate for the FFN's).
inline bool HasTransposedCopies(const LlamaLayer& l) {
  return l.wq_t.present() && l.wo_t.present() && l.ffn_gate_t.present();
}

}  // namespace pi
