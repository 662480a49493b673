// Synthetic llama and falcon GGUF files (see synthetic_model.h).
//
// Weights come from a counter-based generator: element i of a tensor is
// SplitMix64(key + (i + 1) * golden), key derived from the seed and the
// tensor's name. Unlike a sequential engine (std::mt19937_64 streams), this
// gives any element directly, which is what makes ffn_down_t a transpose of
// ffn_down and lets rows be generated on several threads with identical
// results. No std:: distributions are used: their output differs between
// standard libraries.
#include "common/offline/synthetic_model.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/base/memory_limits.h"
#include "common/offline/rope_scaling.h"
#include "kernels/cpu/quant.h"

namespace pi {
namespace {

constexpr uint64_t kGolden = 0x9e3779b97f4a7c15ull;
constexpr int kByteVocab = 3 + 256 + 1;  // <unk>, <s>, </s>, 256 byte tokens, "▁"
// Planted sparsity: layer outputs are scaled by this / sqrt(n_embd).
constexpr double kPlantedOutputScale = 0.5;

uint64_t SplitMix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

uint64_t Fnv1a64(const std::string& s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return h;
}

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// How one tensor's values are produced: value = offset + scale * u, with u
// uniform in [0, 1) (24 bits, exact in float).
struct Generator {
  uint64_t key = 0;
  double offset = 0;
  double scale = 0;

  float At(uint64_t index) const {
    const uint64_t bits = SplitMix64(key + (index + 1) * kGolden);
    const double u = static_cast<double>(bits >> 40) * (1.0 / 16777216.0);
    return static_cast<float>(offset + scale * u);
  }
};

Generator MakeGenerator(uint64_t seed, const std::string& name, int64_t fan_in) {
  Generator g;
  g.key = SplitMix64(seed ^ Fnv1a64(name));
  if (EndsWith(name, "_norm.weight") || EndsWith(name, "_norm_2.weight")) {
    g.offset = 0.8;
    g.scale = 0.4;
  } else if (EndsWith(name, "_norm.bias") || EndsWith(name, "_norm_2.bias")) {
    g.offset = -0.1;
    g.scale = 0.2;
  } else {
    const double a = std::sqrt(3.0 / static_cast<double>(fan_in));
    g.offset = -a;
    g.scale = 2.0 * a;
  }
  return g;
}

// Runs fn(begin, end) over [0, n_rows) on up to hardware_concurrency threads;
// small tensors stay on the calling thread.
template <class Fn>
void ParallelRows(int64_t n_rows, int64_t row_elems, Fn fn) {
  const int64_t total = n_rows * row_elems;
  int n_threads = static_cast<int>(std::min<unsigned>(16, std::thread::hardware_concurrency()));
  if (total < (1 << 20) || n_threads <= 1) {
    fn(int64_t{0}, n_rows);
    return;
  }
  n_threads = static_cast<int>(std::min<int64_t>(n_threads, n_rows));
  std::vector<std::thread> threads;
  for (int t = 0; t < n_threads; ++t) {
    const int64_t begin = n_rows * t / n_threads;
    const int64_t end = n_rows * (t + 1) / n_threads;
    threads.emplace_back([=, &fn] { fn(begin, end); });
  }
  for (std::thread& th : threads) th.join();
}

// Element (row, col) of a matrix being written.
using ValueFn = std::function<float(int64_t row, int64_t col)>;

// Adds matrix `name` [ne0, ne1] (a vector when ne1 == 0) with values value(row, col).
Status AddMatrix(GgufWriter* w, const std::string& name, DType type, int64_t ne0, int64_t ne1,
                 ValueFn value) {
  const std::vector<int64_t> ne =
      ne1 > 0 ? std::vector<int64_t>{ne0, ne1} : std::vector<int64_t>{ne0};
  const int64_t rows = ne1 > 0 ? ne1 : 1;
  return w->AddTensorFill(name, type, ne, [=](void* dst) {
    const int64_t row_bytes = RowBytes(type, ne0);
    ParallelRows(rows, ne0, [&](int64_t begin, int64_t end) {
      std::vector<float> buf(static_cast<size_t>(ne0));
      for (int64_t r = begin; r < end; ++r) {
        for (int64_t c = 0; c < ne0; ++c) buf[static_cast<size_t>(c)] = value(r, c);
        QuantizeRow(type, buf.data(), static_cast<uint8_t*>(dst) + r * row_bytes, ne0);
      }
    });
    return Status::Ok();
  });
}

// Φ^-1(p) for p in (0, 1), by bisection on the normal CDF (exact enough for
// planting: 60 halvings of [-40, 40]).
double InverseNormalCdf(double p) {
  double lo = -40.0, hi = 40.0;
  for (int i = 0; i < 60; ++i) {
    const double mid = 0.5 * (lo + hi);
    if (0.5 * std::erfc(-mid / std::sqrt(2.0)) < p) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  return 0.5 * (lo + hi);
}

void AddByteTokenizer(int n_vocab, GgufWriter* w) {
  std::vector<std::string> tokens = {"<unk>", "<s>", "</s>"};
  std::vector<int32_t> types = {2, 3, 3};  // unknown, control, control
  for (int b = 0; b < 256; ++b) {
    char buf[8];
    snprintf(buf, sizeof(buf), "<0x%02X>", b);
    tokens.push_back(buf);
    types.push_back(6);  // byte
  }
  // SPM's space marker U+2581 as a normal piece: without it a space would go
  // out as byte tokens E2 96 81 and decode back as "\u2581", not " ".
  tokens.push_back("\xe2\x96\x81");
  types.push_back(1);  // normal
  // The rest of the vocabulary (the embedding has n_vocab rows) is unused
  // pieces, which text never tokenizes into.
  for (int k = 0; static_cast<int>(tokens.size()) < n_vocab; ++k) {
    tokens.push_back("<unused_" + std::to_string(k) + ">");
    types.push_back(5);
  }
  w->Set("tokenizer.ggml.model", GgufValue::String("llama"));
  w->Set("tokenizer.ggml.tokens", GgufValue::StringArray(tokens));
  w->Set("tokenizer.ggml.scores", GgufValue::F32Array(std::vector<float>(tokens.size(), 0.0f)));
  w->Set("tokenizer.ggml.token_type", GgufValue::I32Array(types));
  w->Set("tokenizer.ggml.unknown_token_id", GgufValue::U32(0));
  w->Set("tokenizer.ggml.bos_token_id", GgufValue::U32(1));
  w->Set("tokenizer.ggml.eos_token_id", GgufValue::U32(2));
  w->Set("tokenizer.ggml.add_bos_token", GgufValue::Bool(true));
  w->Set("tokenizer.ggml.add_eos_token", GgufValue::Bool(false));
}

}  // namespace

uint32_t GgufFileTypeOf(DType t) {
  switch (t) {
    case DType::kF32:
      return 0;  // LLAMA_FTYPE_ALL_F32
    case DType::kF16:
      return 1;  // LLAMA_FTYPE_MOSTLY_F16
    case DType::kQ4_0:
      return 2;  // LLAMA_FTYPE_MOSTLY_Q4_0
    case DType::kQ8_0:
      return 7;  // LLAMA_FTYPE_MOSTLY_Q8_0
    case DType::kBF16:
      return 32;  // LLAMA_FTYPE_MOSTLY_BF16
    case DType::kQ4_1:
      return 3;  // LLAMA_FTYPE_MOSTLY_Q4_1
    case DType::kQ5_0:
      return 8;  // LLAMA_FTYPE_MOSTLY_Q5_0
    case DType::kQ5_1:
      return 9;  // LLAMA_FTYPE_MOSTLY_Q5_1
    case DType::kQ4_K:
      return 14;  // LLAMA_FTYPE_MOSTLY_Q4_K_S (every matrix Q4_K)
    case DType::kQ5_K:
      return 16;  // LLAMA_FTYPE_MOSTLY_Q5_K_S
    case DType::kQ6_K:
      return 18;  // LLAMA_FTYPE_MOSTLY_Q6_K
    default:
      return 0;
  }
}

float SyntheticWeight(uint64_t seed, const std::string& name, int64_t ne0, int64_t fan_in,
                      int64_t row, int64_t col) {
  return MakeGenerator(seed, name, fan_in).At(static_cast<uint64_t>(row * ne0 + col));
}

namespace {

Status ValidateRopeScaling(const SyntheticModelOptions& o) {
  if (o.rope_scaling.empty()) return Status::Ok();
  if (o.rope_scaling != "linear" && o.rope_scaling != "llama3") {
    return Status::Invalid("rope scaling '%s': expected linear or llama3", o.rope_scaling.c_str());
  }
  if (o.rope_scaling == "llama3" && o.arch != "llama") {
    return Status::Invalid("llama3 rope scaling is a llama file's (rope_freqs.weight)");
  }
  if (!(o.rope_factor >= 1.0f && o.rope_factor <= 1e4f) || o.rope_original_ctx < 1) {
    return Status::Invalid("rope scaling factor %g (1 to 1e4) and original context %d (>= 1)",
                           o.rope_factor, o.rope_original_ctx);
  }
  return Status::Ok();
}

}  // namespace

Status ValidateSyntheticModel(const SyntheticModelOptions& o) {
  if (o.n_vocab <= 0 || o.n_embd <= 0 || o.n_layer <= 0 || o.n_head <= 0 || o.n_head_kv < 0 ||
      o.n_ff <= 0 || o.n_ctx <= 0) {
    return Status::Error(
        "sizes must be positive: n_vocab=%d n_embd=%d n_layer=%d n_head=%d n_head_kv=%d n_ff=%d "
        "n_ctx=%d",
        o.n_vocab, o.n_embd, o.n_layer, o.n_head, o.n_head_kv, o.n_ff, o.n_ctx);
  }
  const int n_head_kv = o.n_head_kv == 0 ? o.n_head : o.n_head_kv;
  if (o.n_embd % o.n_head != 0 || (o.n_embd / o.n_head) % 2 != 0) {
    return Status::Error("n_embd %d must be n_head %d times an even head size", o.n_embd, o.n_head);
  }
  if (o.n_head % n_head_kv != 0) {
    return Status::Error("n_head %d is not a multiple of n_head_kv %d", o.n_head, n_head_kv);
  }
  if (o.type != DType::kF32 && o.type != DType::kF16 && o.type != DType::kBF16 &&
      o.type != DType::kQ8_0 && o.type != DType::kQ4_0 && o.type != DType::kQ4_K &&
      o.type != DType::kQ5_K && o.type != DType::kQ6_K) {
    return Status::Error("type %s is not supported (f32, f16, bf16, q8_0, q4_0, q4_K, q5_K, q6_K)",
                         DTypeName(o.type));
  }
  const int block = GetDTypeInfo(static_cast<uint32_t>(o.type)).block_elems;
  // Rows run along n_embd everywhere except ffn_down (along n_ff).
  if (o.n_embd % block != 0 || (!o.down_t && o.n_ff % block != 0)) {
    return Status::Error("%s needs n_embd (%d)%s to be multiples of %d", DTypeName(o.type),
                         o.n_embd, o.down_t ? "" : " and n_ff", block);
  }
  const bool falcon = o.arch == "falcon";
  const bool gemma = o.arch == "gemma2" || o.arch == "gemma3";
  if (o.arch != "llama" && o.arch != "qwen2" && o.arch != "qwen3" && !gemma && o.arch != "phi3" &&
      !falcon) {
    return Status::Error("arch '%s': expected llama, qwen2, qwen3, gemma2, gemma3, phi3 or falcon",
                         o.arch.c_str());
  }
  if (!falcon && o.activation != "silu" && o.activation != "relu" && o.activation != "drelu" &&
      o.activation != "gelu") {
    return Status::Error("activation '%s': expected silu, relu, drelu or gelu",
                         o.activation.c_str());
  }
  if (o.sliding_window < 1 || !(o.attn_softcap >= 0.0f) || !(o.final_softcap >= 0.0f)) {
    return Status::Error("sliding window %d must be >= 1 and soft-caps %g, %g >= 0",
                         o.sliding_window, o.attn_softcap, o.final_softcap);
  }
  if ((gemma || o.arch == "phi3") && o.planted_sparsity != 0.0) {
    return Status::Error("planted sparsity is written for llama and falcon layers only");
  }
  if (falcon && o.activation != "relu" && o.activation != "gelu") {
    return Status::Error("activation '%s': falcon's FFN has no gate, expected relu or gelu",
                         o.activation.c_str());
  }
  if (!falcon && o.attn_norm_2) return Status::Error("attn_norm_2 is a falcon tensor");
  if (!o.activation_key) {
    const char* implied = o.down_t ? "relu" : (falcon || gemma ? "gelu" : "silu");
    if (o.activation != implied) {
      return Status::Error(
          "without pi.ffn_activation a %s file%s means %s, not the activation '%s' asked for",
          o.arch.c_str(), o.down_t ? " with the PWRI magic" : "", implied, o.activation.c_str());
    }
  }
  if (o.byte_tokenizer && o.n_vocab < kByteVocab) {
    return Status::Error("the byte tokenizer needs n_vocab >= %d, got %d", kByteVocab, o.n_vocab);
  }
  if (!(o.rope_theta > 0) || !(o.norm_eps > 0)) {
    return Status::Error("rope theta %g and norm epsilon %g must be positive", o.rope_theta,
                         o.norm_eps);
  }
  PI_RETURN_IF_ERROR(ValidateRopeScaling(o));
  if (o.planted_sparsity != 0.0) {
    if (!(o.planted_sparsity > 0.0 && o.planted_sparsity < 1.0)) {
      return Status::Error("planted sparsity %g must be in (0, 1)", o.planted_sparsity);
    }
    if (o.activation != "relu" && o.activation != "drelu") {
      return Status::Error("planted sparsity needs a ReLU-family activation (relu or drelu)");
    }
    if (!(o.planted_alpha >= 0.0)) {
      return Status::Error("planted alpha %g must be >= 0", o.planted_alpha);
    }
  }
  if (o.predictor_rank < 0 || o.predictor_rank > 4096 || (o.predictor_rank > 0 && !o.down_t)) {
    return Status::Error("predictor rank %d: expected 0 (none) or 1 to 4096 with down_t",
                         o.predictor_rank);
  }
  // Tensors are generated one at a time, in f32 and then in their type: the
  // largest one (the embedding, a FFN matrix or falcon's fused QKV) bounds
  // the memory, with the byte tokenizer's strings and the planted rates.
  const int64_t d = o.n_embd;
  const int64_t largest =
      std::max({d * o.n_vocab, d * o.n_ff, d * (d + 2 * (d / o.n_head) * n_head_kv)});
  const int64_t vocab_bytes = o.byte_tokenizer ? int64_t{64} * o.n_vocab : 0;
  const int64_t planted_bytes = o.planted_sparsity != 0.0 ? int64_t{24} * o.n_ff : 0;
  const int64_t tensor_list_bytes = int64_t{o.n_layer} * 12 * 512;  // names, shapes, callbacks
  return CheckMemory("a synthetic model of this shape (its largest tensor has " +
                         std::to_string(largest) + " values)",
                     largest > INT64_MAX / 16
                         ? -1
                         : largest * 8 + vocab_bytes + planted_bytes + tensor_list_bytes);
}

std::vector<double> PlantedFiringRates(const SyntheticModelOptions& o, int layer) {
  const int n = o.n_ff;
  const double target = 1.0 - o.planted_sparsity;
  // Mean of min(1, c (r+1)^-alpha) grows with c: bisect for the target mean.
  std::vector<double> by_rank(n);
  auto fill = [&](double c) {
    double sum = 0;
    for (int r = 0; r < n; ++r) {
      by_rank[r] = std::min(1.0, c * std::pow(r + 1.0, -o.planted_alpha));
      sum += by_rank[r];
    }
    return sum / n;
  };
  double lo = 0.0, hi = 1.0;
  while (fill(hi) < target) hi *= 2.0;
  for (int i = 0; i < 100; ++i) {
    const double mid = 0.5 * (lo + hi);
    (fill(mid) < target ? lo : hi) = mid;
  }
  fill(hi);
  // Scatter the ranks: neuron order by a hash of (seed, layer, neuron).
  std::vector<int> order(n);
  for (int i = 0; i < n; ++i) order[i] = i;
  const uint64_t key = SplitMix64(o.seed ^ Fnv1a64("planted") ^ static_cast<uint64_t>(layer));
  std::sort(order.begin(), order.end(), [&](int a, int b) {
    const uint64_t ha = SplitMix64(key + static_cast<uint64_t>(a) * kGolden);
    const uint64_t hb = SplitMix64(key + static_cast<uint64_t>(b) * kGolden);
    return ha != hb ? ha < hb : a < b;
  });
  std::vector<double> rates(n);
  for (int r = 0; r < n; ++r) rates[order[r]] = by_rank[r];
  return rates;
}

// The keys llama.cpp's converter writes for the architecture and shape.
static void SetSyntheticMetadata(const SyntheticModelOptions& o, GgufWriter* w) {
  const int n_head_kv = o.n_head_kv == 0 ? o.n_head : o.n_head_kv;
  const int64_t d = o.n_embd;
  const int64_t ff = o.n_ff;
  const int64_t head_dim = d / o.n_head;
  const bool quantized = o.type != DType::kF32 && o.type != DType::kF16 && o.type != DType::kBF16;
  const bool falcon = o.arch == "falcon";
  w->SetSparseMagic(o.down_t);
  w->Set("general.architecture", GgufValue::String(o.arch));
  w->Set("general.name", GgufValue::String("synthetic"));
  w->Set("general.file_type", GgufValue::U32(GgufFileTypeOf(o.type)));
  if (quantized) w->Set("general.quantization_version", GgufValue::U32(2));
  const std::string a = o.arch + ".";
  w->Set(a + "context_length", GgufValue::U32(static_cast<uint32_t>(o.n_ctx)));
  w->Set(a + "embedding_length", GgufValue::U32(static_cast<uint32_t>(d)));
  w->Set(a + "block_count", GgufValue::U32(static_cast<uint32_t>(o.n_layer)));
  w->Set(a + "feed_forward_length", GgufValue::U32(static_cast<uint32_t>(ff)));
  w->Set(a + "attention.head_count", GgufValue::U32(static_cast<uint32_t>(o.n_head)));
  w->Set(a + "attention.head_count_kv", GgufValue::U32(static_cast<uint32_t>(n_head_kv)));
  if (falcon) {
    // As llama.cpp's converter writes falcon: no rope.dimension_count (the
    // head size), LayerNorm epsilon, and the fused QKV layout's name.
    w->Set(a + "rope.freq_base", GgufValue::F32(o.rope_theta));
    w->Set(a + "attention.layer_norm_epsilon", GgufValue::F32(o.norm_eps));
    w->Set(a + "tensor_data_layout", GgufValue::String("jploski"));
  } else {
    w->Set(a + "rope.dimension_count", GgufValue::U32(static_cast<uint32_t>(head_dim)));
    w->Set(a + "rope.freq_base", GgufValue::F32(o.rope_theta));
    w->Set(a + "attention.layer_norm_rms_epsilon", GgufValue::F32(o.norm_eps));
    w->Set(a + "vocab_size", GgufValue::U32(static_cast<uint32_t>(o.n_vocab)));
  }
  if (o.rope_scaling == "linear") {
    w->Set(a + "rope.scaling.type", GgufValue::String("linear"));
    w->Set(a + "rope.scaling.factor", GgufValue::F32(o.rope_factor));
  }
  if (o.arch == "gemma2") {
    w->Set(a + "attn_logit_softcapping", GgufValue::F32(o.attn_softcap));
    w->Set(a + "final_logit_softcapping", GgufValue::F32(o.final_softcap));
  }
  if (o.arch == "gemma2" || o.arch == "gemma3" || o.arch == "phi3") {
    w->Set(a + "attention.sliding_window", GgufValue::U32(static_cast<uint32_t>(o.sliding_window)));
  }
  if (o.activation_key) w->Set("pi.ffn_activation", GgufValue::String(o.activation));
}

namespace {

// Llama 3.1's rope_freqs.weight, for rope_scaling "llama3".
Status AddRopeFreqs(const SyntheticModelOptions& o, int64_t head_dim, GgufWriter* w) {
  if (o.rope_scaling != "llama3") return Status::Ok();
  const std::vector<float> f =
      Llama3RopeFactors({o.rope_factor, 1.0, 4.0, static_cast<double>(o.rope_original_ctx)},
                        static_cast<int>(head_dim), o.rope_theta);
  return AddMatrix(w, "rope_freqs.weight", DType::kF32, head_dim / 2, 0,
                   [f](int64_t, int64_t c) { return f[static_cast<size_t>(c)]; });
}

// An F32 vector of n generated values (MakeGenerator's for `name` and fan_in).
Status AddVector(const SyntheticModelOptions& o, const std::string& name, int64_t n, int64_t fan_in,
                 GgufWriter* w) {
  const Generator g = MakeGenerator(o.seed, name, fan_in);
  return AddMatrix(w, name, DType::kF32, n, 0,
                   [g](int64_t, int64_t c) { return g.At(static_cast<uint64_t>(c)); });
}

// qwen2's Q/K/V biases (fan-in 3: uniform in [-1, 1), as large as the
// products they are added to, so a forward that dropped them would show), or
// qwen3's per-head RMSNorm weights of Q and K (as the other norms: 0.8 to 1.2).
Status AddQwenAttention(const SyntheticModelOptions& o, const std::string& p, int64_t q_dim,
                        int64_t kv_dim, int64_t head_dim, GgufWriter* w) {
  if (o.arch == "qwen2") {
    PI_RETURN_IF_ERROR(AddVector(o, p + "attn_q.bias", q_dim, 3, w));
    PI_RETURN_IF_ERROR(AddVector(o, p + "attn_k.bias", kv_dim, 3, w));
    return AddVector(o, p + "attn_v.bias", kv_dim, 3, w);
  }
  if (o.arch == "qwen3" || o.arch == "gemma3") {
    PI_RETURN_IF_ERROR(AddVector(o, p + "attn_q_norm.weight", head_dim, head_dim, w));
    return AddVector(o, p + "attn_k_norm.weight", head_dim, head_dim, w);
  }
  return Status::Ok();
}

}  // namespace

Status AddSyntheticModel(const SyntheticModelOptions& o, GgufWriter* w) {
  PI_RETURN_IF_ERROR(ValidateSyntheticModel(o));
  const int n_head_kv = o.n_head_kv == 0 ? o.n_head : o.n_head_kv;
  const int64_t d = o.n_embd;
  const int64_t ff = o.n_ff;
  const int64_t head_dim = d / o.n_head;
  const int64_t kv_dim = head_dim * n_head_kv;
  const bool falcon = o.arch == "falcon";
  const bool gemma = o.arch == "gemma2" || o.arch == "gemma3";
  SetSyntheticMetadata(o, w);
  if (o.byte_tokenizer) AddByteTokenizer(o.n_vocab, w);

  const bool planted = o.planted_sparsity != 0.0;
  // Matrix [ne0, ne1] with fan-in ne0 (the reduction axis); `fix` may
  // override elements (planted sparsity), returning true when it did.
  using FixFn = std::function<bool(int64_t row, int64_t col, float* v)>;
  auto matrix = [&](const std::string& name, int64_t ne0, int64_t ne1, FixFn fix = nullptr) {
    const Generator g = MakeGenerator(o.seed, name, ne0);
    return AddMatrix(w, name, o.type, ne0, ne1, [=](int64_t r, int64_t c) {
      float v;
      if (fix && fix(r, c, &v)) return v;
      return g.At(static_cast<uint64_t>(r * ne0 + c));
    });
  };
  auto norm = [&](const std::string& name) {
    const Generator g = MakeGenerator(o.seed, name, d);
    const bool bias = EndsWith(name, ".bias");
    return AddMatrix(w, name, DType::kF32, d, 0, [=](int64_t, int64_t c) {
      // The planted bias channel passes the norm unscaled.
      if (planted && c == 0) return bias ? 0.0f : 1.0f;
      return g.At(static_cast<uint64_t>(c));
    });
  };
  // A falcon norm: weight and bias.
  auto layer_norm = [&](const std::string& name) {
    PI_RETURN_IF_ERROR(norm(name + ".weight"));
    return norm(name + ".bias");
  };
  // Planted: column 0 of gate (and, for drelu, up) is a per-neuron bias.
  auto bias_column = [&](const std::vector<double>& rates) -> FixFn {
    if (rates.empty()) return nullptr;
    std::vector<float> bias(rates.size());
    for (size_t i = 0; i < rates.size(); ++i) {
      const double p = std::min(std::max(rates[i], 1e-6), 1.0 - 1e-6);
      bias[i] = static_cast<float>(InverseNormalCdf(p) / std::sqrt(static_cast<double>(d)));
    }
    return [bias](int64_t r, int64_t c, float* v) {
      if (c != 0) return false;
      *v = bias[static_cast<size_t>(r)];
      return true;
    };
  };
  // Planted: only the FFN gate (and drelu's up) reads the bias channel:
  // column 0 of the other input projections is zero, so its large value does
  // not swamp attention.
  const FixFn zero_col0 = planted ? FixFn([](int64_t, int64_t c, float* v) {
    if (c != 0) return false;
    *v = 0.0f;
    return true;
  })
                                  : nullptr;
  // Planted: nothing writes residual dimension 0 (row 0 of an output
  // projection), and the layers' outputs are scaled down so the residual
  // stays about as large as the embedding (|h_rest| ~ h[0] = 1) at every
  // depth: that ratio is what turns the gate's bias into a firing rate.
  const float out_scale = static_cast<float>(kPlantedOutputScale / std::sqrt(double(d)));
  auto scaled_output = [&](const std::string& name, int64_t ne0) -> FixFn {
    if (!planted) return nullptr;
    const Generator g = MakeGenerator(o.seed, name, ne0);
    return [g, ne0, out_scale](int64_t r, int64_t c, float* v) {
      *v = r == 0 ? 0.0f : out_scale * g.At(static_cast<uint64_t>(r * ne0 + c));
      return true;
    };
  };

  PI_RETURN_IF_ERROR(AddRopeFreqs(o, head_dim, w));
  PI_RETURN_IF_ERROR(matrix("token_embd.weight", d, o.n_vocab,
                            planted ? FixFn([](int64_t, int64_t c, float* v) {
                              if (c != 0) return false;
                              *v = 1.0f;  // the bias channel
                              return true;
                            })
                                    : nullptr));
  for (int l = 0; l < o.n_layer; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    std::vector<double> gate_rates, up_rates;
    if (planted) {
      gate_rates = PlantedFiringRates(o, l);
      if (o.activation == "drelu") {
        for (double& r : gate_rates) r = std::sqrt(r);
        up_rates = gate_rates;
      }
    }
    if (falcon) {
      // Planted: ungated relu, so up carries the per-neuron bias column.
      PI_RETURN_IF_ERROR(layer_norm(p + "attn_norm"));
      if (o.attn_norm_2) PI_RETURN_IF_ERROR(layer_norm(p + "attn_norm_2"));
      PI_RETURN_IF_ERROR(matrix(p + "attn_qkv.weight", d, d + 2 * kv_dim, zero_col0));
      PI_RETURN_IF_ERROR(
          matrix(p + "attn_output.weight", d, d, scaled_output(p + "attn_output.weight", d)));
      PI_RETURN_IF_ERROR(matrix(p + "ffn_up.weight", d, ff, bias_column(gate_rates)));
    } else if (o.arch == "phi3") {
      // Fused as llama.cpp's converter writes Phi-3: Q, K, V rows; gate, up rows.
      PI_RETURN_IF_ERROR(norm(p + "attn_norm.weight"));
      PI_RETURN_IF_ERROR(matrix(p + "attn_qkv.weight", d, d + 2 * kv_dim));
      PI_RETURN_IF_ERROR(matrix(p + "attn_output.weight", d, d));
      PI_RETURN_IF_ERROR(norm(p + "ffn_norm.weight"));
      PI_RETURN_IF_ERROR(matrix(p + "ffn_up.weight", d, 2 * ff));
    } else {
      PI_RETURN_IF_ERROR(norm(p + "attn_norm.weight"));
      PI_RETURN_IF_ERROR(matrix(p + "attn_q.weight", d, d, zero_col0));
      PI_RETURN_IF_ERROR(matrix(p + "attn_k.weight", d, kv_dim, zero_col0));
      PI_RETURN_IF_ERROR(matrix(p + "attn_v.weight", d, kv_dim, zero_col0));
      PI_RETURN_IF_ERROR(AddQwenAttention(o, p, d, kv_dim, head_dim, w));
      PI_RETURN_IF_ERROR(
          matrix(p + "attn_output.weight", d, d, scaled_output(p + "attn_output.weight", d)));
      if (gemma) PI_RETURN_IF_ERROR(norm(p + "post_attention_norm.weight"));
      PI_RETURN_IF_ERROR(norm(p + "ffn_norm.weight"));
      PI_RETURN_IF_ERROR(matrix(p + "ffn_gate.weight", d, ff, bias_column(gate_rates)));
      PI_RETURN_IF_ERROR(
          matrix(p + "ffn_up.weight", d, ff, up_rates.empty() ? zero_col0 : bias_column(up_rates)));
      if (gemma) PI_RETURN_IF_ERROR(norm(p + "post_ffw_norm.weight"));
    }
    if (o.down_t) {
      // Row i = neuron i's output weights = column i of ffn_down [n_ff, n_embd].
      const Generator g = MakeGenerator(o.seed, p + "ffn_down.weight", ff);
      PI_RETURN_IF_ERROR(
          AddMatrix(w, p + "ffn_down_t.weight", o.type, d, ff, [=](int64_t r, int64_t c) {
            if (planted) return c == 0 ? 0.0f : out_scale * g.At(static_cast<uint64_t>(c * ff + r));
            return g.At(static_cast<uint64_t>(c * ff + r));
          }));
    } else {
      PI_RETURN_IF_ERROR(
          matrix(p + "ffn_down.weight", ff, d, scaled_output(p + "ffn_down.weight", ff)));
    }
    if (o.predictor_rank > 0) {
      auto f32_matrix = [&](const std::string& name, int64_t ne0, int64_t ne1) {
        const Generator g = MakeGenerator(o.seed, name, ne0);
        return AddMatrix(w, name, DType::kF32, ne0, ne1, [=](int64_t r, int64_t c) {
          return g.At(static_cast<uint64_t>(r * ne0 + c));
        });
      };
      PI_RETURN_IF_ERROR(f32_matrix(p + "fc1.weight", d, o.predictor_rank));
      PI_RETURN_IF_ERROR(f32_matrix(p + "fc2.weight", o.predictor_rank, ff));
    }
  }
  PI_RETURN_IF_ERROR(falcon ? layer_norm("output_norm") : norm("output_norm.weight"));
  if (!o.tied) PI_RETURN_IF_ERROR(matrix("output.weight", d, o.n_vocab));
  return Status::Ok();
}

int64_t SyntheticModelWeightBytes(const SyntheticModelOptions& o) {
  const int64_t d = o.n_embd, ff = o.n_ff;
  const int64_t kv_dim = d / o.n_head * (o.n_head_kv == 0 ? o.n_head : o.n_head_kv);
  const int64_t row = RowBytes(o.type, d);  // one row along n_embd
  const int64_t down = o.down_t ? row * ff : RowBytes(o.type, ff) * d;
  const bool falcon = o.arch == "falcon";
  const int64_t predictor = 4 * int64_t{o.predictor_rank} * (d + ff);
  const int64_t layer = row * (2 * d + 2 * kv_dim) + row * ff * (falcon ? 1 : 2) + down + predictor;
  const int64_t embd = row * o.n_vocab * (o.tied ? 1 : 2);
  int64_t layers = 0;
  if (__builtin_mul_overflow(layer, int64_t{o.n_layer}, &layers) || layers > INT64_MAX - embd) {
    return -1;
  }
  return layers + embd;
}

Status WriteSyntheticModel(const SyntheticModelOptions& o, const std::string& path) {
  PI_RETURN_IF_ERROR(ValidateSyntheticModel(o));
  PI_RETURN_IF_ERROR(CheckDiskSpace("writing " + path, path, SyntheticModelWeightBytes(o)));
  GgufWriter w;
  PI_RETURN_IF_ERROR(AddSyntheticModel(o, &w));
  return w.Write(path);
}

}  // namespace pi
