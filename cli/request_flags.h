// The flags of a generation request, shared by pi-run and pi-client:
//   -p, --prompt TEXT   -f, --file FILE   -n, --n-predict N   --ignore-eos
//   --stop TEXT (repeatable)   and llama.cpp's sampling flags: --temp X
//   --top-k N  --top-p X  --min-p X  --repeat-penalty X  --repeat-last-n N
//   --presence-penalty X  --frequency-penalty X  -l, --logit-bias ID(+|-)BIAS
//   -s, --seed N   and the output's grammar: --grammar GBNF  --grammar-file FILE
//   -j, --json-schema SCHEMA
#pragma once

#include <string>
#include <vector>

#include "cli/args.h"
#include "common/base/status.h"
#include "common/text/sampler.h"

namespace pi {

struct RequestFlags {
  std::string prompt, prompt_file;
  int n_predict = -1;
  bool ignore_eos = false;
  std::vector<std::string> stops;
  SamplerParams sampling;
  // The output's GBNF grammar (grammar.h): --grammar, read from
  // --grammar-file, or made from -j's JSON schema (ReadGrammarFlags).
  std::string grammar, grammar_file, json_schema;
};

// Help lines for the flags, with llama.cpp's defaults.
extern const char kRequestUsage[];

// Consumes `flag` (already read by args->Next()) when it is one of the
// flags; returns false for any other flag.
bool ParseRequestFlag(const std::string& flag, ArgReader* args, RequestFlags* flags);

// An error naming the first value out of range.
Status CheckRequestFlags(const RequestFlags& flags);

// With -f, reads the prompt file into flags->prompt (the error names it).
Status ReadPromptFile(RequestFlags* flags);

// Reads --grammar-file, or turns -j's schema into a grammar, into
// flags->grammar (at most one of the three flags; the error names it).
Status ReadGrammarFlags(RequestFlags* flags);

}  // namespace pi
