// pi-convert: a Hugging Face model folder to a GGUF file.
//
//   pi-convert HF_DIR -o OUT.gguf [--outtype f16] [--down-t] [--ffn-activation relu]
//
// The work is common/offline/hf_convert.h's; this is flags in, one call, a line out.
#include <cstdio>
#include <string>

#include "cli/args.h"
#include "cli/tool_main.h"
#include "common/offline/hf_convert.h"

namespace {

bool ParseOutType(const std::string& s, pi::DType* t) {
  for (pi::DType d :
       {pi::DType::kF32, pi::DType::kF16, pi::DType::kBF16, pi::DType::kQ8_0, pi::DType::kQ4_0}) {
    if (s == pi::DTypeName(d)) {
      *t = d;
      return true;
    }
  }
  return false;
}

void Usage() {
  fprintf(stderr,
          "usage: pi-convert HF_DIR -o OUT.gguf [options]\n"
          "  HF_DIR's class: LlamaForCausalLM, MistralForCausalLM, BambooForCausalLM\n"
          "          (dReLU), FalconForCausalLM, RWForCausalLM (the first Falcon releases'\n"
          "          own code; without an \"activation\" key: gelu, or --ffn-activation relu)\n"
          "  HF_DIR: config.json, model.safetensors (or shards with\n"
          "          model.safetensors.index.json), tokenizer.model or tokenizer.json\n"
          "  --outtype T          f32 | f16 (default) | bf16 | q8_0 | q4_0 for the matrices\n"
          "                       (norms stay f32; rows that are not whole blocks: f16)\n"
          "  --down-t             store each FFN down projection as PowerInfer's ffn_down_t\n"
          "                       (a row per neuron) in a PWRI file: for --sparse and\n"
          "                       pi-train-predictor\n"
          "  --ffn-activation A   relu | silu | drelu (falcon: relu | gelu), instead of\n"
          "                       config.json's hidden_act (falcon: activation)\n"
          "  --name NAME          general.name (default: the folder's name)\n"
          "  --predictors DIR     the original PowerInfer's predictors (DIR/model_N.pt with\n"
          "                       fc1, fc2; DIR/config.json's sparse_threshold): a PWRI file\n"
          "                       with them (needs --down-t); read by pi-pt-export (torch)\n"
          "  --activations DIR    its activation counts (DIR/activation_N.pt) as OUT's\n"
          "                       statistics, OUT.stats.gguf (what --vram-budget places by)\n");
}

int Run(int argc, char** argv) {
  pi::ArgReader args("pi-convert", argc, argv);
  std::string dir, out, outtype = "f16";
  pi::HfConvertOptions o;
  const int flags_rc = args.ReadFlags(
      [&](const std::string& f) {
        if (f == "-o" || f == "--outfile") {
          out = args.String(f);
        } else if (f == "--outtype") {
          outtype = args.String(f);
        } else if (f == "--down-t") {
          o.down_t = true;
        } else if (f == "--ffn-activation") {
          o.activation = args.String(f);
        } else if (f == "--predictors") {
          o.predictors_dir = args.String(f);
        } else if (f == "--activations") {
          o.activations_dir = args.String(f);
        } else if (f == "--name") {
          o.name = args.String(f);
        } else if (!f.empty() && f[0] == '-') {
          return false;
        } else if (dir.empty()) {
          dir = f;
        } else {
          args.Fail("one model folder, got '" + dir + "' and '" + f + "'");
        }
        return true;
      },
      Usage);
  if (flags_rc >= 0) return flags_rc;
  if (dir.empty() || out.empty()) {
    Usage();
    return 2;
  }
  if (!ParseOutType(outtype, &o.outtype)) {
    fprintf(stderr, "pi-convert: --outtype '%s': expected f32, f16, bf16, q8_0 or q4_0\n",
            outtype.c_str());
    return 2;
  }
  if (!pi::CheckOutputs("pi-convert", {out})) return 1;
  const pi::Status s = pi::ConvertHfModel(dir, o, out);
  if (!s.ok()) {
    fprintf(stderr, "pi-convert: %s\n", s.message().c_str());
    return 1;
  }
  fprintf(stderr, "pi-convert: wrote %s\n", out.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return pi::RunTool("pi-convert", Run, argc, argv);
}
