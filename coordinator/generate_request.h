// ParseGenerateRequest: a client's GenerateRequest (proto/pi.proto) checked
// and turned into the engine's terms — the prompt tokenized (or its ids
// checked against the vocabulary) and fitted to the context, n_predict,
// the stop strings, and the sampling parameters over llama.cpp's defaults
// (repeat_last_n resolved against the context, so the sampler is sized by
// n_ctx at most).
// The error names the field; the server answers it as INVALID_ARGUMENT.
// Fuzzed by request_fuzz.
#pragma once

#include "common/sampler.h"
#include "common/status.h"
#include "common/tokenizer.h"
#include "coordinator/generation.h"
#include "proto/pi.pb.h"

namespace pi {

Status ParseGenerateRequest(const v1::GenerateRequest& in, int n_vocab, int n_ctx,
                            const Tokenizer& tok, GenerationRequest* out, SamplerParams* sampling);

}  // namespace pi
