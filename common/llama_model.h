// LlamaModel: the llama family (LLaMA, Mistral, ReluLLaMA, ProSparse, Bamboo,
// TurboSparse) as views into a mapped GGUF file. Nothing is copied: every
// Tensor points into the mapping.
//
// Shapes are in ggml order, [ne0, ne1]: ne0 is the contiguous axis, so a
// [n_embd, n_ff] matrix is n_ff rows of n_embd weights (row i = neuron i).
//
// FFN activation (which of the three gated forms) is read from, in order:
//   1. "pi.ffn_activation" (string: "silu" | "relu" | "drelu"), which our
//      tools write;
//   2. the PWRI magic (PowerInfer's sparse files are ReLU models), where the
//      architecture "bamboo" means dReLU;
//   3. the architecture's default: llama/mistral -> silu, bamboo -> drelu.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/gguf.h"
#include "common/status.h"

namespace pi {

// The metadata key our writers set to name the FFN activation.
inline constexpr const char* kFfnActivationKey = "pi.ffn_activation";

enum class FfnActivation {
  kSilu,   // y = down(silu(gate x) * up x)         dense LLaMA, Mistral
  kRelu,   // y = down(relu(gate x) * up x)         ReluLLaMA, ProSparse (ReGLU)
  kDRelu,  // y = down(relu(gate x) * relu(up x))   Bamboo, TurboSparse
};
const char* FfnActivationName(FfnActivation a);
bool ParseFfnActivation(const std::string& s, FfnActivation* out);

struct LlamaConfig {
  std::string arch;  // general.architecture
  std::string name;  // general.name (may be empty)
  int n_vocab = 0;
  int n_embd = 0;  // d
  int n_layer = 0;
  int n_head = 0;
  int n_head_kv = 0;  // < n_head means grouped-query attention
  int head_dim = 0;   // n_embd / n_head unless key_length says otherwise
  int n_ff = 0;
  int n_ctx_train = 0;
  int rope_dims = 0;  // rotary dims per head (<= head_dim)
  float rope_theta = 10000.0f;
  float norm_eps = 1e-5f;
  FfnActivation activation = FfnActivation::kSilu;
  bool sparse_magic = false;      // file had the PWRI magic
  float sparse_threshold = 0.0f;  // powerinfer.sparse_threshold (0 when absent)

  int q_dim() const { return n_head * head_dim; }
  int kv_dim() const { return n_head_kv * head_dim; }
};

// A view of one tensor in the mapping. `rows` x `cols` for matrices.
struct Tensor {
  const TensorInfo* info = nullptr;
  const uint8_t* data = nullptr;
  DType type = DType::kF32;
  int64_t cols = 0;  // ne0
  int64_t rows = 1;  // ne1
  int64_t row_bytes = 0;

  bool present() const { return data != nullptr; }
  const uint8_t* row(int64_t r) const { return data + r * row_bytes; }
  int64_t nbytes() const { return rows * row_bytes; }
};

struct LlamaLayer {
  Tensor attn_norm;   // [n_embd]               f32
  Tensor wq;          // [n_embd, q_dim]        rows = q features (RoPE pairs adjacent)
  Tensor wk;          // [n_embd, kv_dim]
  Tensor wv;          // [n_embd, kv_dim]
  Tensor wo;          // [q_dim, n_embd]
  Tensor ffn_norm;    // [n_embd]               f32
  Tensor ffn_gate;    // [n_embd, n_ff]         row i = neuron i
  Tensor ffn_up;      // [n_embd, n_ff]         row i = neuron i
  Tensor ffn_down;    // [n_ff, n_embd]         row j = output feature j   (or absent)
  Tensor ffn_down_t;  // [n_embd, n_ff]         row i = neuron i's outputs (PowerInfer; or absent)
  Tensor fc1;         // [n_embd, rank]         predictor (PowerInfer; optional)
  Tensor fc2;         // [rank, n_ff]           predictor (PowerInfer; optional)
};

struct LlamaModel {
  std::unique_ptr<GgufFile> file;
  LlamaConfig config;
  Tensor token_embd;   // [n_embd, n_vocab]      row t = embedding of token t
  Tensor output_norm;  // [n_embd]               f32
  Tensor output;       // [n_embd, n_vocab]      = token_embd when tied
  bool tied_output = false;
  std::vector<LlamaLayer> layers;

  // Bytes of weights one decode step reads (every matrix once, one embedding row).
  int64_t DecodeWeightBytes() const;
  // All tensor bytes (the file's payload).
  int64_t TotalWeightBytes() const;
  int64_t ParameterCount() const;
};

// Whether sparse FFN modes can skip neurons in this model: it needs a
// ReLU-family activation and ffn_down_t in every layer. Otherwise *why says
// what is missing (the FFN then runs dense, which is still exact).
bool SupportsSparseFfn(const LlamaModel& model, std::string* why);

// Opens and validates a llama-family GGUF: architecture, hyper-parameters,
// every tensor's presence, shape and type. Errors name the tensor or key.
Status LoadLlamaModel(const std::string& path, LlamaModel* model);
// Same over an already opened file (takes ownership).
Status LoadLlamaModel(std::unique_ptr<GgufFile> file, LlamaModel* model);

}  // namespace pi
