// The text corpora the offline tools run a model over — pi-profile's firing
// statistics and pi-train-predictor's samples — read, tokenized and
// evaluated the same way by both, so a profile and a predictor trained on one
// text see the same positions.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/base/progress.h"
#include "common/base/status.h"
#include "common/model/llama_model.h"
#include "common/text/tokenizer.h"
#include "coordinator/engine/engine.h"

namespace pi {

// The model file at `path` with --ffn-activation applied (when non-empty),
// its weights checked finite when `check_tensors`, and its tokenizer.
Status LoadModelAndTokenizer(const char* tool, const std::string& path,
                             const std::string& ffn_activation, bool check_tensors,
                             LlamaModel* model, std::unique_ptr<Tokenizer>* tok);

// A corpus: `path` itself, or the *.txt files of a folder sorted by name,
// each tokenized without BOS (every chunk gets its own) and concatenated in
// order. Reading stops once `max_tokens` (> 0) tokens are in; a corpus that
// encodes to no tokens is an error.
struct Corpus {
  std::vector<int32_t> tokens;
  size_t files_read = 0;
  size_t files_found = 0;
  // The path as given; for a folder also how many of its *.txt files were read.
  std::string name;
};
Status ReadCorpus(const std::string& path, const Tokenizer& tok, int64_t max_tokens, Corpus* out);

// The corpus in chunks of the engine's n_ctx positions, each evaluated from an
// empty context and starting with BOS when the tokenizer adds one, as every
// real prompt does. `max_positions` (> 0) bounds the positions evaluated in
// all; -1 takes every chunk.
class CorpusChunks {
 public:
  // Fails when n_ctx leaves no room for text after BOS.
  static Status Make(const std::vector<int32_t>* tokens, int n_ctx, int32_t bos,
                     int64_t max_positions, CorpusChunks* out);

  // The positions Eval evaluates (BOS included).
  int64_t positions() const { return positions_; }

  // Evaluates every chunk, n_batch positions at a time (the bar moves within a
  // chunk); an FFN observer on the engine sees each position once.
  Status Eval(Engine* engine, int n_batch, ProgressBar* bar) const;

 private:
  const std::vector<int32_t>* tokens_ = nullptr;
  int32_t bos_ = -1;
  int per_chunk_ = 0;  // corpus tokens per chunk
  int64_t positions_ = 0;
};

}  // namespace pi
