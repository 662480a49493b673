// HfConfig: what a Hugging Face model folder's config.json says about the
// model's shape — the fields a llama-family conversion needs, each checked
// (present where required, of the right type, in range).
#pragma once

#include <string>

#include "common/status.h"

namespace pi {

struct HfConfig {
  std::string architecture;  // architectures[0]: LlamaForCausalLM, MistralForCausalLM, ...
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
  std::string hidden_act;  // relu, silu, gelu, ...
  bool tie_word_embeddings = false;
  int bos_token_id = -1, eos_token_id = -1;  // -1: not given
};

// Parses config.json's text. Errors name the field.
Status ParseHfConfig(const std::string& text, HfConfig* out);

// A folder's small text file (config.json, tokenizer.json) read whole.
Status ReadHfFile(const std::string& path, std::string* out);

}  // namespace pi
