// Fill-in-the-middle: the prompt a code model with FIM tokens completes the
// text between a prefix and a suffix from (llama-server's /infill, OpenAI's
// `suffix`). In the prefix-suffix-middle order code models are trained on:
//
//   [BOS] extra [FIM_PRE] prefix prompt [FIM_SUF] suffix [FIM_MID]
//
// and with `spm`, suffix first: [FIM_SUF] suffix [FIM_PRE] prefix prompt
// [FIM_MID]. `extra` is other files' text, as Qwen 2.5 Coder's repository
// format writes it where the vocabulary has its tokens —
// [FIM_REP]myproject\n [FIM_SEP]name\n text ... [FIM_SEP]filename\n, the
// repository and current file named as llama-server names them — else each
// file after a "--- snippet ---" line. The model's answer is the middle.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/base/status.h"
#include "common/text/tokenizer.h"

namespace pi {

struct InfillFile {
  std::string filename = "tmp";
  std::string text;
};

struct InfillInput {
  std::string prefix;  // the text before the cursor
  std::string suffix;  // the text after it
  std::string prompt;  // text that goes on the prefix (what is being typed)
  std::vector<InfillFile> extra;
};

// The prompt's tokens into *ids, at most `budget` of them: when the whole
// does not fit, the other files go first (their end is kept), then the
// prefix loses its start and the suffix its end, the suffix keeping at most
// a quarter of the room; *truncated says so. Errors: a vocabulary without
// FIM tokens; markers and prompt alone over the budget.
Status InfillPrompt(const Tokenizer& tok, const InfillInput& in, bool spm, int budget,
                    std::vector<int32_t>* ids, bool* truncated);

}  // namespace pi
