// What the tools say about the context size they were given, the same way
// everywhere.
#pragma once

#include "common/llama_model.h"

namespace pi {

// Prints "tool: warning: -c N exceeds the model's trained context (M); ..."
// when n_ctx is beyond what the model was trained on, as llama.cpp does.
void NoteContextSize(const char* tool, const LlamaModel& model, int n_ctx);

// --repeat-last-n as llama.cpp reads it: -1 is the whole context, and no
// value may exceed the context (the sampler's history is sized by it).
int RepeatLastNForContext(int repeat_last_n, int n_ctx);

}  // namespace pi
