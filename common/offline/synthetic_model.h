// Synthetic llama and falcon models: GGUF files of any shape with seeded
// random weights, for tests and benchmarks that need a model of a given size,
// not a trained one (pi-synth is the command-line front end).
//
// arch "falcon" writes llama.cpp's falcon tensor set (llama_model.h): norms
// with biases (attn_norm, optional attn_norm_2, output_norm), the fused
// attn_qkv [n_embd, n_embd + 2 kv_dim] in the "jploski" layout (all Q rows,
// then K, then V), attn_output, ffn_up and ffn_down (or ffn_down_t); no gate,
// no rope.dimension_count (the loader's default: the head size).
//
// Every weight is a pure function of (seed, tensor name, row, column), so a
// file is reproducible bit for bit, tensors can be generated in any order and
// in parallel, and ffn_down_t is exactly the transpose of the ffn_down the
// same seed would give: a --down-t model computes the same function as the
// plain one (up to quantization, which runs along a different axis).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/base/status.h"
#include "common/format/gguf.h"
#include "kernels/dtype.h"

namespace pi {

struct SyntheticModelOptions {
  int n_vocab = 512;
  int n_embd = 256;
  int n_layer = 2;
  int n_head = 4;
  int n_head_kv = 0;  // 0: same as n_head
  int n_ff = 768;
  int n_ctx = 2048;          // <arch>.context_length
  DType type = DType::kF32;  // matrices: F32, F16, BF16, Q8_0 or Q4_0; norms are F32
  // general.architecture: llama | qwen2 (llama's tensors with Q/K/V biases,
  // NeoX RoPE) | qwen3 (with a per-head RMSNorm of Q and K instead of the
  // biases) | gemma2 (post_attention_norm and post_ffw_norm, the soft-caps
  // and sliding window below; activation gelu) | gemma3 (gemma2's tensors
  // with qwen3's head norms; the window, no caps) | phi3 (fused attn_qkv and
  // ffn_up = [gate rows; up rows], the window) | falcon.
  std::string arch = "llama";
  // pi.ffn_activation: silu | relu | drelu | gelu (gated), relu | gelu
  // (falcon, ungated).
  std::string activation = "silu";
  // gemma2, gemma3, phi3: <arch>.attention.sliding_window.
  int sliding_window = 4096;
  // gemma2: <arch>.attn_logit_softcapping and .final_logit_softcapping (its
  // converter writes Gemma 2's 50 and 30; tests take small ones so the caps
  // bite).
  float attn_softcap = 50.0f;
  float final_softcap = 30.0f;
  // false: no pi.ffn_activation key, so the loader's default rule decides;
  // the activation must then be that default (llama: relu with down_t, the
  // PWRI magic, else silu; falcon: relu with down_t, else gelu).
  bool activation_key = true;
  bool attn_norm_2 = false;  // falcon: a separate FFN norm blk.N.attn_norm_2 (as 40B)
  bool tied = false;         // no output.weight (the embedding is reused)
  bool down_t = false;       // ffn_down_t [n_embd, n_ff] instead of ffn_down, PWRI magic
  float rope_theta = 10000.0f;
  // RoPE scaling as llama.cpp's files carry it: "linear" writes
  // <arch>.rope.scaling.type linear and .factor rope_factor; "llama3"
  // (llama only) writes rope_freqs.weight, Llama 3.1's factors
  // (rope_scaling.h) for rope_factor and rope_original_ctx; "" none.
  std::string rope_scaling;
  float rope_factor = 8.0f;
  int rope_original_ctx = 8192;
  float norm_eps = 1e-5f;
  uint64_t seed = 1;
  // An SPM vocab: <unk>, <s>, </s>, <0x00>..<0xFF> (byte b is token 3 + b), "▁"
  // (token 259, so spaces decode as spaces), then <unused_N> up to n_vocab.
  bool byte_tokenizer = false;

  // Planted sparsity (relu/drelu only; 0 = off): every layer's FFN neurons
  // fire with power-law frequencies, p(rank r) = min(1, c (r + 1)^-alpha),
  // with c chosen so the mean firing rate is 1 - planted_sparsity, and the
  // ranks scattered over the neurons by the seed. See PlantedFiringRates.
  double planted_sparsity = 0.0;
  double planted_alpha = 1.0;
  // > 0: seeded random activation predictors of this rank (blk.N.fc1.weight
  // [n_embd -> rank], fc2 [rank -> n_ff], F32) — not trained: about half the
  // neurons pass at threshold 0, a different half for every input, which is
  // what tests of the predictor path need. Needs down_t (a sparse model).
  int predictor_rank = 0;
};

// The planted per-neuron firing probabilities of `layer` (n_ff values, mean
// 1 - sparsity, power law in rank, ranks permuted by seed and layer).
std::vector<double> PlantedFiringRates(const SyntheticModelOptions& o, int layer);

// Checks shapes and types (head geometry, block multiples, vocab size).
Status ValidateSyntheticModel(const SyntheticModelOptions& o);

// Adds the metadata and the tensors (generated while `w` writes) to `w`.
Status AddSyntheticModel(const SyntheticModelOptions& o, GgufWriter* w);

// Validates, builds and writes `path`; one tensor is in memory at a time.
// Fails before building anything when the weights would not fit on the disk.
Status WriteSyntheticModel(const SyntheticModelOptions& o, const std::string& path);

// The bytes of the weight matrices of a valid `o` (the file is a little
// larger: norms, metadata, padding); -1 when it overflows.
int64_t SyntheticModelWeightBytes(const SyntheticModelOptions& o);

// How sparsity is planted: residual dimension 0 is a constant "bias channel".
// Every token embedding has h[0] = 1, and no layer writes to it (row 0 of
// attn_output and of ffn_down, column 0 of ffn_down_t, are zero), so after
// each RMSNorm x[0] is large and positive. Only the gate (and drelu's up)
// reads it (column 0 of attn_q/k/v and relu's ffn_up are zero, so it does
// not swamp the rest of the model). Column 0 of ffn_gate row i (falcon, no
// gate: of ffn_up; norm biases are 0 there) is then
// a per-neuron bias, set to Φ^-1(p_i) / sqrt(n_embd): with the rest of the
// residual about as large as the bias channel, the gate's random part has
// standard deviation ~ x[0] / sqrt(n_embd), so neuron i fires with
// probability ~ p_i (drelu: gate and up each with sqrt(p_i)). The realized
// rates drift as the residual grows with depth; pi-profile measures them.

// The f32 value (before conversion to the file's type) of element (row, col)
// of the synthetic matrix `name` with `ne0` columns: uniform in
// [-sqrt(3 / fan_in), sqrt(3 / fan_in)], so its standard deviation is
// 1 / sqrt(fan_in). Norm weights ("*_norm.weight", "*_norm_2.weight") are
// uniform in [0.8, 1.2], norm biases ("*_norm.bias", "*_norm_2.bias") in
// [-0.1, 0.1].
// For ffn_down_t, ask for ffn_down's element (col, row) instead. Planted
// sparsity overrides the few elements described above.
//
// Exactly: key = SplitMix64(seed ^ FNV-1a-64(name)), i = row * ne0 + col,
// u = (SplitMix64(key + (i + 1) * 0x9e3779b97f4a7c15) >> 40) / 2^24, and the
// value is float(lo + (hi - lo) * u) computed in double, where SplitMix64 is
// the finalizer of Vigna's splitmix64 (constants 0xbf58476d1ce4e5b9,
// 0x94d049bb133111eb).
float SyntheticWeight(uint64_t seed, const std::string& name, int64_t ne0, int64_t fan_in,
                      int64_t row, int64_t col);

// general.file_type (llama.cpp's LLAMA_FTYPE) of a file whose matrices are `t`.
uint32_t GgufFileTypeOf(DType t);

}  // namespace pi
