// Writes model_fuzz's seed corpus: a tiny llama model with a byte tokenizer
// (and the same with RoPE scaling, qwen2, qwen3, gemma2, gemma3 and phi3
// ones, and a falcon one with ffn_down_t), its activation statistics, a
// placement plan and PowerInfer's gpu index, all made by the code that writes
// them for users, and a slot file of a prompt on it, so the fuzzer starts from files every reader
// accepts.
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "common/format/gguf.h"
#include "common/model/llama_model.h"
#include "common/offline/synthetic_model.h"
#include "common/plan/activation_stats.h"
#include "common/plan/gpu_index.h"
#include "common/plan/placement.h"
#include "coordinator/engine/engine.h"
#include "coordinator/engine/slot_file.h"
#include "tests/fuzz/seed_file.h"

namespace {

bool Check(const pi::Status& s, const char* what) {
  if (!s.ok()) fprintf(stderr, "model_fuzz_seeds: %s: %s\n", what, s.message().c_str());
  return s.ok();
}

// A small model, its stats, plan and index under dir/NAME.*.gguf.
bool WriteSet(const std::string& dir, const std::string& name, pi::SyntheticModelOptions o) {
  pi::GgufWriter w;
  if (!Check(pi::AddSyntheticModel(o, &w), "model")) return false;
  const std::string model_path = dir + "/" + name + ".gguf";
  if (!pi::WriteSeedFile(model_path, w.Serialize())) return false;
  pi::LlamaModel model;
  if (!Check(pi::LoadLlamaModel(model_path, &model), "load")) return false;
  pi::ActivationStats stats;
  stats.Init(model.config.n_layer, model.config.n_ff);
  stats.set_n_tokens(100);
  for (int l = 0; l < model.config.n_layer; ++l) {
    for (int i = 0; i < model.config.n_ff; ++i) stats.mutable_counts(l)[i] = (i * 37 + l) % 101;
  }
  stats.model_fingerprint = pi::ModelFingerprint(*model.file);
  stats.n_ctx = 16;
  // --sparse cats' gate quantiles: rising, a ReLU layer's first points zero.
  for (int l = 0; l < model.config.n_layer; ++l) {
    for (int k = 0; k < pi::kGateQuantilePoints; ++k) {
      stats.gate_quantiles.push_back(k < 40 * l ? 0.0f : 0.01f * (k + 1));
    }
  }
  if (!Check(pi::WriteActivationStats(stats, dir + "/" + name + ".stats.gguf"), "stats")) {
    return false;
  }
  pi::PlacementOptions opt;
  opt.vram_budget = 1 << 20;
  opt.n_ctx = 16;
  opt.allow_partial_dense = true;
  pi::Placement plan;
  if (!Check(pi::Place(model, stats, opt, &plan), "place")) return false;
  if (!Check(pi::WritePlan(plan, dir + "/" + name + ".plan.gguf"), "plan")) return false;
  // A slot file (POST /slots/{id}?action=save): 5 prompt positions and the logits after them.
  pi::EngineOptions eo;
  eo.n_ctx = 16;
  eo.n_batch = 4;
  std::unique_ptr<pi::Engine> engine;
  if (!Check(pi::Engine::Create(&model, eo, &engine), "engine")) return false;
  std::vector<int32_t> prompt;
  for (int32_t id : {1, 72, 105, 33, 10}) prompt.push_back(id % model.config.n_vocab);
  int64_t bytes = 0;
  if (!Check(engine->Eval(prompt.data(), 5), "eval") ||
      !Check(pi::SaveSlot(engine.get(), 0, prompt, engine->logits(), dir + "/" + name + ".slot",
                          &bytes),
             "slot file")) {
    return false;
  }
  // A plan for two devices (--gpus): the devices' budgets, layers and head.
  opt.device_budgets = {1 << 19, 1 << 19};
  pi::Placement plan2;
  if (!Check(pi::PlaceOnDevices(model, stats, opt, &plan2), "place on devices")) return false;
  if (!Check(pi::WritePlan(plan2, dir + "/" + name + ".plan2.gguf"), "plan2")) return false;
  return Check(pi::WriteGpuIndex(pi::GpuIndexFromPlacement(plan), dir + "/" + name + ".gpuidx"),
               "gpuidx");
}

}  // namespace

int main(int argc, char** argv) {
  std::string dir;
  if (!pi::SeedDirFromArgs(argc, argv, &dir)) return 2;
  pi::SyntheticModelOptions o;
  o.n_vocab = 260;  // the byte tokenizer's 259 tokens and one more
  o.n_embd = 32;
  o.n_layer = 1;
  o.n_head = 2;
  o.n_ff = 32;
  o.n_ctx = 16;
  o.type = pi::DType::kQ8_0;
  o.tied = true;
  o.byte_tokenizer = true;
  o.activation = "relu";
  bool ok = WriteSet(dir, "llama", o);
  // RoPE scaling: Llama 3.1's rope_freqs.weight, and linear scaling's keys.
  o.rope_scaling = "llama3";
  o.rope_original_ctx = 8;
  ok &= WriteSet(dir, "llama3rope", o);
  o.rope_scaling = "linear";
  ok &= WriteSet(dir, "ropelinear", o);
  o.rope_scaling = "";
  o.arch = "qwen2";  // Q/K/V biases
  ok &= WriteSet(dir, "qwen2", o);
  o.arch = "qwen3";  // Q/K head norms
  ok &= WriteSet(dir, "qwen3", o);
  o.arch = "gemma2";  // post-norms, soft-caps, a window, GeGLU
  o.activation = "gelu";
  o.sliding_window = 3;
  ok &= WriteSet(dir, "gemma2", o);
  o.arch = "gemma3";  // and head norms, local RoPE
  ok &= WriteSet(dir, "gemma3", o);
  o.arch = "phi3";  // fused attn_qkv and gate+up
  o.activation = "silu";
  ok &= WriteSet(dir, "phi3", o);
  o.activation = "relu";
  o.arch = "falcon";
  o.n_head_kv = 1;
  o.down_t = true;
  o.type = pi::DType::kF16;
  o.byte_tokenizer = false;
  o.n_vocab = 16;
  ok &= WriteSet(dir, "falcon", o);
  return ok ? 0 : 1;
}
