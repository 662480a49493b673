// A synthetic model built in memory for a test (no file): its GGUF bytes,
// the model read from them, and, with a byte tokenizer, its tokenizer.
#pragma once

#include <memory>
#include <vector>

#include "common/model/llama_model.h"
#include "common/offline/synthetic_model.h"
#include "common/text/tokenizer.h"

namespace pi {

struct InMemoryModel {
  std::vector<uint8_t> bytes;  // what `model` maps: it must live as long
  LlamaModel model;
  std::unique_ptr<Tokenizer> tok;  // set when o.byte_tokenizer

  Status Build(const SyntheticModelOptions& o) {
    GgufWriter w;
    PI_RETURN_IF_ERROR(AddSyntheticModel(o, &w));
    bytes = w.Serialize();
    std::unique_ptr<GgufFile> f;
    PI_RETURN_IF_ERROR(GgufFile::OpenBuffer(bytes.data(), bytes.size(), &f));
    PI_RETURN_IF_ERROR(LoadLlamaModel(std::move(f), &model));
    if (o.byte_tokenizer) PI_RETURN_IF_ERROR(Tokenizer::FromGguf(*model.file, &tok));
    return Status::Ok();
  }
};

}  // namespace pi
