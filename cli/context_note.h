// What the tools say about the context size they were given, the same way
// everywhere.
#pragma once

#include "common/model/llama_model.h"

namespace pi {

// Prints "tool: warning: -c N exceeds the model's trained context (M); ..."
// when n_ctx is beyond what the model was trained on, as llama.cpp does.
void NoteContextSize(const char* tool, const LlamaModel& model, int n_ctx);

}  // namespace pi
