#include "common/offline/hf_config.h"

#include <fstream>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <sstream>

namespace pi {
namespace {

using json = nlohmann::json;

// The head geometry every architecture needs; *out = c when it holds.
Status CheckHeads(const HfConfig& c, HfConfig* out) {
  if (c.num_attention_heads % c.num_key_value_heads != 0) {
    return Status::Error("config.json: %d attention heads are not a multiple of %d KV heads",
                         c.num_attention_heads, c.num_key_value_heads);
  }
  if (c.head_dim % 2 != 0)
    return Status::Error("config.json: an odd head dimension %d", c.head_dim);
  *out = c;
  return Status::Ok();
}

// A positive integer field (required, or absent leaving *out).
Status Int(const json& j, const char* key, bool required, int max, int* out) {
  if (!j.contains(key) || j[key].is_null()) {
    return required ? Status::Error("config.json: no \"%s\"", key) : Status::Ok();
  }
  if (!j[key].is_number_integer() || j[key].get<int64_t>() < 1 || j[key].get<int64_t>() > max) {
    return Status::Error("config.json: \"%s\" must be an integer from 1 to %d", key, max);
  }
  *out = static_cast<int>(j[key].get<int64_t>());
  return Status::Ok();
}

Status Float(const json& j, const char* key, double* out) {
  if (!j.contains(key) || j[key].is_null()) return Status::Ok();
  if (!j[key].is_number() || !(j[key].get<double>() > 0)) {
    return Status::Error("config.json: \"%s\" must be a positive number", key);
  }
  *out = j[key].get<double>();
  return Status::Ok();
}

// rope_scaling {rope_type (or type), factor, ...}: none ("default"), linear,
// or Llama 3.1's llama3 with its frequency factors and original context.
Status ParseRopeScaling(const json& j, HfConfig* c) {
  if (!j.contains("rope_scaling") || j["rope_scaling"].is_null()) return Status::Ok();
  const json& r = j["rope_scaling"];
  if (!r.is_object()) return Status::Invalid("config.json: \"rope_scaling\" is not an object");
  const char* key = r.contains("rope_type") ? "rope_type" : "type";
  if (!r.contains(key) || !r[key].is_string()) {
    return Status::Invalid("config.json: rope_scaling has no \"rope_type\" string");
  }
  const std::string type = r[key].get<std::string>();
  if (type == "default") return Status::Ok();
  if (type != "linear" && type != "llama3") {
    return Status::Unsupported(
        "config.json: rope_scaling type '%s' is not supported (linear, llama3)", type.c_str());
  }
  c->rope_scaling = type;
  Llama3RopeScaling& s = c->rope;
  s.factor = 0;
  PI_RETURN_IF_ERROR(Float(r, "factor", &s.factor).WithContext("rope_scaling"));
  if (!(s.factor >= 1.0 && s.factor <= 1e4)) {
    return Status::Invalid("config.json: rope_scaling.factor must be 1 to 1e4");
  }
  if (type == "llama3") {
    PI_RETURN_IF_ERROR(Float(r, "low_freq_factor", &s.low_freq_factor));
    PI_RETURN_IF_ERROR(Float(r, "high_freq_factor", &s.high_freq_factor));
    PI_RETURN_IF_ERROR(Float(r, "original_max_position_embeddings", &s.original_context));
    if (!(s.high_freq_factor > s.low_freq_factor)) {
      return Status::Invalid(
          "config.json: rope_scaling.high_freq_factor must exceed "
          "low_freq_factor");
    }
  }
  return Status::Ok();
}

bool IsTokenId(const json& v) {
  return v.is_number_integer() && v.get<int64_t>() >= 0 && v.get<int64_t>() <= (1 << 30);
}

// bos/eos: an id, or (some configs) a list whose first id is taken.
Status TokenId(const json& j, const char* key, int* out, const char* file = "config.json") {
  if (!j.contains(key) || j[key].is_null()) return Status::Ok();
  const json& v = j[key].is_array() && !j[key].empty() ? j[key][0] : j[key];
  if (!IsTokenId(v)) return Status::Error("%s: \"%s\" must be a token id", file, key);
  *out = static_cast<int>(v.get<int64_t>());
  return Status::Ok();
}

// An optional true/false field (absent leaves *out).
Status Bool(const json& j, const char* key, bool* out) {
  if (!j.contains(key) || j[key].is_null()) return Status::Ok();
  if (!j[key].is_boolean()) return Status::Error("config.json: \"%s\" is not true or false", key);
  *out = j[key].get<bool>();
  return Status::Ok();
}

// The first of `keys` config.json has, else the first: Falcon's older
// configs spell hidden_size, num_hidden_layers... n_embed, n_layer, ...
const char* FirstKey(const json& j, std::initializer_list<const char*> keys) {
  for (const char* k : keys) {
    if (j.contains(k) && !j[k].is_null()) return k;
  }
  return *keys.begin();
}

// A FalconConfig flag that pi's falcon graph cannot honour, set to `bad`.
Status RefuseFalconFlag(const json& j, const char* key, bool dflt, bool bad, const char* why) {
  bool v = dflt;
  PI_RETURN_IF_ERROR(Bool(j, key, &v));
  if (v == bad) {
    return Status::Error("config.json: \"%s\": %s is not supported (%s)", key,
                         bad ? "true" : "false", why);
  }
  return Status::Ok();
}

// FalconForCausalLM: transformers' FalconConfig, defaults included. pi's
// falcon graph (llama.cpp's) is LayerNorm with bias, rotary positions on the
// whole head (rotate-half), attention and FFN in parallel from one or two
// norms, no linear biases, an ungated FFN: anything else is refused here,
// naming the key, rather than converted into a file that computes another model.
//
// RWForCausalLM (the first Falcon releases' own code, configuration_RW.py:
// falcon-7b/40b as first published, PowerInfer's ReluFalcon) holds the same
// tensors; its defaults differ: multi_query and parallel_attn false, and
// model_type "RefinedWeb" (40B) means the new decoder architecture, whose
// layers are always parallel.
Status ParseFalconConfig(const json& j, HfConfig* c) {
  c->falcon = true;
  const bool rw = c->architecture == "RWForCausalLM";
  const bool rw_new = rw && c->model_type == "RefinedWeb";
  constexpr int kMaxDim = 1 << 20;
  PI_RETURN_IF_ERROR(
      Int(j, FirstKey(j, {"hidden_size", "n_embed"}), true, kMaxDim, &c->hidden_size));
  PI_RETURN_IF_ERROR(
      Int(j, FirstKey(j, {"num_hidden_layers", "n_layer"}), true, 4096, &c->num_hidden_layers));
  PI_RETURN_IF_ERROR(
      Int(j, FirstKey(j, {"num_attention_heads", "n_head"}), true, 4096, &c->num_attention_heads));
  PI_RETURN_IF_ERROR(Int(j, "vocab_size", true, 1 << 24, &c->vocab_size));
  c->intermediate_size = 4 * c->hidden_size;
  PI_RETURN_IF_ERROR(Int(j, "ffn_hidden_size", false, kMaxDim, &c->intermediate_size));
  c->max_position_embeddings = 2048;
  PI_RETURN_IF_ERROR(
      Int(j, "max_position_embeddings", false, 1 << 24, &c->max_position_embeddings));
  PI_RETURN_IF_ERROR(Float(j, "layer_norm_epsilon", &c->layer_norm_eps));
  PI_RETURN_IF_ERROR(Float(j, "rope_theta", &c->rope_theta));
  if (j.contains("rope_scaling") && !j["rope_scaling"].is_null()) {
    return Status::Error("config.json: rope_scaling is not supported yet");
  }
  PI_RETURN_IF_ERROR(RefuseFalconFlag(j, "alibi", false, true,
                                      "ALiBi positions; pi's falcon runs rotary positions"));
  PI_RETURN_IF_ERROR(
      RefuseFalconFlag(j, "bias", false, true, "linear biases; pi's falcon has none"));
  PI_RETURN_IF_ERROR(RefuseFalconFlag(
      j, "parallel_attn", rw ? rw_new : true, false,
      "attention then FFN in sequence; pi's falcon runs them in parallel from the same input"));
  PI_RETURN_IF_ERROR(RefuseFalconFlag(j, "apply_residual_connection_post_layernorm", false, true,
                                      "the residual taken after the norm"));
  bool new_arch = rw_new, multi_query = !rw;
  PI_RETURN_IF_ERROR(Bool(j, "new_decoder_architecture", &new_arch));
  PI_RETURN_IF_ERROR(Bool(j, "multi_query", &multi_query));
  int kv = c->num_attention_heads;
  PI_RETURN_IF_ERROR(Int(j, FirstKey(j, {"num_kv_heads", "n_head_kv"}), false, 4096, &kv));
  // As FalconAttention splits query_key_value: the KV heads only count with
  // the new decoder architecture; the old one is multi-query or one per head.
  c->num_key_value_heads = new_arch ? kv : (multi_query ? 1 : c->num_attention_heads);
  c->falcon_norms = 1;
  if (new_arch) {
    c->falcon_norms = 2;  // transformers' default for num_ln_in_parallel_attn
    PI_RETURN_IF_ERROR(Int(j, "num_ln_in_parallel_attn", false, 2, &c->falcon_norms));
  }
  c->hidden_act = "gelu";
  if (j.contains("activation")) {
    if (!j["activation"].is_string()) {
      return Status::Error("config.json: \"activation\" is not a string");
    }
    c->hidden_act = j["activation"].get<std::string>();
  }
  c->tie_word_embeddings = true;  // PretrainedConfig's default: FalconConfig sets none
  PI_RETURN_IF_ERROR(Bool(j, "tie_word_embeddings", &c->tie_word_embeddings));
  PI_RETURN_IF_ERROR(TokenId(j, "bos_token_id", &c->bos_token_id));
  PI_RETURN_IF_ERROR(TokenId(j, "eos_token_id", &c->eos_token_id));
  if (c->hidden_size % c->num_attention_heads != 0) {
    return Status::Error("config.json: hidden_size %d is not a multiple of %d heads",
                         c->hidden_size, c->num_attention_heads);
  }
  c->head_dim = c->hidden_size / c->num_attention_heads;
  return Status::Ok();
}

// Gemma 2/3's and Phi-3's fields (HfConfig), each optional; sliding_window
// only when use_sliding_window is not false (Qwen2's configs).
Status ParseGemmaPhiFields(const json& j, HfConfig* c) {
  PI_RETURN_IF_ERROR(Float(j, "query_pre_attn_scalar", &c->query_pre_attn_scalar));
  PI_RETURN_IF_ERROR(Float(j, "attn_logit_softcapping", &c->attn_softcap));
  PI_RETURN_IF_ERROR(Float(j, "final_logit_softcapping", &c->final_softcap));
  PI_RETURN_IF_ERROR(Float(j, "rope_local_base_freq", &c->rope_local_base_freq));
  PI_RETURN_IF_ERROR(Int(j, "sliding_window_pattern", false, 4096, &c->sliding_window_pattern));
  bool use_window = true;
  PI_RETURN_IF_ERROR(Bool(j, "use_sliding_window", &use_window));
  if (use_window) PI_RETURN_IF_ERROR(Int(j, "sliding_window", false, 1 << 30, &c->sliding_window));
  if (j.contains("layer_types") && !j["layer_types"].is_null()) {
    const json& t = j["layer_types"];
    if (!t.is_array()) return Status::Error("config.json: \"layer_types\" is not a list");
    for (const json& x : t) {
      const std::string v = x.is_string() ? x.get<std::string>() : "";
      if (v != "sliding_attention" && v != "full_attention") {
        return Status::Unsupported(
            "config.json: layer_types holds '%s' (sliding_attention, full_attention)", v.c_str());
      }
      c->layer_types += v == "sliding_attention" ? 's' : 'f';
    }
  }
  double partial = 1.0;
  PI_RETURN_IF_ERROR(Float(j, "partial_rotary_factor", &partial));
  if (partial != 1.0) {
    return Status::Unsupported("config.json: partial_rotary_factor %g: not supported", partial);
  }
  return Status::Ok();
}

}  // namespace

Status ApplyGenerationConfig(const std::string& text, HfConfig* c) {
  const json j = json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    return Status::Error("generation_config.json is not a JSON object");
  }
  constexpr const char* kFile = "generation_config.json";
  PI_RETURN_IF_ERROR(TokenId(j, "bos_token_id", &c->bos_token_id, kFile));
  if (!j.contains("eos_token_id") || j["eos_token_id"].is_null()) return Status::Ok();
  PI_RETURN_IF_ERROR(TokenId(j, "eos_token_id", &c->eos_token_id, kFile));
  const json& eos = j["eos_token_id"];
  if (eos.is_array() && eos.size() > 1) {
    if (!IsTokenId(eos[1])) {
      return Status::Error("%s: \"eos_token_id\"[1] must be a token id", kFile);
    }
    c->eot_token_id = static_cast<int>(eos[1].get<int64_t>());
    c->n_eos_dropped = static_cast<int>(eos.size()) - 2;
  }
  return Status::Ok();
}

Status ReadHfFile(const std::string& path, std::string* out) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return Status::Error("%s: cannot read", path.c_str());
  std::stringstream s;
  s << f.rdbuf();
  if (f.bad()) return Status::Error("%s: read error", path.c_str());
  *out = s.str();
  return Status::Ok();
}

Status ParseHfConfig(const std::string& text, HfConfig* out) {
  const json j = json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return Status::Error("config.json is not a JSON object");
  HfConfig c;
  if (!j.contains("architectures") || !j["architectures"].is_array() ||
      j["architectures"].empty() || !j["architectures"][0].is_string()) {
    return Status::Error("config.json: no \"architectures\" list naming the model class");
  }
  c.architecture = j["architectures"][0].get<std::string>();
  if (j.contains("model_type") && j["model_type"].is_string()) {
    c.model_type = j["model_type"].get<std::string>();
  }
  if (c.architecture == "FalconForCausalLM" || c.architecture == "RWForCausalLM") {
    PI_RETURN_IF_ERROR(ParseFalconConfig(j, &c));
    return CheckHeads(c, out);
  }
  constexpr int kMaxDim = 1 << 20;
  PI_RETURN_IF_ERROR(Int(j, "hidden_size", true, kMaxDim, &c.hidden_size));
  PI_RETURN_IF_ERROR(Int(j, "intermediate_size", true, kMaxDim, &c.intermediate_size));
  PI_RETURN_IF_ERROR(Int(j, "num_hidden_layers", true, 4096, &c.num_hidden_layers));
  PI_RETURN_IF_ERROR(Int(j, "num_attention_heads", true, 4096, &c.num_attention_heads));
  c.num_key_value_heads = c.num_attention_heads;
  PI_RETURN_IF_ERROR(Int(j, "num_key_value_heads", false, 4096, &c.num_key_value_heads));
  c.head_dim = c.hidden_size / c.num_attention_heads;
  PI_RETURN_IF_ERROR(Int(j, "head_dim", false, kMaxDim, &c.head_dim));
  PI_RETURN_IF_ERROR(Int(j, "vocab_size", true, 1 << 24, &c.vocab_size));
  c.max_position_embeddings = 2048;
  PI_RETURN_IF_ERROR(Int(j, "max_position_embeddings", false, 1 << 24, &c.max_position_embeddings));
  PI_RETURN_IF_ERROR(Float(j, "rms_norm_eps", &c.rms_norm_eps));
  PI_RETURN_IF_ERROR(Float(j, "rope_theta", &c.rope_theta));
  PI_RETURN_IF_ERROR(ParseRopeScaling(j, &c));
  c.hidden_act = "silu";
  // Gemma's configs name it hidden_activation (hidden_act there is legacy).
  for (const char* key : {"hidden_act", "hidden_activation"}) {
    if (!j.contains(key) || j[key].is_null()) continue;
    if (!j[key].is_string()) return Status::Error("config.json: \"%s\" is not a string", key);
    c.hidden_act = j[key].get<std::string>();
  }
  PI_RETURN_IF_ERROR(ParseGemmaPhiFields(j, &c));
  if (j.contains("tie_word_embeddings")) {
    if (!j["tie_word_embeddings"].is_boolean()) {
      return Status::Error("config.json: \"tie_word_embeddings\" is not true or false");
    }
    c.tie_word_embeddings = j["tie_word_embeddings"].get<bool>();
  }
  PI_RETURN_IF_ERROR(TokenId(j, "bos_token_id", &c.bos_token_id));
  PI_RETURN_IF_ERROR(TokenId(j, "eos_token_id", &c.eos_token_id));
  return CheckHeads(c, out);
}

}  // namespace pi
