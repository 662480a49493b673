#include "common/model/llama_model.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <iterator>

#include "kernels/cpu/ops.h"
#include "kernels/cpu/quant.h"

namespace pi {

const char* FfnActivationName(FfnActivation a) {
  switch (a) {
    case FfnActivation::kSilu:
      return "silu";
    case FfnActivation::kRelu:
    case FfnActivation::kReluUp:
      return "relu";
    case FfnActivation::kDRelu:
      return "drelu";
    case FfnActivation::kGeluUp:
    case FfnActivation::kGelu:
      return "gelu";
  }
  return "?";
}

bool ParseFfnActivation(const std::string& s, bool gated, FfnActivation* out) {
  if (gated && s == "silu")
    *out = FfnActivation::kSilu;
  else if (s == "relu")
    *out = gated ? FfnActivation::kRelu : FfnActivation::kReluUp;
  else if (gated && s == "drelu")
    *out = FfnActivation::kDRelu;
  else if (s == "gelu")
    *out = gated ? FfnActivation::kGelu : FfnActivation::kGeluUp;
  else
    return false;
  return true;
}

bool FfnIsGated(FfnActivation a) {
  return a != FfnActivation::kReluUp && a != FfnActivation::kGeluUp;
}

bool FfnIsReluFamily(FfnActivation a) {
  return a == FfnActivation::kRelu || a == FfnActivation::kDRelu || a == FfnActivation::kReluUp;
}

void RopeAnglesOf(const LlamaConfig& c, int pos, float* cs) {
  RopeAngles(c.rope_dims, pos, c.rope_theta, cs, c.rope_freq_scale,
             c.rope_freq_factors.empty() ? nullptr : c.rope_freq_factors.data());
}

void RopeAnglesOf(const LlamaConfig& c, int il, int pos, float* cs) {
  if (c.HasLocalRope(il)) {
    RopeAngles(c.rope_dims, pos, c.rope_theta_swa, cs);
  } else {
    RopeAnglesOf(c, pos, cs);
  }
}

const char* LlamaConfig::GemmaFeature() const {
  if (embd_scale != 1.0f) return "the embedding scale";
  if (post_norms) return "post-norms";
  if (attn_softcap > 0.0f || final_softcap > 0.0f) return "soft-capping";
  if (n_swa > 0) return "sliding-window attention";
  if (activation == FfnActivation::kGelu) return "the GELU-gated FFN";
  return nullptr;
}

void EmbedToken(const LlamaModel& m, int token, float* out) {
  const int64_t d = m.config.n_embd;
  DequantizeRow(m.token_embd.type, m.token_embd.row(token), out, d);
  const float s = m.config.embd_scale;
  if (s != 1.0f) {
    for (int64_t i = 0; i < d; ++i) out[i] *= s;
  }
}

void SoftCapLogits(const LlamaConfig& c, float* logits, int64_t n) {
  const float cap = c.final_softcap;
  if (cap <= 0.0f) return;
  for (int64_t i = 0; i < n; ++i) logits[i] = cap * std::tanh(logits[i] / cap);
}

void AddResidual(const LlamaConfig& c, const Tensor& post_norm, float* x, float* h) {
  if (post_norm.present()) {
    RmsNorm(x, reinterpret_cast<const float*>(post_norm.data), c.n_embd, c.norm_eps, x);
  }
  for (int i = 0; i < c.n_embd; ++i) h[i] += x[i];
}

void NormalizeRow(const LlamaConfig& c, const Tensor& w, const Tensor& b, const float* x,
                  float* out) {
  const float* wd = reinterpret_cast<const float*>(w.data);
  if (c.norm == NormKind::kRms) {
    RmsNorm(x, wd, c.n_embd, c.norm_eps, out);
  } else {
    LayerNorm(x, wd, b.present() ? reinterpret_cast<const float*>(b.data) : nullptr, c.n_embd,
              c.norm_eps, out);
  }
}

namespace {

// RoPE scaling as llama.cpp reads it: rope.scaling.factor (or the older
// rope.scale_linear) divides every position unless rope.scaling.type is
// "none"; "linear", or no type, is that scaling; the others (yarn, longrope)
// change the angles in ways not implemented here and are refused by name.
Status ReadRopeScaling(const GgufFile& f, const std::string& p, LlamaConfig* c) {
  std::string type;
  PI_RETURN_IF_ERROR(f.GetStringOpt(p + "rope.scaling.type", &type));
  if (!type.empty() && type != "none" && type != "linear") {
    return Status::Unsupported("%srope.scaling.type '%s' is not supported (none, linear)",
                               p.c_str(), type.c_str());
  }
  float factor = 0.0f;
  PI_RETURN_IF_ERROR(f.GetF32Opt(p + "rope.scaling.factor", &factor));
  if (factor == 0.0f) PI_RETURN_IF_ERROR(f.GetF32Opt(p + "rope.scale_linear", &factor));
  if (!(factor >= 0.0f && factor <= 1e6f)) {
    return Status::Invalid("%srope.scaling.factor %g: expected 0 (none) to 1e6", p.c_str(), factor);
  }
  c->rope_freq_scale = factor == 0.0f || type == "none" ? 1.0f : 1.0f / factor;
  return Status::Ok();
}

// A window of 1 to 2^30 positions.
Status CheckWindow(const std::string& key, uint32_t v) {
  if (v == 0 || v > (1u << 30)) {
    return Status::Invalid("%s = %u: expected 1 to 2^30 positions", key.c_str(), v);
  }
  return Status::Ok();
}

// Gemma 2/3 as llama.cpp runs them (llm_build_gemma2, llm_build_gemma3).
Status ReadGemmaConfig(const GgufFile& f, const std::string& p, LlamaConfig* c) {
  const bool gemma2 = c->arch == "gemma2";
  c->embd_scale = std::sqrt(static_cast<float>(c->n_embd));
  c->post_norms = true;
  // The 27B models scale by n_embd / n_head (their query_pre_attn_scalar);
  // llama.cpp tells them by their layer count.
  if (c->n_layer == (gemma2 ? 46 : 62)) {
    c->attn_scale = 1.0f / std::sqrt(static_cast<float>(c->n_embd / c->n_head));
  }
  uint32_t window = 4096;  // Gemma 2's, when the file does not say
  const std::string wkey = p + "attention.sliding_window";
  if (gemma2) {
    c->attn_softcap = 50.0f;
    c->final_softcap = 30.0f;
    PI_RETURN_IF_ERROR(f.GetF32Opt(p + "attn_logit_softcapping", &c->attn_softcap));
    PI_RETURN_IF_ERROR(f.GetU32Opt(wkey, &window));
    c->swa_pattern = 2;
  } else {
    PI_RETURN_IF_ERROR(f.GetU32(wkey, &window));
    c->swa_pattern = 6;
    c->rope_theta_swa = 10000.0f;
  }
  PI_RETURN_IF_ERROR(f.GetF32Opt(p + "final_logit_softcapping", &c->final_softcap));
  for (float cap : {c->attn_softcap, c->final_softcap}) {
    if (!(cap >= 0.0f && cap < 1e30f)) {
      return Status::Invalid("%s soft-capping %g: expected 0 (none) or a positive cap", p.c_str(),
                             cap);
    }
  }
  PI_RETURN_IF_ERROR(CheckWindow(wkey, window));
  c->n_swa = static_cast<int>(window);
  return Status::Ok();
}

// Phi-3's window, every layer's: the key, else llama.cpp's defaults for the
// files written before it (mini and medium, 4k and 128k).
Status ReadPhi3Window(const GgufFile& f, const std::string& p, LlamaConfig* c) {
  uint32_t window = 0;
  if (c->n_ctx_train == 4096 && (c->n_layer == 32 || c->n_layer == 40)) {
    window = 2047;
  } else if (c->n_ctx_train == 131072 && c->n_layer == 32 && c->n_head_kv == 32) {
    window = 262144;
  } else if (c->n_ctx_train == 131072 && c->n_layer == 40) {
    window = 131072;
  }
  const std::string wkey = p + "attention.sliding_window";
  if (f.Find(wkey)) {
    PI_RETURN_IF_ERROR(f.GetU32(wkey, &window));
    if (window == 0) return Status::Ok();  // Phi-4's: no window
  } else if (window == 0) {
    return Status::Error("missing key '%s' (Phi-3's sliding window)", wkey.c_str());
  }
  PI_RETURN_IF_ERROR(CheckWindow(wkey, window));
  c->n_swa = static_cast<int>(window);
  c->swa_pattern = 0;
  return Status::Ok();
}

Status ReadConfig(const GgufFile& f, LlamaConfig* c) {
  PI_RETURN_IF_ERROR(f.GetString("general.architecture", &c->arch));
  static const char* const kArchs[] = {"llama", "bamboo", "falcon", "qwen2",
                                       "qwen3", "gemma2", "gemma3", "phi3"};
  if (std::find(std::begin(kArchs), std::end(kArchs), c->arch) == std::end(kArchs)) {
    return Status::Unsupported(
        "unsupported architecture '%s' (general.architecture); supported: llama (LLaMA, "
        "Llama 3, Mistral, ReluLLaMA, ProSparse, TurboSparse), bamboo, falcon (Falcon, "
        "ReluFalcon), qwen2, qwen3, gemma2, gemma3, phi3",
        c->arch.c_str());
  }
  // All but llama and bamboo rotate NeoX-style (llama.cpp's converter permutes
  // only llama's Q/K rows into adjacent pairs).
  if (c->arch != "llama" && c->arch != "bamboo") c->rope = RopeKind::kNeox;
  const bool falcon = c->arch == "falcon";
  PI_RETURN_IF_ERROR(f.GetStringOpt("general.name", &c->name));
  const std::string p = c->arch + ".";
  uint32_t v = 0;
  PI_RETURN_IF_ERROR(f.GetU32(p + "embedding_length", &v));
  c->n_embd = static_cast<int>(v);
  PI_RETURN_IF_ERROR(f.GetU32(p + "block_count", &v));
  c->n_layer = static_cast<int>(v);
  if (falcon && !f.Find(p + "feed_forward_length")) {
    // Old falcon conversions leave n_ff out: it is then ffn_up's row count.
    const TensorInfo* up = f.FindTensor("blk.0.ffn_up.weight");
    if (!up || up->n_dims != 2) {
      return Status::Error(
          "key '%sfeed_forward_length' is missing and there is no 2-D tensor "
          "'blk.0.ffn_up.weight' to take n_ff from",
          p.c_str());
    }
    v = up->ne[1] > 0 && up->ne[1] <= (int64_t{1} << 30) ? static_cast<uint32_t>(up->ne[1]) : 0;
  } else {
    PI_RETURN_IF_ERROR(f.GetU32(p + "feed_forward_length", &v));
  }
  c->n_ff = static_cast<int>(v);
  PI_RETURN_IF_ERROR(f.GetU32(p + "attention.head_count", &v));
  c->n_head = static_cast<int>(v);
  v = static_cast<uint32_t>(c->n_head);
  PI_RETURN_IF_ERROR(f.GetU32Opt(p + "attention.head_count_kv", &v));
  c->n_head_kv = static_cast<int>(v);
  v = 2048;
  PI_RETURN_IF_ERROR(f.GetU32Opt(p + "context_length", &v));
  c->n_ctx_train = static_cast<int>(v);
  PI_RETURN_IF_ERROR(f.GetF32Opt(p + "rope.freq_base", &c->rope_theta));
  if (falcon) {
    PI_RETURN_IF_ERROR(f.GetF32Opt(p + "attention.layer_norm_epsilon", &c->norm_eps));
    c->norm = NormKind::kLayer;
    c->rope = RopeKind::kNeox;
    c->parallel_residual = true;
    // llama.cpp only runs the "jploski" fused-QKV order (all Q, then K, then V);
    // the original interleaved per-group order would load but compute garbage.
    std::string layout;
    PI_RETURN_IF_ERROR(f.GetStringOpt(p + "tensor_data_layout", &layout));
    if (!layout.empty() && layout != "jploski") {
      return Status::Error(
          "%stensor_data_layout = '%s': only the 'jploski' fused QKV layout is supported",
          p.c_str(), layout.c_str());
    }
  } else {
    PI_RETURN_IF_ERROR(f.GetF32Opt(p + "attention.layer_norm_rms_epsilon", &c->norm_eps));
  }

  if (c->n_embd <= 0 || c->n_layer <= 0 || c->n_ff <= 0 || c->n_head <= 0 || c->n_head_kv <= 0 ||
      c->n_ctx_train <= 0) {
    return Status::Error(
        "invalid hyper-parameters: n_embd=%d n_layer=%d n_ff=%d n_head=%d "
        "n_head_kv=%d context_length=%d",
        c->n_embd, c->n_layer, c->n_ff, c->n_head, c->n_head_kv, c->n_ctx_train);
  }
  // Every layer has several tensors in the file: a block count beyond the
  // tensor count is corrupt, and is refused before a layer table is sized by it.
  if (static_cast<size_t>(c->n_layer) > f.tensors().size()) {
    return Status::Error("%sblock_count %d is more than the file's %zu tensors can hold", p.c_str(),
                         c->n_layer, f.tensors().size());
  }
  if (c->n_head % c->n_head_kv != 0) {
    return Status::Error("head_count %d is not a multiple of head_count_kv %d", c->n_head,
                         c->n_head_kv);
  }
  v = static_cast<uint32_t>(c->n_embd / c->n_head);
  PI_RETURN_IF_ERROR(f.GetU32Opt(p + "attention.key_length", &v));
  c->head_dim = static_cast<int>(v);
  uint32_t value_length = v;
  PI_RETURN_IF_ERROR(f.GetU32Opt(p + "attention.value_length", &value_length));
  if (value_length != v) {
    return Status::Error("attention.key_length %u != value_length %u is not supported", v,
                         value_length);
  }
  v = static_cast<uint32_t>(c->head_dim);
  PI_RETURN_IF_ERROR(f.GetU32Opt(p + "rope.dimension_count", &v));
  c->rope_dims = static_cast<int>(v);
  if (c->head_dim <= 0 || c->head_dim % 2 != 0 || c->rope_dims <= 0 || c->rope_dims > c->head_dim ||
      c->rope_dims % 2 != 0) {
    return Status::Error("invalid head geometry: head_dim=%d rope.dimension_count=%d", c->head_dim,
                         c->rope_dims);
  }
  if (!(c->norm_eps > 0.0f) || !(c->rope_theta > 0.0f)) {
    return Status::Error("invalid norm epsilon %g or rope.freq_base %g", c->norm_eps,
                         c->rope_theta);
  }
  PI_RETURN_IF_ERROR(ReadRopeScaling(f, p, c));
  if (c->arch == "gemma2" || c->arch == "gemma3") PI_RETURN_IF_ERROR(ReadGemmaConfig(f, p, c));
  if (c->arch == "phi3") PI_RETURN_IF_ERROR(ReadPhi3Window(f, p, c));

  c->sparse_magic = f.is_sparse_magic();
  PI_RETURN_IF_ERROR(f.GetF32Opt("powerinfer.sparse_threshold", &c->sparse_threshold));

  // Activation: explicit key, else the PWRI convention, else the arch default.
  std::string act;
  PI_RETURN_IF_ERROR(f.GetStringOpt(kFfnActivationKey, &act));
  const bool gated = !falcon;
  if (!act.empty()) {
    if (!ParseFfnActivation(act, gated, &c->activation)) {
      return Status::Error(
          "%s = '%s': expected %s", kFfnActivationKey, act.c_str(),
          gated ? "silu, relu, drelu or gelu" : "relu or gelu (falcon's FFN has no gate)");
    }
  } else if (c->arch == "bamboo") {
    c->activation = FfnActivation::kDRelu;
  } else if (c->arch == "gemma2" || c->arch == "gemma3") {
    c->activation = FfnActivation::kGelu;
  } else if (c->sparse_magic) {
    c->activation = gated ? FfnActivation::kRelu : FfnActivation::kReluUp;
  } else {
    c->activation = gated ? FfnActivation::kSilu : FfnActivation::kGeluUp;
  }
  return Status::Ok();
}

std::string ShapeStr(const std::vector<int64_t>& ne) {
  std::string s = "[";
  for (size_t i = 0; i < ne.size(); ++i) s += (i ? ", " : "") + std::to_string(ne[i]);
  return s + "]";
}

// Binds `name` with the expected ggml shape; 1-D tensors must be F32.
Status BindTensor(const GgufFile& f, const std::string& name, std::vector<int64_t> ne,
                  bool required, Tensor* t) {
  const TensorInfo* info = f.FindTensor(name);
  if (!info) {
    if (required) return Status::Error("missing tensor '%s'", name.c_str());
    return Status::Ok();
  }
  bool shape_ok = info->n_dims == static_cast<int>(ne.size());
  for (size_t i = 0; shape_ok && i < ne.size(); ++i) shape_ok = info->ne[i] == ne[i];
  if (!shape_ok) {
    return Status::Error("tensor '%s' has shape %s, expected %s", name.c_str(),
                         info->ShapeString().c_str(), ShapeStr(ne).c_str());
  }
  if (!IsComputeDType(info->type)) {
    return Status::Error("tensor '%s' has type %s; supported: f32, f16, bf16, q8_0, q4_0",
                         name.c_str(), DTypeName(info->type));
  }
  if (ne.size() == 1 && info->type != DType::kF32) {
    return Status::Error("tensor '%s' has type %s; 1-D tensors must be f32", name.c_str(),
                         DTypeName(info->type));
  }
  t->info = info;
  t->data = info->data;
  t->type = info->type;
  t->cols = info->ne[0];
  t->rows = ne.size() > 1 ? info->ne[1] : 1;
  t->row_bytes = info->row_bytes();
  return Status::Ok();
}

// A view of rows [row0, row0 + n) of matrix `t` (whole rows, so any type).
Tensor RowRange(const Tensor& t, int64_t row0, int64_t n) {
  Tensor v = t;
  v.data = t.data + row0 * t.row_bytes;
  v.rows = n;
  return v;
}

// Falcon's attention and FFN-norm tensors of one layer (prefix p = "blk.N.").
Status BindLayerFalcon(const GgufFile& f, const LlamaConfig& c, const std::string& p,
                       LlamaLayer* l) {
  const int64_t d = c.n_embd;
  PI_RETURN_IF_ERROR(BindTensor(f, p + "attn_norm.bias", {d}, true, &l->attn_norm_b));
  // 40B has a separate FFN norm (attn_norm_2); 7B feeds the FFN the same normed input.
  PI_RETURN_IF_ERROR(BindTensor(f, p + "attn_norm_2.weight", {d}, false, &l->ffn_norm));
  if (l->ffn_norm.present()) {
    PI_RETURN_IF_ERROR(BindTensor(f, p + "attn_norm_2.bias", {d}, false, &l->ffn_norm_b));
  } else {
    if (f.FindTensor(p + "attn_norm_2.bias")) {
      return Status::Error("tensor '%sattn_norm_2.bias' without '%sattn_norm_2.weight'", p.c_str(),
                           p.c_str());
    }
    l->ffn_norm = l->attn_norm;
    l->ffn_norm_b = l->attn_norm_b;
  }
  const int64_t qd = c.q_dim(), kvd = c.kv_dim();
  PI_RETURN_IF_ERROR(BindTensor(f, p + "attn_qkv.weight", {d, qd + 2 * kvd}, true, &l->wqkv));
  l->wq = RowRange(l->wqkv, 0, qd);
  l->wk = RowRange(l->wqkv, qd, kvd);
  l->wv = RowRange(l->wqkv, qd + kvd, kvd);
  // Falcon-7B/40B have no linear biases and llama.cpp's falcon graph has no
  // place for them: refuse a file that has some rather than ignore them.
  for (const char* name : {"attn_qkv.bias", "attn_output.bias", "ffn_up.bias", "ffn_down.bias",
                           "ffn_down_t.bias", "ffn_gate.weight"}) {
    if (f.FindTensor(p + name)) {
      return Status::Error("tensor '%s%s' is not part of the falcon architecture (unsupported)",
                           p.c_str(), name);
    }
  }
  return Status::Ok();
}

// Q, K and V of a llama-style layer: three matrices, or phi3's fused
// attn_qkv bound as row-range views.
Status BindQkv(const GgufFile& f, const LlamaConfig& c, const std::string& p, LlamaLayer* l) {
  const int64_t d = c.n_embd, qd = c.q_dim(), kvd = c.kv_dim();
  if (c.arch == "phi3" && f.FindTensor(p + "attn_qkv.weight")) {
    PI_RETURN_IF_ERROR(BindTensor(f, p + "attn_qkv.weight", {d, qd + 2 * kvd}, true, &l->wqkv));
    l->wq = RowRange(l->wqkv, 0, qd);
    l->wk = RowRange(l->wqkv, qd, kvd);
    l->wv = RowRange(l->wqkv, qd + kvd, kvd);
    return Status::Ok();
  }
  PI_RETURN_IF_ERROR(BindTensor(f, p + "attn_q.weight", {d, qd}, true, &l->wq));
  PI_RETURN_IF_ERROR(BindTensor(f, p + "attn_k.weight", {d, kvd}, true, &l->wk));
  return BindTensor(f, p + "attn_v.weight", {d, kvd}, true, &l->wv);
}

// A llama-style layer's tensors but attn_output and the down projection, each
// architecture's own (the header's table) required.
Status BindLayerLlama(const GgufFile& f, const LlamaConfig& c, const std::string& p,
                      LlamaLayer* l) {
  const int64_t d = c.n_embd, ff = c.n_ff;
  PI_RETURN_IF_ERROR(BindQkv(f, c, p, l));
  const bool qwen2 = c.arch == "qwen2";
  PI_RETURN_IF_ERROR(BindTensor(f, p + "attn_q.bias", {c.q_dim()}, qwen2, &l->bq));
  PI_RETURN_IF_ERROR(BindTensor(f, p + "attn_k.bias", {c.kv_dim()}, qwen2, &l->bk));
  PI_RETURN_IF_ERROR(BindTensor(f, p + "attn_v.bias", {c.kv_dim()}, qwen2, &l->bv));
  const bool head_norms = c.arch == "qwen3" || c.arch == "gemma3";
  PI_RETURN_IF_ERROR(BindTensor(f, p + "attn_q_norm.weight", {c.head_dim}, head_norms, &l->q_norm));
  PI_RETURN_IF_ERROR(BindTensor(f, p + "attn_k_norm.weight", {c.head_dim}, head_norms, &l->k_norm));
  if (c.post_norms) {
    PI_RETURN_IF_ERROR(
        BindTensor(f, p + "post_attention_norm.weight", {d}, true, &l->attn_post_norm));
    PI_RETURN_IF_ERROR(BindTensor(f, p + "post_ffw_norm.weight", {d}, true, &l->ffn_post_norm));
  }
  PI_RETURN_IF_ERROR(BindTensor(f, p + "ffn_norm.weight", {d}, true, &l->ffn_norm));
  if (c.arch == "phi3") {
    // ffn_up holds the gate's rows, then up's (llama.cpp's LLM_FFN_SWIGLU split).
    Tensor gate_up;
    PI_RETURN_IF_ERROR(BindTensor(f, p + "ffn_up.weight", {d, 2 * ff}, true, &gate_up));
    l->ffn_gate = RowRange(gate_up, 0, ff);
    l->ffn_up = RowRange(gate_up, ff, ff);
    return Status::Ok();
  }
  PI_RETURN_IF_ERROR(BindTensor(f, p + "ffn_gate.weight", {d, ff}, true, &l->ffn_gate));
  return BindTensor(f, p + "ffn_up.weight", {d, ff}, true, &l->ffn_up);
}

// rope_freqs.weight, when present: one factor per rotated pair, each finite
// and positive (an angle is divided by it).
Status ReadRopeFactors(const GgufFile& f, LlamaConfig* c) {
  Tensor t;
  PI_RETURN_IF_ERROR(BindTensor(f, "rope_freqs.weight", {c->rope_dims / 2}, false, &t));
  if (!t.present()) return Status::Ok();
  c->rope_freq_factors.resize(static_cast<size_t>(c->rope_dims / 2));
  std::memcpy(c->rope_freq_factors.data(), t.data, c->rope_freq_factors.size() * sizeof(float));
  for (size_t i = 0; i < c->rope_freq_factors.size(); ++i) {
    const float v = c->rope_freq_factors[i];
    if (!(v > 0.0f && v < 1e30f)) {
      return Status::Invalid(
          "rope_freqs.weight[%zu] = %g: RoPE factors must be positive and finite", i, v);
    }
  }
  return Status::Ok();
}

}  // namespace

Status LoadLlamaModel(const std::string& path, LlamaModel* model) {
  std::unique_ptr<GgufFile> file;
  PI_RETURN_IF_ERROR(GgufFile::Open(path, &file));
  return LoadLlamaModel(std::move(file), model);
}

Status LoadLlamaModel(std::unique_ptr<GgufFile> file, LlamaModel* model) {
  const std::string where = file->path();
  Status s = [&]() -> Status {
    const GgufFile& f = *file;
    LlamaConfig& c = model->config;
    PI_RETURN_IF_ERROR(ReadConfig(f, &c));
    const bool falcon = c.arch == "falcon";

    const TensorInfo* embd = f.FindTensor("token_embd.weight");
    if (!embd) return Status::Error("missing tensor 'token_embd.weight'");
    c.n_vocab = static_cast<int>(embd->ne[1]);
    if (c.n_vocab <= 0) return Status::Error("token_embd.weight has no rows");
    const int64_t d = c.n_embd, ff = c.n_ff, vocab = c.n_vocab;
    PI_RETURN_IF_ERROR(BindTensor(f, "token_embd.weight", {d, vocab}, true, &model->token_embd));
    PI_RETURN_IF_ERROR(BindTensor(f, "output_norm.weight", {d}, true, &model->output_norm));
    if (falcon) {
      PI_RETURN_IF_ERROR(BindTensor(f, "output_norm.bias", {d}, true, &model->output_norm_b));
    }
    PI_RETURN_IF_ERROR(BindTensor(f, "output.weight", {d, vocab}, false, &model->output));
    model->tied_output = !model->output.present();
    if (model->tied_output) model->output = model->token_embd;

    PI_RETURN_IF_ERROR(ReadRopeFactors(f, &c));
    for (const char* name : {"rope_factors_long.weight", "rope_factors_short.weight"}) {
      if (f.FindTensor(name)) {
        return Status::Unsupported(
            "tensor '%s': LongRoPE (Phi-3's 128k-context scaling) is not supported", name);
      }
    }

    model->layers.assign(c.n_layer, LlamaLayer());
    for (int i = 0; i < c.n_layer; ++i) {
      LlamaLayer& l = model->layers[i];
      const std::string p = "blk." + std::to_string(i) + ".";
      PI_RETURN_IF_ERROR(BindTensor(f, p + "attn_norm.weight", {d}, true, &l.attn_norm));
      if (falcon) {
        PI_RETURN_IF_ERROR(BindLayerFalcon(f, c, p, &l));
        PI_RETURN_IF_ERROR(BindTensor(f, p + "ffn_up.weight", {d, ff}, true, &l.ffn_up));
      } else {
        PI_RETURN_IF_ERROR(BindLayerLlama(f, c, p, &l));
      }
      PI_RETURN_IF_ERROR(BindTensor(f, p + "attn_output.weight", {c.q_dim(), d}, true, &l.wo));
      PI_RETURN_IF_ERROR(BindTensor(f, p + "ffn_down.weight", {ff, d}, false, &l.ffn_down));
      PI_RETURN_IF_ERROR(BindTensor(f, p + "ffn_down_t.weight", {d, ff}, false, &l.ffn_down_t));
      if (!l.ffn_down.present() && !l.ffn_down_t.present()) {
        return Status::Error("layer %d has neither '%sffn_down.weight' nor '%sffn_down_t.weight'",
                             i, p.c_str(), p.c_str());
      }
      // The predictor's hidden size may differ per layer: bind fc1 first, then
      // require fc2 to agree with it.
      const TensorInfo* fc1 = f.FindTensor(p + "fc1.weight");
      if (fc1) {
        const int64_t rank = fc1->ne[1];
        PI_RETURN_IF_ERROR(BindTensor(f, p + "fc1.weight", {d, rank}, true, &l.fc1));
        PI_RETURN_IF_ERROR(BindTensor(f, p + "fc2.weight", {rank, ff}, true, &l.fc2));
      }
    }
    return Status::Ok();
  }();
  if (!s.ok()) return s.WithContext(where);
  model->file = std::move(file);
  return Status::Ok();
}

void LlamaModel::FreeBuffer::operator()(uint8_t* p) const {
  std::free(p);
}

int64_t LlamaModel::DecodeWeightBytes() const {
  // Absent tensors count 0 bytes (no rows of row_bytes 0).
  int64_t bytes =
      token_embd.row_bytes + output_norm.nbytes() + output_norm_b.nbytes() + output.nbytes();
  for (const LlamaLayer& l : layers) {
    bytes += l.attn_norm.nbytes() + l.attn_norm_b.nbytes() + l.wq.nbytes() + l.wk.nbytes() +
             l.wv.nbytes() + l.wo.nbytes() + l.ffn_gate.nbytes() + l.ffn_up.nbytes();
    // Falcon-7B's FFN norm is the attention norm, read once.
    if (l.ffn_norm.data != l.attn_norm.data) bytes += l.ffn_norm.nbytes() + l.ffn_norm_b.nbytes();
    bytes += l.ffn_down.present() ? l.ffn_down.nbytes() : l.ffn_down_t.nbytes();
  }
  return bytes;
}

int64_t LlamaModel::TotalWeightBytes() const {
  int64_t bytes = 0;
  for (const TensorInfo& t : file->tensors()) bytes += static_cast<int64_t>(t.nbytes);
  return bytes;
}

int64_t LlamaModel::ParameterCount() const {
  int64_t n = 0;
  for (const TensorInfo& t : file->tensors()) n += t.n_elements();
  return n;
}

bool SupportsSparseFfn(const LlamaModel& model, std::string* why) {
  if (!FfnIsReluFamily(model.config.activation)) {
    *why = std::string("its FFN activation is ") + FfnActivationName(model.config.activation) +
           ", which never outputs exact zeros";
    return false;
  }
  for (size_t i = 0; i < model.layers.size(); ++i) {
    if (!model.layers[i].ffn_down_t.present()) {
      *why = "layer " + std::to_string(i) +
             " has no ffn_down_t (PowerInfer's transposed down projection)";
      return false;
    }
  }
  return true;
}

bool SupportsNeuronSplit(const LlamaModel& model, bool gate_thresholds, std::string* why) {
  if (!gate_thresholds) return SupportsSparseFfn(model, why);
  const Status s = CheckCatsSupport(model);
  if (!s.ok()) *why = s.message();
  return s.ok();
}

Status CheckCatsSupport(const LlamaModel& model) {
  for (size_t i = 0; i < model.layers.size(); ++i) {
    if (!model.layers[i].ffn_down_t.present()) {
      return Status::Unsupported(
          "--sparse cats: layer %zu has no ffn_down_t: the sparse step reads one down row per "
          "computed neuron (pi-quantize IN.gguf OUT.gguf TYPE --down-t writes them)",
          i);
    }
  }
  return Status::Ok();
}

Status OverrideFfnActivation(const std::string& name, LlamaModel* model, FfnActivation* previous) {
  LlamaConfig& c = model->config;
  const bool gated = FfnIsGated(c.activation);
  FfnActivation a;
  if (!ParseFfnActivation(name, gated, &a)) {
    return Status::Error("--ffn-activation %s: this %s FFN takes %s", name.c_str(),
                         gated ? "gated" : "ungated",
                         gated ? "silu, relu, drelu or gelu" : "relu or gelu");
  }
  *previous = c.activation;
  c.activation = a;
  return Status::Ok();
}

}  // namespace pi
