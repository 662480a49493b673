#include "coordinator/serve/mixed_prompt.h"

namespace pi {

bool IsMixedPrompt(const nlohmann::json& p) {
  if (!p.is_array()) return false;
  bool text = false, id = false;
  for (const nlohmann::json& x : p) {
    text = text || x.is_string();
    id = id || x.is_number();
  }
  return text && id;
}

Status ReadMixedPrompt(const nlohmann::json& p, MixedPrompt* out) {
  out->clear();
  for (const nlohmann::json& x : p) {
    PromptPiece piece;
    if (x.is_string()) {
      piece.text = x.get<std::string>();
    } else if (x.is_number_integer() && x.get<int64_t>() >= 0 && x.get<int64_t>() <= INT32_MAX) {
      piece.id = static_cast<int32_t>(x.get<int64_t>());
    } else {
      return Status::Error("a prompt's items must be strings or token ids (non-negative integers)");
    }
    out->push_back(std::move(piece));
  }
  return Status::Ok();
}

Status EncodeMixedPrompt(const Tokenizer& tok, const MixedPrompt& p, bool add_eos,
                         bool parse_special, std::vector<int32_t>* out) {
  out->clear();
  std::vector<int32_t> ids;
  for (size_t i = 0; i < p.size(); ++i) {
    if (p[i].id >= 0) {
      out->push_back(p[i].id);
      continue;
    }
    PI_RETURN_IF_ERROR(tok.Encode(p[i].text, i == 0 && tok.add_bos_token(), &ids, parse_special));
    out->insert(out->end(), ids.begin(), ids.end());
  }
  if (add_eos && !p.empty() && p.back().id < 0 && tok.eos() >= 0) out->push_back(tok.eos());
  return Status::Ok();
}

size_t MixedPromptTextBytes(const MixedPrompt& p) {
  size_t bytes = 0;
  for (const PromptPiece& piece : p) bytes += piece.text.size();
  return bytes;
}

}  // namespace pi
