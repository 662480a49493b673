#include "coordinator/serve/native_api.h"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

namespace pi {
namespace {

using json = nlohmann::json;

json Bytes(const std::string& text) {
  json b = json::array();
  for (unsigned char ch : text) b.push_back(static_cast<int>(ch));
  return b;
}

json Entry(const Tokenizer& tok, int32_t id, const char* key, float value) {
  const std::string piece = tok.TokenToPiece(id);
  return {{"id", id}, {"token", piece}, {"bytes", Bytes(piece)}, {key, value}};
}

// llama-server's completion_probabilities: each token with its most likely
// alternatives, log-probabilities under the model or (post_sampling_probs)
// the probabilities the draw used.
json Probabilities(const std::vector<TokenLogprob>& probs, bool post_sampling,
                   const Tokenizer& tok) {
  const char* key = post_sampling ? "prob" : "logprob";
  json out = json::array();
  for (const TokenLogprob& p : probs) {
    json e = Entry(tok, p.id, key, p.logprob);
    json top = json::array();
    for (const auto& [id, v] : p.top) top.push_back(Entry(tok, id, key, v));
    e[post_sampling ? "top_probs" : "top_logprobs"] = std::move(top);
    out.push_back(std::move(e));
  }
  return out;
}

json Settings(const NativeReplyInfo& info) {
  const SamplerParams& s = info.sampling;
  return {{"n_predict", info.n_predict},
          {"max_tokens", info.n_predict},
          {"seed", s.seed},
          {"temperature", s.temp},
          {"top_k", s.top_k},
          {"top_p", s.top_p},
          {"min_p", s.min_p},
          {"repeat_last_n", s.repeat_last_n},
          {"repeat_penalty", s.repeat_penalty},
          {"presence_penalty", s.presence_penalty},
          {"frequency_penalty", s.frequency_penalty},
          {"stop", info.stops},
          {"ignore_eos", info.ignore_eos},
          {"n_probs", info.n_probs},
          {"post_sampling_probs", info.post_sampling_probs},
          {"stream", false}};
}

// llama-server's response_fields: each named field ("a/b" nested) under its
// name, in the order asked.
json Fields(const json& whole, const std::vector<std::string>& names) {
  json out = json::object();
  for (const std::string& name : names) {
    const json* at = &whole;
    size_t from = 0;
    while (at && from <= name.size()) {
      const size_t slash = std::min(name.find('/', from), name.size());
      const auto it = at->is_object() ? at->find(name.substr(from, slash - from)) : at->end();
      at = it != at->end() ? &*it : nullptr;
      from = slash + 1;
    }
    if (at) out[name] = *at;
  }
  return out;
}

std::string Dump(const json& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace

std::string NativePromptText(const Tokenizer& tok, const std::vector<int32_t>& ids) {
  std::string text;
  for (int32_t id : ids) {
    text += tok.token_type(id) == TokenType::kControl ? tok.TokenText(id) : tok.TokenToPiece(id);
  }
  return text;
}

const char* NativeStopType(const std::string& stop_reason) {
  if (stop_reason == "eos") return "eos";
  if (stop_reason == "stop") return "word";
  if (stop_reason == "length" || stop_reason == "context") return "limit";
  return "none";
}

std::string NativeChunkJson(const NativeReplyInfo& info, const std::string& text,
                            const std::vector<int32_t>& ids, int tokens_predicted,
                            const std::vector<TokenLogprob>* probs, const Tokenizer& tok,
                            const ReplyTimings* timings, int id_slot) {
  json j = {{"index", info.index},
            {"content", text},
            {"tokens", ids},  // (a chunk's always, as llama-server sends them)
            {"stop", false},
            {"id_slot", id_slot},
            {"tokens_predicted", tokens_predicted},
            {"tokens_evaluated", info.n_prompt}};
  if (probs && !probs->empty()) {
    j["completion_probabilities"] = Probabilities(*probs, info.post_sampling_probs, tok);
  }
  if (timings) j["timings"] = TimingsJson(*timings);
  return Dump(j);
}

std::string NativeFinalJson(const NativeReplyInfo& info, bool stream, const GenerationResult& g,
                            const std::string& text, int n_prompt, const ReplyTimings& t,
                            const Tokenizer& tok) {
  const int n_gen = static_cast<int>(g.ids.size());
  json j = {{"index", info.index},
            {"content", stream ? "" : text},
            {"tokens", info.return_tokens && !stream ? json(g.ids) : json::array()},
            {"id_slot", g.seq},
            {"stop", true},
            {"model", info.model},
            {"tokens_predicted", n_gen},
            {"tokens_evaluated", n_prompt},
            {"generation_settings", Settings(info)},
            {"prompt", info.prompt},
            {"has_new_line", text.find('\n') != std::string::npos},
            // (a reply the full context stopped is truncated, as llama-server says)
            {"truncated", g.context_shifts > 0 || info.prompt_truncated ||
                              std::string(g.stop_reason) == "context"},
            {"stop_type", NativeStopType(g.stop_reason)},
            {"stopping_word", g.stop_word},
            {"tokens_cached", n_prompt + std::max(0, n_gen - 1)},
            {"timings", TimingsJson(t)}};
  j["generation_settings"]["stream"] = stream;
  if (!stream && info.n_probs > 0) {
    j["completion_probabilities"] = Probabilities(g.logprobs, info.post_sampling_probs, tok);
  }
  if (!stream && !info.response_fields.empty()) return Dump(Fields(j, info.response_fields));
  return Dump(j);
}

}  // namespace pi
