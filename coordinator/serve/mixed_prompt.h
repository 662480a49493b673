// llama-server's prompts that mix token ids and text in one array
// ([12, 34, "text", 56]): read from JSON, then made tokens with the
// model's tokenizer once a request reaches a server that has one.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/base/status.h"
#include "common/text/tokenizer.h"

namespace pi {

// A piece: text (id < 0) or one token id.
struct PromptPiece {
  std::string text;
  int32_t id = -1;
};
using MixedPrompt = std::vector<PromptPiece>;

// True for an array holding a string and a number among its items: a
// mixed prompt (an array of strings alone is several prompts).
bool IsMixedPrompt(const nlohmann::json& p);

// Its pieces: each string a text piece, each number a non-negative int32 id
// (checked against the vocabulary when encoded); anything else an error.
Status ReadMixedPrompt(const nlohmann::json& p, MixedPrompt* out);

// The tokens, as llama-server makes them: each text piece encoded alone,
// BOS before a first piece of text where the tokenizer adds one (and EOS
// after a last piece of text where add_eos), ids as given; control tokens
// in the text read as such with parse_special (as the request's prompt).
Status EncodeMixedPrompt(const Tokenizer& tok, const MixedPrompt& p, bool add_eos,
                         bool parse_special, std::vector<int32_t>* out);

// The bytes of its text (for the tokenize gate).
size_t MixedPromptTextBytes(const MixedPrompt& p);

}  // namespace pi
