// libFuzzer target for what a client sends the coordinator: any bytes that
// arrive as a GenerateRequest (protobuf's parser, then ParseGenerateRequest:
// the prompt tokenized by the demo model's SentencePiece vocabulary, ids,
// n_predict, stops, sampling) or as a TokenizeRequest. A request is refused
// with an error or gives a job the engine can take: a prompt of 1..n_ctx
// tokens in the vocabulary, n_predict >= -2, non-empty stops, sampling
// parameters in range.
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "common/text/sampler.h"
#include "common/text/tokenizer.h"
#include "coordinator/serve/generate_request.h"
#include "proto/pi.pb.h"
#include "tests/fuzz/demo_tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const pi::Tokenizer& tok = pi::FuzzDemoTokenizer();
  if (size < 1) return 0;
  if (data[0] & 1) {  // a TokenizeRequest: the text as the server encodes it
    pi::v1::TokenizeRequest req;
    if (!req.ParseFromArray(data + 1, static_cast<int>(size - 1))) return 0;
    std::vector<int32_t> ids;
    if (tok.Encode(req.text(), req.has_add_bos() ? req.add_bos() : tok.add_bos_token(), &ids)
            .ok()) {
      for (int32_t id : ids) {
        if (id < 0 || id >= tok.n_vocab()) abort();
        (void)tok.TokenToPiece(id);
      }
    }
    return 0;
  }
  pi::v1::GenerateRequest req;
  if (!req.ParseFromArray(data + 1, static_cast<int>(size - 1))) return 0;
  pi::GenerationRequest job;
  pi::SamplerParams sampling;
  if (!pi::ParseGenerateRequest(req, tok.n_vocab(), pi::kFuzzContext, tok, &job, &sampling).ok()) {
    return 0;
  }
  if (job.prompt.empty() || job.prompt.size() > static_cast<size_t>(pi::kFuzzContext)) abort();
  for (int32_t id : job.prompt) {
    if (id < 0 || id >= tok.n_vocab()) abort();
  }
  if (job.n_predict < -2) abort();
  for (const std::string& stop : job.stops) {
    if (stop.empty()) abort();
  }
  if (!pi::CheckSamplerParams(sampling).ok()) abort();
  if (sampling.repeat_last_n < 0 || sampling.repeat_last_n > pi::kFuzzContext) abort();
  // The sampler takes what was accepted.
  pi::Sampler sampler(sampling, tok.n_vocab());
  (void)sampler;
  return 0;
}
