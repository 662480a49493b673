// HfConfig: what a Hugging Face model folder's config.json says about the
// model's shape — the fields a llama-family or falcon conversion needs, each
// checked (present where required, of the right type, in range).
#pragma once

#include <string>

#include "common/base/status.h"
#include "common/offline/rope_scaling.h"

namespace pi {

struct HfConfig {
  std::string architecture;  // architectures[0]: LlamaForCausalLM, MistralForCausalLM, ...
  std::string model_type;    // "bamboo" marks a dReLU model whatever its class
  int hidden_size = 0;
  int intermediate_size = 0;
  int num_hidden_layers = 0;
  int num_attention_heads = 0;
  int num_key_value_heads = 0;  // absent: num_attention_heads
  int head_dim = 0;             // absent: hidden_size / num_attention_heads
  int max_position_embeddings = 0;
  int vocab_size = 0;
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  // rope_scaling (llama family): "" none; "linear" (positions divided by
  // rope.factor); "llama3" (Llama 3.1: all of `rope`; rope_scaling.h).
  // Other types are refused naming theirs.
  std::string rope_scaling;
  Llama3RopeScaling rope;
  std::string hidden_act;  // relu, silu, gelu, ... (Gemma's hidden_activation)
  // Gemma 2/3 and Phi-3 (0: absent). Gemma's query_pre_attn_scalar (q.k is
  // scaled by its inverse square root), soft-caps (null: none), Gemma 3's
  // window pattern and local RoPE base; the attention window (Mistral and
  // Qwen2 configs name one too; their architectures do not use it).
  double query_pre_attn_scalar = 0;
  double attn_softcap = 0, final_softcap = 0;
  int sliding_window = 0;
  int sliding_window_pattern = 0;
  // layer_types (newer configs): 's' per "sliding_attention" layer, 'f' per
  // "full_attention"; empty when absent.
  std::string layer_types;
  double rope_local_base_freq = 0;
  bool tie_word_embeddings = false;
  int bos_token_id = -1, eos_token_id = -1;  // -1: not given
  // A second end-of-generation id (generation_config.json's eos list, e.g. a
  // chat model's end of turn), written as tokenizer.ggml.eot_token_id.
  int eot_token_id = -1;
  int n_eos_dropped = 0;  // further ids of that list, which no GGUF key holds

  // FalconForCausalLM (transformers' FalconConfig, its defaults and older key
  // names): intermediate_size is ffn_hidden_size (4 x hidden_size when
  // absent), hidden_act is "activation" (gelu), tied embeddings unless said
  // otherwise. num_key_value_heads is the fused query_key_value's KV groups as
  // Hugging Face splits it: num_kv_heads with new_decoder_architecture, 1 with
  // multi_query, else one per head. Variants pi's falcon cannot run (alibi,
  // bias, parallel_attn false, ...) are refused naming the key. RWForCausalLM
  // (configuration_RW.py's defaults: multi_query and parallel_attn false;
  // model_type RefinedWeb is the new decoder architecture) reads the same way.
  bool falcon = false;
  int falcon_norms = 1;  // 1: input_layernorm feeds both; 2: ln_attn and ln_mlp
  double layer_norm_eps = 1e-5;
};

// Parses config.json's text. Errors name the field.
Status ParseHfConfig(const std::string& text, HfConfig* out);

// Applies generation_config.json's text: its bos_token_id and eos_token_id
// (a number or a list) are what transformers' generate() stops on, so they
// take precedence over config.json's; a list's second id becomes
// eot_token_id. Sampling defaults there are not kept.
Status ApplyGenerationConfig(const std::string& text, HfConfig* c);

// A folder's small text file (config.json, tokenizer.json) read whole.
Status ReadHfFile(const std::string& path, std::string* out);

}  // namespace pi
