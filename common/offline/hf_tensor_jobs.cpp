#include "common/offline/hf_tensor_jobs.h"

#include <utility>

namespace pi {

const char* FamilyArch(Family f) {
  switch (f) {
    case Family::kFalcon:
      return "falcon";
    case Family::kBamboo:
      return "bamboo";
    case Family::kQwen2:
      return "qwen2";
    case Family::kQwen3:
      return "qwen3";
    case Family::kGemma2:
      return "gemma2";
    case Family::kGemma3:
      return "gemma3";
    case Family::kPhi3:
      return "phi3";
    case Family::kLlama:
      break;
  }
  return "llama";
}

// The GGUF type of a matrix with rows of `cols`: the requested one when
// its rows are whole blocks, else f16.
DType MatrixType(DType want, int64_t cols) {
  const int64_t block = GetDTypeInfo(static_cast<uint32_t>(want)).block_elems;
  return cols % block == 0 ? want : DType::kF16;
}

namespace {

// Jobs in the order they are made: matrices in the requested type (f16 where
// a row is not whole blocks), vectors in f32.
struct JobList {
  const HfConfig& c;
  const HfConvertOptions& o;
  std::vector<Job> jobs;

  void Matrix(std::string src, std::string dst, int64_t rows, int64_t cols,
              Reorder reorder = Reorder::kNone) {
    Job j{std::move(src), std::move(dst), {rows, cols}, DType::kF16, reorder, c.head_dim};
    j.type = MatrixType(o.outtype, reorder == Reorder::kTranspose ? rows : cols);
    j.n_head = c.num_attention_heads;
    j.n_kv = c.num_key_value_heads;
    jobs.push_back(std::move(j));
  }
  // An f32 vector of n: norms, head norms, biases.
  void Vector(std::string src, std::string dst, int64_t n, float offset = 0.0f) {
    Job j{std::move(src), std::move(dst), {n}, DType::kF32, Reorder::kNone, 0};
    j.offset = offset;
    jobs.push_back(std::move(j));
  }
  // The down projection [d, ff] as ffn_down, or transposed as ffn_down_t.
  void Down(const std::string& src, const std::string& g) {
    const int64_t d = c.hidden_size, ff = c.intermediate_size;
    if (o.down_t) {
      Matrix(src, g + "ffn_down_t.weight", d, ff, Reorder::kTranspose);
    } else {
      Matrix(src, g + "ffn_down.weight", d, ff);
    }
  }
};

// Layer l of a llama-shaped model (s: its Hugging Face prefix, g: its GGUF
// one). Llama's Q and K rows go from Hugging Face's rotate-half order to
// llama.cpp's interleaved pairs; the others' stay (they run NeoX RoPE).
// qwen2 adds Q/K/V biases, qwen3 and gemma3 Q/K head norms; gemma's norms
// are 1 + w, with a norm after attention and after the FFN
// (post_attention_layernorm is gemma's post-attention norm, llama's FFN
// norm); phi3's qkv_proj and gate_up_proj stay fused.
void LayerJobs(Family family, const std::string& s, const std::string& g, JobList* out) {
  const HfConfig& c = out->c;
  const bool gemma = family == Family::kGemma2 || family == Family::kGemma3;
  const bool phi3 = family == Family::kPhi3;
  const float off = gemma ? 1.0f : 0.0f;
  const int64_t d = c.hidden_size, ff = c.intermediate_size, hd = c.head_dim;
  const int64_t q = c.num_attention_heads * hd, kv = c.num_key_value_heads * hd;
  out->Vector(s + "input_layernorm.weight", g + "attn_norm.weight", d, off);
  if (phi3) {
    out->Matrix(s + "self_attn.qkv_proj.weight", g + "attn_qkv.weight", q + 2 * kv, d);
  } else {
    const bool permute = family == Family::kLlama || family == Family::kBamboo;
    const Reorder rope = permute ? Reorder::kRope : Reorder::kNone;
    out->Matrix(s + "self_attn.q_proj.weight", g + "attn_q.weight", q, d, rope);
    out->Matrix(s + "self_attn.k_proj.weight", g + "attn_k.weight", kv, d, rope);
    out->Matrix(s + "self_attn.v_proj.weight", g + "attn_v.weight", kv, d);
  }
  const std::pair<const char*, int64_t> qkv[] = {{"q", q}, {"k", kv}, {"v", kv}};
  for (const auto& [x, n] : qkv) {
    if (family == Family::kQwen2) {
      out->Vector(s + "self_attn." + x + "_proj.bias", g + "attn_" + x + ".bias", n);
    } else if ((family == Family::kQwen3 || family == Family::kGemma3) &&
               std::string(x) != "v") {  // head norms: Q and K only
      out->Vector(s + "self_attn." + x + "_norm.weight", g + "attn_" + x + "_norm.weight", hd, off);
    }
  }
  out->Matrix(s + "self_attn.o_proj.weight", g + "attn_output.weight", d, q);
  if (gemma) {
    out->Vector(s + "post_attention_layernorm.weight", g + "post_attention_norm.weight", d, off);
    out->Vector(s + "pre_feedforward_layernorm.weight", g + "ffn_norm.weight", d, off);
  } else {
    out->Vector(s + "post_attention_layernorm.weight", g + "ffn_norm.weight", d);
  }
  if (phi3) {
    out->Matrix(s + "mlp.gate_up_proj.weight", g + "ffn_up.weight", 2 * ff, d);
  } else {
    out->Matrix(s + "mlp.gate_proj.weight", g + "ffn_gate.weight", ff, d);
    out->Matrix(s + "mlp.up_proj.weight", g + "ffn_up.weight", ff, d);
  }
  out->Down(s + "mlp.down_proj.weight", g);
  if (gemma) {
    out->Vector(s + "post_feedforward_layernorm.weight", g + "post_ffw_norm.weight", d, off);
  }
}

// Every tensor of a falcon model's layer l: llama.cpp's falcon names
// (attn_norm_2 for the FFN's own norm where there are two), the fused QKV
// regrouped, no RoPE permutation (the engine's falcon RoPE is rotate-half too).
void FalconLayerJobs(const std::string& s, const std::string& g, JobList* out) {
  const HfConfig& c = out->c;
  const int64_t d = c.hidden_size, ff = c.intermediate_size;
  const int64_t qkv = (c.num_attention_heads + 2 * c.num_key_value_heads) * c.head_dim;
  // LayerNorm: weight and bias, both f32.
  auto norm = [&](const std::string& src, const std::string& dst) {
    for (const char* part : {"weight", "bias"}) {
      out->Vector(src + "." + part, dst + "." + part, d);
    }
  };
  if (c.falcon_norms == 2) {
    norm(s + "ln_attn", g + "attn_norm");
    norm(s + "ln_mlp", g + "attn_norm_2");
  } else {
    norm(s + "input_layernorm", g + "attn_norm");
  }
  out->Matrix(s + "self_attention.query_key_value.weight", g + "attn_qkv.weight", qkv, d,
              Reorder::kFalconQkv);
  out->Matrix(s + "self_attention.dense.weight", g + "attn_output.weight", d, d);
  out->Matrix(s + "mlp.dense_h_to_4h.weight", g + "ffn_up.weight", ff, d);
  out->Down(s + "mlp.dense_4h_to_h.weight", g);
}

}  // namespace

std::vector<Job> TensorJobs(const HfConfig& c, const HfConvertOptions& o, bool has_head,
                            Family family) {
  const bool falcon = family == Family::kFalcon;
  const bool gemma = family == Family::kGemma2 || family == Family::kGemma3;
  const int64_t d = c.hidden_size;
  JobList list{c, o, {}};
  const std::string root = falcon ? "transformer." : "model.";
  list.Matrix(root + (falcon ? "word_embeddings.weight" : "embed_tokens.weight"),
              "token_embd.weight", c.vocab_size, d);
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    const std::string g = "blk." + std::to_string(l) + ".";
    if (falcon) {
      FalconLayerJobs("transformer.h." + std::to_string(l) + ".", g, &list);
    } else {
      LayerJobs(family, "model.layers." + std::to_string(l) + ".", g, &list);
    }
  }
  if (falcon) {
    list.Vector("transformer.ln_f.weight", "output_norm.weight", d);
    list.Vector("transformer.ln_f.bias", "output_norm.bias", d);
  } else {
    list.Vector("model.norm.weight", "output_norm.weight", d, gemma ? 1.0f : 0.0f);
  }
  if (has_head) list.Matrix("lm_head.weight", "output.weight", c.vocab_size, d);
  return list.jobs;
}

}  // namespace pi
