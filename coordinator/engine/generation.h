// Generate: one request's generation on an engine — the prompt evaluated,
// then sample, stream, evaluate, until -n tokens, end of text, a stop
// string, a full context, a cancel or an error. pi-run drives it today;
// pi-launch and the servers will, so a request's output and its stop reason
// mean the same everywhere.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/text/grammar_matcher.h"
#include "common/text/sampler.h"
#include "common/text/tokenizer.h"
#include "coordinator/engine/embedding.h"
#include "coordinator/engine/engine.h"
#include "coordinator/engine/slot_file.h"
#include "coordinator/engine/speculative.h"

namespace pi {

struct GenerationRequest {
  std::vector<int32_t> prompt;  // token ids, BOS included when the tokenizer adds one
  int n_predict = -1;           // -1: until end of text or a full context
  bool ignore_eos = false;
  std::vector<std::string> stops;  // non-empty strings; the text ends before the first match
  // >= 0: each generated token's log-probability under the model (the
  // logits' log-softmax) with that many most likely tokens'; -1: none.
  int logprobs = -1;
  // With logprobs: the probabilities the draw used instead (not logs:
  // Sampler::LastDistribution), as llama-server's post_sampling_probs.
  bool post_sampling = false;
  // llama-cli's context shift (Generate only): when the context fills, the
  // first `context_keep` prompt tokens (after BOS, which is always kept; -2:
  // the whole prompt) stay, half of the rest is dropped, the kept tokens are
  // evaluated again and generation goes on; -1: stop at a full context
  // ("context"). With shifting, n_predict -1 means until end of text.
  int context_keep = -1;
  // A scheduler may start from the prompt's prefix its sequence's cache
  // holds (prompt_cache.h; the answer is the same); false: evaluate it all.
  bool cache_prompt = true;
  // Only text this grammar matches is generated (grammar.h: each token is
  // sampled among those that can continue it; an end of text only where
  // the text is a whole match); null: any text.
  std::shared_ptr<const Grammar> grammar;
  // Non-empty: the grammar holds the text only from where this text first
  // appears in it (a lazy grammar: free text, then a tool call held to its
  // schema); the grammar's matches start with it.
  std::string grammar_trigger;
  // An embedding request (pooling not kNone; embedding.h): each of
  // embed_prompts (non-empty, at most the context each) is evaluated,
  // nothing generated, and its embedding goes to the result's embeddings;
  // `prompt` is unused.
  Pooling pooling = Pooling::kNone;
  std::vector<std::vector<int32_t>> embed_prompts;
  // The sequence a scheduler runs it on (llama-server's id_slot), waiting
  // for it to be free; -1: the scheduler's choice.
  int seq = -1;
  // A slot action (slot_op not kNone; slot_file.h): nothing generated;
  // sequence `seq`'s cached prompt saved to slot_path, restored from it, or
  // forgotten.
  SlotOp slot_op = SlotOp::kNone;
  std::string slot_path;
  // This request's drafting (speculative.h; llama-server's speculative.*):
  // -1 each, the server's. Set on a server without a draft model, the
  // request fails as the client's fault.
  int draft_max = -1, draft_min = -1;
  float draft_p_min = -1.0f;
};

// Whether the request tunes drafting (GenerationRequest::draft_*).
inline bool AsksDraft(const GenerationRequest& r) {
  return r.draft_max >= 0 || r.draft_min >= 0 || r.draft_p_min >= 0;
}

// A generated token's log-probability, and the most likely tokens' (most
// likely first); with GenerationRequest::post_sampling, probabilities.
struct TokenLogprob {
  int32_t id = 0;
  float logprob = 0;
  std::vector<std::pair<int32_t, float>> top;
};

struct GenerationResult {
  std::vector<int32_t> ids;  // generated tokens (a stop string's tokens included)
  std::string text;          // the generated text, cut before a matched stop string
  int n_eval = 0;            // decode steps run (the last token sampled is not evaluated)
  double prompt_s = 0, eval_s = 0, sample_s = 0;
  // FFN neurons the decode steps computed, and of them the hot side's
  // (Engine::last_ffn_neurons, last_ffn_hot_fired).
  int64_t ffn_neurons = 0, ffn_hot = 0;
  // Of ffn_neurons, each layer's (Engine::last_ffn_neurons(layer)), filled by
  // Generate when the engine counts every layer's (else empty).
  std::vector<int64_t> layer_neurons;
  int context_shifts = 0;  // times the context was shifted (context_keep)
  int n_cached = 0;        // prompt tokens reused from the sequence's cache (prompt_cache.h)
  int seq = 0;             // the sequence it ran on (a scheduler's: llama-server's id_slot)
  // length | eos | context | stop | cancelled | error
  const char* stop_reason = "length";
  std::string stop_word;      // for "stop": the stop string that matched
  std::string error;          // for "error"
  bool client_error = false;  // for "error": the request's fault (a 400), not the server's
  // One per generated token when asked for, entry k written before token k
  // is told (and never moved: reserved for the whole generation).
  std::vector<TokenLogprob> logprobs;
  // An embedding request's: one per prompt, in order.
  std::vector<std::vector<float>> embeddings;
  // A slot action's: the positions saved, restored or forgotten, and the
  // file's bytes (its time in prompt_s).
  int64_t slot_tokens = 0, slot_bytes = 0;
};

// The tokens a generation sampled: the generated ones, and the end of text
// that stopped it (never part of the text; llama-server's n_decoded counts
// it too): timings' predicted_n.
inline int SampledTokens(const GenerationResult& g) {
  return static_cast<int>(g.ids.size()) + (std::string(g.stop_reason) == "eos" ? 1 : 0);
}

// The prompt tokens a request evaluates (an embedding request's, all its prompts').
inline size_t PromptTokens(const GenerationRequest& r) {
  size_t n = r.prompt.size();
  for (const std::vector<int32_t>& p : r.embed_prompts) n += p.size();
  return n;
}

// Told of each generated token and the text that became whole UTF-8 with it
// (possibly empty; text that may begin a stop string is held back, and a
// stop string is never sent, so the pieces add up to the result's text);
// returning false cancels the request. Called once more at the end, with
// id -1, with what is left.
using TokenCallback = std::function<bool(int32_t id, const std::string& text)>;

// One request's generation as steps over logits, so that one loop (Generate)
// or a scheduler running many requests at once (batch_scheduler.h) drives
// it the same way: after the prompt, Next() samples from the logits, streams
// the text and says which token to evaluate next, until a stop; Finish()
// then flushes what was held back. `request`, `sampler` and `result` must
// outlive it.
class Generation {
 public:
  // n_vocab: the logits' length.
  Generation(const Tokenizer& tok, Sampler* sampler, const GenerationRequest& request, int n_ctx,
             int n_vocab, GenerationResult* result);
  // The prompt was evaluated (in prompt_s): the sampler's history takes it.
  void PromptDone(double prompt_s);
  // From the logits after the prompt or the last token (the sequence now
  // holding n_past tokens): true with *next, the token to evaluate; false
  // when the generation stopped (the result's stop reason says why).
  bool Next(const float* logits, int n_past, const TokenCallback& on_token, int32_t* next);
  // *next was evaluated: its FFN neurons (all, and the hot side's).
  void Evaluated(int64_t ffn_neurons, int64_t ffn_hot);
  // *next could not be evaluated: the generation ends with this error.
  void Fail(const Status& s);
  // After the last Next: the timings, and the held-back text (unless cancelled or stopped).
  void Finish(const TokenCallback& on_token);

 private:
  void RecordLogprob(const float* logits, int32_t id);
  Status ConstrainNext();
  void StartGrammar();
  Status WatchTrigger(size_t fresh);
  const Tokenizer& tok_;
  Sampler* sampler_;
  const GenerationRequest& request_;
  GenerationResult* g_;
  int n_ctx_, n_vocab_, limit_;
  double t_gen_ = 0;
  // What the callback sees: whole UTF-8 (`stream_`), and never a stop
  // string: text that could be the start of one is held back until the next
  // tokens tell, so the streamed text always equals the final text.
  Utf8Stream stream_;
  std::string whole_;   // the text as streamed, sent or held
  size_t emitted_ = 0;  // bytes of whole_ sent
  bool cancelled_ = false;
  // With a grammar: where the text is in it, and the tokens allowed next.
  std::unique_ptr<GrammarMatcher> matcher_;
  std::vector<uint64_t> allowed_;
};

// llama-cli's context shift on a full context: `context` (the tokens the
// engine holds, in order) keeps its first `keep` tokens, drops half of the
// rest, and the engine (Reset) evaluates what is left again from position 0.
Status ShiftContext(Engine* engine, int keep, std::vector<int32_t>* context);
// The tokens a shift keeps for GenerationRequest::context_keep: BOS and that
// many prompt tokens (-2: the whole prompt).
int ContextKeepTokens(const Tokenizer& tok, const std::vector<int32_t>& prompt, int context_keep);

// Sequence 0 of the engine keeps its first `cached` positions, which must
// hold the prompt's first tokens as a prompt evaluation wrote them
// (prompt_cache.h: ReusablePrefix); the rest of the prompt is evaluated from
// there (0: all of it, whatever the engine held). The sampler's history gets
// the whole prompt. Allocates only the result's growth.
// With `prompt_logits`: the logits after the prompt's last token are kept
// there (empty after a failure); given back with `cached` the whole prompt
// (the same prompt again, e.g. the next of n choices), nothing is evaluated
// and the first token comes from them.
// With `drafter` (speculative.h), decode runs speculatively: the draft model's proposals evaluated
// with each sampled token, each kept while the samples agree.
void Generate(Engine* engine, const Tokenizer& tok, Sampler* sampler,
              const GenerationRequest& request, const TokenCallback& on_token,
              GenerationResult* result, size_t cached = 0,
              std::vector<float>* prompt_logits = nullptr, Drafter* drafter = nullptr);

// The position of the first stop string in `text` that ends within its last
// `fresh` bytes, or npos (exposed for tests).
size_t FindStopString(const std::string& text, size_t fresh, const std::vector<std::string>& stops);
// The same for one string (a stop, or a lazy grammar's trigger).
size_t FindEndingIn(const std::string& text, size_t fresh, const std::string& stop);
// The length of the longest end of `text` that is the start (not the whole)
// of a stop string: what a stream holds back until the next tokens tell.
size_t StopPrefixAtEnd(const std::string& text, const std::vector<std::string>& stops);

}  // namespace pi
