#include "cli/sparse_note.h"

#include <cstdio>

namespace pi {

void NoteSparseSupport(const char* tool, const LlamaModel& model, SparseMode mode) {
  if (mode == SparseMode::kOff) return;
  std::string why;
  if (!SupportsSparseFfn(model, &why)) {
    fprintf(stderr, "%s: --sparse %s: this model's FFN runs dense: %s\n", tool,
            SparseModeName(mode), why.c_str());
  }
}

}  // namespace pi
