// Repacks a loaded model's dense Q4_0 and float matrices for the CPU's matrix
// kernels (kernels/cpu/weight_panels.h), once, at load: decode steps, batched
// decode and prompts then read them with no per-call packing.
//
// The repacked copy is the matrix's own size, in memory of its own; the
// file's bytes stay mapped for what reads single rows (embeddings, the sparse
// FFN, GPU uploads) and are not read again by the products, so the page cache
// may drop them. Only where it pays: the active CPU level has the fast kernel
// (WeightPanelsFast), and only matrices read whole by every step.
#pragma once

#include <cstdint>
#include <string>

#include "common/base/status.h"
#include "common/base/thread_pool.h"
#include "common/model/llama_model.h"

namespace pi {

struct RepackStats {
  int64_t matrices = 0;
  int64_t bytes = 0;
  // Set when nothing was repacked for want of memory (the repacked copy must
  // fit in the memory available; a model bigger than RAM runs from the
  // mapped file as before): says so, with the sizes.
  std::string skipped;
};

// What of the model this process multiplies.
struct RepackScope {
  // Layers below run elsewhere (a device holding a prefix of them,
  // DevicePlan::n_layers): their matrices are not repacked here.
  int first_layer = 0;
  bool head = true;  // the output head (false: the device holds it)
  // The FFN matrices too: when this process computes the FFN densely
  // (sparse steps read FFN rows one by one, from the file's layout).
  bool ffn = false;
};

// Repacks the attention projections of the layers in scope, the head and
// the FFN matrices as `scope` says. Matrices of other types or shapes are
// left alone. When their bytes do not
// fit in the memory available (common/base/memory_limits.h) nothing is repacked
// (stats->skipped says why); fails only when an allocation fails all the
// same. Threads from `pool`.
Status RepackModelWeights(LlamaModel* model, const RepackScope& scope, ThreadPool* pool,
                          RepackStats* stats);

}  // namespace pi
