// The model and shard step_fuzz and its seed writer share.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "common/offline/synthetic_model.h"
#include "common/transport/step_message.h"

namespace pi {

inline SyntheticModelOptions StepFuzzModel() {
  SyntheticModelOptions o;
  o.n_vocab = 16;
  o.n_embd = 32;
  o.n_layer = 2;
  o.n_head = 2;
  o.n_ff = 64;
  o.activation = "relu";
  o.down_t = true;
  return o;
}

// Builds the model in memory: *bytes holds the GGUF and must outlive *model.
inline bool MakeStepFuzzModel(std::vector<uint8_t>* bytes, LlamaModel* model) {
  GgufWriter w;
  if (!AddSyntheticModel(StepFuzzModel(), &w).ok()) return false;
  *bytes = w.Serialize();
  std::unique_ptr<GgufFile> file;
  return GgufFile::OpenBuffer(bytes->data(), bytes->size(), &file).ok() &&
         LoadLlamaModel(std::move(file), model).ok();
}

// Every third neuron of each layer, batches up to 2.
inline ShardLayout StepFuzzLayout(const LlamaConfig& c) {
  ShardLayout s;
  s.n_layer = c.n_layer;
  s.n_embd = c.n_embd;
  s.n_ff = c.n_ff;
  s.max_batch = 2;
  s.owned.assign(c.n_layer, {});
  for (int l = 0; l < c.n_layer; ++l) {
    for (int i = l; i < c.n_ff; i += 3) s.owned[l].push_back(i);
  }
  return s;
}

}  // namespace pi
