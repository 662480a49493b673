// pi-quantize: converts a GGUF's weight matrices to Q8_0, Q4_0 or F16.
//
//   pi-quantize model-f16.gguf model-q4_0.gguf q4_0
//
// Every 2-D tensor whose name ends in ".weight" and whose rows are whole
// blocks of the target type is converted (through f32, with ggml's reference
// quantizers, so files match llama.cpp's); everything else (norms, 1-D
// tensors, tensors of types we cannot decode) is copied unchanged. All
// metadata is kept; general.file_type and general.quantization_version are
// updated; the PWRI magic and PowerInfer's extra tensors are kept.
//
//   pi-quantize model-f16.gguf model-f16-down-t.gguf f16 --down-t
//
// --down-t also rewrites every blk.N.ffn_down [n_ff, n_embd] as PowerInfer's
// transposed blk.N.ffn_down_t [n_embd, n_ff] (row i = neuron i's outputs),
// which sparse FFN execution needs; the magic is left as it was (PWRI would
// tell PowerInfer to expect predictor tensors).
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "cli/args.h"
#include "cli/tool_main.h"
#include "common/format/gguf.h"
#include "common/format/transpose_tensor.h"
#include "common/model/llama_model.h"
#include "common/offline/synthetic_model.h"
#include "common/plan/activation_stats.h"
#include "kernels/cpu/quant.h"

namespace {

void Usage() {
  fprintf(stderr,
          "usage: pi-quantize IN.gguf OUT.gguf TYPE [--down-t] [--set-activation A]\n"
          "  TYPE: q8_0 | q4_0 | f16, or llama.cpp's block formats q4_1 | q5_0 | q5_1 | q4_k |\n"
          "        q5_k | q6_k, or llama.cpp's mixes q4_k_m | q5_k_m (attn_v and ffn_down of\n"
          "        a third of the layers and output.weight in q6_k); K-quant rows that are not\n"
          "        whole 256s fall back to q5_0, q5_1, q8_0 for q4_k, q5_k, q6_k, as in llama.cpp\n"
          "Converts every 2-D *.weight tensor whose ne0 is a multiple of TYPE's block size;\n"
          "other tensors (norms, 1-D) are copied unchanged. Metadata is kept.\n"
          "  --down-t  also store each blk.N.ffn_down as PowerInfer's transposed\n"
          "            blk.N.ffn_down_t (one row per FFN neuron, for sparse execution)\n"
          "  --set-activation A  write pi.ffn_activation = A (relu, silu, drelu, gelu): the\n"
          "            FFN activation every tool then runs the file with\n");
}

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// llama.cpp's "medium" K-quant recipes (Q4_K_M, Q5_K_M): attn_v and
// ffn_down of the first and last eighth of the layers and of every third
// layer between, and output.weight, in Q6_K; every other matrix the base type.
bool UseMoreBits(int layer, int n_layer) {
  return layer < n_layer / 8 || layer >= 7 * n_layer / 8 || (layer - n_layer / 8) % 3 == 2;
}

// The type `name` gets under a medium mix (the base type when not `medium`).
pi::DType MixType(bool medium, pi::DType base, const std::string& name, int n_layer) {
  if (!medium) return base;
  if (name == "output.weight") return pi::DType::kQ6_K;
  const bool v = EndsWith(name, ".attn_v.weight");
  const bool down = EndsWith(name, ".ffn_down.weight") || EndsWith(name, ".ffn_down_t.weight");
  if ((v || down) && name.compare(0, 4, "blk.") == 0) {
    const int layer = atoi(name.c_str() + 4);
    if (UseMoreBits(layer, n_layer)) return pi::DType::kQ6_K;
  }
  return base;
}

// A K-quant needs rows of whole 256s; for other rows llama-quantize falls
// back to a 32-block format of about the same size, and so does this tool
// (then to the source type, with a note, when even 32 does not divide).
pi::DType FitRows(pi::DType want, int64_t row_len) {
  if (row_len % pi::GetDTypeInfo(static_cast<uint32_t>(want)).block_elems == 0) return want;
  if (row_len % 32 != 0) return want;
  switch (want) {
    case pi::DType::kQ4_K:
      return pi::DType::kQ5_0;
    case pi::DType::kQ5_K:
      return pi::DType::kQ5_1;
    case pi::DType::kQ6_K:
      return pi::DType::kQ8_0;
    default:
      return want;
  }
}

bool ParseType(const std::string& s, pi::DType* t) {
  for (pi::DType d :
       {pi::DType::kQ8_0, pi::DType::kQ4_0, pi::DType::kF16, pi::DType::kQ4_1, pi::DType::kQ5_0,
        pi::DType::kQ5_1, pi::DType::kQ4_K, pi::DType::kQ5_K, pi::DType::kQ6_K}) {
    std::string name = pi::DTypeName(d);
    for (char& c : name) c = static_cast<char>(tolower(c));
    if (s == name) {
      *t = d;
      return true;
    }
  }
  return false;
}

bool IsQuantized(pi::DType t) {
  return pi::GetDTypeInfo(static_cast<uint32_t>(t)).block_elems > 1;
}

// Converts rows [0, n_rows) on several threads; each row is independent.
void ConvertRows(const pi::TensorInfo& t, pi::DType to, uint8_t* dst) {
  const int64_t ne0 = t.ne[0];
  const int64_t n_rows = t.n_rows();
  const int64_t src_row = t.row_bytes();
  const int64_t dst_row = pi::RowBytes(to, ne0);
  auto work = [&](int64_t begin, int64_t end) {
    std::vector<float> buf(static_cast<size_t>(ne0));
    for (int64_t r = begin; r < end; ++r) {
      pi::DequantizeRow(t.type, t.data + r * src_row, buf.data(), ne0);
      pi::QuantizeRow(to, buf.data(), dst + r * dst_row, ne0);
    }
  };
  int n_threads = static_cast<int>(std::min<unsigned>(16, std::thread::hardware_concurrency()));
  if (n_threads <= 1 || t.n_elements() < (1 << 20)) {
    work(0, n_rows);
    return;
  }
  n_threads = static_cast<int>(std::min<int64_t>(n_threads, n_rows));
  std::vector<std::thread> threads;
  for (int k = 0; k < n_threads; ++k) {
    threads.emplace_back(work, n_rows * k / n_threads, n_rows * (k + 1) / n_threads);
  }
  for (std::thread& th : threads) th.join();
}

// The input's activation statistics, when it has some and the output keeps
// its tensors' names and shapes (not with --down-t), serve the output too
// (CheckStatsMatchModel takes a copy in other types): written beside it.
void CarryStatsOver(const std::string& in_path, const std::string& out_path) {
  const std::string from = pi::DefaultStatsPath(in_path);
  const std::string to = pi::DefaultStatsWritePath(out_path);
  struct stat st;
  if (stat(from.c_str(), &st) != 0 || stat(to.c_str(), &st) == 0) return;
  pi::ActivationStats stats;
  std::unique_ptr<pi::GgufFile> out;
  if (!pi::ReadActivationStats(from, &stats).ok() || stats.shape_fingerprint == 0 ||
      !pi::GgufFile::Open(out_path, &out).ok() ||
      pi::ShapeFingerprint(*out) != stats.shape_fingerprint) {
    return;
  }
  if (pi::WriteActivationStats(stats, to).ok()) {
    fprintf(stderr, "pi-quantize: %s serves the copy too: written as %s\n", from.c_str(),
            to.c_str());
  }
}

bool IsFfnDown(const std::string& name) {
  return name.compare(0, 4, "blk.") == 0 && EndsWith(name, ".ffn_down.weight");
}

// What the tensors became, for the summary.
struct Converted {
  bool any_quantized = false;
  int n_converted = 0;
  int n_fallback = 0;  // written in a fallback type (rows not whole K-quant blocks)
};

// Tensor i of `in` added to `w` in the type `mixed` asks for: ffn_down
// transposed with --down-t, a matrix converted where its rows fit the type's
// blocks, anything else copied.
pi::Status AddTensor(const pi::GgufFile& in, int i, pi::DType mixed, bool down_t, pi::GgufWriter* w,
                     Converted* n) {
  const pi::TensorInfo& t = in.tensors()[i];
  const int n_tensors = static_cast<int>(in.tensors().size());
  if (down_t && IsFfnDown(t.name) && t.n_dims == 2 && pi::IsComputeDType(t.type) &&
      t.n_elements() > 0) {
    // Rows of the result run along n_embd = ne[1]: blocks must fit there.
    const pi::DType want = FitRows(mixed, t.ne[1]);
    const int block = pi::GetDTypeInfo(static_cast<uint32_t>(want)).block_elems;
    n->n_fallback += want != mixed;
    const pi::DType out_type = t.ne[1] % block == 0 ? want : pi::DType::kF32;
    const std::string name = t.name.substr(0, t.name.size() - 7) + "_t.weight";
    n->any_quantized |= IsQuantized(out_type);
    ++n->n_converted;
    return w->AddTensorFill(name, out_type, {t.ne[1], t.ne[0]},
                            [&t, name, out_type, i, n_tensors](void* dst) {
                              fprintf(stderr, "[%*d/%d] %-32s %-14s %5s -> %s (transposed)\n",
                                      static_cast<int>(std::to_string(n_tensors).size()), i + 1,
                                      n_tensors, name.c_str(), t.ShapeString().c_str(),
                                      pi::DTypeName(t.type), pi::DTypeName(out_type));
                              pi::TransposeTensor(t, out_type, static_cast<uint8_t*>(dst));
                              return pi::Status::Ok();
                            });
  }
  const bool matrix = t.n_dims == 2 && EndsWith(t.name, ".weight");
  const pi::DType want = matrix ? FitRows(mixed, t.ne[0]) : mixed;
  const int block = pi::GetDTypeInfo(static_cast<uint32_t>(want)).block_elems;
  const bool convert =
      matrix && t.ne[0] % block == 0 && pi::IsComputeDType(t.type) && t.type != want;
  n->n_fallback += convert && want != mixed;
  const pi::DType out_type = convert ? want : t.type;
  n->any_quantized |= IsQuantized(out_type);
  n->n_converted += convert;
  if (!convert && t.n_dims == 2 && EndsWith(t.name, ".weight") && t.type != want) {
    fprintf(stderr, "pi-quantize: keeping %s as %s (%s)\n", t.name.c_str(), pi::DTypeName(t.type),
            pi::IsComputeDType(t.type) ? "ne0 is not a multiple of the block size"
                                       : "cannot decode this type");
  }
  std::vector<int64_t> ne(t.ne, t.ne + t.n_dims);
  // Tensors are produced while the file is written, one at a time, straight
  // from the input mapping: memory stays at one tensor.
  return w->AddTensorFill(t.name, out_type, ne, [&t, out_type, convert, i, n_tensors](void* dst) {
    fprintf(stderr, "[%*d/%d] %-32s %-14s %5s -> %s\n",
            static_cast<int>(std::to_string(n_tensors).size()), i + 1, n_tensors, t.name.c_str(),
            t.ShapeString().c_str(), pi::DTypeName(t.type), pi::DTypeName(out_type));
    if (convert) {
      ConvertRows(t, out_type, static_cast<uint8_t*>(dst));
    } else {
      memcpy(dst, t.data, t.nbytes);
    }
    return pi::Status::Ok();
  });
}

}  // namespace

static int Run(int argc, char** argv) {
  pi::ArgReader args("pi-quantize", argc, argv);
  bool down_t = false;
  std::string set_activation;
  std::vector<std::string> positional;
  const int flags_rc = args.ReadFlags(
      [&](const std::string& a) {
        if (a == "--down-t")
          down_t = true;
        else if (a == "--set-activation")
          set_activation = args.String(a);
        else if (!a.empty() && a[0] == '-')
          return false;
        else
          positional.push_back(a);
        return true;
      },
      Usage);
  if (flags_rc >= 0) return flags_rc;
  if (positional.size() != 3) {
    Usage();
    return 2;
  }
  const std::string in_path = positional[0];
  const std::string out_path = positional[1];
  if (!pi::CheckOutputs("pi-quantize", {out_path})) return 1;
  pi::DType target;
  // LLAMA_FTYPE_MOSTLY_Q4_K_M / Q5_K_M for the mixes; 0: a single type.
  uint32_t mix_file_type = 0;
  if (positional[2] == "q4_k_m" || positional[2] == "q5_k_m") {
    mix_file_type = positional[2] == "q4_k_m" ? 15 : 17;
    positional[2] = positional[2].substr(0, 4);
  }
  if (!ParseType(positional[2], &target)) {
    fprintf(stderr,
            "pi-quantize: unknown type '%s' (q8_0, q4_0, f16, q4_1, q5_0, q5_1, q4_k, "
            "q5_k, q6_k, q4_k_m or q5_k_m)\n",
            positional[2].c_str());
    return 2;
  }

  std::unique_ptr<pi::GgufFile> in;
  pi::Status s = pi::GgufFile::Open(in_path, &in);
  if (!s.ok()) {
    fprintf(stderr, "pi-quantize: %s\n", s.message().c_str());
    return 1;
  }

  pi::GgufWriter w;
  w.SetSparseMagic(in->is_sparse_magic());
  const int n_tensors = static_cast<int>(in->tensors().size());
  int n_layer = 0;
  if (const pi::GgufValue* arch = in->Find("general.architecture")) {
    if (const pi::GgufValue* n = in->Find(arch->str + ".block_count")) {
      n_layer = static_cast<int>(n->u);
    }
  }
  Converted n;
  for (int i = 0; i < n_tensors && s.ok(); ++i) {
    const pi::DType mixed = MixType(mix_file_type != 0, target, in->tensors()[i].name, n_layer);
    s = AddTensor(*in, i, mixed, down_t, &w, &n);
  }
  if (!s.ok()) {
    fprintf(stderr, "pi-quantize: %s\n", s.message().c_str());
    return 1;
  }

  for (const auto& kv : in->metadata()) {
    // A file with nothing quantized left carries no quantization version.
    if (kv.first == "general.quantization_version" && !n.any_quantized) continue;
    w.Set(kv.first, kv.second);
  }
  w.Set("general.file_type",
        pi::GgufValue::U32(mix_file_type != 0 ? mix_file_type : pi::GgufFileTypeOf(target)));
  if (!set_activation.empty()) {
    // The forms the FFN can have: a gate (phi3's fused into ffn_up) or not
    // (falcon's relu(up x)).
    std::string arch;
    (void)in->GetStringOpt("general.architecture", &arch);
    const bool gated = arch != "falcon";
    pi::FfnActivation a;
    if (!pi::ParseFfnActivation(set_activation, gated, &a)) {
      fprintf(stderr, "pi-quantize: --set-activation %s: this %s FFN takes %s\n",
              set_activation.c_str(), gated ? "gated" : "ungated",
              gated ? "silu, relu, drelu or gelu" : "relu or gelu");
      return 2;
    }
    w.Set(pi::kFfnActivationKey, pi::GgufValue::String(set_activation));
  }
  if (n.any_quantized) w.Set("general.quantization_version", pi::GgufValue::U32(2));

  const auto start = std::chrono::steady_clock::now();
  s = w.Write(out_path);
  if (!s.ok()) {
    fprintf(stderr, "pi-quantize: %s\n", s.message().c_str());
    return 1;
  }
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  fprintf(stderr, "pi-quantize: wrote %s: %d of %d tensors converted to %s in %.1f s\n",
          out_path.c_str(), n.n_converted, n_tensors, pi::DTypeName(target), secs);
  if (n.n_fallback > 0) {
    fprintf(stderr,
            "pi-quantize: %d of them have rows that are not whole 256s: written as q5_0, q5_1 or "
            "q8_0 for q4_K, q5_K or q6_K, as llama-quantize falls back\n",
            n.n_fallback);
  }
  CarryStatsOver(in_path, out_path);
  return 0;
}

int main(int argc, char** argv) {
  return pi::RunTool("pi-quantize", Run, argc, argv);
}
