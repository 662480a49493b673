#include "coordinator/engine/speculative.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>

namespace pi {

Status NoDraftModel() {
  return Status::Invalid(
      "speculative.n_max, .n_min and .p_min tune a draft model's proposals: this server has none "
      "(pi-launch --model-draft, with -np 1)");
}

Status CheckDraftVocabulary(const Tokenizer& target, const Tokenizer& draft) {
  if (std::abs(target.n_vocab() - draft.n_vocab()) > 128) {
    return Status::Invalid(
        "the draft model's vocabulary has %d tokens, the model's %d (at most 128 apart)",
        draft.n_vocab(), target.n_vocab());
  }
  if (target.bos() != draft.bos() || target.eos() != draft.eos()) {
    return Status::Invalid("the draft model's BOS/EOS are %d/%d, the model's %d/%d", draft.bos(),
                           draft.eos(), target.bos(), target.eos());
  }
  const int32_t n = std::min(target.n_vocab(), draft.n_vocab());
  for (int32_t id = 0; id < n; ++id) {
    if (target.TokenText(id) != draft.TokenText(id)) {
      return Status::Invalid(
          "token %d is \"%s\" in the draft model's vocabulary and \"%s\" in the model's: a draft "
          "model must share the model's vocabulary",
          id, draft.TokenText(id).c_str(), target.TokenText(id).c_str());
    }
  }
  return Status::Ok();
}

Status Drafter::Propose(const std::vector<int32_t>& context, int most, const DraftOptions& options,
                        std::vector<int32_t>* out) {
  out->clear();
  // The proposals but the last are evaluated: they and the context must fit.
  most = std::min({most, options.n_max, draft_->n_ctx() - static_cast<int>(context.size()) + 1});
  if (most <= 0 || most < options.n_min || context.empty()) return Status::Ok();
  // What the draft holds of the context stays; its last token is evaluated
  // again at least (the proposals start from its logits).
  size_t keep = 0;
  while (keep < held_.size() && keep + 1 < context.size() && held_[keep] == context[keep]) ++keep;
  draft_->KeepSeq(0, static_cast<int>(keep));
  held_.resize(keep);
  Status s = draft_->Eval(context.data() + keep, static_cast<int>(context.size() - keep));
  held_ = context;
  const int n_vocab = draft_->n_vocab();
  while (s.ok() && static_cast<int>(out->size()) < most) {
    const float* logits = draft_->logits();
    const int32_t best = static_cast<int32_t>(std::max_element(logits, logits + n_vocab) - logits);
    double sum = 0;  // of exp(logit - max): the best's probability is 1 / sum
    for (int i = 0; i < n_vocab; ++i)
      sum += std::exp(static_cast<double>(logits[i] - logits[best]));
    if (1.0 / sum < options.p_min || best >= n_vocab_) break;
    out->push_back(best);
    if (static_cast<int>(out->size()) == most) break;
    s = draft_->Eval(&best, 1);
    held_.push_back(best);
  }
  if (!s.ok()) {
    draft_->Reset();
    held_.clear();
    out->clear();
    return s;
  }
  if (static_cast<int>(out->size()) < options.n_min) out->clear();
  proposed_ += static_cast<int64_t>(out->size());
  return Status::Ok();
}

}  // namespace pi
