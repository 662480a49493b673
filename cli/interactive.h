// pi-run -i: llama-cli's interactive mode. The prompt is evaluated, then
// generation streams to `out` until the output ends with a reverse prompt
// (-r, repeatable), the model ends its text, or the turn's -n tokens are out;
// then a line is read from `in` and in_prefix + line + "\n" + in_suffix is
// evaluated (prefix and suffix printed; the line itself is the terminal's
// echo) and generation goes on. Ends at the end of input. A full context
// shifts as pi-run's does (generation.h's ShiftContext, --keep).
#pragma once

#include <cstdio>
#include <istream>
#include <string>
#include <vector>

#include "cli/engine_flags.h"
#include "common/base/status.h"
#include "common/text/sampler.h"

namespace pi {

struct InteractiveOptions {
  std::vector<std::string> reverse_prompts;  // -r
  std::string in_prefix, in_suffix;          // --in-prefix, --in-suffix
  int n_predict = -1;  // tokens per turn; -1: until a reverse prompt or end of text
  bool ignore_eos = false;
  int context_keep = 0;      // --keep (-1: the whole prompt)
  bool input_first = false;  // -if: the user's turn first
};

Status RunInteractive(const InteractiveOptions& options, const std::vector<int32_t>& prompt,
                      LoadedEngine* loaded, Sampler* sampler, std::istream& in, FILE* out);

}  // namespace pi
