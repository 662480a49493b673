// Writes hf_fuzz's seeds: a small valid safetensors file, config.jsons (llama,
// llama with Llama 3.1's rope_scaling, qwen2, gemma3, phi3, falcon, RW), the
// demo's tokenizer.model and two small BPE tokenizer.jsons (ByteLevel, Qwen2's
// split), each behind its selector byte.
#include <cstdint>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "tests/fuzz/seed_file.h"

namespace {

std::vector<uint8_t> With(uint8_t kind, const std::string& body) {
  std::vector<uint8_t> out = {kind};
  out.insert(out.end(), body.begin(), body.end());
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  std::string dir;
  if (!pi::SeedDirFromArgs(argc, argv, &dir)) return 2;
  // Two F32 tensors: a [2, 2] matrix and a [2] vector.
  const std::string header =
      R"({"a":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]},)"
      R"("b":{"dtype":"F16","shape":[2],"data_offsets":[16,20]},"__metadata__":{"format":"pt"}})";
  std::string st(8, '\0');
  for (int i = 0; i < 8; ++i) st[i] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
  st += header + std::string(20, '\x01');
  const std::string config =
      R"({"architectures":["LlamaForCausalLM"],"hidden_size":64,"intermediate_size":192,)"
      R"("num_hidden_layers":2,"num_attention_heads":4,"num_key_value_heads":2,)"
      R"("vocab_size":512,"hidden_act":"relu","rms_norm_eps":1e-5,"bos_token_id":1})";
  const std::string llama3 = config.substr(0, config.size() - 1) +
                             R"(,"rope_scaling":{"rope_type":"llama3","factor":8.0,)"
                             R"("low_freq_factor":1.0,"high_freq_factor":4.0,)"
                             R"("original_max_position_embeddings":8192}})";
  const std::string qwen2 =
      R"({"architectures":["Qwen2ForCausalLM"],"hidden_size":64,"intermediate_size":192,)"
      R"("num_hidden_layers":2,"num_attention_heads":4,"num_key_value_heads":2,)"
      R"("vocab_size":512,"hidden_act":"silu","tie_word_embeddings":true})";
  // Gemma 3's and Phi-3's fields: caps, windows, patterns, layer_types.
  const std::string gemma3 =
      R"({"architectures":["Gemma3ForCausalLM"],"hidden_size":64,"intermediate_size":192,)"
      R"("num_hidden_layers":2,"num_attention_heads":4,"num_key_value_heads":2,"head_dim":32,)"
      R"("vocab_size":512,"hidden_activation":"gelu_pytorch_tanh","query_pre_attn_scalar":32,)"
      R"("sliding_window":512,"sliding_window_pattern":6,"rope_local_base_freq":10000.0,)"
      R"("final_logit_softcapping":null,"layer_types":["sliding_attention","full_attention"]})";
  const std::string phi3 =
      R"({"architectures":["Phi3ForCausalLM"],"hidden_size":64,"intermediate_size":192,)"
      R"("num_hidden_layers":2,"num_attention_heads":4,"vocab_size":512,)"
      R"("sliding_window":2047,"partial_rotary_factor":1.0,"rope_scaling":null})";
  const std::string qwen2_bpe =
      R"({"model":{"type":"BPE","vocab":{"a":0,"b":1,"ab":2},"merges":["a b"]},)"
      R"("pre_tokenizer":{"type":"Sequence","pretokenizers":[{"type":"Split","pattern":)"
      R"({"Regex":"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?x"}},)"
      R"({"type":"ByteLevel"}]}})";
  // Falcon's two config dialects: FalconConfig's names, and configuration_RW.py's.
  const std::string falcon =
      R"({"architectures":["FalconForCausalLM"],"hidden_size":64,"num_hidden_layers":2,)"
      R"("num_attention_heads":4,"vocab_size":512,"new_decoder_architecture":true,)"
      R"("num_kv_heads":2,"activation":"relu","parallel_attn":true})";
  const std::string rw =
      R"({"architectures":["RWForCausalLM"],"model_type":"RefinedWeb","n_embed":64,)"
      R"("n_layer":2,"n_head":4,"n_head_kv":2,"vocab_size":512,"alibi":false,"bias":false})";
  const std::string bpe =
      R"({"model":{"type":"BPE","vocab":{"a":0,"b":1,"ab":2},"merges":["a b"]},)"
      R"("added_tokens":[{"id":3,"content":"<s>","special":true}],)"
      R"("pre_tokenizer":{"type":"ByteLevel","use_regex":true}})";
  std::ifstream spm_file(std::string(PI_SOURCE_DIR) + "/models/demo-tokenizer.model",
                         std::ios::binary);
  const std::string spm((std::istreambuf_iterator<char>(spm_file)),
                        std::istreambuf_iterator<char>());
  bool ok = pi::WriteSeedFile(dir + "/safetensors.bin", With(0, st));
  ok &= pi::WriteSeedFile(dir + "/config.bin", With(1, config));
  ok &= pi::WriteSeedFile(dir + "/config_llama3.bin", With(1, llama3));
  ok &= pi::WriteSeedFile(dir + "/config_qwen2.bin", With(1, qwen2));
  ok &= pi::WriteSeedFile(dir + "/bpe_qwen2.bin", With(3, qwen2_bpe));
  ok &= pi::WriteSeedFile(dir + "/config_gemma3.bin", With(1, gemma3));
  ok &= pi::WriteSeedFile(dir + "/config_phi3.bin", With(1, phi3));
  ok &= pi::WriteSeedFile(dir + "/config_falcon.bin", With(1, falcon));
  ok &= pi::WriteSeedFile(dir + "/config_rw.bin", With(1, rw));
  ok &= pi::WriteSeedFile(dir + "/spm.bin", With(2, spm.substr(0, 4000)));
  ok &= pi::WriteSeedFile(dir + "/bpe.bin", With(3, bpe));
  return ok ? 0 : 1;
}
