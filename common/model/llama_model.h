// LlamaModel: the llama family (LLaMA, Llama 3, Mistral, ReluLLaMA, ProSparse,
// Bamboo, TurboSparse), Qwen2/Qwen3, Gemma 2/3, Phi-3 and Falcon (dense Falcon,
// ReluFalcon) as views into a mapped GGUF file. Nothing is copied: every
// Tensor points into the mapping.
//
// Shapes are in ggml order, [ne0, ne1]: ne0 is the contiguous axis, so a
// [n_embd, n_ff] matrix is n_ff rows of n_embd weights (row i = neuron i).
//
// How the architectures differ (llama.cpp's llm_build_llama / llm_build_falcon):
//
//               llama, bamboo                    falcon
//   norm        RMSNorm * w                      LayerNorm * w + b
//   q, k, v     attn_q, attn_k, attn_v           attn_qkv, fused, "jploski" layout:
//                                                all Q rows, then K, then V (bound
//                                                here as row-range views wq, wk, wv)
//   RoPE        normal (adjacent pairs)          NeoX (pairs (i, i + rot/2))
//   FFN         down(act(gate x, up x))          down(act(up x)), no gate
//   residual    h += attn(norm h);               h += attn(norm h) + ffn(norm2 h),
//               h += ffn(ffn_norm h)             both from the layer input h
//                                                (norm2: attn_norm_2 in 40B, else
//                                                attn_norm itself)
//
// The others are llama's layers with (llama.cpp's llm_build_qwen2/qwen3/
// gemma2/gemma3/phi3):
//   qwen2   Q/K/V biases; NeoX RoPE
//   qwen3   each Q and K head RMS-normed (attn_q_norm, attn_k_norm); NeoX RoPE
//   gemma2  embeddings times sqrt(n_embd); h += post_norm(attn(norm h)), the
//           same for the FFN (attn_post_norm, ffn_post_norm); GELU-gated FFN;
//           attention scores and logits soft-capped (cap * tanh(s / cap));
//           even layers attend to a sliding window; NeoX RoPE; tied output
//   gemma3  gemma2 with qwen3's head norms instead of score capping; five of
//           every six layers slide, and rotate with base 10000 unscaled
//   phi3    fused attn_qkv (Q, K, V rows) and ffn_up (gate rows, then up rows)
//           bound as row-range views; NeoX RoPE; every layer slides
//
// FFN activation is read from, in order:
//   1. "pi.ffn_activation" (string: "silu" | "relu" | "drelu" | "gelu"), which
//      our tools write; for falcon (no gate) only relu and gelu;
//   2. the PWRI magic (PowerInfer's sparse files are ReLU models), where the
//      architecture "bamboo" means dReLU and "falcon" means ungated ReLU;
//   3. the architecture's default: llama/mistral -> silu, bamboo -> drelu,
//      falcon -> gelu.
#pragma once

#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/base/status.h"
#include "common/format/gguf.h"

namespace pi {

// The metadata key our writers set to name the FFN activation.
inline constexpr const char* kFfnActivationKey = "pi.ffn_activation";

// The gated forms read ffn_gate and ffn_up; the ungated ones (falcon) only
// ffn_up. Separate values rather than a "gated" flag beside kRelu, so code
// that only knows the gated forms (e.g. a GPU kernel's switch) rejects an
// ungated model instead of reading a gate that is not there.
enum class FfnActivation {
  kSilu,    // y = down(silu(gate x) * up x)         dense LLaMA, Mistral
  kRelu,    // y = down(relu(gate x) * up x)         ReluLLaMA, ProSparse (ReGLU)
  kDRelu,   // y = down(relu(gate x) * relu(up x))   Bamboo, TurboSparse
  kReluUp,  // y = down(relu(up x))                  ReluFalcon (PowerInfer's "SEQ")
  kGeluUp,  // y = down(gelu(up x))                  dense Falcon (tanh form, as ggml_gelu)
  kGelu,    // y = down(gelu(gate x) * up x)         Gemma 2/3 (GeGLU, the same tanh form)
};
// The function's name as pi.ffn_activation spells it: silu, relu, drelu,
// gelu; relu and gelu for the ungated forms too (the architecture says
// whether there is a gate).
const char* FfnActivationName(FfnActivation a);
// "silu" | "relu" | "drelu" | "gelu" for an FFN with (`gated`) or without a
// gate projection (without: relu, gelu); false for a name or a combination
// that does not exist.
bool ParseFfnActivation(const std::string& s, bool gated, FfnActivation* out);
// Whether the FFN has a gate projection (ffn_gate).
bool FfnIsGated(FfnActivation a);
// Whether a silent neuron's activation is exactly zero (the ReLU forms), so
// that skipping it is exact: what sparse execution needs.
bool FfnIsReluFamily(FfnActivation a);

enum class NormKind { kRms, kLayer };    // RMSNorm * w | LayerNorm * w + b
enum class RopeKind { kNormal, kNeox };  // ops.h: RopeNormal | RopeNeox

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
  // Linear RoPE scaling: positions times this (1 / rope.scaling.factor).
  float rope_freq_scale = 1.0f;
  // rope_freqs.weight (Llama 3.1's frequency-dependent scaling): pair i's
  // angle divided by [i], rope_dims / 2 of them; empty: none.
  std::vector<float> rope_freq_factors;
  float norm_eps = 1e-5f;  // layer_norm_rms_epsilon, or falcon's layer_norm_epsilon
  FfnActivation activation = FfnActivation::kSilu;
  NormKind norm = NormKind::kRms;
  RopeKind rope = RopeKind::kNormal;
  // Falcon: attention and FFN both read the layer input and both add into it
  // (h += attn(norm h) + ffn(norm2 h)); the predictor reads that input too.
  bool parallel_residual = false;
  bool sparse_magic = false;      // file had the PWRI magic
  float sparse_threshold = 0.0f;  // powerinfer.sparse_threshold (0 when absent)
  // Gemma's: token embedding rows times this (sqrt(n_embd)); 1 elsewhere.
  float embd_scale = 1.0f;
  // q.k is multiplied by this; 0: 1/sqrt(head_dim). Gemma 2/3 27B's is
  // 1/sqrt(n_embd / n_head), as llama.cpp has it (their query_pre_attn_scalar).
  float attn_scale = 0.0f;
  // Soft-capping, s -> cap * tanh(s / cap), of attention scores (after the
  // scale) and of the output logits (Gemma 2); 0: none.
  float attn_softcap = 0.0f;
  float final_softcap = 0.0f;
  // Sliding-window attention: a query at position p reads only keys at
  // positions > p - n_swa, in the layers IsSlidingLayer names; 0: none.
  int n_swa = 0;
  // llama.cpp's pattern: layer il slides when swa_pattern is 0 (all of them,
  // phi3) or il % swa_pattern < swa_pattern - 1 (gemma2: 2, gemma3: 6).
  int swa_pattern = 0;
  // Gemma 3: sliding layers rotate with this base and no scaling; 0: they
  // rotate as the others.
  float rope_theta_swa = 0.0f;
  // attn_post_norm and ffn_post_norm in every layer (Gemma 2/3).
  bool post_norms = false;

  int q_dim() const { return n_head * head_dim; }
  int kv_dim() const { return n_head_kv * head_dim; }
  float QueryScale() const {
    return attn_scale > 0.0f ? attn_scale : 1.0f / std::sqrt(static_cast<float>(head_dim));
  }
  bool IsSlidingLayer(int il) const {
    return n_swa > 0 && (swa_pattern == 0 || il % swa_pattern < swa_pattern - 1);
  }
  // Whether layer il rotates with its own base (gemma3's sliding layers).
  bool HasLocalRope(int il) const { return rope_theta_swa > 0.0f && IsSlidingLayer(il); }
  // The first of the features above that a backend without them would get
  // wrong ("embedding scale", ...), or null when the model has none.
  const char* GemmaFeature() const;
};

// A view of one tensor in the mapping. `rows` x `cols` for matrices.
struct Tensor {
  const TensorInfo* info = nullptr;  // the file's tensor (a view's: the one it is part of)
  const uint8_t* data = nullptr;
  DType type = DType::kF32;
  int64_t cols = 0;  // ne0
  int64_t rows = 1;  // ne1
  int64_t row_bytes = 0;
  // The same matrix repacked for the CPU's matrix kernels
  // (kernels/cpu/weight_panels.h; common/model/weight_repack.h makes it), or null.
  // `data` stays valid: whatever reads single rows reads it.
  const uint8_t* panels = nullptr;

  bool present() const { return data != nullptr; }
  const uint8_t* row(int64_t r) const { return data + r * row_bytes; }
  int64_t nbytes() const { return rows * row_bytes; }
};

struct LlamaLayer {
  Tensor attn_norm;       // [n_embd]               f32
  Tensor attn_norm_b;     // [n_embd]               f32  LayerNorm bias (falcon; else absent)
  Tensor wqkv;            // [n_embd, q_dim + 2 kv_dim]  falcon's fused attn_qkv (else absent)
  Tensor wq;              // [n_embd, q_dim]        rows = q features (llama: RoPE pairs
                          //                        adjacent; falcon: rows [0, q_dim) of wqkv)
  Tensor wk;              // [n_embd, kv_dim]       falcon: rows [q_dim, q_dim + kv_dim) of wqkv
  Tensor wv;              // [n_embd, kv_dim]       falcon: the last kv_dim rows of wqkv
  Tensor bq, bk, bv;      // [q_dim], [kv_dim] x 2  f32  Q/K/V biases (qwen2; else absent)
  Tensor q_norm;          // [head_dim]             f32  RMSNorm of each Q head (qwen3; else absent)
  Tensor k_norm;          // [head_dim]             f32  the same for each K head
  Tensor wo;              // [q_dim, n_embd]
  Tensor ffn_norm;        // [n_embd]               f32  falcon: attn_norm_2 (40B), else the
                          //                        same view as attn_norm (7B shares it)
  Tensor ffn_norm_b;      // [n_embd]               f32  falcon: its bias (else absent)
  Tensor attn_post_norm;  // [n_embd]            f32  RMSNorm of attention's output (gemma)
  Tensor ffn_post_norm;   // [n_embd]            f32  the same of the FFN's output (gemma)
  Tensor ffn_gate;        // [n_embd, n_ff]         row i = neuron i (absent without a gate;
                          //                        phi3: rows [0, n_ff) of the fused ffn_up)
  Tensor ffn_up;          // [n_embd, n_ff]         row i = neuron i (phi3: rows [n_ff, 2 n_ff))
  Tensor ffn_down;        // [n_ff, n_embd]         row j = output feature j   (or absent)
  Tensor ffn_down_t;  // [n_embd, n_ff]         row i = neuron i's outputs (PowerInfer; or absent)
  // Transposed copies for --sparse teal's column-sparse products (row j =
  // input j's weights to every output; weight_transpose.h), else absent.
  Tensor wq_t, wk_t, wv_t, wo_t, ffn_gate_t;
  Tensor fc1;  // [n_embd, rank]         predictor (PowerInfer; optional)
  Tensor fc2;  // [rank, n_ff]           predictor (PowerInfer; optional)
};

struct LlamaModel {
  std::unique_ptr<GgufFile> file;
  LlamaConfig config;
  Tensor token_embd;     // [n_embd, n_vocab]      row t = embedding of token t
  Tensor output_norm;    // [n_embd]               f32
  Tensor output_norm_b;  // [n_embd]               f32  LayerNorm bias (falcon; else absent)
  Tensor output;         // [n_embd, n_vocab]      = token_embd when tied
  bool tied_output = false;
  std::vector<LlamaLayer> layers;
  // The buffers Tensor::panels point into (common/model/weight_repack.h).
  struct FreeBuffer {
    void operator()(uint8_t* p) const;
  };
  std::vector<std::unique_ptr<uint8_t, FreeBuffer>> repacked;

  // Bytes of weights one decode step reads (every matrix once, one embedding row).
  int64_t DecodeWeightBytes() const;
  // All tensor bytes (the file's payload).
  int64_t TotalWeightBytes() const;
  int64_t ParameterCount() const;
};

// The model's normalization of one row of n_embd: RMSNorm * w, or (falcon)
// LayerNorm * w + b, b absent meaning 0. out may alias x.
void NormalizeRow(const LlamaConfig& c, const Tensor& w, const Tensor& b, const float* x,
                  float* out);

// RopeAngles (kernels/cpu/ops.h) for position `pos` with the model's base,
// scaling and factors: what the CPU and every device rotate by.
void RopeAnglesOf(const LlamaConfig& c, int pos, float* cs);
// The same for layer il: gemma3's sliding layers rotate with their own base.
void RopeAnglesOf(const LlamaConfig& c, int il, int pos, float* cs);

// Token `token`'s embedding row as floats (times embd_scale).
void EmbedToken(const LlamaModel& m, int token, float* out);
// Output soft-capping of n logits in place (nothing without one).
void SoftCapLogits(const LlamaConfig& c, float* logits, int64_t n);
// h[i] += x[i] for n_embd values — or, with a post-norm w, h += RMSNorm(x) * w,
// x normalized in place first.
void AddResidual(const LlamaConfig& c, const Tensor& post_norm, float* x, float* h);

// Whether sparse FFN modes can skip neurons in this model: it needs a
// ReLU-family activation and ffn_down_t in every layer. Otherwise *why says
// what is missing (the FFN then runs dense, which is still exact).
bool SupportsSparseFfn(const LlamaModel& model, std::string* why);
// Whether the FFN can be cut by neuron across shards (the hot/cold split,
// cpu workers): SupportsSparseFfn, or with `gate_thresholds` (--sparse cats
// decides which neurons pass) any activation with ffn_down_t.
bool SupportsNeuronSplit(const LlamaModel& model, bool gate_thresholds, std::string* why);
// Whether the model can take --sparse cats (any activation; each computed
// neuron's down row must be a row: ffn_down_t), else why not, naming the
// command that writes ffn_down_t.
Status CheckCatsSupport(const LlamaModel& model);

// Opens and validates a llama-family or falcon GGUF: architecture, hyper-parameters,
// every tensor's presence, shape and type. Errors name the tensor or key.
Status LoadLlamaModel(const std::string& path, LlamaModel* model);
// Same over an already opened file (takes ownership).
Status LoadLlamaModel(std::unique_ptr<GgufFile> file, LlamaModel* model);

// --ffn-activation: replaces the loaded model's FFN activation by `name`
// (silu | relu | drelu | gelu, as pi.ffn_activation spells them) — for a file
// that names none (llama.cpp's converter writes no key) or the wrong one.
// *previous: what the file said. An unknown name, or a form the
// architecture lacks (gelu with a gate, silu without), is an error naming
// the forms it has.
Status OverrideFfnActivation(const std::string& name, LlamaModel* model, FfnActivation* previous);

}  // namespace pi
