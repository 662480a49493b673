// Synthetic llama GGUF files (see synthetic_model.h).
//
// Weights come from a counter-based generator: element i of a tensor is
// SplitMix64(key + (i + 1) * golden), key derived from the seed and the
// tensor's name. Unlike a sequential engine (std::mt19937_64 streams), this
// gives any element directly, which is what makes ffn_down_t a transpose of
// ffn_down and lets rows be generated on several threads with identical
// results. No std:: distributions are used: their output differs between
// standard libraries.
#include "common/synthetic_model.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "kernels/cpu/quant.h"

namespace pi {
namespace {

constexpr uint64_t kGolden = 0x9e3779b97f4a7c15ull;
constexpr int kByteVocab = 3 + 256 + 1;  // <unk>, <s>, </s>, 256 byte tokens, "▁"

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
  if (EndsWith(name, "_norm.weight")) {
    g.offset = 0.8;
    g.scale = 0.4;
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

// Adds matrix `name` [ne0, ne1] whose values are those of `source` [src_ne0, ...]:
// element (row, col) = source element (row, col), or (col, row) when
// `transpose` (ffn_down_t from ffn_down's generator).
Status AddMatrix(GgufWriter* w, const std::string& name, DType type, int64_t ne0, int64_t ne1,
                 const Generator& gen, bool transpose) {
  const std::vector<int64_t> ne =
      ne1 > 0 ? std::vector<int64_t>{ne0, ne1} : std::vector<int64_t>{ne0};
  const int64_t rows = ne1 > 0 ? ne1 : 1;
  return w->AddTensorFill(name, type, ne, [=](void* dst) {
    const int64_t row_bytes = RowBytes(type, ne0);
    ParallelRows(rows, ne0, [&](int64_t begin, int64_t end) {
      std::vector<float> buf(static_cast<size_t>(ne0));
      for (int64_t r = begin; r < end; ++r) {
        for (int64_t c = 0; c < ne0; ++c) {
          const uint64_t index =
              transpose ? static_cast<uint64_t>(c * rows + r) : static_cast<uint64_t>(r * ne0 + c);
          buf[static_cast<size_t>(c)] = gen.At(index);
        }
        QuantizeRow(type, buf.data(), static_cast<uint8_t*>(dst) + r * row_bytes, ne0);
      }
    });
    return Status::Ok();
  });
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
    default:
      return 0;
  }
}

float SyntheticWeight(uint64_t seed, const std::string& name, int64_t ne0, int64_t fan_in,
                      int64_t row, int64_t col) {
  return MakeGenerator(seed, name, fan_in).At(static_cast<uint64_t>(row * ne0 + col));
}

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
      o.type != DType::kQ8_0 && o.type != DType::kQ4_0) {
    return Status::Error("type %s is not supported (f32, f16, bf16, q8_0, q4_0)",
                         DTypeName(o.type));
  }
  const int block = GetDTypeInfo(static_cast<uint32_t>(o.type)).block_elems;
  // Rows run along n_embd everywhere except ffn_down (along n_ff).
  if (o.n_embd % block != 0 || (!o.down_t && o.n_ff % block != 0)) {
    return Status::Error("%s needs n_embd (%d)%s to be multiples of %d", DTypeName(o.type),
                         o.n_embd, o.down_t ? "" : " and n_ff", block);
  }
  if (o.activation != "silu" && o.activation != "relu" && o.activation != "drelu") {
    return Status::Error("activation '%s': expected silu, relu or drelu", o.activation.c_str());
  }
  if (o.byte_tokenizer && o.n_vocab < kByteVocab) {
    return Status::Error("the byte tokenizer needs n_vocab >= %d, got %d", kByteVocab, o.n_vocab);
  }
  if (!(o.rope_theta > 0) || !(o.norm_eps > 0)) {
    return Status::Error("rope theta %g and norm epsilon %g must be positive", o.rope_theta,
                         o.norm_eps);
  }
  return Status::Ok();
}

Status AddSyntheticModel(const SyntheticModelOptions& o, GgufWriter* w) {
  PI_RETURN_IF_ERROR(ValidateSyntheticModel(o));
  const int n_head_kv = o.n_head_kv == 0 ? o.n_head : o.n_head_kv;
  const int64_t d = o.n_embd;
  const int64_t ff = o.n_ff;
  const int64_t head_dim = d / o.n_head;
  const int64_t kv_dim = head_dim * n_head_kv;
  const bool quantized = o.type == DType::kQ8_0 || o.type == DType::kQ4_0;

  w->SetSparseMagic(o.down_t);
  w->Set("general.architecture", GgufValue::String("llama"));
  w->Set("general.name", GgufValue::String("synthetic"));
  w->Set("general.file_type", GgufValue::U32(GgufFileTypeOf(o.type)));
  if (quantized) w->Set("general.quantization_version", GgufValue::U32(2));
  w->Set("llama.context_length", GgufValue::U32(static_cast<uint32_t>(o.n_ctx)));
  w->Set("llama.embedding_length", GgufValue::U32(static_cast<uint32_t>(d)));
  w->Set("llama.block_count", GgufValue::U32(static_cast<uint32_t>(o.n_layer)));
  w->Set("llama.feed_forward_length", GgufValue::U32(static_cast<uint32_t>(ff)));
  w->Set("llama.attention.head_count", GgufValue::U32(static_cast<uint32_t>(o.n_head)));
  w->Set("llama.attention.head_count_kv", GgufValue::U32(static_cast<uint32_t>(n_head_kv)));
  w->Set("llama.rope.dimension_count", GgufValue::U32(static_cast<uint32_t>(head_dim)));
  w->Set("llama.rope.freq_base", GgufValue::F32(o.rope_theta));
  w->Set("llama.attention.layer_norm_rms_epsilon", GgufValue::F32(o.norm_eps));
  w->Set("llama.vocab_size", GgufValue::U32(static_cast<uint32_t>(o.n_vocab)));
  w->Set("pi.ffn_activation", GgufValue::String(o.activation));
  if (o.byte_tokenizer) AddByteTokenizer(o.n_vocab, w);

  // Matrix [ne0, ne1] with fan-in ne0 (the reduction axis).
  auto matrix = [&](const std::string& name, DType type, int64_t ne0, int64_t ne1) {
    return AddMatrix(w, name, type, ne0, ne1, MakeGenerator(o.seed, name, ne0), false);
  };
  auto norm = [&](const std::string& name) {
    return AddMatrix(w, name, DType::kF32, d, 0, MakeGenerator(o.seed, name, d), false);
  };
  PI_RETURN_IF_ERROR(matrix("token_embd.weight", o.type, d, o.n_vocab));
  for (int l = 0; l < o.n_layer; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    PI_RETURN_IF_ERROR(norm(p + "attn_norm.weight"));
    PI_RETURN_IF_ERROR(matrix(p + "attn_q.weight", o.type, d, d));
    PI_RETURN_IF_ERROR(matrix(p + "attn_k.weight", o.type, d, kv_dim));
    PI_RETURN_IF_ERROR(matrix(p + "attn_v.weight", o.type, d, kv_dim));
    PI_RETURN_IF_ERROR(matrix(p + "attn_output.weight", o.type, d, d));
    PI_RETURN_IF_ERROR(norm(p + "ffn_norm.weight"));
    PI_RETURN_IF_ERROR(matrix(p + "ffn_gate.weight", o.type, d, ff));
    PI_RETURN_IF_ERROR(matrix(p + "ffn_up.weight", o.type, d, ff));
    if (o.down_t) {
      // Row i = neuron i's output weights = column i of ffn_down [n_ff, n_embd].
      PI_RETURN_IF_ERROR(AddMatrix(w, p + "ffn_down_t.weight", o.type, d, ff,
                                   MakeGenerator(o.seed, p + "ffn_down.weight", ff), true));
    } else {
      PI_RETURN_IF_ERROR(matrix(p + "ffn_down.weight", o.type, ff, d));
    }
  }
  PI_RETURN_IF_ERROR(norm("output_norm.weight"));
  if (!o.tied) PI_RETURN_IF_ERROR(matrix("output.weight", o.type, d, o.n_vocab));
  return Status::Ok();
}

Status WriteSyntheticModel(const SyntheticModelOptions& o, const std::string& path) {
  GgufWriter w;
  PI_RETURN_IF_ERROR(AddSyntheticModel(o, &w));
  return w.Write(path);
}

}  // namespace pi
