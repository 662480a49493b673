#include "common/offline/hf_convert.h"

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <vector>

#include "common/base/executable_path.h"
#include "common/base/memory_limits.h"
#include "common/base/progress.h"
#include "common/format/gguf.h"
#include "common/model/llama_model.h"
#include "common/offline/hf_config.h"
#include "common/offline/hf_tensor_jobs.h"
#include "common/offline/hf_tokenizer.h"
#include "common/offline/rope_scaling.h"
#include "common/offline/safetensors.h"
#include "common/offline/synthetic_model.h"
#include "common/plan/activation_stats.h"
#include "kernels/cpu/quant.h"

namespace pi {
namespace {

// The original's torch files as pi-pt-export wrote them (safetensors), mapped.
struct PtExport {
  std::unique_ptr<MappedRegion> region;
  std::vector<SafeTensor> tensors;
  std::map<std::string, const SafeTensor*> by_name;
};

// Runs pi-pt-export (next to this binary) `flag dir` into a temporary file
// beside out_path, then maps and parses it (the file is removed at once:
// the mapping keeps it).
Status RunPtExport(const char* flag, const std::string& dir, const std::string& out_path,
                   PtExport* out) {
  const std::string helper = PathNextToExecutable("pi-pt-export");
  const std::string tmp = out_path + ".pt-export.tmp";
  std::vector<std::string> args = {helper, flag, dir, "-o", tmp};
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  if (posix_spawn(&pid, helper.c_str(), nullptr, nullptr, argv.data(), environ) != 0) {
    return Status::Error("%s: cannot run %s (it reads the torch files)", flag, helper.c_str());
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    unlink(tmp.c_str());
    return Status::Error("%s %s: pi-pt-export failed (its message is above)", flag, dir.c_str());
  }
  Status s = MappedRegion::Map(tmp, &out->region);
  unlink(tmp.c_str());
  PI_RETURN_IF_ERROR(s);
  PI_RETURN_IF_ERROR(ParseSafetensors(out->region->data(), out->region->size(), &out->tensors));
  for (const SafeTensor& t : out->tensors) out->by_name[t.name] = &t;
  return Status::Ok();
}

// The predictors' tensors as jobs (fc1 [H, n_embd], fc2 [n_ff, H] per layer)
// and their threshold (the folder's config.json, else 0).
Status PredictorJobs(const HfConfig& c, const HfConvertOptions& o, const PtExport& p,
                     std::vector<Job>* jobs, float* threshold) {
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    const std::string g = "blk." + std::to_string(l) + ".";
    const auto fc1 = p.by_name.find(g + "fc1.weight"), fc2 = p.by_name.find(g + "fc2.weight");
    if (fc1 == p.by_name.end() || fc2 == p.by_name.end()) {
      return Status::Error("--predictors %s: no predictor for layer %d (model_%d.pt)",
                           o.predictors_dir.c_str(), l, l);
    }
    const int64_t rank = fc1->second->shape.size() == 2 ? fc1->second->shape[0] : 0;
    const DType type = o.outtype == DType::kF32 ? DType::kF32 : DType::kF16;
    jobs->push_back(Job{"model_" + std::to_string(l) + ".pt fc1.weight",
                        g + "fc1.weight",
                        {rank, c.hidden_size},
                        type,
                        Reorder::kNone,
                        0,
                        fc1->second});
    jobs->push_back(Job{"model_" + std::to_string(l) + ".pt fc2.weight",
                        g + "fc2.weight",
                        {c.intermediate_size, rank},
                        type,
                        Reorder::kNone,
                        0,
                        fc2->second});
  }
  if (p.by_name.size() != 2 * static_cast<size_t>(c.num_hidden_layers)) {
    return Status::Error("--predictors %s: %zu files for a model of %d layers",
                         o.predictors_dir.c_str(), p.by_name.size() / 2, c.num_hidden_layers);
  }
  *threshold = 0.0f;
  std::string text;
  if (ReadHfFile(o.predictors_dir + "/config.json", &text).ok()) {
    const nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
    if (j.is_object() && j.contains("sparse_threshold")) {
      if (!j["sparse_threshold"].is_number() ||
          !std::isfinite(j["sparse_threshold"].get<double>())) {
        return Status::Error("%s/config.json: sparse_threshold is not a number",
                             o.predictors_dir.c_str());
      }
      *threshold = j["sparse_threshold"].get<float>();
    }
  }
  return Status::Ok();
}

// The original's activation counts as OUT.stats.gguf for the model just
// written (its fingerprint): integer counts as they are (the tokens seen,
// not recorded there, taken as the largest count), frequencies in [0, 1] as
// counts of a million tokens.
Status WriteImportedStats(const HfConvertOptions& o, const PtExport& p,
                          const std::string& out_path) {
  LlamaModel model;
  PI_RETURN_IF_ERROR(LoadLlamaModel(out_path, &model));
  ActivationStats stats;
  InitActivationStatsFor(model, &stats);
  const int n_ff = stats.n_ff();
  bool frequencies = true;
  std::vector<std::vector<double>> values(stats.n_layer());
  for (int l = 0; l < stats.n_layer(); ++l) {
    const auto it = p.by_name.find("blk." + std::to_string(l) + ".activation");
    if (it == p.by_name.end()) {
      return Status::Error("--activations %s: no activation_%d.pt", o.activations_dir.c_str(), l);
    }
    const SafeTensor& t = *it->second;
    if (t.shape.size() != 1 || t.shape[0] != n_ff || (t.dtype != "F32" && t.dtype != "I64")) {
      return Status::Error("--activations %s: activation_%d.pt is not [%d] counts",
                           o.activations_dir.c_str(), l, n_ff);
    }
    values[l].resize(n_ff);
    for (int i = 0; i < n_ff; ++i) {
      double v;
      if (t.dtype == "F32") {
        float f;
        memcpy(&f, t.data + 4 * i, 4);
        v = f;
      } else {
        int64_t n;
        memcpy(&n, t.data + 8 * i, 8);
        v = static_cast<double>(n);
      }
      if (!(v >= 0) || v > 2e9) {
        return Status::Error("--activations %s: activation_%d.pt holds %g at neuron %d",
                             o.activations_dir.c_str(), l, v, i);
      }
      frequencies = frequencies && v <= 1.0 && t.dtype == "F32";
      values[l][i] = v;
    }
  }
  int64_t max_count = 1;
  for (int l = 0; l < stats.n_layer(); ++l) {
    int64_t* counts = stats.mutable_counts(l);
    for (int i = 0; i < n_ff; ++i) {
      counts[i] = std::llround(frequencies ? values[l][i] * 1e6 : values[l][i]);
      max_count = std::max(max_count, counts[i]);
    }
  }
  stats.set_n_tokens(static_cast<uint64_t>(frequencies ? 1000000 : max_count));
  stats.corpus = "PowerInfer activation files: " + o.activations_dir;
  const std::string path = DefaultStatsWritePath(out_path);
  PI_RETURN_IF_ERROR(WriteActivationStats(stats, path));
  fprintf(stderr, "pi-convert: activation statistics in %s\n", path.c_str());
  return Status::Ok();
}

// Source row of destination row r for the rope permutation: within each head,
// destination rows 2i and 2i + 1 are source rows i and head_dim / 2 + i.
int64_t RopeSourceRow(int64_t r, int head_dim) {
  const int64_t head = r / head_dim, k = r % head_dim;
  return head * head_dim + (k % 2) * (head_dim / 2) + k / 2;
}

// Source row of destination row r of a falcon attn_qkv. Hugging Face's fused
// query_key_value holds n_kv groups, each n_head / n_kv query heads then one
// key and one value head (multi-query is one group; one-KV-per-head is
// n_head groups of q, k, v); the engine (llama.cpp's "jploski" layout) reads
// all query heads, then all keys, then all values, query head h sharing KV
// head h / (n_head / n_kv) as Hugging Face's grouping does.
int64_t FalconQkvSourceRow(int64_t r, int head_dim, int n_head, int n_kv) {
  const int64_t per = n_head / n_kv, head = r / head_dim, i = r % head_dim;
  int64_t group, slot;
  if (head < n_head) {
    group = head / per, slot = head % per;
  } else if (head < n_head + n_kv) {
    group = head - n_head, slot = per;
  } else {
    group = head - n_head - n_kv, slot = per + 1;
  }
  return (group * (per + 2) + slot) * head_dim + i;
}

int64_t SourceRow(const Job& job, int64_t r) {
  switch (job.reorder) {
    case Reorder::kRope:
      return RopeSourceRow(r, job.head_dim);
    case Reorder::kFalconQkv:
      return FalconQkvSourceRow(r, job.head_dim, job.n_head, job.n_kv);
    default:
      return r;
  }
}

std::string ShapeString(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
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
    DequantizeRow(t.type, t.data + SourceRow(job, r) * src_row, row.data(), cols);
    if (job.offset != 0.0f) {
      for (float& v : row) v += job.offset;
    }
    QuantizeRow(job.type, row.data(), dst + r * dst_row, cols);
  }
  return Status::Ok();
}

// The model's family from config.json's class (and Bamboo's model_type).
Status FamilyOf(const HfConfig& c, const std::string& dir, Family* out) {
  if (c.architecture == "FalconForCausalLM" || c.architecture == "RWForCausalLM") {
    *out = Family::kFalcon;
  } else if (c.architecture == "BambooForCausalLM" || c.model_type == "bamboo") {
    *out = Family::kBamboo;
  } else if (c.architecture == "LlamaForCausalLM" || c.architecture == "MistralForCausalLM") {
    *out = Family::kLlama;
  } else if (c.architecture == "Qwen2ForCausalLM") {
    *out = Family::kQwen2;
  } else if (c.architecture == "Qwen3ForCausalLM") {
    *out = Family::kQwen3;
  } else if (c.architecture == "Gemma2ForCausalLM") {
    *out = Family::kGemma2;
  } else if (c.architecture == "Gemma3ForCausalLM") {
    *out = Family::kGemma3;
  } else if (c.architecture == "Phi3ForCausalLM") {
    *out = Family::kPhi3;
  } else {
    return Status::Unsupported(
        "%s: architecture %s is not one pi-convert knows (LlamaForCausalLM, "
        "MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM, Gemma2ForCausalLM, "
        "Gemma3ForCausalLM, Phi3ForCausalLM, BambooForCausalLM, FalconForCausalLM, "
        "RWForCausalLM)",
        dir.c_str(), c.architecture.c_str());
  }
  return Status::Ok();
}

// config.json's activation as pi.ffn_activation spells it for the family.
// Bamboo's hidden_act "relu" is applied to the gate and the up projection
// both (its BambooMLP): dReLU. Falcon's "gelu" is the exact (erf) GELU; the
// engine, as llama.cpp's falcon, runs the tanh form: said (by the caller),
// not refused.
Status ConfigActivation(const HfConfig& c, Family family, std::string* out) {
  const std::string& a = c.hidden_act;
  if (family == Family::kFalcon) {
    if (a == "relu") {
      *out = "relu";
    } else if (a == "gelu" || a == "gelu_new" || a == "gelu_pytorch_tanh" || a == "gelu_fast") {
      *out = "gelu";
    } else {
      return Status::Error(
          "config.json: activation '%s' is not one pi's falcon runs (relu, gelu); "
          "--ffn-activation sets it",
          a.c_str());
    }
  } else if (family == Family::kBamboo) {
    if (a != "relu" && a != "drelu") {
      return Status::Error(
          "config.json: hidden_act '%s' on both of a Bamboo FFN's projections is not one pi "
          "runs (relu: dReLU); --ffn-activation sets it",
          a.c_str());
    }
    *out = "drelu";
  } else if (a == "relu" || a == "silu" || a == "drelu") {
    *out = a;
  } else if (a == "swish") {
    *out = "silu";
  } else if (a == "gelu_pytorch_tanh" || a == "gelu_new" || a == "gelu_fast") {
    *out = "gelu";  // the tanh form, as the engine computes it
  } else {
    return Status::Error(
        "config.json: hidden_act '%s' is not one a llama-family model runs "
        "(relu, silu, drelu, gelu_pytorch_tanh); --ffn-activation sets it",
        a.c_str());
  }
  return Status::Ok();
}

Status ActivationOf(const HfConfig& c, Family family, const std::string& override_act,
                    std::string* out) {
  if (override_act.empty()) return ConfigActivation(c, family, out);
  const bool falcon = family == Family::kFalcon;
  const bool ok = falcon ? override_act == "relu" || override_act == "gelu"
                         : override_act == "relu" || override_act == "silu" ||
                               override_act == "drelu" || override_act == "gelu";
  if (!ok) {
    return Status::Error("--ffn-activation %s: expected %s", override_act.c_str(),
                         falcon ? "relu or gelu for a falcon model (its FFN has no gate)"
                                : "relu, silu, drelu or gelu for a llama-family model");
  }
  *out = override_act;
  std::string implied;
  if (!ConfigActivation(c, family, &implied).ok() || implied != override_act) {
    // Bamboo's "relu" means drelu: say what the config implied when it differs.
    const std::string meaning =
        !implied.empty() && implied != c.hidden_act ? " (" + implied + " here)" : "";
    fprintf(stderr, "pi-convert: --ffn-activation %s overrides config.json's %s '%s'%s\n",
            override_act.c_str(), falcon ? "activation" : "hidden_act", c.hidden_act.c_str(),
            meaning.c_str());
  }
  return Status::Ok();
}

// What llama.cpp's converter writes for falcon (no rope.dimension_count: the
// head size; the fused QKV layout named), and the activation.
void SetFalconMetadata(const HfConfig& c, const std::string& activation, GgufWriter* w) {
  w->Set("falcon.context_length", GgufValue::U32(c.max_position_embeddings));
  w->Set("falcon.embedding_length", GgufValue::U32(c.hidden_size));
  w->Set("falcon.block_count", GgufValue::U32(c.num_hidden_layers));
  w->Set("falcon.feed_forward_length", GgufValue::U32(c.intermediate_size));
  w->Set("falcon.attention.head_count", GgufValue::U32(c.num_attention_heads));
  w->Set("falcon.attention.head_count_kv", GgufValue::U32(c.num_key_value_heads));
  w->Set("falcon.rope.freq_base", GgufValue::F32(static_cast<float>(c.rope_theta)));
  w->Set("falcon.attention.layer_norm_epsilon",
         GgufValue::F32(static_cast<float>(c.layer_norm_eps)));
  w->Set("falcon.tensor_data_layout", GgufValue::String("jploski"));
  w->Set("pi.ffn_activation", GgufValue::String(activation));
}

// A llama-shaped model's keys under `arch` ("llama", or "bamboo" as
// PowerInfer's converter writes Bamboo: the same layout, dReLU implied).
void SetLlamaMetadata(const HfConfig& c, const std::string& arch, const std::string& activation,
                      GgufWriter* w) {
  const std::string p = arch + ".";
  w->Set(p + "context_length", GgufValue::U32(c.max_position_embeddings));
  w->Set(p + "embedding_length", GgufValue::U32(c.hidden_size));
  w->Set(p + "block_count", GgufValue::U32(c.num_hidden_layers));
  w->Set(p + "feed_forward_length", GgufValue::U32(c.intermediate_size));
  w->Set(p + "attention.head_count", GgufValue::U32(c.num_attention_heads));
  w->Set(p + "attention.head_count_kv", GgufValue::U32(c.num_key_value_heads));
  w->Set(p + "rope.dimension_count", GgufValue::U32(c.head_dim));
  if (c.head_dim * c.num_attention_heads != c.hidden_size) {  // as llama.cpp's converter
    w->Set(p + "attention.key_length", GgufValue::U32(c.head_dim));
    w->Set(p + "attention.value_length", GgufValue::U32(c.head_dim));
  }
  w->Set(p + "rope.freq_base", GgufValue::F32(static_cast<float>(c.rope_theta)));
  w->Set(p + "attention.layer_norm_rms_epsilon",
         GgufValue::F32(static_cast<float>(c.rms_norm_eps)));
  w->Set(p + "vocab_size", GgufValue::U32(c.vocab_size));
  // Gemma's soft-caps (gemma2) and the windows (gemma2, gemma3, phi3).
  if (c.attn_softcap > 0) {
    w->Set(p + "attn_logit_softcapping", GgufValue::F32(static_cast<float>(c.attn_softcap)));
  }
  if (c.final_softcap > 0) {
    w->Set(p + "final_logit_softcapping", GgufValue::F32(static_cast<float>(c.final_softcap)));
  }
  // Mistral's and Qwen2's configs name a window too; llama.cpp's llama and
  // qwen2 graphs (and pi's) attend to every position, and its converter
  // writes none for them.
  if (c.sliding_window > 0 && (arch == "gemma2" || arch == "gemma3" || arch == "phi3")) {
    w->Set(p + "attention.sliding_window", GgufValue::U32(c.sliding_window));
  }
  if (c.rope_scaling == "linear") {
    w->Set(p + "rope.scaling.type", GgufValue::String("linear"));
    w->Set(p + "rope.scaling.factor", GgufValue::F32(static_cast<float>(c.rope.factor)));
  }
  w->Set("pi.ffn_activation", GgufValue::String(activation));
}

// What a family's file must say for llama.cpp's graph (and pi's) to compute
// what the model does: Gemma's query scale and window pattern are not
// written to the file but fixed by the architecture (and, for the 27B
// models, by the layer count), so a config with other values is refused.
Status CheckFamilyConfig(const HfConfig& c, Family family) {
  const bool gemma = family == Family::kGemma2 || family == Family::kGemma3;
  if (gemma) {
    const bool big = c.num_hidden_layers == (family == Family::kGemma2 ? 46 : 62);
    const int implied = big ? c.hidden_size / c.num_attention_heads : c.head_dim;
    if (c.query_pre_attn_scalar != 0 && c.query_pre_attn_scalar != implied) {
      return Status::Unsupported(
          "config.json: query_pre_attn_scalar %g: llama.cpp's graph (and pi's) scales q.k by "
          "1/sqrt(%d) for a %s of %d layers",
          c.query_pre_attn_scalar, implied, c.architecture.c_str(), c.num_hidden_layers);
    }
  }
  if (family == Family::kGemma3) {
    if (c.sliding_window_pattern != 0 && c.sliding_window_pattern != 6) {
      return Status::Unsupported(
          "config.json: sliding_window_pattern %d: gemma3 files slide 5 of every 6 layers",
          c.sliding_window_pattern);
    }
    if (c.rope_local_base_freq != 0 && c.rope_local_base_freq != 10000.0) {
      return Status::Unsupported(
          "config.json: rope_local_base_freq %g: gemma3 files rotate sliding layers with 10000",
          c.rope_local_base_freq);
    }
    if (c.sliding_window <= 0) return Status::Error("config.json: gemma3 needs sliding_window");
  }
  if (gemma && !c.layer_types.empty()) {  // the pattern llama.cpp's graph runs
    std::string implied;
    for (int il = 0; il < c.num_hidden_layers; ++il) {
      const bool slides = family == Family::kGemma2 ? il % 2 == 0 : il % 6 < 5;
      implied += slides ? 's' : 'f';
    }
    if (c.layer_types != implied) {
      return Status::Unsupported(
          "config.json: layer_types (%s) is not the pattern %s files run (%s; s: sliding)",
          c.layer_types.c_str(), FamilyArch(family), implied.c_str());
    }
  }
  if (!gemma && (c.attn_softcap > 0 || c.final_softcap > 0)) {
    return Status::Unsupported("config.json: logit soft-capping on %s: not supported",
                               c.architecture.c_str());
  }
  if (family == Family::kGemma3 && c.attn_softcap > 0) {
    return Status::Unsupported("config.json: attn_logit_softcapping on Gemma 3: not supported");
  }
  return Status::Ok();
}

// Llama 3.1's scaling as llama.cpp's converter stores it: rope_freqs.weight,
// one factor per rotated pair (no scaling key).
Status AddRopeFactors(const HfConfig& c, GgufWriter* w) {
  if (c.rope_scaling != "llama3") return Status::Ok();
  const std::vector<float> f = Llama3RopeFactors(c.rope, c.head_dim, c.rope_theta);
  return w->AddTensor("rope_freqs.weight", DType::kF32, {static_cast<int64_t>(f.size())}, f.data());
}

void SetMetadata(const HfConfig& c, Family family, const HfConvertOptions& o,
                 const std::string& name, const std::string& activation, GgufWriter* w) {
  const char* arch = FamilyArch(family);
  w->Set("general.architecture", GgufValue::String(arch));
  w->Set("general.name", GgufValue::String(name));
  w->Set("general.file_type", GgufValue::U32(GgufFileTypeOf(o.outtype)));
  if (family == Family::kFalcon) {
    SetFalconMetadata(c, activation, w);
  } else {
    SetLlamaMetadata(c, arch, activation, w);
  }
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
  if (ReadHfFile(dir + "/generation_config.json", &text).ok()) {
    PI_RETURN_IF_ERROR(ApplyGenerationConfig(text, &c).WithContext(dir));
    if (c.n_eos_dropped > 0) {
      fprintf(stderr,
              "pi-convert: generation_config.json lists %d end ids; the first two are kept "
              "(eos, eot), the rest has no GGUF key\n",
              c.n_eos_dropped + 2);
    }
  }
  Family family = Family::kLlama;
  PI_RETURN_IF_ERROR(FamilyOf(c, dir, &family));
  if (family == Family::kFalcon && c.head_dim * c.num_attention_heads != c.hidden_size) {
    return Status::Error("%s: head_dim %d x %d heads differs from hidden_size %d: not supported",
                         dir.c_str(), c.head_dim, c.num_attention_heads, c.hidden_size);
  }
  std::string activation;
  PI_RETURN_IF_ERROR(ActivationOf(c, family, o.activation, &activation));
  if (family == Family::kFalcon && activation == "gelu" && c.hidden_act == "gelu") {
    fprintf(stderr,
            "pi-convert: config.json's activation 'gelu' is the exact (erf) GELU; pi runs its "
            "tanh approximation (as llama.cpp's falcon does)\n");
  }
  SafetensorsSet weights;
  PI_RETURN_IF_ERROR(weights.Open(dir));
  // Q/K/V biases are qwen2's alone: elsewhere (attention_bias true) they would be left out.
  if (family != Family::kQwen2 && family != Family::kFalcon &&
      (weights.Find("model.layers.0.self_attn.q_proj.bias") != nullptr ||
       weights.Find("model.layers.0.self_attn.qkv_proj.bias") != nullptr)) {
    return Status::Unsupported("%s: %s with attention biases (q_proj.bias): not supported",
                               dir.c_str(), c.architecture.c_str());
  }
  const bool has_head = weights.Find("lm_head.weight") != nullptr && !c.tie_word_embeddings;
  if (!has_head && !c.tie_word_embeddings) {
    return Status::Error("%s: no lm_head.weight and tie_word_embeddings is not set", dir.c_str());
  }
  PI_RETURN_IF_ERROR(CheckFamilyConfig(c, family).WithContext(dir));
  std::vector<Job> jobs = TensorJobs(c, o, has_head, family);
  PtExport predictors, activations;
  float threshold = 0.0f;
  if (!o.predictors_dir.empty()) {
    if (!o.down_t) return Status::Error("--predictors needs --down-t (PowerInfer's sparse layout)");
    PI_RETURN_IF_ERROR(RunPtExport("--predictors", o.predictors_dir, out_path, &predictors));
    PI_RETURN_IF_ERROR(PredictorJobs(c, o, predictors, &jobs, &threshold));
  }
  if (!o.activations_dir.empty()) {
    PI_RETURN_IF_ERROR(RunPtExport("--activations", o.activations_dir, out_path, &activations));
  }
  // Everything checked before a byte is written.
  int64_t total = 0;
  for (const Job& j : jobs) {
    const SafeTensor* t = j.tensor ? j.tensor : weights.Find(j.src);
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
  SetMetadata(c, family, o, name, activation, &w);
  if (!o.predictors_dir.empty()) w.Set("powerinfer.sparse_threshold", GgufValue::F32(threshold));
  PI_RETURN_IF_ERROR(AddHfTokenizer(dir, c, &w));
  if (family != Family::kFalcon) PI_RETURN_IF_ERROR(AddRopeFactors(c, &w));
  auto bar = std::make_shared<ProgressBar>("pi-convert " + out_path, total, "B");
  auto done = std::make_shared<int64_t>(0);
  for (const Job& j : jobs) {
    const SafeTensor* t = j.tensor ? j.tensor : weights.Find(j.src);
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
  if (!o.activations_dir.empty()) PI_RETURN_IF_ERROR(WriteImportedStats(o, activations, out_path));
  return Status::Ok();
}

}  // namespace pi
