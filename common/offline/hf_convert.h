// ConvertHfModel: a Hugging Face model folder (config.json, safetensors
// weights — one file or shards with their index —, tokenizer.model or
// tokenizer.json) to a GGUF file the engine runs (pi-convert is the command).
//
// Llama-family classes (LlamaForCausalLM, MistralForCausalLM) become
// general.architecture "llama": Q and K rows permuted from Hugging Face's
// rotate-half RoPE layout to llama.cpp's interleaved pairs, tied embeddings
// left to the loader, norms in f32, the FFN activation always written
// (pi.ffn_activation: config.json's hidden_act or --ffn-activation).
// BambooForCausalLM (Bamboo, TurboSparse-Mistral: hidden_act relu on gate and
// up both) becomes "bamboo" with drelu, as PowerInfer's converter names it.
// FalconForCausalLM becomes "falcon" as llama.cpp's loader takes it: the
// fused query_key_value regrouped to all Q, K, V ("jploski"), LayerNorm
// weights and biases, ln_attn/ln_mlp as attn_norm/attn_norm_2, no RoPE
// permutation (both sides rotate halves); variants the engine's falcon
// cannot run (alibi, biases, sequential attention) are refused. With
// down_t the FFN's down projection is stored as PowerInfer's ffn_down_t (a
// row per neuron) in a PWRI file: what sparse execution and
// pi-train-predictor take. Tensors stream one at a time from the mapped
// shards into the output, written atomically.
#pragma once

#include <string>

#include "common/base/status.h"
#include "kernels/dtype.h"

namespace pi {

struct HfConvertOptions {
  // f32, f16, bf16, q8_0 or q4_0 for the matrices (a matrix whose rows are
  // not whole blocks of a quantized type falls back to f16); norms are f32.
  DType outtype = DType::kF16;
  bool down_t = false;
  // relu | silu | drelu (llama-shaped), relu | gelu (falcon); empty: config.json's.
  std::string activation;
  std::string name;  // general.name; empty: the folder's name
  // The original PowerInfer's files, read through pi-pt-export (next to the
  // running binary; torch pickles loaded weights-only): predictors_dir's
  // model_{i}.pt (fc1, fc2; config.json's sparse_threshold) become each
  // layer's blk.i.fc1/fc2 (needs down_t); activations_dir's
  // activation_{i}.pt become OUT's statistics file (OUT.stats.gguf).
  std::string predictors_dir;
  std::string activations_dir;
};

Status ConvertHfModel(const std::string& dir, const HfConvertOptions& options,
                      const std::string& out_path);

}  // namespace pi
