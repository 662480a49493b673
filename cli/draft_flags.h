// llama-server's speculative decoding flags, for pi-run and pi-launch
// (coordinator/engine/speculative.h):
//   -md, --model-draft FILE   --draft-max N (--draft, --draft-n)   --draft-min N
//   --draft-p-min P
// and the draft model's load: its vocabulary checked against the model's, a
// dense engine of its own on the host (the model's threads, context and -b).
#pragma once

#include <memory>
#include <string>

#include "cli/args.h"
#include "common/base/status.h"
#include "common/model/llama_model.h"
#include "common/text/tokenizer.h"
#include "coordinator/engine/engine.h"
#include "coordinator/engine/speculative.h"

namespace pi {

struct DraftFlags {
  std::string model_path;  // empty: no speculative decoding
  DraftOptions opt;
};

extern const char kDraftUsage[];

// Consumes `flag` when it is one of the flags; false for any other.
bool ParseDraftFlag(const std::string& flag, ArgReader* args, DraftFlags* flags);
// An error naming the first flag out of range.
Status CheckDraftFlags(const DraftFlags& flags);

// The draft model and what runs it; destroyed drafter first.
struct LoadedDraft {
  LlamaModel model;
  std::unique_ptr<Tokenizer> tok;
  std::unique_ptr<Engine> engine;
  std::unique_ptr<Drafter> drafter;
};

// Loads the draft model for `target` (its engine and tokenizer loaded):
// refused on the device path (a device evaluates a run one token at a time,
// so nothing is gained) and with several sequences (-np: the serial path
// drafts). A line on stderr, prefixed with `tool`, says what was loaded.
Status LoadDraft(const char* tool, const DraftFlags& flags, Engine* target,
                 const Tokenizer& target_tok, LoadedDraft* out);

}  // namespace pi
