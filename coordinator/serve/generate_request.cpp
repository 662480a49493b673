#include "coordinator/serve/generate_request.h"

#include <cstdint>
#include <string>

#include "common/text/grammar.h"

namespace pi {
namespace {

// The request's sampling parameters over llama.cpp's defaults.
SamplerParams SamplingFrom(const v1::SamplingParams& s) {
  SamplerParams p;
  if (s.has_temperature()) p.temp = s.temperature();
  if (s.has_top_k()) p.top_k = s.top_k();
  if (s.has_top_p()) p.top_p = s.top_p();
  if (s.has_min_p()) p.min_p = s.min_p();
  if (s.has_repeat_penalty()) p.repeat_penalty = s.repeat_penalty();
  if (s.has_repeat_last_n()) p.repeat_last_n = s.repeat_last_n();
  if (s.has_seed()) p.seed = static_cast<uint32_t>(s.seed());  // (checked: -1 .. 2^32 - 1)
  if (s.has_frequency_penalty()) p.frequency_penalty = s.frequency_penalty();
  if (s.has_presence_penalty()) p.presence_penalty = s.presence_penalty();
  for (const v1::LogitBias& b : s.logit_bias()) p.logit_bias.emplace_back(b.token(), b.bias());
  return p;
}

}  // namespace

size_t MaxPromptBytes(const Tokenizer& tok, int n_ctx) {
  return tok.max_token_bytes() * static_cast<size_t>(n_ctx < 0 ? 0 : n_ctx);
}

Status ParseGenerateRequest(const v1::GenerateRequest& in, int n_vocab, int n_ctx,
                            const Tokenizer& tok, GenerationRequest* out, SamplerParams* sampling,
                            const std::vector<TextSpan>* literal) {
  if (in.input_case() == v1::GenerateRequest::INPUT_NOT_SET) {
    return Status::Error("no prompt: set prompt (text) or prompt_ids");
  }
  if (in.has_prompt_ids()) {
    out->prompt.assign(in.prompt_ids().ids().begin(), in.prompt_ids().ids().end());
    for (int32_t id : out->prompt) {
      if (id < 0 || id >= n_vocab) {
        return Status::Error("prompt_ids: token %d is outside the vocabulary (0..%d)", id,
                             n_vocab - 1);
      }
    }
  } else {
    const size_t bound = MaxPromptBytes(tok, n_ctx);
    if (bound > 0 && in.prompt().size() > bound) {
      return Status::Error(
          "the prompt is %zu bytes: more than the context (%d tokens) can hold (at most %zu "
          "bytes with this vocabulary)",
          in.prompt().size(), n_ctx, bound);
    }
    PI_RETURN_IF_ERROR(
        tok.Encode(in.prompt(), tok.add_bos_token(), &out->prompt, in.parse_special(), literal)
            .WithContext("prompt"));
  }
  if (out->prompt.empty()) return Status::Error("the prompt is empty (no tokens)");
  if (static_cast<int64_t>(out->prompt.size()) > n_ctx) {
    // (llama-server's words, which its clients look for)
    return Status::Error("the prompt is %zu tokens: it exceeds the available context size (%d)",
                         out->prompt.size(), n_ctx);
  }
  out->n_predict = in.has_n_predict() ? in.n_predict() : -1;
  if (out->n_predict < -2) return Status::Error("n_predict must be -2 or more");
  out->ignore_eos = in.ignore_eos();
  out->cache_prompt = !in.has_cache_prompt() || in.cache_prompt();
  out->draft_max = in.has_draft_max() ? in.draft_max() : -1;
  out->draft_min = in.has_draft_min() ? in.draft_min() : -1;
  out->draft_p_min = in.has_draft_p_min() ? in.draft_p_min() : -1.0f;
  if (out->draft_max < -1 || out->draft_max > 256 || out->draft_min < -1 ||
      out->draft_min > 256 || (out->draft_max >= 0 && out->draft_min > out->draft_max)) {
    return Status::Error("speculative.n_max and .n_min must be 0 to 256, n_min at most n_max");
  }
  if (in.has_draft_p_min() && !(out->draft_p_min >= 0.0f && out->draft_p_min <= 1.0f)) {
    return Status::Error("speculative.p_min must be 0 to 1");
  }
  out->seq = in.has_id_slot() ? in.id_slot() : -1;
  if (out->seq < -1)
    return Status::Error("id_slot must be -1 (any) or a slot's id, got %d", out->seq);
  if (in.top_logprobs() < 0 || in.top_logprobs() > 20) {
    return Status::Error("top_logprobs must be 0 to 20, got %d", in.top_logprobs());
  }
  out->logprobs = in.logprobs() ? in.top_logprobs() : -1;
  if (in.post_sampling_probs() && !in.logprobs()) {
    return Status::Error("post_sampling_probs needs logprobs");
  }
  out->post_sampling = in.post_sampling_probs();
  if (static_cast<size_t>(in.stop_size()) > kMaxStopStrings) {
    return Status::Error("stop: %d strings, at most %zu", in.stop_size(), kMaxStopStrings);
  }
  for (const std::string& stop : in.stop()) {
    if (stop.empty()) return Status::Error("stop: an empty string never matches");
    if (stop.size() > kMaxStopBytes) {
      return Status::Error("stop: a string of %zu bytes, at most %zu", stop.size(), kMaxStopBytes);
    }
    out->stops.push_back(stop);
  }
  if (in.sampling().has_seed() &&
      (in.sampling().seed() < -1 || in.sampling().seed() > UINT32_MAX)) {
    return Status::Error("seed must be -1 (random) to 4294967295, got %lld",
                         static_cast<long long>(in.sampling().seed()));
  }
  if (static_cast<size_t>(in.sampling().logit_bias_size()) > kMaxLogitBiases) {
    return Status::Error("logit_bias: %d tokens, at most %zu", in.sampling().logit_bias_size(),
                         kMaxLogitBiases);
  }
  if (!in.grammar().empty()) {
    // Read and checked here, before the request waits for the engine: a
    // grammar's errors are the client's (400), never a failed generation.
    PI_RETURN_IF_ERROR(Grammar::Parse(in.grammar(), &out->grammar));
  }
  if (!in.grammar_trigger().empty()) {
    if (in.grammar().empty()) return Status::Error("grammar_trigger: only with a grammar");
    if (in.grammar_trigger().size() > kMaxStopBytes) {
      return Status::Error("grammar_trigger: %zu bytes, at most %zu", in.grammar_trigger().size(),
                           kMaxStopBytes);
    }
    out->grammar_trigger = in.grammar_trigger();
  }
  *sampling = SamplingFrom(in.sampling());
  PI_RETURN_IF_ERROR(CheckSamplerParams(*sampling));
  PI_RETURN_IF_ERROR(CheckLogitBias(*sampling, n_vocab));
  // The sampler's history is sized by it: never beyond the context (a
  // request's 2000000000 must not allocate gigabytes).
  sampling->repeat_last_n = RepeatLastNForContext(sampling->repeat_last_n, n_ctx);
  return Status::Ok();
}

Status ParseGenerateRequestGated(WorkGate* gate, const v1::GenerateRequest& in, int n_vocab,
                                 int n_ctx, const Tokenizer& tok, GenerationRequest* out,
                                 SamplerParams* sampling, const std::vector<TextSpan>* literal,
                                 bool* busy) {
  WorkGate::Pass pass = gate->Enter();
  *busy = !pass;
  if (!pass) return Status::Error("too many prompts being tokenized at once; retry shortly");
  return ParseGenerateRequest(in, n_vocab, n_ctx, tok, out, sampling, literal);
}

Status EnterTokenizeGate(WorkGate* gate, size_t bytes, WorkGate::Pass* pass, bool* busy) {
  *busy = false;
  if (bytes > kMaxTokenizeBytes) {
    return Status::Error("the text is %zu bytes, at most %zu", bytes, kMaxTokenizeBytes);
  }
  *pass = gate->Enter();
  *busy = !*pass;
  if (*busy) return Status::Error("too many texts being tokenized at once; retry shortly");
  return Status::Ok();
}

Status TokenizeGated(WorkGate* gate, const Tokenizer& tok, const std::string& text, bool add_bos,
                     std::vector<int32_t>* ids, bool* busy) {
  WorkGate::Pass pass;
  PI_RETURN_IF_ERROR(EnterTokenizeGate(gate, text.size(), &pass, busy));
  return tok.Encode(text, add_bos, ids);
}

}  // namespace pi
