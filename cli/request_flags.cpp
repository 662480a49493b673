#include "cli/request_flags.h"

#include "cli/read_file.h"

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <nlohmann/json.hpp>

#include "common/text/json_schema_grammar.h"

namespace pi {

const char kRequestUsage[] =
    "  -p, --prompt TEXT       prompt\n"
    "  -f, --file FILE         read the prompt from a file (- : standard input)\n"
    "  -n, --n-predict N       tokens to generate (-1 = until end of text or context, -2 =\n"
    "                          until the context is full; default -1)\n"
    "  --ignore-eos            keep generating past end of text\n"
    "  --stop TEXT             stop when the generated text contains TEXT (repeatable)\n"
    "  --temp X                temperature, <= 0 is greedy (default 0.8)\n"
    "  --top-k N               (default 40, 0 = off)\n"
    "  --top-p X               (default 0.95, 1 = off)\n"
    "  --min-p X               (default 0.05, 0 = off)\n"
    "  --repeat-penalty X      (default 1.0 = off)\n"
    "  --repeat-last-n N       (default 64, -1 = the context; capped at the context)\n"
    "  --presence-penalty X    (default 0.0 = off; [-2, 2])\n"
    "  --frequency-penalty X   (default 0.0 = off; [-2, 2])\n"
    "  -l, --logit-bias ID(+|-)BIAS\n"
    "                          add BIAS to token ID's logit, e.g. 15043+1 or 15043-inf\n"
    "                          (repeatable)\n"
    "  -s, --seed N            (default -1 = random)\n"
    "  --grammar GBNF          generate only text this grammar matches (llama.cpp's GBNF,\n"
    "                          start rule root)\n"
    "  --grammar-file FILE     the same, read from a file\n"
    "  -j, --json-schema SCHEMA\n"
    "                          generate only JSON valid under this JSON schema, e.g. '{}'\n";

namespace {

// llama.cpp's spelling: the token id, then the signed bias ("15043+1",
// "15043-inf").
void ParseLogitBias(const std::string& f, const std::string& v, ArgReader* args,
                    SamplerParams* sp) {
  if (args->failed()) return;
  const size_t sign = v.find_first_of("+-");
  char* end = nullptr;
  errno = 0;
  const long id = sign > 0 && sign != std::string::npos ? strtol(v.c_str(), &end, 10) : -1;
  if (sign == std::string::npos || sign == 0 || end != v.c_str() + sign || errno != 0 || id < 0 ||
      id > INT32_MAX) {
    args->Fail(f + " expects TOKEN_ID+BIAS or TOKEN_ID-BIAS, got '" + v + "'");
    return;
  }
  const char* b = v.c_str() + sign;
  const float bias = strtof(b, &end);
  if (end == b || *end != '\0') {
    args->Fail(f + " expects TOKEN_ID+BIAS or TOKEN_ID-BIAS, got '" + v + "'");
    return;
  }
  sp->logit_bias.emplace_back(static_cast<int32_t>(id), bias);
}

}  // namespace

bool ParseRequestFlag(const std::string& f, ArgReader* args, RequestFlags* r) {
  SamplerParams* sp = &r->sampling;
  if (f == "-p" || f == "--prompt")
    r->prompt = args->String(f);
  else if (f == "-f" || f == "--file")
    r->prompt_file = args->String(f);
  else if (f == "-n" || f == "--n-predict")
    r->n_predict = args->Int(f);
  else if (f == "--ignore-eos")
    r->ignore_eos = true;
  else if (f == "--stop") {
    const std::string stop = args->String(f);
    if (!args->failed() && stop.empty()) args->Fail("--stop expects a non-empty text");
    r->stops.push_back(stop);
  } else if (f == "--temp")
    sp->temp = args->Float(f);
  else if (f == "--top-k")
    sp->top_k = args->Int(f);
  else if (f == "--top-p")
    sp->top_p = args->Float(f);
  else if (f == "--min-p")
    sp->min_p = args->Float(f);
  else if (f == "--repeat-penalty")
    sp->repeat_penalty = args->Float(f);
  else if (f == "--repeat-last-n")
    sp->repeat_last_n = args->Int(f);
  else if (f == "--presence-penalty")
    sp->presence_penalty = args->Float(f);
  else if (f == "--frequency-penalty")
    sp->frequency_penalty = args->Float(f);
  else if (f == "-l" || f == "--logit-bias")
    ParseLogitBias(f, args->String(f), args, sp);
  else if (f == "--grammar")
    r->grammar = args->String(f);
  else if (f == "--grammar-file")
    r->grammar_file = args->String(f);
  else if (f == "-j" || f == "--json-schema")
    r->json_schema = args->String(f);
  else if (f == "-s" || f == "--seed")
    sp->seed = static_cast<uint32_t>(args->Int64(f));
  else
    return false;
  return true;
}

Status CheckRequestFlags(const RequestFlags& r) {
  // llama.cpp's -1 (until end of text) and -2 (until the context is full)
  // both end at the context here.
  if (r.n_predict < -2) return Status::Error("-n must be -2 or more, got %d", r.n_predict);
  return CheckSamplerParams(r.sampling);
}

Status ReadPromptFile(RequestFlags* r) {
  if (r->prompt_file.empty()) return Status::Ok();
  if (r->prompt_file == "-") return ReadStandardInput(&r->prompt);
  return ReadWholeFile(r->prompt_file, &r->prompt).WithContext("prompt file");
}

Status ReadGrammarFlags(RequestFlags* r) {
  const int given = !r->grammar.empty() + !r->grammar_file.empty() + !r->json_schema.empty();
  if (given > 1) return Status::Error("--grammar, --grammar-file and --json-schema: give one");
  if (!r->grammar_file.empty()) {
    return ReadWholeFile(r->grammar_file, &r->grammar).WithContext("grammar file");
  }
  if (r->json_schema.empty()) return Status::Ok();
  const nlohmann::ordered_json schema =
      nlohmann::ordered_json::parse(r->json_schema, nullptr, /*allow_exceptions=*/false);
  if (schema.is_discarded()) return Status::Error("--json-schema: not JSON");
  return JsonSchemaToGbnf(schema, &r->grammar);
}

}  // namespace pi
