// pi-synth: writes a llama-family or falcon GGUF of any shape with seeded
// random weights (common/offline/synthetic_model.h), for tests and benchmarks.
//
//   pi-synth -o tiny.gguf --n-embd 256 --n-layer 2 --tokenizer bytes
//   pi-synth -o relufalcon.gguf --arch falcon --n-head-kv 1 --activation relu --down-t
//   pi-synth -o big.gguf --n-vocab 32000 --n-embd 4096 --n-ff 11008 --n-layer 4 --type q4_0
#include <chrono>
#include <cstdio>
#include <string>

#include "cli/args.h"
#include "cli/tool_main.h"
#include "common/offline/synthetic_model.h"

namespace {

void Usage() {
  fprintf(stderr,
          "usage: pi-synth -o OUT.gguf [options]\n"
          "  -o, --output FILE     file to write\n"
          "  --n-vocab N           vocabulary size (default 512)\n"
          "  --n-embd N            embedding size (default 256)\n"
          "  --n-layer N           layers (default 2)\n"
          "  --n-head N            attention heads (default 4)\n"
          "  --n-head-kv N         key/value heads (default: n-head)\n"
          "  --n-ff N              feed-forward size (default 768)\n"
          "  --n-ctx N             <arch>.context_length (default 2048)\n"
          "  --type T              matrices: f32|f16|bf16|q8_0|q4_0|q4_K|q5_K|q6_K (default\n"
          "                        f32; norms are f32; the K types need n-embd, and n-ff\n"
          "                        without --down-t, multiples of 256)\n"
          "  --arch A              llama|qwen2|qwen3|gemma2|gemma3|phi3|falcon (default\n"
          "                        llama). qwen2: llama's tensors with Q/K/V biases, NeoX\n"
          "                        RoPE; qwen3: with Q/K head norms instead. gemma2: post-\n"
          "                        norms, GELU gate, soft-caps, sliding window on even\n"
          "                        layers; gemma3: with head norms, no caps, 5 of 6 layers\n"
          "                        slide; phi3: fused attn_qkv and gate+up, every layer\n"
          "                        slides. falcon: LayerNorm with biases,\n"
          "                        fused attn_qkv (jploski layout), NeoX RoPE, parallel\n"
          "                        residual, FFN without a gate\n"
          "  --attn-norm-2         falcon: a separate FFN norm per layer (as Falcon-40B)\n"
          "  --activation A        silu|relu|drelu|gelu, relu|gelu for falcon (default\n"
          "                        silu, gemma and falcon gelu; key pi.ffn_activation)\n"
          "  --sliding-window N    gemma2/gemma3/phi3: attention.sliding_window (default 4096)\n"
          "  --softcap A,F         gemma2: attention and final logit soft-caps (default 50,30)\n"
          "  --no-activation-key   leave pi.ffn_activation out (the loader's default decides:\n"
          "                        relu with --down-t, else silu / falcon gelu)\n"
          "  --tied                no output.weight (the token embedding is reused)\n"
          "  --down-t              write blk.N.ffn_down_t.weight [n_embd, n_ff] instead of\n"
          "                        ffn_down, with the PWRI magic\n"
          "  --rope-theta X        <arch>.rope.freq_base (default 10000)\n"
          "  --rope-scaling T      linear: <arch>.rope.scaling.type linear and .factor;\n"
          "                        llama3: rope_freqs.weight, Llama 3.1's per-pair factors\n"
          "  --rope-scale F        the scaling factor (default 8)\n"
          "  --rope-orig-ctx N     llama3: the original context (default 8192)\n"
          "  --norm-eps X          llama.attention.layer_norm_rms_epsilon or\n"
          "                        falcon.attention.layer_norm_epsilon (default 1e-5)\n"
          "  --seed N              weight seed (default 1)\n"
          "  --tokenizer none|bytes  bytes: an SPM vocab of byte tokens so pi-run can run it\n"
          "  --planted-sparsity S  relu/drelu: plant power-law firing rates whose mean share\n"
          "                        of silent neurons is S (e.g. 0.9; 0 = off, the default)\n"
          "  --planted-alpha A     the power law's exponent: rate ~ (rank + 1)^-A (default 1)\n");
}

bool ParseType(const std::string& s, pi::DType* t) {
  if (s == "f32")
    *t = pi::DType::kF32;
  else if (s == "f16")
    *t = pi::DType::kF16;
  else if (s == "bf16")
    *t = pi::DType::kBF16;
  else if (s == "q8_0")
    *t = pi::DType::kQ8_0;
  else if (s == "q4_0")
    *t = pi::DType::kQ4_0;
  else if (s == "q4_K" || s == "q4_k")
    *t = pi::DType::kQ4_K;
  else if (s == "q5_K" || s == "q5_k")
    *t = pi::DType::kQ5_K;
  else if (s == "q6_K" || s == "q6_k")
    *t = pi::DType::kQ6_K;
  else
    return false;
  return true;
}

}  // namespace

static int Run(int argc, char** argv) {
  pi::ArgReader args("pi-synth", argc, argv);
  pi::SyntheticModelOptions o;
  std::string out;
  bool activation_set = false;
  const int flags_rc = args.ReadFlags(
      [&](const std::string& f) {
        if (f == "-o" || f == "--output") {
          out = args.String(f);
        } else if (f == "--n-vocab") {
          o.n_vocab = args.Int(f);
        } else if (f == "--n-embd") {
          o.n_embd = args.Int(f);
        } else if (f == "--n-layer") {
          o.n_layer = args.Int(f);
        } else if (f == "--n-head") {
          o.n_head = args.Int(f);
        } else if (f == "--n-head-kv") {
          o.n_head_kv = args.Int(f);
        } else if (f == "--n-ff") {
          o.n_ff = args.Int(f);
        } else if (f == "--n-ctx") {
          o.n_ctx = args.Int(f);
        } else if (f == "--type") {
          const std::string t = args.String(f);
          if (!args.failed() && !ParseType(t, &o.type)) {
            args.Fail("--type expects f32, f16, bf16, q8_0 or q4_0, got '" + t + "'");
          }
        } else if (f == "--arch") {
          o.arch = args.String(f);
        } else if (f == "--sliding-window") {
          o.sliding_window = args.Int(f);
        } else if (f == "--softcap") {
          const std::string v = args.String(f);
          if (!args.failed() &&
              sscanf(v.c_str(), "%f,%f", &o.attn_softcap, &o.final_softcap) != 2) {
            args.Fail("--softcap expects two numbers A,F, got '" + v + "'");
          }
        } else if (f == "--attn-norm-2") {
          o.attn_norm_2 = true;
        } else if (f == "--activation") {
          o.activation = args.String(f);
          activation_set = true;
        } else if (f == "--no-activation-key") {
          o.activation_key = false;
        } else if (f == "--tied") {
          o.tied = true;
        } else if (f == "--down-t") {
          o.down_t = true;
        } else if (f == "--rope-theta") {
          o.rope_theta = args.Float(f);
        } else if (f == "--rope-scaling") {
          o.rope_scaling = args.String(f);
        } else if (f == "--rope-scale") {
          o.rope_factor = args.Float(f);
        } else if (f == "--rope-orig-ctx") {
          o.rope_original_ctx = args.Int(f);
        } else if (f == "--norm-eps") {
          o.norm_eps = args.Float(f);
        } else if (f == "--seed") {
          o.seed = static_cast<uint64_t>(args.Int64(f));
        } else if (f == "--tokenizer") {
          const std::string t = args.String(f);
          if (t == "bytes") {
            o.byte_tokenizer = true;
          } else if (t == "none") {
            o.byte_tokenizer = false;
          } else if (!args.failed()) {
            args.Fail("--tokenizer expects none or bytes, got '" + t + "'");
          }
        } else if (f == "--planted-sparsity") {
          o.planted_sparsity = args.Float(f);
        } else if (f == "--planted-alpha") {
          o.planted_alpha = args.Float(f);
        } else {
          return false;
        }
        return true;
      },
      Usage);
  if (flags_rc >= 0) return flags_rc;
  // falcon's and gemma's default
  if (!activation_set && (o.arch == "falcon" || o.arch == "gemma2" || o.arch == "gemma3")) {
    o.activation = "gelu";
  }
  if (out.empty()) {
    fprintf(stderr, "pi-synth: -o OUT.gguf is required (see --help)\n");
    return 2;
  }
  pi::Status s = pi::ValidateSyntheticModel(o);
  if (!s.ok()) {
    fprintf(stderr, "pi-synth: %s\n", s.message().c_str());
    return 2;
  }
  if (!pi::CheckOutputs("pi-synth", {out})) return 1;
  const auto start = std::chrono::steady_clock::now();
  s = pi::WriteSyntheticModel(o, out);
  if (!s.ok()) {
    fprintf(stderr, "pi-synth: %s\n", s.message().c_str());
    return 1;
  }
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  fprintf(stderr, "pi-synth: wrote %s (%s %s %s, %d layers, n_embd %d, n_ff %d) in %.1f s\n",
          out.c_str(), o.arch.c_str(), o.activation.c_str(), pi::DTypeName(o.type), o.n_layer,
          o.n_embd, o.n_ff, secs);
  return 0;
}

int main(int argc, char** argv) {
  return pi::RunTool("pi-synth", Run, argc, argv);
}
