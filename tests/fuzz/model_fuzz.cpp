// libFuzzer target for everything the engine reads out of a GGUF file beyond
// the container (gguf_fuzz covers that): the model loader's validation, the
// tokenizer, activation statistics, placement plans and PowerInfer's gpu
// index, and slot files (a sequence's prompt saved by POST /slots). Any input must be refused with
// a Status or give objects that are safe to use: an accepted model runs one token through the
// engine, an accepted tokenizer encodes and decodes a string.
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
#include "coordinator/engine/slot_file.h"

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

// A slot file checked against the layout it claims (so the tensors' checks
// are reached) with the seed's context and vocabulary; what is accepted
// must have the sizes the layout says.
void TrySlotFile(const pi::GgufFile& file) {
  pi::SlotLayout l;
  uint32_t n_batch = 0;
  uint64_t row_bytes = 0;
  (void)file.GetU64("pi.slot.model_fingerprint", &l.model_fingerprint);
  (void)file.GetU32("pi.slot.n_batch", &n_batch);
  (void)file.GetU64("pi.slot.kv_row_bytes", &row_bytes);
  l.n_batch = static_cast<int>(n_batch & 0xffff);
  l.kv_row_bytes = static_cast<int64_t>(row_bytes & 0xffffff);
  l.n_ctx = 16;
  l.n_vocab = 260;
  pi::SlotState state;
  if (!pi::ReadSlotFile(file, l, &state).ok()) return;
  const int64_t n = state.seq.n();
  if (n < 1 || n > l.n_ctx ||
      static_cast<int64_t>(state.seq.host_kv.size()) != n * l.kv_row_bytes ||
      state.seq.dense.size() != state.seq.tokens.size() ||
      (!state.logits.empty() && state.logits.size() != 260)) {
    __builtin_trap();
  }
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
  TrySlotFile(*file);
  TryModel(data, size);
  return 0;
}
