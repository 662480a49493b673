// The tokenizer of a Hugging Face model folder as GGUF metadata
// (tokenizer.ggml.*, what common/text/tokenizer.h reads):
//
//   tokenizer.model (SentencePiece)  ->  "llama": pieces, scores, types as stored
//   tokenizer.json (a BPE model)     ->  "gpt2": byte-level tokens by id, merges,
//                                        added tokens (special: control), the
//                                        pre-tokenizer ("llama-bpe" for llama 3's
//                                        split regex, else "gpt2")
//
// bos/eos come from config.json, else the pieces <s> and </s>. Both files are
// parsed from their bytes with every field checked: a malformed file is an
// error naming what is wrong, never a crash.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "common/base/status.h"
#include "common/format/gguf.h"
#include "common/offline/hf_config.h"

namespace pi {

struct SpmPiece {
  std::string piece;
  float score = 0.0f;
  int type = 1;  // 1 normal, 2 unknown, 3 control, 4 user-defined, 5 unused, 6 byte (= GGUF's)
};

struct SpmModel {
  std::vector<SpmPiece> pieces;
  std::string normalizer;  // NormalizerSpec.name
  bool add_dummy_prefix = true;
  bool remove_extra_whitespaces = true;
};

// A sentencepiece ModelProto's pieces and normalizer flags, from the
// protobuf wire format.
Status ParseSpmModel(const uint8_t* data, size_t size, SpmModel* out);

// Adds the folder's tokenizer keys to `w`: config.vocab_size (the model's
// embedding rows) tokens, the list padded with unused ones to it.
Status AddHfTokenizer(const std::string& dir, const HfConfig& config, GgufWriter* w);

// The BPE half from the texts of tokenizer.json and tokenizer_config.json
// (may be empty).
Status AddBpeTokenizer(const std::string& tokenizer_json, const std::string& tokenizer_config_json,
                       const HfConfig& config, GgufWriter* w);

}  // namespace pi
