// The --sparse flag shared by pi-run, pi-bench and pi-perplexity.
#pragma once

#include <string>

#include "common/llama_model.h"
#include "common/sparse_mode.h"

namespace pi {

// Prints "tool: --sparse oracle: this model's FFN runs dense: <why>" when a
// sparse mode cannot skip neurons in `model`, so a user never mistakes a
// dense run for a sparse one.
void NoteSparseSupport(const char* tool, const LlamaModel& model, SparseMode mode);

}  // namespace pi
