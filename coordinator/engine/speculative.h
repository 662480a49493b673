// Speculative decoding (llama-server's --model-draft): a small draft model
// with the target's vocabulary proposes the tokens that follow; the target
// evaluates the sampled token and the proposals in one run, with logits
// after each, and samples each position as it would have one token at a
// time: while its token equals the proposal the next position is already
// evaluated, and at the first that differs its own token goes on. The
// target reads its weights once for the whole run, so a token costs about a
// 1/(accepted + 1) of a decode step's weight bytes, plus the draft's.
//
// Every token is the target's own sample from the target's logits, so the
// text follows the target's distribution whatever the draft proposes; the
// logits of a run of several tokens are a prompt evaluation's (dense, in
// other rounding than a decode step's), so a greedy text may part from the
// one-token-at-a-time text where two tokens are within rounding.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/base/status.h"
#include "common/text/tokenizer.h"
#include "coordinator/engine/engine.h"

namespace pi {

// llama-server's --draft-max, --draft-min, --draft-p-min.
struct DraftOptions {
  int n_max = 16;       // proposals per run, at most
  int n_min = 0;        // fewer proposals than this: none
  float p_min = 0.75f;  // a proposal's probability under the draft, at least
};

// The error of a request that tunes drafting (llama-server's speculative.*)
// on a server without a draft model: the client's fault.
Status NoDraftModel();

// Whether a draft model's vocabulary means what the target's does: the same
// token text for every id of both, sizes at most 128 apart, the same BOS and
// EOS; the error names the first difference.
Status CheckDraftVocabulary(const Tokenizer& target, const Tokenizer& draft);

class Drafter {
 public:
  // `draft`: an engine of the draft model (sequence 0 is the drafter's),
  // with a context at least the target's; not owned. `n_vocab`: the
  // target's (a proposal at or above it ends the proposals).
  Drafter(Engine* draft, int n_vocab, DraftOptions options)
      : draft_(draft), n_vocab_(n_vocab), options_(options) {}

  // Up to `most` (and options' n_max) proposals to follow `context` (every
  // token of the target's sequence, the last one sampled and not yet
  // evaluated): the draft's sequence is brought to hold `context` (what it
  // holds of it kept), then takes its most likely token while that token's
  // probability is at least p_min. An error leaves the draft's sequence
  // empty (the next call evaluates the context again).
  Status Propose(const std::vector<int32_t>& context, int most, std::vector<int32_t>* out) {
    return Propose(context, most, options_, out);
  }
  // The same under other options (a request's).
  Status Propose(const std::vector<int32_t>& context, int most, const DraftOptions& options,
                 std::vector<int32_t>* out);
  // The target took `accepted` of the last call's proposals.
  void Accepted(int accepted) { accepted_ += accepted; }
  // A failed Propose (the draft's fault, not a request's: the run goes on
  // without proposals) is counted and its message kept.
  void Failed(const Status& s) {
    ++failures_;
    last_error_ = s.message();
  }

  const DraftOptions& options() const { return options_; }
  int64_t proposed() const { return proposed_; }
  int64_t accepted() const { return accepted_; }
  int64_t failures() const { return failures_; }
  const std::string& last_error() const { return last_error_; }

 private:
  Engine* draft_;
  int n_vocab_;
  DraftOptions options_;
  std::vector<int32_t> held_;  // the tokens the draft's sequence holds, in order
  int64_t proposed_ = 0, accepted_ = 0, failures_ = 0;
  std::string last_error_;
};

}  // namespace pi
