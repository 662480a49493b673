#include "common/hf_convert.h"

#include <algorithm>
#include <cstdio>
#include <memory>
#include <vector>

#include "common/gguf.h"
#include "common/hf_config.h"
#include "common/hf_tokenizer.h"
#include "common/memory_limits.h"
#include "common/progress.h"
#include "common/safetensors.h"
#include "common/synthetic_model.h"
#include "kernels/cpu/quant.h"

namespace pi {
namespace {

// How a source tensor becomes a GGUF tensor.
enum class Reorder {
  kNone,
  kRope,       // rows permuted within heads of `head_dim` (rotate-half -> interleaved)
  kTranspose,  // [rows, cols] -> [cols, rows] (ffn_down -> ffn_down_t)
};

struct Job {
  std::string src, dst;
  std::vector<int64_t> shape;  // expected source shape, outermost first
  DType type = DType::kF16;
  Reorder reorder = Reorder::kNone;
  int head_dim = 0;
};

// Source row of destination row r for the rope permutation: within each head,
// destination rows 2i and 2i + 1 are source rows i and head_dim / 2 + i.
int64_t RopeSourceRow(int64_t r, int head_dim) {
  const int64_t head = r / head_dim, k = r % head_dim;
  return head * head_dim + (k % 2) * (head_dim / 2) + k / 2;
}

std::string ShapeString(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

// The GGUF type of a matrix with rows of `cols`: the requested one when
// its rows are whole blocks, else f16.
DType MatrixType(DType want, int64_t cols) {
  const int64_t block = GetDTypeInfo(static_cast<uint32_t>(want)).block_elems;
  return cols % block == 0 ? want : DType::kF16;
}

Status Fill(const SafeTensor& t, const Job& job, uint8_t* dst) {
  const int64_t rows = t.shape.size() == 2 ? t.shape[0] : 1;
  const int64_t cols = t.shape.back();
  const size_t src_row = static_cast<size_t>(cols) * (t.type == DType::kF32 ? 4 : 2);
  if (job.reorder == Reorder::kTranspose) {
    // The whole matrix in f32 (a layer's down projection), then its columns.
    PI_RETURN_IF_ERROR(CheckMemory("transposing " + job.src, rows * cols * 8));
    std::vector<float> all(static_cast<size_t>(rows * cols)), col(static_cast<size_t>(rows));
    for (int64_t r = 0; r < rows; ++r)
      DequantizeRow(t.type, t.data + r * src_row, &all[r * cols], cols);
    const int64_t dst_row = RowBytes(job.type, rows);
    for (int64_t c = 0; c < cols; ++c) {
      for (int64_t r = 0; r < rows; ++r) col[r] = all[r * cols + c];
      QuantizeRow(job.type, col.data(), dst + c * dst_row, rows);
    }
    return Status::Ok();
  }
  std::vector<float> row(static_cast<size_t>(cols));
  const int64_t dst_row = RowBytes(job.type, cols);
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t s = job.reorder == Reorder::kRope ? RopeSourceRow(r, job.head_dim) : r;
    DequantizeRow(t.type, t.data + s * src_row, row.data(), cols);
    QuantizeRow(job.type, row.data(), dst + r * dst_row, cols);
  }
  return Status::Ok();
}

Status ActivationOf(const HfConfig& c, const std::string& override_act, std::string* out) {
  if (!override_act.empty()) {
    *out = override_act;
  } else if (c.hidden_act == "relu" || c.hidden_act == "silu" || c.hidden_act == "drelu") {
    *out = c.hidden_act;
  } else if (c.hidden_act == "swish") {
    *out = "silu";
  } else {
    return Status::Error(
        "config.json: hidden_act '%s' is not one a llama-family model runs "
        "(relu, silu, drelu); --ffn-activation sets it",
        c.hidden_act.c_str());
  }
  if (*out != "relu" && *out != "silu" && *out != "drelu") {
    return Status::Error(
        "--ffn-activation %s: expected relu, silu or drelu for a llama-family model", out->c_str());
  }
  if (!override_act.empty() && override_act != c.hidden_act) {
    fprintf(stderr, "pi-convert: --ffn-activation %s overrides config.json's hidden_act '%s'\n",
            override_act.c_str(), c.hidden_act.c_str());
  }
  return Status::Ok();
}

// Every tensor of a llama-family model, in GGUF order.
std::vector<Job> LlamaJobs(const HfConfig& c, const HfConvertOptions& o, bool has_head) {
  const int64_t d = c.hidden_size, ff = c.intermediate_size, hd = c.head_dim;
  const int64_t q = c.num_attention_heads * hd, kv = c.num_key_value_heads * hd;
  auto matrix = [&](std::string src, std::string dst, int64_t rows, int64_t cols,
                    Reorder reorder = Reorder::kNone) {
    Job j{std::move(src), std::move(dst), {rows, cols}, DType::kF16, reorder, c.head_dim};
    j.type = MatrixType(o.outtype, reorder == Reorder::kTranspose ? rows : cols);
    return j;
  };
  auto norm = [&](std::string src, std::string dst) {
    return Job{std::move(src), std::move(dst), {d}, DType::kF32, Reorder::kNone, 0};
  };
  std::vector<Job> jobs;
  jobs.push_back(matrix("model.embed_tokens.weight", "token_embd.weight", c.vocab_size, d));
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    const std::string s = "model.layers." + std::to_string(l) + ".";
    const std::string g = "blk." + std::to_string(l) + ".";
    jobs.push_back(norm(s + "input_layernorm.weight", g + "attn_norm.weight"));
    jobs.push_back(
        matrix(s + "self_attn.q_proj.weight", g + "attn_q.weight", q, d, Reorder::kRope));
    jobs.push_back(
        matrix(s + "self_attn.k_proj.weight", g + "attn_k.weight", kv, d, Reorder::kRope));
    jobs.push_back(matrix(s + "self_attn.v_proj.weight", g + "attn_v.weight", kv, d));
    jobs.push_back(matrix(s + "self_attn.o_proj.weight", g + "attn_output.weight", d, q));
    jobs.push_back(norm(s + "post_attention_layernorm.weight", g + "ffn_norm.weight"));
    jobs.push_back(matrix(s + "mlp.gate_proj.weight", g + "ffn_gate.weight", ff, d));
    jobs.push_back(matrix(s + "mlp.up_proj.weight", g + "ffn_up.weight", ff, d));
    if (o.down_t) {
      jobs.push_back(
          matrix(s + "mlp.down_proj.weight", g + "ffn_down_t.weight", d, ff, Reorder::kTranspose));
    } else {
      jobs.push_back(matrix(s + "mlp.down_proj.weight", g + "ffn_down.weight", d, ff));
    }
  }
  jobs.push_back(norm("model.norm.weight", "output_norm.weight"));
  if (has_head) jobs.push_back(matrix("lm_head.weight", "output.weight", c.vocab_size, d));
  return jobs;
}

void SetLlamaMetadata(const HfConfig& c, const HfConvertOptions& o, const std::string& name,
                      const std::string& activation, GgufWriter* w) {
  w->Set("general.architecture", GgufValue::String("llama"));
  w->Set("general.name", GgufValue::String(name));
  w->Set("general.file_type", GgufValue::U32(GgufFileTypeOf(o.outtype)));
  w->Set("llama.context_length", GgufValue::U32(c.max_position_embeddings));
  w->Set("llama.embedding_length", GgufValue::U32(c.hidden_size));
  w->Set("llama.block_count", GgufValue::U32(c.num_hidden_layers));
  w->Set("llama.feed_forward_length", GgufValue::U32(c.intermediate_size));
  w->Set("llama.attention.head_count", GgufValue::U32(c.num_attention_heads));
  w->Set("llama.attention.head_count_kv", GgufValue::U32(c.num_key_value_heads));
  w->Set("llama.rope.dimension_count", GgufValue::U32(c.head_dim));
  w->Set("llama.rope.freq_base", GgufValue::F32(static_cast<float>(c.rope_theta)));
  w->Set("llama.attention.layer_norm_rms_epsilon",
         GgufValue::F32(static_cast<float>(c.rms_norm_eps)));
  w->Set("llama.vocab_size", GgufValue::U32(c.vocab_size));
  w->Set("pi.ffn_activation", GgufValue::String(activation));
  if (GetDTypeInfo(static_cast<uint32_t>(o.outtype)).block_elems > 1) {
    w->Set("general.quantization_version", GgufValue::U32(2));
  }
}

}  // namespace

Status ConvertHfModel(const std::string& dir, const HfConvertOptions& o,
                      const std::string& out_path) {
  if (o.outtype != DType::kF32 && o.outtype != DType::kF16 && o.outtype != DType::kBF16 &&
      o.outtype != DType::kQ8_0 && o.outtype != DType::kQ4_0) {
    return Status::Error("--outtype %s: expected f32, f16, bf16, q8_0 or q4_0",
                         DTypeName(o.outtype));
  }
  std::string text;
  PI_RETURN_IF_ERROR(ReadHfFile(dir + "/config.json", &text));
  HfConfig c;
  PI_RETURN_IF_ERROR(ParseHfConfig(text, &c).WithContext(dir));
  if (c.architecture != "LlamaForCausalLM" && c.architecture != "MistralForCausalLM") {
    return Status::Error(
        "%s: architecture %s is not one pi-convert knows (LlamaForCausalLM, "
        "MistralForCausalLM)",
        dir.c_str(), c.architecture.c_str());
  }
  if (c.head_dim * c.num_attention_heads != c.hidden_size) {
    return Status::Error("%s: head_dim %d x %d heads differs from hidden_size %d: not supported",
                         dir.c_str(), c.head_dim, c.num_attention_heads, c.hidden_size);
  }
  std::string activation;
  PI_RETURN_IF_ERROR(ActivationOf(c, o.activation, &activation));
  SafetensorsSet weights;
  PI_RETURN_IF_ERROR(weights.Open(dir));
  const bool has_head = weights.Find("lm_head.weight") != nullptr && !c.tie_word_embeddings;
  if (!has_head && !c.tie_word_embeddings) {
    return Status::Error("%s: no lm_head.weight and tie_word_embeddings is not set", dir.c_str());
  }
  const std::vector<Job> jobs = LlamaJobs(c, o, has_head);
  // Everything checked before a byte is written.
  int64_t total = 0;
  for (const Job& j : jobs) {
    const SafeTensor* t = weights.Find(j.src);
    if (!t) return Status::Error("%s: missing tensor '%s'", dir.c_str(), j.src.c_str());
    if (!t->is_float) {
      return Status::Error("%s: tensor '%s' is %s, expected F32, F16 or BF16", dir.c_str(),
                           j.src.c_str(), t->dtype.c_str());
    }
    if (t->shape != j.shape) {
      return Status::Error("%s: tensor '%s' has shape %s, config.json implies %s", dir.c_str(),
                           j.src.c_str(), ShapeString(t->shape).c_str(),
                           ShapeString(j.shape).c_str());
    }
    total += t->n_elements() * (j.type == DType::kF32 ? 4 : 2);
  }
  std::string name = o.name;
  if (name.empty()) {
    name = dir.substr(dir.find_last_of('/', dir.size() - 2) + 1);
    while (!name.empty() && name.back() == '/') name.pop_back();
  }
  GgufWriter w;
  w.SetSparseMagic(o.down_t);
  SetLlamaMetadata(c, o, name, activation, &w);
  PI_RETURN_IF_ERROR(AddHfTokenizer(dir, c, &w));
  auto bar = std::make_shared<ProgressBar>("pi-convert " + out_path, total, "B");
  auto done = std::make_shared<int64_t>(0);
  for (const Job& j : jobs) {
    const SafeTensor* t = weights.Find(j.src);
    std::vector<int64_t> ne(j.shape.rbegin(), j.shape.rend());  // ggml order
    if (j.reorder == Reorder::kTranspose) std::swap(ne[0], ne[1]);
    auto fill = [t, j, bar, done](void* dst) {
      const Status s = Fill(*t, j, static_cast<uint8_t*>(dst));
      *done += t->n_elements() * (j.type == DType::kF32 ? 4 : 2);
      bar->Update(*done);
      return s;
    };
    PI_RETURN_IF_ERROR(w.AddTensorFill(j.dst, j.type, ne, fill));
  }
  PI_RETURN_IF_ERROR(CheckDiskSpace("writing " + out_path, out_path, total));
  PI_RETURN_IF_ERROR(w.Write(out_path));
  bar->Finish();
  return Status::Ok();
}

}  // namespace pi
