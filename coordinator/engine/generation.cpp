#include "coordinator/engine/generation.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "common/base/progress.h"
#include "coordinator/engine/prompt_cache.h"

namespace pi {

size_t FindEndingIn(const std::string& text, size_t fresh, const std::string& stop) {
  const size_t from = text.size() > fresh + stop.size() ? text.size() - fresh - stop.size() : 0;
  return text.find(stop, from);
}

size_t FindStopString(const std::string& text, size_t fresh,
                      const std::vector<std::string>& stops) {
  size_t best = std::string::npos;
  for (const std::string& stop : stops) best = std::min(best, FindEndingIn(text, fresh, stop));
  return best;
}

size_t StopPrefixAtEnd(const std::string& text, const std::vector<std::string>& stops) {
  size_t longest = 0;
  for (const std::string& stop : stops) {
    if (stop.empty()) continue;
    for (size_t k = std::min(stop.size() - 1, text.size()); k > longest; --k) {
      if (text.compare(text.size() - k, k, stop, 0, k) == 0) {
        longest = k;
        break;
      }
    }
  }
  return longest;
}

Generation::Generation(const Tokenizer& tok, Sampler* sampler, const GenerationRequest& request,
                       int n_ctx, int n_vocab, GenerationResult* result)
    : tok_(tok),
      sampler_(sampler),
      request_(request),
      g_(result),
      n_ctx_(n_ctx),
      n_vocab_(n_vocab),
      limit_(request.n_predict >= 0                                  ? request.n_predict
             : request.n_predict == -1 && request.context_keep != -1 ? INT32_MAX
                                                                     : n_ctx) {
  *g_ = GenerationResult();
  g_->ids.reserve(std::min(limit_, n_ctx));
  // Reserved whole: a streaming caller may read entry k (once told of token
  // k) while later ones are added on another thread (batch_scheduler.h).
  if (request.logprobs >= 0) g_->logprobs.reserve(std::min(limit_, n_ctx));
  if (request.grammar) {
    allowed_.resize((n_vocab + 63) / 64);
    if (request.grammar_trigger.empty()) StartGrammar();
  }
}

void Generation::StartGrammar() {
  matcher_ = std::make_unique<GrammarMatcher>(request_.grammar, &tok_.vocab_trie());
}

// A lazy grammar starts where its trigger first shows in the text (the
// token that completed it may carry text on past it: all of it goes in).
Status Generation::WatchTrigger(size_t fresh) {
  const size_t at = FindEndingIn(g_->text, fresh, request_.grammar_trigger);
  if (at == std::string::npos) return Status::Ok();
  StartGrammar();
  return matcher_->Accept(g_->text.substr(at));
}

// The grammar's mask, and the ends of text: allowed where the text is a
// whole match (with ignore_eos only where nothing else can follow).
Status Generation::ConstrainNext() {
  Status st = matcher_->Mask(allowed_.data());
  if (!st.ok()) return st;
  const bool end = matcher_->CanEnd() && (!request_.ignore_eos || matcher_->Done());
  for (int32_t id : tok_.eog_ids()) {
    if (id < 0 || id >= n_vocab_) continue;
    uint64_t& word = allowed_[id >> 6];
    word = end ? word | (1ull << (id & 63)) : word & ~(1ull << (id & 63));
  }
  for (uint64_t w : allowed_) {
    if (w != 0) return Status::Ok();
  }
  return Status::Invalid("grammar: no token of the vocabulary can continue the text");
}

void Generation::PromptDone(double prompt_s) {
  g_->prompt_s = prompt_s;
  t_gen_ = NowSeconds();
  for (int32_t id : request_.prompt) sampler_->Accept(id);
}

bool Generation::Next(const float* logits, int n_past, const TokenCallback& on_token,
                      int32_t* next) {
  GenerationResult* g = g_;
  if (static_cast<int>(g->ids.size()) >= limit_) return false;
  const double ts = NowSeconds();
  if (matcher_) {
    const Status st = ConstrainNext();
    if (!st.ok()) {
      g->sample_s += NowSeconds() - ts;
      Fail(st);
      return false;
    }
  }
  const int32_t id = sampler_->Sample(logits, matcher_ ? allowed_.data() : nullptr);
  const bool eog = tok_.IsEog(id);
  const std::string piece = tok_.TokenToPiece(id);
  if (matcher_ && !eog) {
    const Status st = matcher_->Accept(piece);
    if (!st.ok()) {
      g->sample_s += NowSeconds() - ts;
      Fail(st);
      return false;
    }
  }
  g->sample_s += NowSeconds() - ts;
  if (eog && (!request_.ignore_eos || matcher_)) {
    g->stop_reason = "eos";
    return false;
  }
  g->ids.push_back(id);
  if (request_.logprobs >= 0) RecordLogprob(logits, id);
  sampler_->Accept(id);
  g->text += piece;
  if (request_.grammar && !matcher_) {
    const Status st = WatchTrigger(piece.size());
    if (!st.ok()) {
      Fail(st);
      return false;
    }
  }
  const std::string fresh = stream_.Push(piece);
  whole_ += fresh;
  const size_t stop_at = FindStopString(g->text, piece.size(), request_.stops);
  const size_t shown_stop = FindStopString(whole_, fresh.size(), request_.stops);
  const size_t sendable = shown_stop != std::string::npos
                              ? std::max(shown_stop, emitted_)
                              : whole_.size() - StopPrefixAtEnd(whole_, request_.stops);
  if (on_token && !on_token(id, whole_.substr(emitted_, std::max(sendable, emitted_) - emitted_))) {
    g->stop_reason = "cancelled";
    cancelled_ = true;
    return false;
  }
  emitted_ = std::max(sendable, emitted_);
  if (stop_at != std::string::npos || shown_stop != std::string::npos) {
    const std::string& where = stop_at != std::string::npos ? g->text : whole_;
    const size_t at = stop_at != std::string::npos ? stop_at : shown_stop;
    for (const std::string& stop : request_.stops) {
      if (where.compare(at, stop.size(), stop) == 0) {
        g->stop_word = stop;
        break;
      }
    }
    if (stop_at != std::string::npos) g->text.resize(stop_at);
    g->stop_reason = "stop";
    return false;
  }
  if (static_cast<int>(g->ids.size()) >= limit_) return false;
  if (n_past >= n_ctx_ && request_.context_keep == -1) {
    g->stop_reason = "context";
    return false;
  }
  *next = id;
  return true;
}

void Generation::RecordLogprob(const float* logits, int32_t id) {
  const int k = std::min(request_.logprobs, kMaxTopTokens);
  TokenLogprob t;
  t.id = id;
  if (request_.post_sampling) {  // the draw's probabilities
    std::pair<int32_t, float> top[kMaxTopTokens];
    const int kept = sampler_->LastDistribution(id, k, top, &t.logprob);
    t.top.assign(top, top + kept);
    g_->logprobs.push_back(std::move(t));
    return;
  }
  const int n = n_vocab_;
  float max = logits[0];
  for (int i = 1; i < n; ++i) max = std::max(max, logits[i]);
  double sum = 0;
  for (int i = 0; i < n; ++i) sum += std::exp(static_cast<double>(logits[i] - max));
  const float log_z = max + static_cast<float>(std::log(sum));
  t.logprob = logits[id] - log_z;
  int32_t top[kMaxTopTokens];
  const int kept = TopIndexes(
      n, k, [logits](int32_t i) { return logits[i]; }, top);
  for (int j = 0; j < kept; ++j) t.top.emplace_back(top[j], logits[top[j]] - log_z);
  g_->logprobs.push_back(std::move(t));
}

void Generation::Evaluated(int64_t ffn_neurons, int64_t ffn_hot) {
  ++g_->n_eval;
  g_->ffn_neurons += ffn_neurons;
  g_->ffn_hot += ffn_hot;
}

void Generation::Fail(const Status& s) {
  g_->stop_reason = "error";
  g_->error = s.message();
}

void Generation::Finish(const TokenCallback& on_token) {
  g_->eval_s = NowSeconds() - t_gen_ - g_->sample_s;
  if (on_token && !cancelled_ && std::string(g_->stop_reason) != "stop") {
    whole_ += stream_.Flush();
    on_token(-1, whole_.substr(emitted_));
  }
}

int ContextKeepTokens(const Tokenizer& tok, const std::vector<int32_t>& prompt, int context_keep) {
  const int bos = !prompt.empty() && prompt[0] == tok.bos() ? 1 : 0;
  const int n = static_cast<int>(prompt.size());
  return context_keep < 0 ? n : std::min(n, bos + context_keep);
}

Status ShiftContext(Engine* engine, int keep, std::vector<int32_t>* context) {
  const int n_past = static_cast<int>(context->size());
  keep = std::min(keep, n_past - 2);  // something must go
  if (keep < 0) return Status::Error("the context (%d) is too small to shift", engine->n_ctx());
  const int discard = (n_past - keep) / 2;
  context->erase(context->begin() + keep, context->begin() + keep + discard);
  engine->Reset();
  return engine->Eval(context->data(), static_cast<int>(context->size()));
}

namespace {

// A decode step's FFN counts into the result (each layer's, when counted).
void CountStep(Engine* engine, int64_t share, Generation* gen, GenerationResult* g) {
  gen->Evaluated(engine->last_ffn_neurons() / share, engine->last_ffn_hot_fired() / share);
  if (!engine->ffn_layers_counted()) return;
  g->layer_neurons.resize(engine->model().config.n_layer, 0);
  for (size_t l = 0; l < g->layer_neurons.size(); ++l) {
    g->layer_neurons[l] += engine->last_ffn_neurons(static_cast<int>(l)) / share;
  }
}

// The decode loop with a drafter (speculative.h): the sampled token and the
// draft's proposals evaluated in one run, each position sampled in turn
// while the samples equal the proposals; the positions after the first
// that differs are dropped.
void DecodeDrafted(Engine* engine, const Tokenizer& tok, Drafter* drafter,
                   const GenerationRequest& request, const float* logits,
                   const TokenCallback& on_token, Generation* gen, GenerationResult* g) {
  const size_t n_vocab = static_cast<size_t>(engine->n_vocab());
  DraftOptions options = drafter->options();  // the request's where it gives them
  if (request.draft_max >= 0) options.n_max = request.draft_max;
  if (request.draft_min >= 0) options.n_min = request.draft_min;
  if (request.draft_p_min >= 0) options.p_min = request.draft_p_min;
  std::vector<int32_t> context = request.prompt, run, proposals;
  int32_t next = 0;
  bool go = gen->Next(logits, engine->n_past(), on_token, &next);
  while (go) {
    if (request.context_keep != -1 && engine->n_past() >= engine->n_ctx()) {
      const Status shifted = ShiftContext(
          engine, ContextKeepTokens(tok, request.prompt, request.context_keep), &context);
      if (!shifted.ok()) {
        gen->Fail(shifted);
        return;
      }
      ++g->context_shifts;
    }
    context.push_back(next);
    const Status drafted =
        drafter->Propose(context, engine->n_ctx() - engine->n_past() - 1, options, &proposals);
    if (!drafted.ok()) drafter->Failed(drafted);
    run.assign(1, next);
    run.insert(run.end(), proposals.begin(), proposals.end());
    const int base = engine->n_past();
    const int n = static_cast<int>(run.size());
    const Status e = engine->Eval(run.data(), n, n > 1);
    if (!e.ok()) {
      gen->Fail(e);
      return;
    }
    int used = 0;  // run[0, used) kept
    while (used < n) {
      ++used;
      CountStep(engine, n, gen, g);
      go = gen->Next(engine->logits() + (n > 1 ? static_cast<size_t>(used - 1) * n_vocab : 0),
                     base + used, on_token, &next);
      if (!go || used == n || next != run[used]) break;
      context.push_back(next);  // the proposal taken: its position is evaluated
    }
    drafter->Accepted(used - 1);
    if (used < n) engine->KeepSeq(0, base + used);
  }
}

}  // namespace

void Generate(Engine* engine, const Tokenizer& tok, Sampler* sampler,
              const GenerationRequest& request, const TokenCallback& on_token, GenerationResult* g,
              size_t cached, std::vector<float>* prompt_logits, Drafter* drafter) {
  Generation gen(tok, sampler, request, engine->n_ctx(), engine->n_vocab(), g);
  if (!drafter && AsksDraft(request)) {
    g->client_error = true;
    gen.Fail(NoDraftModel());
    return;
  }
  const double t_prompt = NowSeconds();
  g->n_cached = static_cast<int>(cached);
  const size_t n_vocab = static_cast<size_t>(engine->n_vocab());
  // The whole prompt cached with its logits: nothing to evaluate.
  const bool whole = prompt_logits && !request.prompt.empty() && cached == request.prompt.size() &&
                     prompt_logits->size() == n_vocab;
  if (whole) {
    engine->KeepSeq(0, static_cast<int>(cached));
  } else {
    const Status s = EvalPromptFrom(engine, request.prompt, cached);
    if (!s.ok()) {
      g->prompt_s = NowSeconds() - t_prompt;
      if (prompt_logits) prompt_logits->clear();
      gen.Fail(s);
      return;
    }
    if (prompt_logits) prompt_logits->assign(engine->logits(), engine->logits() + n_vocab);
  }
  gen.PromptDone(NowSeconds() - t_prompt);
  const float* logits = whole ? prompt_logits->data() : engine->logits();
  if (drafter) {
    DecodeDrafted(engine, tok, drafter, request, logits, on_token, &gen, g);
    gen.Finish(on_token);
    return;
  }
  // The context's tokens, for a context shift.
  std::vector<int32_t> context;
  if (request.context_keep != -1) context = request.prompt;
  int32_t next = 0;
  while (gen.Next(logits, engine->n_past(), on_token, &next)) {
    logits = engine->logits();
    if (request.context_keep != -1 && engine->n_past() >= engine->n_ctx()) {
      const Status shifted = ShiftContext(
          engine, ContextKeepTokens(tok, request.prompt, request.context_keep), &context);
      if (!shifted.ok()) {
        gen.Fail(shifted);
        break;
      }
      ++g->context_shifts;
    }
    if (request.context_keep != -1) context.push_back(next);
    const Status e = engine->Eval(&next, 1);
    if (!e.ok()) {
      gen.Fail(e);
      break;
    }
    CountStep(engine, 1, &gen, g);
  }
  gen.Finish(on_token);
}

}  // namespace pi
