#include "common/text/infill.h"

#include <algorithm>

namespace pi {
namespace {

// Each piece is tokenized on its own, as text (a control token written in a
// file stays text), without BOS.
Status Append(const Tokenizer& tok, const std::string& text, std::vector<int32_t>* out) {
  if (text.empty()) return Status::Ok();
  std::vector<int32_t> ids;
  PI_RETURN_IF_ERROR(tok.Encode(text, false, &ids));
  out->insert(out->end(), ids.begin(), ids.end());
  return Status::Ok();
}

// The other files in the repository format, or after snippet lines.
Status ExtraTokens(const Tokenizer& tok, const std::vector<InfillFile>& files,
                   std::vector<int32_t>* out) {
  const TokenizerVocab& v = tok.vocab();
  if (v.fim_rep >= 0) {
    out->push_back(v.fim_rep);
    PI_RETURN_IF_ERROR(Append(tok, "myproject\n", out));
  }
  for (const InfillFile& f : files) {
    if (v.fim_sep >= 0) {
      out->push_back(v.fim_sep);
      PI_RETURN_IF_ERROR(Append(tok, f.filename + "\n", out));
    } else {
      PI_RETURN_IF_ERROR(Append(tok, "\n\n--- snippet ---\n\n", out));
    }
    PI_RETURN_IF_ERROR(Append(tok, f.text, out));
  }
  if (v.fim_sep >= 0) {
    out->push_back(v.fim_sep);
    PI_RETURN_IF_ERROR(Append(tok, "filename\n", out));
  }
  return Status::Ok();
}

}  // namespace

Status InfillPrompt(const Tokenizer& tok, const InfillInput& in, bool spm, int budget,
                    std::vector<int32_t>* ids, bool* truncated) {
  ids->clear();
  *truncated = false;
  if (!tok.has_fim()) {
    return Status::Error(
        "this model has no fill-in-the-middle tokens (tokenizer.ggml.fim_pre_token_id, "
        "fim_suf_token_id and fim_mid_token_id, or their usual spellings in the vocabulary)");
  }
  const TokenizerVocab& v = tok.vocab();
  std::vector<int32_t> prefix, suffix, prompt, extra;
  PI_RETURN_IF_ERROR(Append(tok, in.prefix, &prefix));
  PI_RETURN_IF_ERROR(Append(tok, in.suffix, &suffix));
  PI_RETURN_IF_ERROR(Append(tok, in.prompt, &prompt));
  PI_RETURN_IF_ERROR(ExtraTokens(tok, in.extra, &extra));

  const bool bos = tok.add_bos_token() && v.bos >= 0;
  const int64_t core = (bos ? 1 : 0) + 3 + static_cast<int64_t>(prompt.size());
  if (core > budget) {
    return Status::Error(
        "the infill prompt's markers and prompt are %lld tokens, more than the %d the context "
        "leaves (raise -c or lower n_predict)",
        static_cast<long long>(core), budget);
  }
  // The room left, the suffix's share first (at most a quarter), then the
  // prefix's, then what is left back to the suffix, then the other files'.
  int64_t room = budget - core;
  const int64_t n_pre = static_cast<int64_t>(prefix.size()),
                n_suf = static_cast<int64_t>(suffix.size());
  int64_t take_suf = std::min(n_suf, room / 4);
  const int64_t take_pre = std::min(n_pre, room - take_suf);
  take_suf = std::min(n_suf, room - take_pre);
  room -= take_pre + take_suf;
  const int64_t take_extra = std::min(static_cast<int64_t>(extra.size()), room);
  *truncated =
      take_pre < n_pre || take_suf < n_suf || take_extra < static_cast<int64_t>(extra.size());

  if (bos) ids->push_back(v.bos);
  ids->insert(ids->end(), extra.end() - take_extra, extra.end());
  auto put_prefix = [&] {
    ids->push_back(v.fim_pre);
    ids->insert(ids->end(), prefix.end() - take_pre, prefix.end());
    ids->insert(ids->end(), prompt.begin(), prompt.end());
  };
  auto put_suffix = [&] {
    ids->push_back(v.fim_suf);
    ids->insert(ids->end(), suffix.begin(), suffix.begin() + take_suf);
  };
  if (spm) {
    put_suffix();
    put_prefix();
  } else {
    put_prefix();
    put_suffix();
  }
  ids->push_back(v.fim_mid);
  return Status::Ok();
}

}  // namespace pi
