// ParseGenerateRequest: a client's GenerateRequest (proto/pi.proto) checked
// and turned into the engine's terms — the prompt tokenized (or its ids
// checked against the vocabulary) and fitted to the context, n_predict,
// the stop strings, and the sampling parameters over llama.cpp's defaults
// (repeat_last_n resolved against the context, so the sampler is sized by
// n_ctx at most).
// Sizes are checked before work: a prompt text that cannot fit the context
// is refused before it is tokenized, stop strings are bounded in number and
// length. The error names the field; the server answers it as
// INVALID_ARGUMENT.
// Fuzzed by request_fuzz.
#pragma once

#include "common/base/status.h"
#include "common/text/sampler.h"
#include "common/text/tokenizer.h"
#include "coordinator/engine/generation.h"
#include "coordinator/serve/work_gate.h"
#include "proto/pi.pb.h"

namespace pi {

// At most this many stop strings, each at most this many bytes: each is
// looked for after every token.
inline constexpr size_t kMaxStopStrings = 16;
inline constexpr size_t kMaxStopBytes = 1024;
// Text a tokenize call (HTTP /tokenize, gRPC Tokenize) takes at most.
inline constexpr size_t kMaxTokenizeBytes = 1 << 20;

// The most bytes of prompt text that could fit a context of n_ctx tokens
// (n_ctx times the most bytes one token stands for); 0: no bound is known.
size_t MaxPromptBytes(const Tokenizer& tok, int n_ctx);

// `literal`: spans of the prompt text read as text even with parse_special
// (a chat's messages between its template's markers).
Status ParseGenerateRequest(const v1::GenerateRequest& in, int n_vocab, int n_ctx,
                            const Tokenizer& tok, GenerationRequest* out, SamplerParams* sampling,
                            const std::vector<TextSpan>* literal = nullptr);

}  // namespace pi

namespace pi {

// What the front ends run under the tokenize gate (a few at once for the
// whole server): *busy (and an error) when the gate is full, else the call
// itself. Tokenize also refuses a text over kMaxTokenizeBytes first.
Status ParseGenerateRequestGated(WorkGate* gate, const v1::GenerateRequest& in, int n_vocab,
                                 int n_ctx, const Tokenizer& tok, GenerationRequest* out,
                                 SamplerParams* sampling, const std::vector<TextSpan>* literal,
                                 bool* busy);
Status TokenizeGated(WorkGate* gate, const Tokenizer& tok, const std::string& text, bool add_bos,
                     std::vector<int32_t>* ids, bool* busy);
// A pass of the gate for tokenizing `bytes` of a client's text (several
// texts together: an infill's, an embeddings request's): an error when they
// are over kMaxTokenizeBytes, or (*busy) when the gate is full.
Status EnterTokenizeGate(WorkGate* gate, size_t bytes, WorkGate::Pass* pass, bool* busy);

}  // namespace pi
