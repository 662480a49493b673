// What pi-convert writes, tensor by tensor: each GGUF tensor of a Hugging
// Face model (llama.cpp's names) as a job — its source tensor, shape, type
// and the reordering on the way — for each model family it knows.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/offline/hf_config.h"
#include "common/offline/hf_convert.h"
#include "common/offline/safetensors.h"
#include "kernels/dtype.h"

namespace pi {

// How a source tensor becomes a GGUF tensor.
enum class Reorder {
  kNone,
  kRope,       // rows permuted within heads of `head_dim` (rotate-half -> interleaved)
  kTranspose,  // [rows, cols] -> [cols, rows] (ffn_down -> ffn_down_t)
  kFalconQkv,  // query_key_value's heads grouped per KV head -> all Q, all K, all V
};

// The models pi-convert knows, by the GGUF architecture they become.
enum class Family {
  kLlama,   // LlamaForCausalLM, MistralForCausalLM: "llama"
  kBamboo,  // BambooForCausalLM (Bamboo, TurboSparse-Mistral): "bamboo", dReLU
  kFalcon,  // FalconForCausalLM, RWForCausalLM: "falcon"
  kQwen2,   // Qwen2ForCausalLM: "qwen2" (llama's layers, Q/K/V biases, NeoX RoPE)
  kQwen3,   // Qwen3ForCausalLM: "qwen3" (llama's layers, Q/K head norms, NeoX RoPE)
  kGemma2,  // Gemma2ForCausalLM: "gemma2" (post-norms, GeGLU, caps, windows)
  kGemma3,  // Gemma3ForCausalLM: "gemma3" (gemma2's layers with Q/K head norms)
  kPhi3,    // Phi3ForCausalLM: "phi3" (fused qkv_proj and gate_up_proj kept fused)
};

// The GGUF architecture a family becomes.
const char* FamilyArch(Family f);

struct Job {
  std::string src, dst;
  std::vector<int64_t> shape;  // expected source shape, outermost first
  DType type = DType::kF16;
  Reorder reorder = Reorder::kNone;
  int head_dim = 0;
  const SafeTensor* tensor = nullptr;  // set: this source, not the model's `src`
  int n_head = 0, n_kv = 0;            // kFalconQkv: the query and KV head counts
  // Added to every value (Gemma's norms multiply by 1 + w: written as 1 + w,
  // as llama.cpp's converter does, so the engine's RMSNorm * w applies them).
  float offset = 0.0f;
};

// The GGUF type of a matrix with rows of `cols`: the requested one when
// its rows are whole blocks, else f16.
DType MatrixType(DType want, int64_t cols);

// Every tensor of a model of `family`, in GGUF order; `has_head`: an
// lm_head of its own (else the embedding is the output).
std::vector<Job> TensorJobs(const HfConfig& c, const HfConvertOptions& o, bool has_head,
                            Family family);

}  // namespace pi
