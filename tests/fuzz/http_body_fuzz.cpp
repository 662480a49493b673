// libFuzzer target for the HTTP API's request bodies: any bytes that arrive
// as a /v1/chat/completions body (messages rendered by each chat template),
// a native /completion or /infill body, a /v1/embeddings or /v1/responses
// body, or a /v1/completions body (nlohmann's JSON parser,
// ParseCompletionRequest, then the validator every front end shares, with
// the demo model's tokenizer) are refused with a 400/404 and a message, or
// give a job the engine can take (an infill's prompt built within its
// budget, with a copy of the demo tokenizer given FIM markers).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "common/text/infill.h"
#include "common/text/sampler.h"
#include "common/text/tokenizer.h"
#include "coordinator/serve/embeddings_api.h"
#include "coordinator/serve/generate_request.h"
#include "coordinator/serve/openai_api.h"
#include "coordinator/serve/responses_api.h"
#include "tests/fuzz/demo_tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const pi::Tokenizer& tok = pi::FuzzDemoTokenizer();
  const std::string body(reinterpret_cast<const char*>(data), size);
  pi::CompletionRequest cr;
  int status = 0;
  // A body as /v1/chat/completions reads it (messages rendered with each
  // template in turn), and as /v1/completions reads it; and as a model's
  // chat template whose family is detected.
  const pi::ChatTemplate t = static_cast<pi::ChatTemplate>(size % pi::kChatTemplateCount);
  pi::ChatTemplate detected;  // (a model's template text is the body's as well)
  if (pi::DetectChatTemplate(body, &detected).ok() &&
      static_cast<int>(detected) >= pi::kChatTemplateCount) {
    abort();
  }
  pi::CompletionRequest chat;
  int chat_status = 0;
  const pi::Status cs = pi::ParseChatRequest(body, "demo", &t, &chat, &chat_status);
  if (cs.ok() != (chat_status == 200) || (cs.ok() && !chat.request.parse_special())) abort();
  // And as llama-server's native /completion reads it.
  pi::CompletionRequest native;
  int native_status = 0;
  const pi::Status ns = pi::ParseNativeCompletionRequest(body, "demo", &native, &native_status);
  if (ns.ok() != (native_status == 200) || (!ns.ok() && ns.message().empty())) abort();
  if (native.n_probs < 0 || native.n_probs > 20) abort();
  // And as /v1/responses reads it: rewritten as a chat body, which the chat
  // path reads (or refuses) in turn.
  std::string chat_body;
  pi::ResponsesEcho echo;
  if (pi::ResponsesToChat(body, &chat_body, &echo).ok()) {
    if (!echo.fields.contains("tools")) abort();
    pi::CompletionRequest responses;
    int responses_status = 0;
    const pi::Status rs =
        pi::ParseChatRequest(chat_body, "demo", &t, &responses, &responses_status);
    if (rs.ok() != (responses_status == 200) || (!rs.ok() && rs.message().empty())) abort();
  }
  // And as /v1/embeddings and llama-server's /embeddings read it: at least
  // one input, at most the cap.
  for (const bool native_shape : {false, true}) {
    pi::EmbeddingRequest embed;
    int embed_status = 0;
    const pi::Status es =
        pi::ParseEmbeddingRequest(body, "demo", &embed, &embed_status, false, native_shape);
    if (es.ok() != (embed_status == 200) || (!es.ok() && es.message().empty())) abort();
    if (es.ok() && (embed.inputs.empty() || embed.inputs.size() > pi::kMaxEmbeddingInputs)) {
      abort();
    }
  }
  // And as /infill reads it: its prompt within the budget, ending in the middle's marker.
  pi::CompletionRequest infill;
  int infill_status = 0;
  const pi::Status is = pi::ParseInfillRequest(body, "demo", &infill, &infill_status);
  if (is.ok() != (infill_status == 200) || (!is.ok() && is.message().empty())) abort();
  if (is.ok()) {
    static const std::unique_ptr<pi::Tokenizer> fim = [&] {
      pi::TokenizerVocab v = tok.vocab();
      v.fim_pre = 100, v.fim_suf = 101, v.fim_mid = 102;
      std::unique_ptr<pi::Tokenizer> t;
      if (!pi::Tokenizer::FromVocab(v, &t).ok()) abort();
      return t;
    }();
    std::vector<int32_t> ids;
    bool truncated = false;
    const int budget = static_cast<int>(size % 64);
    if (pi::InfillPrompt(*fim, infill.infill_input, size % 2, budget, &ids, &truncated).ok() &&
        (ids.size() > static_cast<size_t>(budget) || ids.back() != 102)) {
      abort();
    }
  }
  const pi::Status s = pi::ParseCompletionRequest(body, "demo", &cr, &status);
  if (!s.ok()) {
    if ((status != 400 && status != 404) || s.message().empty()) abort();
    return 0;
  }
  if (status != 200) abort();
  pi::GenerationRequest job;
  pi::SamplerParams sampling;
  if (!pi::ParseGenerateRequest(cr.request, tok.n_vocab(), pi::kFuzzContext, tok, &job, &sampling)
           .ok()) {
    return 0;
  }
  if (job.prompt.empty() || job.prompt.size() > static_cast<size_t>(pi::kFuzzContext)) abort();
  if (job.n_predict < -2) abort();
  for (const std::string& stop : job.stops) {
    if (stop.empty()) abort();
  }
  if (!pi::CheckSamplerParams(sampling).ok()) abort();
  if (!pi::CheckLogitBias(sampling, tok.n_vocab()).ok()) abort();
  if (sampling.repeat_last_n < 0 || sampling.repeat_last_n > pi::kFuzzContext) abort();
  // The responses the server would build from it are valid JSON text.
  pi::CompletionInfo info;
  info.id = "cmpl-1";
  info.model = "demo";
  (void)pi::CompletionJson(info, body, "stop", 1, 1);
  (void)pi::ErrorJson(400, body);
  return 0;
}
