#include "cli/context_note.h"

#include <algorithm>
#include <cstdio>

namespace pi {

void NoteContextSize(const char* tool, const LlamaModel& model, int n_ctx) {
  const int trained = model.config.n_ctx_train;
  if (trained > 0 && n_ctx > trained) {
    fprintf(stderr,
            "%s: warning: -c %d exceeds the model's trained context (%d); positions beyond it "
            "were never seen in training and quality may degrade\n",
            tool, n_ctx, trained);
  }
}

}  // namespace pi
