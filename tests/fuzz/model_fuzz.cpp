// libFuzzer target for everything the engine reads out of a GGUF file beyond
// the container (gguf_fuzz covers that): the model loader's validation, the
// tokenizer, activation statistics, placement plans and PowerInfer's gpu
// index. Any input must be refused with a Status or give objects that are
// safe to use: an accepted model runs one token through the engine, an
// accepted tokenizer encodes and decodes a string.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/format/gguf.h"
#include "common/model/llama_model.h"
#include "common/plan/activation_stats.h"
#include "common/plan/gate_thresholds.h"
#include "common/plan/gpu_index.h"
#include "common/plan/placement.h"
#include "common/text/tokenizer.h"
#include "coordinator/engine/engine.h"

namespace {

void TryTokenizer(const pi::GgufFile& file) {
  std::unique_ptr<pi::Tokenizer> tok;
  if (!pi::Tokenizer::FromGguf(file, &tok).ok()) return;
  std::vector<int32_t> ids;
  if (!tok->Encode("In the beginning, caf\xc3\xa9 \xe2\x80\x94 <s> 123\n", true, &ids, true).ok()) {
    return;
  }
  std::string text = tok->Decode(ids);
  pi::Utf8Stream stream;
  for (int32_t id : ids) text += stream.Push(tok->TokenToPiece(id));
  text += stream.Flush();
}

void TryModel(const uint8_t* data, size_t size) {
  std::unique_ptr<pi::GgufFile> file;
  if (!pi::GgufFile::OpenBuffer(data, size, &file).ok()) return;
  pi::LlamaModel model;
  if (!pi::LoadLlamaModel(std::move(file), &model).ok()) return;
  pi::EngineOptions opt;
  opt.n_threads = 1;
  opt.n_ctx = 4;
  opt.n_batch = 2;
  std::unique_ptr<pi::Engine> engine;
  if (!pi::Engine::Create(&model, opt, &engine).ok()) return;
  const int32_t tokens[2] = {0, model.config.n_vocab - 1};
  (void)engine->Eval(tokens, 2);  // NaN logits from fuzzed weights are an error, not a crash
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::unique_ptr<pi::GgufFile> file;
  if (!pi::GgufFile::OpenBuffer(data, size, &file).ok()) return 0;
  pi::ActivationStats stats;
  if (pi::ReadActivationStats(*file, &stats).ok() && !stats.gate_quantiles.empty()) {
    std::vector<float> thresholds;  // --sparse cats' use of them
    (void)pi::GateThresholdsFor(stats.gate_quantiles, stats.n_layer(), 0.93, &thresholds);
  }
  pi::Placement plan;
  (void)pi::ReadPlan(*file, &plan);
  pi::GpuIndex index;
  (void)pi::ReadGpuIndex(*file, &index);
  TryTokenizer(*file);
  TryModel(data, size);
  return 0;
}
